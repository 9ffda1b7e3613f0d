"""Confirmations: actions staged until their owner sends back a token, and resume slots.

A confirm-required tool call isn't run at once. The engine stages it here and shows the
person one token per way to answer (a plain staging has one, with an empty label). Sending a
token back — as a turn's whole text or through an explicit confirm — takes the action out of
the store, once, and only for the session and the person that staged it. Whatever answers
the token, the other choices of the same staging die with it.

Pending confirmations live in the state store (:mod:`core.state`), so they outlive a restart
and every instance sharing the store sees them. Tokens
are never at rest in clear: a row is keyed by the SHA-256 of its token, and listings show
summaries, never tokens.

How a staging ended (confirmed, a choice chosen, answered by a message, cancelled or expired)
is kept by its id for :data:`SETTLED_RETENTION` (:meth:`ConfirmationStore.settled`), one row
per staging, so a page reloaded after the answer still shows it.

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
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Generic, Literal, TypeVar

import msgspec

from core.clock import Clock
from core.codes import ALPHABET, draw_code, from_micros, to_micros
from core.engine.events import Choice, ChoiceKind
from core.state import Database, DuplicateRow, Migration, Row, Schema

__all__ = [
    "REPLY_CHOICE",
    "SETTLED_RETENTION",
    "TOKEN_ALPHABET",
    "Choice",
    "ChoiceRef",
    "ConfirmationError",
    "ConfirmationStore",
    "InvalidActionError",
    "InvalidChoicesError",
    "InvalidTTLError",
    "PendingChoice",
    "PendingSummary",
    "ResumeSlots",
    "SettledSummary",
    "StagedAction",
    "StagedActionSpec",
    "Staging",
    "TakenAction",
    "choice_kinds",
    "is_token",
    "new_token",
]

TOKEN_ALPHABET: Final = ALPHABET
#: The value of a staging's hidden choice that the person's next message takes.
REPLY_CHOICE: Final = "mercury:reply"
DEFAULT_TTL: Final = timedelta(minutes=5)
#: How long how a staging ended is kept; the periodic purge forgets older outcomes.
SETTLED_RETENTION: Final = timedelta(days=7)
#: The most outcomes one listing returns (the newest).
SETTLED_LISTED: Final = 100

_TOKEN_PATTERN: Final = re.compile(r"[A-Za-z0-9]{4}-[A-Za-z0-9]{4}")
# A token collision is a one-in-10^14 event; a few fresh draws settle it for good.
_STAGING_ATTEMPTS: Final = 5

_COLUMNS: Final = (
    "token_hash, group_id, session_key, person_key, tool_name, arguments_json, "
    "choice_value, choice_label, summary, hands_back, created_at, expires_at, state"
)

_COLUMNS_DDL: Final = """
    group_id       TEXT NOT NULL,
    session_key    TEXT NOT NULL,
    person_key     TEXT NOT NULL,
    tool_name      TEXT NOT NULL,
    arguments_json TEXT NOT NULL,
    choice_value   TEXT,
    choice_label   TEXT NOT NULL,
    summary        TEXT NOT NULL,
    hands_back     INTEGER NOT NULL,
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    state          TEXT NOT NULL DEFAULT 'pending'
"""
_INDEXES: Final = """
CREATE INDEX IF NOT EXISTS confirmations_group ON confirmations (group_id);
CREATE INDEX IF NOT EXISTS confirmations_person ON confirmations (person_key, expires_at);
CREATE INDEX IF NOT EXISTS confirmations_expiry ON confirmations (expires_at);
"""
# SQLite can't add a numbered column to a table: rebuild it, keeping the rows in order.
_REBUILD_WITH_SEQ: Final = "".join(
    (
        "CREATE TABLE confirmations_v2 (\n    seq INTEGER PRIMARY KEY AUTOINCREMENT,\n",
        "    token_hash TEXT NOT NULL UNIQUE,",
        _COLUMNS_DDL,
        ");\n",
        "INSERT INTO confirmations_v2 (",
        _COLUMNS,
        ") SELECT ",
        _COLUMNS,
        " FROM confirmations ORDER BY rowid;\n",
        "DROP TABLE confirmations;\n",
        "ALTER TABLE confirmations_v2 RENAME TO confirmations;\n",
        _INDEXES,
    )
)
_SCHEMA: Final = Schema(
    "confirmations",
    (
        Migration(
            1,
            "CREATE TABLE IF NOT EXISTS confirmations (\n    token_hash TEXT PRIMARY KEY,"
            + _COLUMNS_DDL
            + ");\n"
            + _INDEXES,
        ),
        # A staging order both dialects keep (SQLite's rowid has no PostgreSQL twin).
        Migration(
            2,
            sqlite=_REBUILD_WITH_SEQ,
            postgresql="ALTER TABLE confirmations "
            "ADD COLUMN seq BIGINT GENERATED BY DEFAULT AS IDENTITY;\n",
        ),
    ),
)


_SETTLED_SCHEMA: Final = Schema(
    "confirmation_outcomes",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS confirmation_outcomes (
    group_id    TEXT PRIMARY KEY,
    session_key TEXT NOT NULL,
    person_key  TEXT NOT NULL,
    summary     TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    choice      TEXT,
    settled_at  BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS confirmation_outcomes_person
    ON confirmation_outcomes (person_key, settled_at);
CREATE INDEX IF NOT EXISTS confirmation_outcomes_age ON confirmation_outcomes (settled_at);
""",
        ),
    ),
)
_SETTLED_COLUMNS: Final = "group_id, session_key, person_key, summary, outcome, choice, settled_at"
# SQLite needs the WHERE before an upsert's ON CONFLICT after a SELECT; it is there.
_RECORD_EXPIRED: Final = (
    f"INSERT INTO confirmation_outcomes ({_SETTLED_COLUMNS}) "  # noqa: S608
    "SELECT group_id, MIN(session_key), MIN(person_key), MIN(summary), 'expired', NULL, "
    "MIN(expires_at) FROM confirmations WHERE expires_at <= ? {where} GROUP BY group_id "
    "ON CONFLICT (group_id) DO NOTHING"
)

SettledOutcome = Literal["confirmed", "chosen", "answered", "cancelled", "expired"]


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
    """What staging gives back: the tokens to show, once. ``token`` is the first choice's;
    ``id`` names the staging to its owner, never confirming it on its own."""

    id: str
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


class PendingChoice(msgspec.Struct, frozen=True, kw_only=True):
    """One choice of a pending staging as its owner may list it: its label, never its token."""

    label: str
    kind: ChoiceKind | None = None


class PendingSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A pending confirmation as its owner may list it: never with a token."""

    id: str
    session_key: str
    summary: str
    expires_at: datetime
    choices: tuple[PendingChoice, ...] = ()


class SettledSummary(msgspec.Struct, frozen=True, kw_only=True):
    """How a staging of its owner's ended: never with a token.

    ``outcome`` is ``confirmed`` (a plain or yes/no staging taken), ``chosen`` (one of
    several choices, its label in ``choice``), ``answered`` (the person's message answered
    it), ``cancelled`` (dropped unrun, or its own cancel choice taken) or ``expired``.
    """

    id: str
    session_key: str
    summary: str
    outcome: SettledOutcome
    settled_at: datetime
    choice: str | None = None


def _outcome_of(taken: Row, values: Sequence[str | None]) -> tuple[SettledOutcome, str | None]:
    """How taking the choice ``taken`` ends its staging, whose choices' values are ``values``."""
    value = taken["choice_value"]
    if value == REPLY_CHOICE:
        return "answered", None
    shown = [v for v in values if v != REPLY_CHOICE]
    kind = dict(zip(shown, choice_kinds(shown), strict=True)).get(value)
    if kind == "cancel":
        return "cancelled", None
    if kind == "confirm" or len(shown) <= 1:
        return "confirmed", None
    return "chosen", str(taken["choice_label"])


class ChoiceRef(msgspec.Struct, frozen=True):
    """A choice named by its staging's id and its place among the choices (from 0): how an
    authenticated owner answers a staging whose tokens the page no longer holds."""

    confirmation_id: str
    index: int


def choice_kinds(values: Sequence[str | None]) -> list[ChoiceKind | None]:
    """Which choice is which: on a yes/no staging (its values ``confirm`` and ``cancel``)
    both; on any other staging, the choice that drops it (value ``cancel``, such as an MCP
    question's Cancel), so a client shows no Cancel of its own beside it; None otherwise."""
    if sorted(v or "" for v in values) == ["cancel", "confirm"]:
        return ["confirm" if value == "confirm" else "cancel" for value in values]
    return ["cancel" if value == "cancel" else None for value in values]


def is_token(text: str) -> bool:
    """Whether ``text``, once trimmed, has a confirmation token's shape (``k9m2-x7q4``)."""
    return _TOKEN_PATTERN.fullmatch(text.strip()) is not None


def new_token() -> str:
    """A fresh token: two groups of four characters drawn from 62 by a CSPRNG."""
    return draw_code(2)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def _to_millisecond(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


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
    """Pending confirmations in the state store, single use, bound to a session and a person."""

    def __init__(self, db: Database, *, clock: Clock, ttl: timedelta = DEFAULT_TTL) -> None:
        _check_ttl(ttl)
        self._db = db
        self._clock = clock
        self.ttl = ttl
        self._ready = False

    async def ensure_schema(self) -> None:
        """Migrate the table; lazily by every call too, so the store can be built
        synchronously. Idempotent, so two first callers racing here do no harm."""
        if not self._ready:
            await self._db.migrate(_SCHEMA)
            await self._db.migrate(_SETTLED_SCHEMA)
            self._ready = True

    async def stage(
        self,
        session_key: str,
        person_key: str,
        action: StagedActionSpec,
        choices: Sequence[tuple[str, str]] | None = None,
        *,
        by_reply: bool = False,
    ) -> Staging:
        """Stage ``action`` for ``person_key`` in ``session_key``; one token per choice.

        ``choices`` are ``(label, value)`` pairs, labels in the person's language; the
        value chosen comes back as :attr:`TakenAction.choice_value`. ``by_reply`` adds a
        choice no token of which is ever shown: the person's next message in the session
        takes it (:meth:`take_reply`), dying with the others as any choice does.
        """
        options = _choice_rows(choices)
        if by_reply:
            options.append(("", REPLY_CHOICE))
        arguments_json = msgspec.json.encode(action.arguments).decode()
        await self.ensure_schema()
        now = self._clock()
        # To the millisecond: the precision clients read it with (the pending event's).
        expires_at = _to_millisecond(now + self.ttl)
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
            except DuplicateRow:
                if attempt == _STAGING_ATTEMPTS - 1:
                    raise
                continue
            return Staging(
                id=group_id,
                token=tokens[0],
                choices=tuple(
                    Choice(token=token, label=label)
                    for token, (label, value) in zip(tokens, options, strict=True)
                    if value != REPLY_CHOICE
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

    async def take(
        self, session_key: str, person_key: str, token: str | ChoiceRef
    ) -> TakenAction | None:
        """Take the action ``token`` confirms, once; ``None`` if there is none to take.

        ``token`` is a choice's token, or (for the owner who no longer holds the tokens) a
        :class:`ChoiceRef`; either is held to the same rules. None covers a text that isn't
        token-shaped, an unknown, used or expired token or choice, and one staged in another
        session or for another person (which stays pending for its owner). Taking one choice
        removes every choice of its staging.
        """
        row = await self._row_of(token)
        if row is None or not await self._claim(row, session_key, person_key):
            return None
        return _taken(row)

    async def drop(self, session_key: str, person_key: str, confirmation_id: str) -> bool:
        """Cancel a staging without running it, once, under :meth:`take`'s rules; whether
        it was pending for that session and person."""
        row = await self._row_of(ChoiceRef(confirmation_id, 0))
        return row is not None and await self._claim(row, session_key, person_key, drop=True)

    async def session_of(self, person_key: str, confirmation_id: str) -> str | None:
        """The session a staging of ``person_key``'s waits in; None when none is pending."""
        await self.ensure_schema()
        row = await self._db.fetch_one(
            "SELECT session_key FROM confirmations "
            "WHERE group_id = ? AND person_key = ? AND expires_at > ?",
            (confirmation_id, person_key, to_micros(self._clock())),
        )
        return None if row is None else str(row["session_key"])

    async def _row_of(self, token: str | ChoiceRef) -> Row | None:
        await self.ensure_schema()
        if isinstance(token, ChoiceRef):
            if token.index < 0:
                return None
            return await self._db.fetch_one(
                f"SELECT {_COLUMNS} FROM confirmations WHERE group_id = ? "  # noqa: S608
                "AND (choice_value IS NULL OR choice_value <> ?) ORDER BY seq LIMIT 1 OFFSET ?",
                (token.confirmation_id, REPLY_CHOICE, token.index),
            )
        token = token.strip()
        if not is_token(token):
            return None
        return await self._db.fetch_one(
            f"SELECT {_COLUMNS} FROM confirmations WHERE token_hash = ?",  # noqa: S608
            (_hash(token),),
        )

    async def _claim(
        self, row: Row, session_key: str, person_key: str, *, drop: bool = False
    ) -> bool:
        """Whether ``row``'s staging was pending for that session and person; it is gone,
        and how it ended is recorded (taken by ``row``'s choice, cancelled with ``drop``)."""
        now = to_micros(self._clock())
        if row["expires_at"] <= now:
            await self._db.execute(
                _RECORD_EXPIRED.format(where="AND group_id = ?"), (now, row["group_id"])
            )
            await self._db.execute(
                "DELETE FROM confirmations WHERE group_id = ? AND expires_at <= ?",
                (row["group_id"], now),
            )
            return False
        if row["session_key"] != session_key or row["person_key"] != person_key:
            return False
        # The delete is the arbiter: of two takes that both read the row, only the one
        # whose delete removed it wins.
        removed = await self._db.fetch_all(
            "DELETE FROM confirmations WHERE group_id = ? RETURNING choice_value",
            (row["group_id"],),
        )
        if not removed:
            return False
        if drop:
            await self._record(row, "cancelled", None)
        else:
            await self._record(row, *_outcome_of(row, [r["choice_value"] for r in removed]))
        return True

    async def _record(self, row: Row, outcome: SettledOutcome, choice: str | None) -> None:
        """Keep how ``row``'s staging ended: one row per staging, never a token."""
        await self._db.execute(
            f"INSERT INTO confirmation_outcomes ({_SETTLED_COLUMNS}) "  # noqa: S608
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (group_id) DO NOTHING",
            (
                row["group_id"],
                row["session_key"],
                row["person_key"],
                row["summary"],
                outcome,
                choice,
                to_micros(self._clock()),
            ),
        )

    async def take_reply(self, session_key: str, person_key: str) -> TakenAction | None:
        """Take the newest staging of ``session_key`` that ``person_key``'s next message
        answers (staged ``by_reply``), once; None when there is none (one indexed look per
        turn). Its ``choice_value`` is :data:`REPLY_CHOICE`."""
        await self.ensure_schema()
        row = await self._db.fetch_one(
            f"SELECT {_COLUMNS} FROM confirmations WHERE person_key = ? AND expires_at > ? "  # noqa: S608
            "AND session_key = ? AND choice_value = ? ORDER BY seq DESC LIMIT 1",
            (person_key, to_micros(self._clock()), session_key, REPLY_CHOICE),
        )
        if row is None:
            return None
        removed = await self._db.execute(
            "DELETE FROM confirmations WHERE group_id = ?", (row["group_id"],)
        )
        if not removed:
            return None
        await self._record(row, "answered", None)
        return _taken(row)

    async def label_of(self, session_key: str, person_key: str, token: str) -> str | None:
        """The label of the choice ``token`` picks ("" for a plain staging) while it is
        pending for that session and person; None when :meth:`take` would find nothing.
        A look only (a chat's button checks before it confirms, #37): :meth:`take` decides."""
        token = token.strip()
        if not is_token(token):
            return None
        await self.ensure_schema()
        row = await self._db.fetch_one(
            "SELECT session_key, person_key, choice_label, expires_at FROM confirmations "
            "WHERE token_hash = ?",
            (_hash(token),),
        )
        if row is None or row["expires_at"] <= to_micros(self._clock()):
            return None
        if row["session_key"] != session_key or row["person_key"] != person_key:
            return None
        return str(row["choice_label"] or "")

    async def pending(self, person_key: str) -> list[PendingSummary]:
        """The person's unexpired stagings, oldest first, each with its choices' labels in
        order; no tokens."""
        await self.ensure_schema()
        rows = await self._db.fetch_all(
            # Every choice of a staging has the same session, summary and expiry; the
            # sequence keeps stagings of one instant, and a staging's choices, in order.
            "SELECT group_id, session_key, summary, expires_at, choice_label, choice_value "
            "FROM confirmations WHERE person_key = ? AND expires_at > ? "
            # A question's hidden choice (its answer is the person's next message) has no
            # button: it is never listed.
            "AND (choice_value IS NULL OR choice_value <> ?) ORDER BY created_at, seq",
            (person_key, to_micros(self._clock()), REPLY_CHOICE),
        )
        stagings: dict[str, list[Row]] = {}
        for row in rows:
            stagings.setdefault(row["group_id"], []).append(row)
        listed = []
        for group_id, choices in stagings.items():
            first = choices[0]
            kinds = choice_kinds([row["choice_value"] for row in choices])
            listed.append(
                PendingSummary(
                    id=group_id,
                    session_key=first["session_key"],
                    summary=first["summary"],
                    expires_at=from_micros(first["expires_at"]),
                    choices=tuple(
                        PendingChoice(label=str(row["choice_label"] or ""), kind=kind)
                        for row, kind in zip(choices, kinds, strict=True)
                    ),
                )
            )
        return listed

    async def settled(self, person_key: str) -> list[SettledSummary]:
        """How the person's stagings of the last :data:`SETTLED_RETENTION` ended, oldest
        first (the newest :data:`SETTLED_LISTED`); an expired staging not purged yet is
        listed as expired. No tokens."""
        await self.ensure_schema()
        now = self._clock()
        rows = await self._db.fetch_all(
            "SELECT group_id, session_key, summary, outcome, choice, settled_at "
            "FROM confirmation_outcomes WHERE person_key = ? AND settled_at > ? "
            "UNION ALL SELECT group_id, MIN(session_key), MIN(summary), 'expired', NULL, "
            "MIN(expires_at) FROM confirmations WHERE person_key = ? AND expires_at <= ? "
            "GROUP BY group_id ORDER BY settled_at DESC LIMIT ?",
            (
                person_key,
                to_micros(now - SETTLED_RETENTION),
                person_key,
                to_micros(now),
                SETTLED_LISTED,
            ),
        )
        return [
            SettledSummary(
                id=row["group_id"],
                session_key=row["session_key"],
                summary=row["summary"],
                outcome=row["outcome"],
                choice=row["choice"],
                settled_at=from_micros(row["settled_at"]),
            )
            for row in reversed(rows)
        ]

    async def purge_expired(self) -> int:
        """Delete every expired staging, its outcome kept as expired, and forget outcomes
        older than :data:`SETTLED_RETENTION`; returns how many choices went."""
        await self.ensure_schema()
        now = self._clock()
        await self._db.execute(
            "DELETE FROM confirmation_outcomes WHERE settled_at <= ?",
            (to_micros(now - SETTLED_RETENTION),),
        )
        await self._db.execute(_RECORD_EXPIRED.format(where=""), (to_micros(now),))
        return await self._db.execute(
            "DELETE FROM confirmations WHERE expires_at <= ?", (to_micros(now),)
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

_RESUME_SCHEMA: Final = Schema(
    "resume_slots",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS resume_slots (
    session_key TEXT PRIMARY KEY,
    payload     TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS resume_slots_expiry ON resume_slots (expires_at);
""",
        ),
    ),
)


class ResumeSlots(Generic[T]):
    """What a confirmed hands-back action left for the model, per session, single use.

    A slot lasts ``ttl`` from when it was put; a second put on the same session replaces
    the first. Slots live in the state store, so a confirmation through one instance is
    resumed through any other, and a slot is heard once however many instances race.
    """

    def __init__(
        self,
        db: Database,
        payload_type: type[T],
        *,
        clock: Clock,
        ttl: timedelta = DEFAULT_TTL,
    ) -> None:
        _check_ttl(ttl)
        self._db = db
        self._clock = clock
        self.ttl = ttl
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(payload_type)

    async def ensure_schema(self) -> None:
        await self._db.migrate(_RESUME_SCHEMA)

    async def put(self, session_key: str, payload: T) -> None:
        await self.ensure_schema()
        now = self._clock()
        await self.purge_expired()
        await self._db.execute(
            "INSERT INTO resume_slots (session_key, payload, expires_at) VALUES (?, ?, ?) "
            "ON CONFLICT (session_key) DO UPDATE SET "
            "payload = excluded.payload, expires_at = excluded.expires_at",
            (session_key, self._encoder.encode(payload).decode(), to_micros(now + self.ttl)),
        )

    async def take(self, session_key: str) -> T | None:
        """The session's payload, removed; ``None`` if there is none or it has expired."""
        await self.ensure_schema()
        # The delete is the arbiter: of two instances taking the same slot, one gets the row.
        row = await self._db.fetch_one(
            "DELETE FROM resume_slots WHERE session_key = ? RETURNING payload, expires_at",
            (session_key,),
        )
        if row is None or row["expires_at"] <= to_micros(self._clock()):
            return None
        return self._decoder.decode(row["payload"])

    async def purge_expired(self) -> int:
        """Forget every expired slot; returns how many went."""
        await self.ensure_schema()
        return await self._db.execute(
            "DELETE FROM resume_slots WHERE expires_at <= ?", (to_micros(self._clock()),)
        )

    async def count(self) -> int:
        """How many slots are held, expired ones not yet purged included."""
        await self.ensure_schema()
        row = await self._db.fetch_one("SELECT COUNT(*) FROM resume_slots")
        return 0 if row is None else int(row[0])
