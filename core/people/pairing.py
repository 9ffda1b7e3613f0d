"""Pairing: how someone the directory doesn't know asks in from a direct message, and is let in.

Each chat bridge has a DM policy (``<platform>.dm_policy``, :data:`DM_POLICIES`):

* ``pairing`` (the default where a directory is declared): an unknown sender's direct message
  gets a short code and nothing else; once an approver approves the code, the account is
  admitted, on every instance, for good;
* ``allowlist``: the directory's people only; unknown senders get no answer;
* ``open``: everyone on the platform is let in, as ``MERCURY_ACCESS_UNKNOWN=allow`` lets
  everyone in everywhere.

A request (:class:`PairingRequest`) is one row per sender and platform: asking again while it
is pending gives the same code back, sent at most once every :data:`RESEND_AFTER`; it expires
:data:`CODE_TTL` after it was made, and a platform holds at most ``max_pending`` of them
(``bridges.pairing_max_pending``, :data:`MAX_PENDING` by default), so a flood of strangers
can't fill the store. Denying a code keeps its row, marked denied and never listed, until it
expires: the sender is told nothing and asks in vain until then. An approved account
(:class:`AdmittedAccount`) is kept under its user key (``telegram:123``) with who approved it
and when; :meth:`Pairing.is_admitted` is one primary-key read, which
:meth:`core.people.people.People.identify` makes for an unknown sender of a ``pairing``
platform, so admission is decided there for every path.

A request keeps what reaching the sender again needs (``reach``: the bridge's own record of
their message, without its words), never what they wrote.
"""

from __future__ import annotations

import builtins
import secrets
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final, Literal

import msgspec

from core.clock import Clock, system_clock
from core.codes import from_micros, to_micros
from core.state import Database, Migration, Row, Schema

if TYPE_CHECKING:
    from core.people.i18n import Translator
    from core.people.principal import Person

__all__ = [
    "APPROVER_ROLE",
    "CODE_ALPHABET",
    "CODE_LENGTH",
    "CODE_TTL",
    "DM_POLICIES",
    "MAX_PENDING",
    "RESEND_AFTER",
    "AdmittedAccount",
    "AskOutcome",
    "Asked",
    "DmPolicy",
    "Pairing",
    "PairingRequest",
    "admitted_text",
    "code_text",
    "full_text",
    "may_approve",
    "normalized_code",
]

DmPolicy = Literal["pairing", "allowlist", "open"]
DM_POLICIES: Final[tuple[DmPolicy, ...]] = ("pairing", "allowlist", "open")

#: The role that makes a person an approver.
APPROVER_ROLE: Final = "admin"
#: Upper-case letters and digits without those read as one another (0/O, 1/I/L).
CODE_ALPHABET: Final = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH: Final = 8
#: How long a code waits for an approver.
CODE_TTL: Final = timedelta(hours=1)
#: How often asking again sends the pending code again.
RESEND_AFTER: Final = timedelta(minutes=10)
#: Requests a platform holds at once (pending or denied, until they expire).
MAX_PENDING: Final = 100
#: Characters of a sender's name kept.
_MAX_NAME_CHARS: Final = 200

_SCHEMA: Final = Schema(
    "pairing",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS pairing_requests (
    code         TEXT PRIMARY KEY,
    platform     TEXT NOT NULL,
    account      TEXT NOT NULL,
    name         TEXT,
    language     TEXT NOT NULL,
    reach        TEXT NOT NULL,
    status       TEXT NOT NULL,
    requested_at BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    sent_at      BIGINT NOT NULL,
    UNIQUE (platform, account)
);
CREATE INDEX IF NOT EXISTS pairing_requests_expiry ON pairing_requests (platform, expires_at);
CREATE TABLE IF NOT EXISTS pairing_admitted (
    user_key    TEXT PRIMARY KEY,
    platform    TEXT NOT NULL,
    account     TEXT NOT NULL,
    name        TEXT,
    approved_by TEXT NOT NULL,
    approved_at BIGINT NOT NULL
);
""",
        ),
    ),
)

_COLUMNS: Final = (
    "code, platform, account, name, language, reach, status, requested_at, expires_at, sent_at"
)


class PairingRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A stranger's request to be let in: the code an approver approves, and how to reach them.

    ``reach`` is the bridge's record of the sender's message (its words left out), which the
    bridge answers to tell them the outcome; ``language`` is the one the code was sent in.
    """

    code: str
    platform: str
    account: str
    name: str | None
    language: str
    reach: str
    requested_at: datetime
    expires_at: datetime

    @property
    def user_key(self) -> str:
        """``<platform>:<account>``: the identity admitted on approval."""
        return f"{self.platform}:{self.account}"


class AdmittedAccount(msgspec.Struct, frozen=True, kw_only=True):
    """An account let in by an approver."""

    user_key: str
    name: str | None
    approved_by: str
    approved_at: datetime


#: What asking gave: a ``new`` code; the pending one sent ``again``; ``quiet``: the pending
#: one was sent a moment ago; ``denied``: an approver said no, until the code expires;
#: ``full``: the platform holds as many requests as it may.
AskOutcome = Literal["new", "again", "quiet", "denied", "full"]


class Asked(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :meth:`Pairing.ask`, and the request to tell of (``new``, ``again``)."""

    outcome: AskOutcome
    request: PairingRequest | None = None


def normalized_code(text: str) -> str | None:
    """``text`` as a code (upper case, blanks and dashes left out), or None when it can't be one."""
    code = "".join(c for c in text.upper() if c not in " -")
    if len(code) != CODE_LENGTH or any(c not in CODE_ALPHABET for c in code):
        return None
    return code


def may_approve(person: Person) -> bool:
    """Whether ``person`` may see and answer requests for access: their roles include ``admin``."""
    return APPROVER_ROLE in person.roles


def code_text(code: str, translator: Translator) -> str:
    """What a stranger's direct message is answered with under ``pairing``."""
    return translator.gettext(
        "This assistant doesn't know you yet. To ask for access, give this code to an "
        "administrator: %(code)s. It expires in one hour."
    ) % {"code": code}


def full_text(translator: Translator) -> str:
    """What a stranger is told when their platform holds as many requests as it may."""
    return translator.gettext(
        "Too many requests for access are waiting right now. Try again later."
    )


def admitted_text(translator: Translator) -> str:
    """What an account is told once an approver let it in."""
    return translator.gettext("An administrator gave you access: you can talk to me now.")


def _draw() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def _request(row: Row) -> PairingRequest:
    return PairingRequest(
        code=row["code"],
        platform=row["platform"],
        account=row["account"],
        name=row["name"],
        language=row["language"],
        reach=row["reach"],
        requested_at=from_micros(int(row["requested_at"])),
        expires_at=from_micros(int(row["expires_at"])),
    )


def _admitted(row: Row) -> AdmittedAccount:
    return AdmittedAccount(
        user_key=row["user_key"],
        name=row["name"],
        approved_by=row["approved_by"],
        approved_at=from_micros(int(row["approved_at"])),
    )


class Pairing:
    """Pairing requests and the accounts they let in, in the state store."""

    def __init__(
        self, db: Database, *, clock: Clock = system_clock, max_pending: int = MAX_PENDING
    ) -> None:
        if max_pending < 1:
            raise ValueError(f"Pairing needs room for at least one request, not {max_pending}.")
        self._db = db
        self._clock = clock
        self._max_pending = max_pending
        self._ready = False

    async def ensure_schema(self) -> None:
        """Create the tables if needed; done lazily by every call, idempotent."""
        if not self._ready:
            await self._db.migrate(_SCHEMA)
            self._ready = True

    async def ask(
        self, platform: str, account: str, *, name: str | None, language: str, reach: str
    ) -> Asked:
        """A stranger's direct message: their pending code, a new one, or why there is none.

        The code to send comes with ``new`` and ``again``; with ``again`` it was last sent
        :data:`RESEND_AFTER` ago or more, and only one instance gets ``again`` for it.
        """
        await self.ensure_schema()
        now = self._clock()
        await self._db.execute(
            "DELETE FROM pairing_requests WHERE platform = ? AND expires_at <= ?",
            (platform, to_micros(now)),
        )
        for _ in range(3):  # a new code colliding with a live one is drawn again
            found = await self._find(platform, account)
            if found is not None:
                return await self._again(found, now)
            code = _draw()
            # Under the platform's lock: the count and the insert are one step for every
            # instance, so two strangers asking at once never both take the last place.
            async with self._db.transaction(lock=f"pairing:{platform}") as transaction:
                inserted = await transaction.execute(
                    f"INSERT INTO pairing_requests ({_COLUMNS}) "  # noqa: S608 - fixed text
                    "SELECT ?, ?, ?, ?, ?, ?, 'pending', CAST(? AS BIGINT), CAST(? AS BIGINT), "
                    "CAST(? AS BIGINT) "
                    "WHERE (SELECT COUNT(*) FROM pairing_requests WHERE platform = ?) < ? "
                    "ON CONFLICT DO NOTHING",
                    (
                        code,
                        platform,
                        account,
                        (name or "")[:_MAX_NAME_CHARS] or None,
                        language,
                        reach,
                        to_micros(now),
                        to_micros(now + CODE_TTL),
                        to_micros(now),
                        platform,
                        self._max_pending,
                    ),
                )
            if inserted:
                row = await self._find(platform, account)
                return Asked(outcome="new", request=None if row is None else _request(row))
            if await self._find(platform, account) is None and not await self._room(platform):
                return Asked(outcome="full")
        return Asked(outcome="quiet")

    async def _again(self, found: Row, now: datetime) -> Asked:
        if found["status"] != "pending":
            return Asked(outcome="denied")
        if from_micros(int(found["sent_at"])) + RESEND_AFTER > now:
            return Asked(outcome="quiet")
        # Conditional on the time read: of two instances asking at once, one sends it.
        sent = await self._db.execute(
            "UPDATE pairing_requests SET sent_at = ? WHERE code = ? AND sent_at = ?",
            (to_micros(now), found["code"], found["sent_at"]),
        )
        return Asked(outcome="again", request=_request(found)) if sent else Asked(outcome="quiet")

    async def _find(self, platform: str, account: str) -> Row | None:
        return await self._db.fetch_one(
            f"SELECT {_COLUMNS} FROM pairing_requests "  # noqa: S608 - fixed text
            "WHERE platform = ? AND account = ? AND expires_at > ?",
            (platform, account, to_micros(self._clock())),
        )

    async def _room(self, platform: str) -> bool:
        row = await self._db.fetch_one(
            "SELECT COUNT(*) FROM pairing_requests WHERE platform = ?", (platform,)
        )
        return row is not None and int(row[0]) < self._max_pending

    async def pending(self) -> builtins.list[PairingRequest]:
        """The requests waiting for an approver, on every platform, the oldest first."""
        await self.ensure_schema()
        rows = await self._db.fetch_all(
            f"SELECT {_COLUMNS} FROM pairing_requests "  # noqa: S608 - fixed text
            "WHERE status = 'pending' AND expires_at > ? ORDER BY requested_at, code",
            (to_micros(self._clock()),),
        )
        return [_request(row) for row in rows]

    async def approve(self, code: str, *, by: str) -> PairingRequest | None:
        """Let in the account whose pending, unexpired request ``code`` is; the request, or
        None when there is no such request (unknown, expired, denied or approved already)."""
        await self.ensure_schema()
        now = self._clock()
        async with self._db.transaction() as transaction:
            rows = await transaction.fetch_all(
                "DELETE FROM pairing_requests WHERE code = ? AND status = 'pending' "  # noqa: S608 - fixed text
                f"AND expires_at > ? RETURNING {_COLUMNS}",
                (code, to_micros(now)),
            )
            if not rows:
                return None
            request = _request(rows[0])
            await transaction.execute(
                "INSERT INTO pairing_admitted "
                "(user_key, platform, account, name, approved_by, approved_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user_key) DO UPDATE SET "
                "name = excluded.name, approved_by = excluded.approved_by, "
                "approved_at = excluded.approved_at",
                (
                    request.user_key,
                    request.platform,
                    request.account,
                    request.name,
                    by,
                    to_micros(now),
                ),
            )
        return request

    async def deny(self, code: str) -> bool:
        """Turn down the pending, unexpired request ``code``; whether there was one. The
        row stays, never listed, until it expires: its sender asks in vain until then."""
        await self.ensure_schema()
        denied = await self._db.execute(
            "UPDATE pairing_requests SET status = 'denied' "
            "WHERE code = ? AND status = 'pending' AND expires_at > ?",
            (code, to_micros(self._clock())),
        )
        return denied > 0

    async def is_admitted(self, user_key: str) -> bool:
        """Whether an approver let ``user_key`` in: one primary-key read."""
        await self.ensure_schema()
        row = await self._db.fetch_key(
            "SELECT 1 FROM pairing_admitted WHERE user_key = ?", (user_key,)
        )
        return row is not None

    async def admitted(self, user_key: str) -> AdmittedAccount | None:
        """Who let ``user_key`` in and when, if anyone did."""
        await self.ensure_schema()
        row = await self._db.fetch_one(
            "SELECT user_key, name, approved_by, approved_at FROM pairing_admitted "
            "WHERE user_key = ?",
            (user_key,),
        )
        return None if row is None else _admitted(row)

    async def admitted_accounts(self) -> builtins.list[AdmittedAccount]:
        """Every account an approver let in, on every platform, the latest first."""
        await self.ensure_schema()
        rows = await self._db.fetch_all(
            "SELECT user_key, name, approved_by, approved_at FROM pairing_admitted "
            "ORDER BY approved_at DESC, user_key"
        )
        return [_admitted(row) for row in rows]

    async def revoke(self, user_key: str) -> bool:
        """Let ``user_key`` out again: from its next message on, on every instance, it is a
        stranger (under ``pairing`` it may ask anew). Whether it had been let in."""
        await self.ensure_schema()
        return (
            await self._db.execute("DELETE FROM pairing_admitted WHERE user_key = ?", (user_key,))
            > 0
        )

    async def purge_expired(self) -> int:
        """Remove the requests that have expired, on every platform; how many there were."""
        await self.ensure_schema()
        return await self._db.execute(
            "DELETE FROM pairing_requests WHERE expires_at <= ?", (to_micros(self._clock()),)
        )
