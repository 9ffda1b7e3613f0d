"""Confirmations: actions staged until their owner sends back a token, and resume slots.

A confirm-required tool call isn't run at once. The engine stages it here and shows the
person one token per way to answer (a plain staging has one, with an empty label). Sending a
token back — as a turn's whole text or through an explicit confirm — takes the action out of
the store, once, and only for the session and the person that staged it. Whatever answers
the token, the other choices of the same staging die with it.

Pending confirmations live in the core's SQLite database, so they outlive a restart. Tokens
are never at rest in clear: a row is keyed by the SHA-256 of its token, and listings show
summaries, never tokens.

When a confirmed action hands its result back to the model and the confirmation didn't come
through a turn, the engine parks what the model should hear in :class:`ResumeSlots` until the
resuming turn collects it. That state is in memory only; a restart drops it.

Exception tree::

    ConfirmationError            a confirmation was staged the wrong way (programmer mistakes)
    ├── InvalidActionError       the action has no tool name or arguments JSON can't carry
    ├── InvalidChoicesError      the choices are empty, unlabelled or repeated
    └── InvalidTTLError          a time to live that isn't positive

Runtime outcomes aren't errors: an unknown, expired, used, foreign or malformed token makes
:meth:`ConfirmationStore.take` return ``None``.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Generic, TypeVar

import msgspec

from core.clock import Clock
from core.codes import ALPHABET, draw_code, from_micros, to_micros
from core.db import Database, Row
from core.events import Choice

__all__ = [
    "TOKEN_ALPHABET",
    "Choice",
    "ConfirmationError",
    "ConfirmationStore",
    "InvalidActionError",
    "InvalidChoicesError",
    "InvalidTTLError",
    "PendingSummary",
    "ResumeSlots",
    "StagedAction",
    "StagedActionSpec",
    "Staging",
    "TakenAction",
    "is_token",
    "new_token",
]

TOKEN_ALPHABET: Final = ALPHABET
DEFAULT_TTL: Final = timedelta(minutes=5)

_TOKEN_PATTERN: Final = re.compile(r"[A-Za-z0-9]{4}-[A-Za-z0-9]{4}")
# A token collision is a one-in-10^14 event; a few fresh draws settle it for good.
_STAGING_ATTEMPTS: Final = 5

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS confirmations (
    token_hash     TEXT PRIMARY KEY,
    group_id       TEXT NOT NULL,
    session_key    TEXT NOT NULL,
    person_key     TEXT NOT NULL,
    tool_name      TEXT NOT NULL,
    arguments_json TEXT NOT NULL,
    choice_value   TEXT,
    choice_label   TEXT NOT NULL,
    summary        TEXT NOT NULL,
    hands_back     INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    state          TEXT NOT NULL DEFAULT 'pending'
);
CREATE INDEX IF NOT EXISTS confirmations_group ON confirmations (group_id);
CREATE INDEX IF NOT EXISTS confirmations_person ON confirmations (person_key, expires_at);
CREATE INDEX IF NOT EXISTS confirmations_expiry ON confirmations (expires_at);
"""

_COLUMNS: Final = (
    "token_hash, group_id, session_key, person_key, tool_name, arguments_json, "
    "choice_value, choice_label, summary, hands_back, created_at, expires_at, state"
)


class ConfirmationError(Exception):
    """A confirmation was staged the wrong way; the caller's code needs fixing."""


class InvalidActionError(ConfirmationError, ValueError):
    """The staged action can't be stored as it is."""


class InvalidChoicesError(ConfirmationError, ValueError):
    """The choices offered for a staged action make no sense."""


class InvalidTTLError(ConfirmationError, ValueError):
    """A confirmation or resume window that isn't a positive duration."""


def _check_action(tool_name: str, arguments: dict[str, Any]) -> None:
    if not tool_name.strip():
        raise InvalidActionError(
            "A staged action has an empty tool name; give the tool the action runs."
        )
    try:
        # Round-tripped, not just encoded: msgspec would happily write a set, a tuple or a
        # datetime, and the action taken back would then differ from the one staged.
        carried = msgspec.json.decode(msgspec.json.encode(arguments)) == arguments
    except (TypeError, msgspec.EncodeError):
        carried = False
    if not carried:
        raise InvalidActionError(
            f"The arguments of the staged {tool_name!r} action don't survive a trip through "
            "JSON; pass only strings, numbers, booleans, null, lists and objects keyed by "
            "strings."
        )


class StagedActionSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What to stage: the tool call to run once confirmed and the line that describes it.

    ``summary`` is the one-line command text the person reads, already in their language.
    ``hands_back`` says the action's result goes back to the model, so a confirmation
    through an explicit confirm leads to a resumed turn.
    """

    tool_name: str
    arguments: dict[str, Any]
    summary: str
    hands_back: bool = False

    def __post_init__(self) -> None:
        _check_action(self.tool_name, self.arguments)


class StagedAction(msgspec.Struct, frozen=True, kw_only=True):
    """One choice of a staged action, as the store keeps it.

    ``choice_label`` is empty and ``choice_value`` ``None`` for a plain staging.
    """

    tool_name: str
    arguments: dict[str, Any]
    summary: str
    hands_back: bool
    choice_label: str = ""
    choice_value: str | None = None

    def __post_init__(self) -> None:
        _check_action(self.tool_name, self.arguments)


class Staging(msgspec.Struct, frozen=True, kw_only=True):
    """What staging gives back: the tokens to show, once. ``token`` is the first choice's."""

    token: str
    choices: tuple[Choice, ...]
    expires_at: datetime


class TakenAction(msgspec.Struct, frozen=True, kw_only=True):
    """A confirmed action, out of the store for good: the engine runs it now."""

    tool_name: str
    arguments: dict[str, Any]
    choice_value: str | None
    hands_back: bool
    summary: str


class PendingSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A pending confirmation as its owner may list it: never with a token."""

    session_key: str
    summary: str
    expires_at: datetime


def is_token(text: str) -> bool:
    """Whether ``text``, once trimmed, has a confirmation token's shape (``k9m2-x7q4``)."""
    return _TOKEN_PATTERN.fullmatch(text.strip()) is not None


def new_token() -> str:
    """A fresh token: two groups of four characters drawn from 62 by a CSPRNG."""
    return draw_code(2)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def _check_ttl(ttl: timedelta) -> None:
    if ttl <= timedelta(0):
        raise InvalidTTLError(
            f"A confirmation window of {ttl} can never be met; give a positive duration."
        )


def _choice_rows(
    choices: Sequence[tuple[str, str]] | None,
) -> list[tuple[str, str | None]]:
    if choices is None:
        return [("", None)]
    if not choices:
        raise InvalidChoicesError(
            "A staging was given an empty list of choices; pass None for a plain staging."
        )
    labels = [label for label, _ in choices]
    values = [value for _, value in choices]
    if any(not label.strip() for label in labels):
        raise InvalidChoicesError(
            "A choice of a staged action has an empty label; give every choice the words "
            "the person picks it by."
        )
    if len(set(labels)) != len(labels) or len(set(values)) != len(values):
        raise InvalidChoicesError(
            "Two choices of a staged action share a label or a value; make each one distinct."
        )
    return [(label, value) for label, value in choices]


class ConfirmationStore:
    """Pending confirmations in SQLite, single use, bound to a session and a person."""

    def __init__(self, db: Database, *, clock: Clock, ttl: timedelta = DEFAULT_TTL) -> None:
        _check_ttl(ttl)
        self._db = db
        self._clock = clock
        self.ttl = ttl
        self._ready = False

    async def _ensure_schema(self) -> None:
        # Lazily, so the store can be built synchronously at the composition root;
        # the schema is idempotent, so two first callers racing here do no harm.
        if not self._ready:
            await self._db.ensure(_SCHEMA)
            self._ready = True

    async def stage(
        self,
        session_key: str,
        person_key: str,
        action: StagedActionSpec,
        choices: Sequence[tuple[str, str]] | None = None,
    ) -> Staging:
        """Stage ``action`` for ``person_key`` in ``session_key``; one token per choice.

        ``choices`` are ``(label, value)`` pairs, labels in the person's language; the
        value chosen comes back as :attr:`TakenAction.choice_value`.
        """
        options = _choice_rows(choices)
        arguments_json = msgspec.json.encode(action.arguments).decode()
        await self._ensure_schema()
        now = self._clock()
        expires_at = now + self.ttl
        group_id = secrets.token_hex(16)
        placeholders = ", ".join(["(" + ", ".join("?" * 13) + ")"] * len(options))
        for attempt in range(_STAGING_ATTEMPTS):
            tokens = self._distinct_tokens(len(options))
            parameters: list[Any] = []
            for token, (label, value) in zip(tokens, options, strict=True):
                parameters += [
                    _hash(token),
                    group_id,
                    session_key,
                    person_key,
                    action.tool_name,
                    arguments_json,
                    value,
                    label,
                    action.summary,
                    int(action.hands_back),
                    to_micros(now),
                    to_micros(expires_at),
                    "pending",
                ]
            try:
                # One multi-row INSERT: a collision rolls back the whole statement, so a
                # group is never half-written.
                await self._db.execute(
                    f"INSERT INTO confirmations ({_COLUMNS}) VALUES {placeholders}",  # noqa: S608
                    parameters,
                )
            except sqlite3.IntegrityError:
                if attempt == _STAGING_ATTEMPTS - 1:
                    raise
                continue
            return Staging(
                token=tokens[0],
                choices=tuple(
                    Choice(token=token, label=label)
                    for token, (label, _) in zip(tokens, options, strict=True)
                ),
                expires_at=expires_at,
            )
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _distinct_tokens(count: int) -> list[str]:
        tokens: list[str] = []
        while len(tokens) < count:
            token = new_token()
            if token not in tokens:
                tokens.append(token)
        return tokens

    async def take(self, session_key: str, person_key: str, token: str) -> TakenAction | None:
        """Take the action ``token`` confirms, once; ``None`` if there is none to take.

        None covers a text that isn't token-shaped, an unknown, used or expired token, and
        a token staged in another session or for another person (which stays pending for
        its owner). Taking one choice removes every choice of its staging.
        """
        token = token.strip()
        if not is_token(token):
            return None
        await self._ensure_schema()
        now = to_micros(self._clock())
        row = await self._db.fetch_one(
            f"SELECT {_COLUMNS} FROM confirmations WHERE token_hash = ?",  # noqa: S608
            (_hash(token),),
        )
        if row is None:
            return None
        if row["expires_at"] <= now:
            await self._db.execute(
                "DELETE FROM confirmations WHERE group_id = ? AND expires_at <= ?",
                (row["group_id"], now),
            )
            return None
        if row["session_key"] != session_key or row["person_key"] != person_key:
            return None
        # The delete is the arbiter: of two takes that both read the row, only the one
        # whose delete removed it wins.
        removed = await self._db.execute(
            "DELETE FROM confirmations WHERE group_id = ?", (row["group_id"],)
        )
        if removed == 0:
            return None
        return _taken(row)

    async def pending(self, person_key: str) -> list[PendingSummary]:
        """The person's unexpired stagings, one per staging, oldest first; no tokens."""
        await self._ensure_schema()
        rows = await self._db.fetch_all(
            "SELECT session_key, summary, expires_at, MIN(created_at) AS staged_at "
            "FROM confirmations WHERE person_key = ? AND expires_at > ? "
            "GROUP BY group_id ORDER BY staged_at, MIN(rowid)",
            (person_key, to_micros(self._clock())),
        )
        return [
            PendingSummary(
                session_key=row["session_key"],
                summary=row["summary"],
                expires_at=from_micros(row["expires_at"]),
            )
            for row in rows
        ]

    async def purge_expired(self) -> int:
        """Delete every expired staging; returns how many choices went."""
        await self._ensure_schema()
        return await self._db.execute(
            "DELETE FROM confirmations WHERE expires_at <= ?", (to_micros(self._clock()),)
        )


def _taken(row: Row) -> TakenAction:
    arguments = msgspec.json.decode(row["arguments_json"], type=dict[str, Any])
    return TakenAction(
        tool_name=row["tool_name"],
        arguments=arguments,
        choice_value=row["choice_value"],
        hands_back=bool(row["hands_back"]),
        summary=row["summary"],
    )


T = TypeVar("T")


class ResumeSlots(Generic[T]):
    """What a confirmed hands-back action left for the model, per session, single use.

    A slot lasts ``ttl`` from when it was put; a second put on the same session replaces
    the first. In memory only: a restart empties every slot.
    """

    def __init__(self, clock: Clock, ttl: timedelta = DEFAULT_TTL) -> None:
        _check_ttl(ttl)
        self._clock = clock
        self.ttl = ttl
        self._slots: dict[str, tuple[datetime, T]] = {}

    def put(self, session_key: str, payload: T) -> None:
        now = self._clock()
        self.purge_expired()
        self._slots[session_key] = (now + self.ttl, payload)

    def take(self, session_key: str) -> T | None:
        """The session's payload, removed; ``None`` if there is none or it has expired."""
        slot = self._slots.pop(session_key, None)
        if slot is None:
            return None
        expires_at, payload = slot
        if expires_at <= self._clock():
            return None
        return payload

    def purge_expired(self) -> int:
        """Forget every expired slot; returns how many went."""
        now = self._clock()
        expired = [key for key, (expires_at, _) in self._slots.items() if expires_at <= now]
        for key in expired:
            del self._slots[key]
        return len(expired)

    def __len__(self) -> int:
        return len(self._slots)
