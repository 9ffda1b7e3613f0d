"""Mutes: people whose messages a space drops for a while, unread and unanswered.

The assistant mutes someone who keeps abusing a space (spam, attempts to get at secrets,
wasting the group's resources) after a warning; the mute lasts what it was given, from a
minute to 30 days (:func:`parse_duration`), and then ends by itself: an expired mute is no
mute, whether or not :meth:`Mutes.purge_expired` has removed it yet. Muting again replaces
the expiry. A mute names its *target* as the space shows it (a caller id such as
``slack:U123``) or as a person key; the tools and the routes keep it under the person key
the name resolves to (:class:`core.spaces.access.MuteTargets`), and :meth:`Mutes.is_muted`
asks for all of a sender's names at once (their id and person key), in one lookup, on every
message of the space, so a mute catches every account of the person.

Exceptions::

    MuteError (ValueError)        a duration, target or reason was refused; ``fault`` says
                                  which, the message says the way out
    InvalidSpaceId (ValueError)   the space id is malformed (from core.spaces.ids)
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Final, Literal

import msgspec

from core.clock import Clock, system_clock
from core.codes import from_micros, to_micros
from core.spaces.ids import parse_space_id
from core.state import Database, Migration, Row, Schema
from core.workspace.files import holds_invisible

__all__ = [
    "MAX_MUTE",
    "MAX_REASON_CHARS",
    "MAX_TARGET_CHARS",
    "MIN_MUTE",
    "Mute",
    "MuteError",
    "MuteFault",
    "Mutes",
    "checked_reason",
    "checked_target",
    "parse_duration",
]

MIN_MUTE: Final = timedelta(minutes=1)
MAX_MUTE: Final = timedelta(days=30)
MAX_TARGET_CHARS: Final = 200
MAX_REASON_CHARS: Final = 500

_DURATION: Final = re.compile(r"([0-9]{1,6})([mhd])")
_UNITS: Final = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1)}
_DURATION_FORMS: Final = (
    "A mute lasts a whole number of minutes, hours or days, written like 10m, 1h, 24h or 7d, "
    "from 1 minute to 30 days."
)

_SCHEMA: Final = Schema(
    "space_mutes",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS space_mutes (
    space_id TEXT NOT NULL,
    target   TEXT NOT NULL,
    ends_at  BIGINT NOT NULL,
    reason   TEXT,
    muted_by TEXT NOT NULL,
    PRIMARY KEY (space_id, target)
);
CREATE INDEX IF NOT EXISTS space_mutes_ends_at ON space_mutes (ends_at);
""",
        ),
    ),
)


#: What a refused mute got wrong: its duration, its target's shape, its reason's text, or
#: a target who is an admin of the space; ``unchecked``: who the target is can't be told now.
MuteFault = Literal["duration", "target", "reason", "admin", "unchecked"]


class MuteError(ValueError):
    """A mute was refused; ``fault`` says why, the message says the way out."""

    def __init__(self, fault: MuteFault, message: str) -> None:
        super().__init__(message)
        self.fault: MuteFault = fault


class Mute(msgspec.Struct, frozen=True, kw_only=True):
    """Someone a space drops the messages of, until ``until``; ``by`` is who muted them."""

    space_id: str
    target: str
    until: datetime
    reason: str | None
    by: str


def parse_duration(text: str) -> timedelta:
    """How long ``10m``, ``1h``, ``24h`` or ``7d`` is; :class:`MuteError` for anything else."""
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        raise MuteError("duration", _DURATION_FORMS)
    duration = int(found[1]) * _UNITS[found[2]]
    if not MIN_MUTE <= duration <= MAX_MUTE:
        raise MuteError("duration", _DURATION_FORMS)
    return duration


def checked_target(target: str) -> str:
    """``target`` when it can name a person to mute; :class:`MuteError` otherwise.

    1 to :data:`MAX_TARGET_CHARS` characters, none of them a blank, a control or an invisible
    one (:func:`core.workspace.files.holds_invisible`).
    """
    if (
        not target
        or len(target) > MAX_TARGET_CHARS
        or any(c.isspace() for c in target)
        or holds_invisible(target)
    ):
        raise MuteError(
            "target",
            "Name the person to mute by their id in the space, such as slack:U0123ABC, "
            "without spaces or invisible characters.",
        )
    return target


def checked_reason(reason: str | None) -> str | None:
    """``reason`` trimmed (``None`` for none); :class:`MuteError` for a control or invisible
    character (tabs and line breaks aside) or more than :data:`MAX_REASON_CHARS`."""
    cleaned = (reason or "").strip()
    if holds_invisible(cleaned, allowed="\t\n"):
        raise MuteError(
            "reason",
            "A mute's reason is plain text: control and invisible characters (such as NUL or "
            "U+202E) are refused.",
        )
    if len(cleaned) > MAX_REASON_CHARS:
        raise MuteError("reason", f"A mute's reason holds at most {MAX_REASON_CHARS} characters.")
    return cleaned or None


def _mute(row: Row) -> Mute:
    return Mute(
        space_id=row["space_id"],
        target=row["target"],
        until=from_micros(int(row["ends_at"])),
        reason=row["reason"],
        by=row["muted_by"],
    )


class Mutes:
    """The mutes of every space, in the state store."""

    def __init__(self, db: Database, *, clock: Clock = system_clock) -> None:
        self._db = db
        self._clock = clock
        self._ready = False

    async def ensure_schema(self) -> None:
        """Create the table if needed; done lazily by every call, idempotent."""
        if not self._ready:
            await self._db.migrate(_SCHEMA)
            self._ready = True

    async def mute(
        self,
        space_id: str,
        target: str,
        duration: timedelta,
        *,
        reason: str | None,
        by: str,
    ) -> Mute:
        """Mute ``target`` in the space for ``duration`` from now; a second mute replaces it."""
        parse_space_id(space_id)
        checked_target(target)
        if not MIN_MUTE <= duration <= MAX_MUTE:
            raise MuteError("duration", _DURATION_FORMS)
        reason = checked_reason(reason)
        await self.ensure_schema()
        until = to_micros(self._clock() + duration)
        await self._db.execute(
            "INSERT INTO space_mutes (space_id, target, ends_at, reason, muted_by) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (space_id, target) DO UPDATE SET "
            "ends_at = excluded.ends_at, reason = excluded.reason, muted_by = excluded.muted_by",
            (space_id, target, until, reason, by),
        )
        return Mute(
            space_id=space_id, target=target, until=from_micros(until), reason=reason, by=by
        )

    async def unmute(self, space_id: str, target: str) -> bool:
        """End ``target``'s mute in the space; whether a mute was still running."""
        parse_space_id(space_id)
        await self.ensure_schema()
        rows = await self._db.fetch_all(
            "DELETE FROM space_mutes WHERE space_id = ? AND target = ? RETURNING ends_at",
            (space_id, target),
        )
        now = to_micros(self._clock())
        return any(int(row[0]) > now for row in rows)

    async def list(self, space_id: str) -> builtins.list[Mute]:
        """The space's running mutes, the soonest to end first."""
        parse_space_id(space_id)
        await self.ensure_schema()
        rows = await self._db.fetch_all(
            "SELECT space_id, target, ends_at, reason, muted_by FROM space_mutes "
            "WHERE space_id = ? AND ends_at > ? ORDER BY ends_at, target",
            (space_id, to_micros(self._clock())),
        )
        return [_mute(row) for row in rows]

    async def is_muted(self, space_id: str, targets: Iterable[str]) -> bool:
        """Whether any of ``targets`` (a sender's caller id, person key…) is muted here now.

        One lookup on the table's primary key, fit for every message a space receives.
        """
        names = builtins.list(dict.fromkeys(targets))
        if not names:
            return False
        await self.ensure_schema()
        placeholders = ", ".join(["?"] * len(names))
        row = await self._db.fetch_key(
            f"SELECT 1 FROM space_mutes WHERE space_id = ? AND target IN ({placeholders}) "  # noqa: S608 - fixed text
            "AND ends_at > ? LIMIT 1",
            (space_id, *names, to_micros(self._clock())),
        )
        return row is not None

    async def purge_expired(self) -> int:
        """Remove the mutes that have ended, in every space; how many there were."""
        await self.ensure_schema()
        return await self._db.execute(
            "DELETE FROM space_mutes WHERE ends_at <= ?", (to_micros(self._clock()),)
        )

    async def delete_space(self, space_id: str) -> int:
        """Remove every mute of the space; how many there were."""
        parse_space_id(space_id)
        await self.ensure_schema()
        return await self._db.execute("DELETE FROM space_mutes WHERE space_id = ?", (space_id,))
