"""A space's preferences: short key/value texts its admins set from the chat.

Every conversation of the space shares them (there are no per-person rows), and every run in
the space reads them in its instructions (:func:`render_preferences`), so a preference set
now shapes the next answer without the assistant looking it up. Keys are 1 to 64 lower-case
letters, digits, ``.``, ``_`` or ``-`` (:data:`PREFERENCE_KEY`); a value is plain text of 1 to
:data:`MAX_VALUE_CHARS` characters, without control or invisible characters but tabs and line
breaks (the rule file names follow, :func:`core.workspace.files.holds_invisible`); a space holds at
most :data:`MAX_PREFERENCES` keys, and changing the value of a key it already holds never
counts against that.

Who may read or write them is the caller's business (:data:`core.spaces.PERMISSIONS`); the
store checks only the shape of what it keeps.

Exceptions::

    PreferenceError (ValueError)    a key, value or space full of preferences was refused;
                                    ``fault`` (:data:`PreferenceFault`) says which, the
                                    message says the way out
    InvalidSpaceId (ValueError)     the space id is malformed (from core.spaces.ids)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Final, Literal

import msgspec

from core.clock import Clock, system_clock
from core.codes import from_micros, to_micros
from core.spaces.ids import parse_space_id
from core.spaces.turn import escape
from core.state import Database, Migration, Row, Schema
from core.workspace.files import holds_invisible

__all__ = [
    "MAX_PREFERENCES",
    "MAX_VALUE_CHARS",
    "PREFERENCE_KEY",
    "Preference",
    "PreferenceError",
    "PreferenceFault",
    "SpacePreferences",
    "render_preferences",
]

PREFERENCE_KEY: Final = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
MAX_VALUE_CHARS: Final = 500
MAX_PREFERENCES: Final = 50


_SCHEMA: Final = Schema(
    "space_preferences",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS space_preferences (
    space_id   TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (space_id, key)
);
""",
        ),
    ),
)


#: What a refused preference got wrong: its key; its value empty, too long or holding control
#: or invisible characters; or the space already full.
PreferenceFault = Literal["key", "blank", "long", "invisible", "full"]


class PreferenceError(ValueError):
    """A preference was refused: its key, its value, or a space already full."""

    def __init__(self, fault: PreferenceFault, message: str) -> None:
        super().__init__(message)
        self.fault: PreferenceFault = fault


class Preference(msgspec.Struct, frozen=True, kw_only=True):
    """One preference of a space.

    ``created_by`` and ``created_at`` are the key's first setting; ``updated_at`` its last.
    """

    key: str
    value: str
    created_by: str
    created_at: datetime
    updated_at: datetime


def _check_key(key: str) -> str:
    """``key`` when it is a valid preference key; :class:`PreferenceError` otherwise."""
    if PREFERENCE_KEY.fullmatch(key) is None:
        raise PreferenceError(
            "key",
            'A preference key is 1 to 64 lower-case letters, digits, ".", "_" or "-", '
            "starting with a letter or digit, such as tone or sources.news.",
        )
    return key


def _check_value(value: str) -> str:
    """``value`` trimmed, when it is a valid preference value; :class:`PreferenceError` if not."""
    cleaned = value.strip()
    if holds_invisible(cleaned, allowed="\t\n"):
        raise PreferenceError(
            "invisible",
            "A preference's value is plain text: control and invisible characters (such as "
            "NUL or U+202E) are refused; tabs and line breaks are fine.",
        )
    if not cleaned:
        raise PreferenceError(
            "blank", "A preference's value is empty or only blanks; write what to follow."
        )
    if len(cleaned) > MAX_VALUE_CHARS:
        raise PreferenceError(
            "long",
            f"A preference's value holds at most {MAX_VALUE_CHARS} characters; "
            f"this one has {len(cleaned)}.",
        )
    return cleaned


def _preference(row: Row) -> Preference:
    return Preference(
        key=row["key"],
        value=row["value"],
        created_by=row["created_by"],
        created_at=from_micros(int(row["created_at"])),
        updated_at=from_micros(int(row["updated_at"])),
    )


class SpacePreferences:
    """The preferences of every space, in the state store."""

    def __init__(self, db: Database, *, clock: Clock = system_clock) -> None:
        self._db = db
        self._clock = clock
        self._ready = False

    async def ensure_schema(self) -> None:
        """Create the table if needed; done lazily by every call, idempotent."""
        if not self._ready:
            await self._db.migrate(_SCHEMA)
            self._ready = True

    async def list(self, space_id: str) -> list[Preference]:
        """The space's preferences, by key."""
        parse_space_id(space_id)
        await self.ensure_schema()
        rows = await self._db.fetch_all(
            "SELECT key, value, created_by, created_at, updated_at FROM space_preferences "
            "WHERE space_id = ? ORDER BY key",
            (space_id,),
        )
        return [_preference(row) for row in rows]

    async def get(self, space_id: str, key: str) -> Preference | None:
        """The space's preference ``key``, if it has one."""
        parse_space_id(space_id)
        _check_key(key)
        await self.ensure_schema()
        row = await self._db.fetch_key(
            "SELECT key, value, created_by, created_at, updated_at FROM space_preferences "
            "WHERE space_id = ? AND key = ?",
            (space_id, key),
        )
        return None if row is None else _preference(row)

    async def set(self, space_id: str, key: str, value: str, *, by: str) -> tuple[Preference, bool]:
        """Save ``value`` (trimmed) under ``key``; returns the preference and whether it is new.

        A new key is refused once the space holds :data:`MAX_PREFERENCES`: the count and the
        insert share one transaction holding the space's lock, so two sets racing for the
        last place can't both take it.
        """
        parse_space_id(space_id)
        _check_key(key)
        cleaned = _check_value(value)
        await self.ensure_schema()
        now = to_micros(self._clock())
        async with self._db.transaction(lock=f"space_preferences:{space_id}") as transaction:
            held = await transaction.fetch_one(
                "SELECT 1 FROM space_preferences WHERE space_id = ? AND key = ?",
                (space_id, key),
            )
            if held is None:
                count = await transaction.fetch_one(
                    "SELECT COUNT(*) FROM space_preferences WHERE space_id = ?", (space_id,)
                )
                if count is not None and int(count[0]) >= MAX_PREFERENCES:
                    raise PreferenceError(
                        "full",
                        f"This space already holds {MAX_PREFERENCES} preferences, the most it "
                        "can; delete one it no longer needs, or change one that is there.",
                    )
            row = await transaction.fetch_one(
                "INSERT INTO space_preferences "
                "(space_id, key, value, created_by, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (space_id, key) DO UPDATE SET "
                "value = excluded.value, updated_at = excluded.updated_at "
                "RETURNING key, value, created_by, created_at, updated_at",
                (space_id, key, cleaned, by, now, now),
            )
        assert row is not None  # noqa: S101 - an upsert RETURNING always gives its row
        return _preference(row), held is None

    async def delete(self, space_id: str, key: str) -> bool:
        """Delete the space's preference ``key``; whether there was one."""
        parse_space_id(space_id)
        _check_key(key)
        await self.ensure_schema()
        deleted = await self._db.execute(
            "DELETE FROM space_preferences WHERE space_id = ? AND key = ?", (space_id, key)
        )
        return deleted > 0

    async def delete_space(self, space_id: str) -> int:
        """Delete every preference of the space; how many there were."""
        parse_space_id(space_id)
        await self.ensure_schema()
        return await self._db.execute(
            "DELETE FROM space_preferences WHERE space_id = ?", (space_id,)
        )


def render_preferences(preferences: Iterable[Preference]) -> str:
    """The preferences block of a run's instructions; ``''`` when there are none.

    Keys and values are escaped, so a value can't close its element or open another: it
    stays text however it is written.
    """
    lines = [f'<pref key="{escape(p.key)}">{escape(p.value)}</pref>' for p in preferences]
    if not lines:
        return ""
    return "<preferences>\n" + "\n".join(lines) + "\n</preferences>"
