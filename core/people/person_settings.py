"""What each person asked the assistant to remember about them: name, language, time zone.

One row in the state store per person key (``people:alice``, or a user key without a
directory), so two accounts linked into one person share their settings, and nobody reads
anyone else's.
A setting never given reads as ``None``.

Exceptions::

    InvalidSetting (ValueError)   a value that can't be saved; ``setting`` names which one
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable
from typing import Final, Literal

import msgspec

from core.clock import Clock, system_clock
from core.people.i18n import SUPPORTED_LANGUAGES
from core.people.timezones import canonical_zone
from core.state import Database, Migration, Schema

__all__ = [
    "MAX_NAME_CHARS",
    "InvalidSetting",
    "PersonSettings",
    "SavedSettings",
    "SettingName",
]

MAX_NAME_CHARS: Final = 100
_CACHE_SIZE: Final = 10_000

SettingName = Literal["name", "language", "time_zone"]

_SCHEMA: Final = Schema(
    "person_settings",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS person_settings (
    person_key TEXT PRIMARY KEY,
    name       TEXT,
    language   TEXT,
    time_zone  TEXT,
    updated_at TEXT NOT NULL
);
""",
        ),
    ),
)


class InvalidSetting(ValueError):
    """A setting's value was refused; the message says what a valid one looks like."""

    def __init__(self, setting: SettingName, value: str, message: str) -> None:
        super().__init__(message)
        self.setting: SettingName = setting
        self.value = value


class SavedSettings(msgspec.Struct, frozen=True, kw_only=True):
    """A person's settings; ``None`` for each they never gave."""

    name: str | None = None
    language: str | None = None
    time_zone: str | None = None


class PersonSettings:
    """Per-person settings in the state store; never stale, on any instance.

    Settings are read on every request. On a store one process owns (SQLite) they are
    cached in memory, and every write, which goes through this object, forgets the person's
    entry. On a store several instances share (PostgreSQL) nothing is cached: a write
    through one instance must be what the very next request reads through any other, and
    no invalidation message can be guaranteed to arrive before that request does, so every
    read is one primary-key lookup.
    """

    def __init__(self, db: Database, *, clock: Clock = system_clock) -> None:
        self._db = db
        self._clock = clock
        self._ready = False
        self._caching = not db.shared
        self._cache: dict[str, SavedSettings] = {}
        self._writes = 0  # a read that overlapped a write doesn't fill the cache
        self._reading: dict[str, asyncio.Task[SavedSettings]] = {}

    async def ensure_schema(self) -> None:
        """Create the table if needed; done lazily by every call, idempotent."""
        if not self._ready:
            await self._db.migrate(_SCHEMA)
            self._ready = True

    @property
    def cached(self) -> int:
        """How many people's settings this instance holds in memory."""
        return len(self._cache)

    async def get(self, person_key: str) -> SavedSettings:
        """The settings saved for ``person_key`` (all ``None`` for someone new)."""
        cached = self._cache.get(person_key)
        if cached is not None:
            return cached
        if not self._caching:
            return await self._read(person_key)
        # Requests of one person arriving together share one read: a burst of new people
        # (a restart under load) would otherwise queue a read per request behind the
        # store's one connection, each waiting for the event loop's attention to finish.
        reading = self._reading.get(person_key)
        if reading is None:
            reading = asyncio.get_running_loop().create_task(self._read_and_keep(person_key))
            self._reading[person_key] = reading
            reading.add_done_callback(functools.partial(self._done_reading, person_key))
        # Shielded: a request that gives up doesn't cancel the read others wait for.
        return await asyncio.shield(reading)

    async def _read_and_keep(self, person_key: str) -> SavedSettings:
        writes = self._writes
        saved = await self._read(person_key)
        if writes == self._writes:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[person_key] = saved
        return saved

    def _done_reading(self, person_key: str, reading: asyncio.Task[SavedSettings]) -> None:
        if self._reading.get(person_key) is reading:
            del self._reading[person_key]
        if not reading.cancelled():
            reading.exception()  # its waiters have it; a read nobody awaits any more is quiet

    async def names(self, person_keys: Iterable[str]) -> dict[str, str]:
        """The names the people ``person_keys`` asked to be called, those saved: one read
        for all of them."""
        wanted = list(dict.fromkeys(person_keys))
        if not wanted:
            return {}
        await self.ensure_schema()
        placeholders = ", ".join(["?"] * len(wanted))
        rows = await self._db.fetch_all(
            "SELECT person_key, name FROM person_settings "  # noqa: S608 - fixed text
            f"WHERE person_key IN ({placeholders}) AND name IS NOT NULL",
            tuple(wanted),
        )
        return {row[0]: row[1] for row in rows}

    async def _read(self, person_key: str) -> SavedSettings:
        await self.ensure_schema()
        row = await self._db.fetch_key(
            "SELECT name, language, time_zone FROM person_settings WHERE person_key = ?",
            (person_key,),
        )
        if row is None:
            return SavedSettings()
        return SavedSettings(name=row["name"], language=row["language"], time_zone=row["time_zone"])

    async def _save(self, sql: str, parameters: tuple[str, str, str]) -> None:
        await self._db.execute(sql, parameters)
        self._writes += 1
        self._cache.pop(parameters[0], None)
        self._reading.pop(parameters[0], None)  # a later request reads what was written

    async def set_name(self, person_key: str, name: str) -> str:
        """Save how the person wants to be called; returns it trimmed."""
        cleaned = " ".join(name.split())
        if not cleaned:
            raise InvalidSetting("name", name, "A name can't be empty; give at least one letter.")
        if len(cleaned) > MAX_NAME_CHARS:
            raise InvalidSetting(
                "name",
                name,
                f"A name can be at most {MAX_NAME_CHARS} characters long; give a shorter one.",
            )
        await self.ensure_schema()
        await self._save(
            "INSERT INTO person_settings (person_key, name, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (person_key) DO UPDATE SET "
            "name = excluded.name, updated_at = excluded.updated_at",
            (person_key, cleaned, self._now()),
        )
        return cleaned

    async def set_language(self, person_key: str, language: str) -> str:
        """Save the language the person wants (``en``, ``it``, ``de``, ``fr`` or ``es``)."""
        code = language.strip().lower()
        if code not in SUPPORTED_LANGUAGES:
            raise InvalidSetting(
                "language",
                language,
                f"{language!r} isn't a language the assistant speaks; choose one of "
                f"{', '.join(SUPPORTED_LANGUAGES)}.",
            )
        await self.ensure_schema()
        await self._save(
            "INSERT INTO person_settings (person_key, language, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (person_key) DO UPDATE SET "
            "language = excluded.language, updated_at = excluded.updated_at",
            (person_key, code, self._now()),
        )
        return code

    async def set_time_zone(self, person_key: str, time_zone: str) -> str:
        """Save the person's time zone; returns its canonical name (``Europe/Rome``)."""
        # The first lookup reads the tz database from disk; keep that off the event loop.
        zone = await asyncio.to_thread(canonical_zone, time_zone)
        if zone is None:
            raise InvalidSetting(
                "time_zone",
                time_zone,
                f"{time_zone[:64]!r} isn't the name of a time zone (a fixed offset such as "
                "+02:00 isn't one); give an IANA name such as Europe/Rome.",
            )
        await self.ensure_schema()
        await self._save(
            "INSERT INTO person_settings (person_key, time_zone, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (person_key) DO UPDATE SET "
            "time_zone = excluded.time_zone, updated_at = excluded.updated_at",
            (person_key, zone, self._now()),
        )
        return zone

    async def clear(self, person_key: str, field: Literal["language", "time_zone"]) -> None:
        """Forget the person's saved language or time zone: the defaults apply again."""
        await self.ensure_schema()
        column = {"language": "language", "time_zone": "time_zone"}[field]  # never the caller's
        await self._db.execute(
            f"UPDATE person_settings SET {column} = NULL, updated_at = ? "  # noqa: S608
            "WHERE person_key = ?",
            (self._now(), person_key),
        )
        self._writes += 1
        self._cache.pop(person_key, None)
        self._reading.pop(person_key, None)

    def _now(self) -> str:
        return self._clock().isoformat()
