"""Spaces and the people in them: who takes part, and what each may ask of the assistant.

A space's row is made the first time a message arrives from it (:meth:`Spaces.open`); each
person who speaks in it is recorded as taking part (:meth:`Spaces.join`). A person's role
in a space comes, in this order, from:

1. the file's ``spaces:`` section (:class:`~core.spaces.config.SpaceConfig`): ``admins``,
   then ``members``, whose entries are person keys (``people:alice``) or identities
   (``slack:U0123ABC``), matched against the person's key and ids, and against the person
   each entry belongs to (:class:`~core.spaces.names.Names`: linked accounts and the
   directory), so any of a person's accounts holds the role the file gives another;
2. in a direct message, the person who opened it, its admin;
3. having spoken in the space: a member.

Anyone else has no role there (``None``). What a role allows is :data:`PERMISSIONS`.

Exceptions::

    InvalidSpaceId (ValueError)         the space id is malformed (from core.spaces.ids)
    DirectoryUnavailable (Exception)    (from core.people.directory, :meth:`Spaces.is_admin` only)
                                        whether an entry of the file is the person can't be
                                        checked right now
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Literal

import msgspec

from core.clock import Clock, system_clock
from core.codes import from_micros, to_micros
from core.people.directory import DirectoryUnavailable
from core.spaces.config import SpaceConfig
from core.spaces.ids import Platform, SpaceRef, parse_space_id
from core.spaces.names import Names
from core.spaces.turn import Role
from core.state import Database, Migration, Row, Schema

if TYPE_CHECKING:
    from core.people.people import People

__all__ = ["PERMISSIONS", "Permission", "Space", "Spaces", "allows"]

Permission = Literal[
    "prefs.get", "prefs.set", "mute", "config.get", "config.set", "usage.get", "space.delete"
]

PERMISSIONS: Final[Mapping[Permission, frozenset[Role]]] = MappingProxyType(
    {
        "prefs.get": frozenset({"admin", "member"}),
        "prefs.set": frozenset({"admin"}),
        "mute": frozenset({"admin"}),
        # The space's runtime settings (core/spaces/settings.py, #40).
        "config.get": frozenset({"admin", "member"}),
        "config.set": frozenset({"admin"}),
        # What the space's people used of the model (core/usage/ledger.py), person by person.
        "usage.get": frozenset({"admin"}),
        # Forgetting the space: its members, preferences, settings, mutes and ambient talk.
        "space.delete": frozenset({"admin"}),
    }
)

_SCHEMA: Final = Schema(
    "spaces",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS spaces (
    id         TEXT PRIMARY KEY,
    platform   TEXT NOT NULL,
    is_dm      INTEGER NOT NULL,
    title      TEXT,
    created_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS space_members (
    space_id   TEXT NOT NULL,
    person_key TEXT NOT NULL,
    joined_at  BIGINT NOT NULL,
    PRIMARY KEY (space_id, person_key)
);
CREATE INDEX IF NOT EXISTS space_members_person ON space_members (person_key);
""",
        ),
        # The name a member was last seen under (the directory's or the platform's), so the
        # people of a space are shown by name (#40).
        Migration(2, "ALTER TABLE space_members ADD COLUMN name TEXT;"),
    ),
)


class Space(msgspec.Struct, frozen=True, kw_only=True):
    """A space the assistant has heard from; ``title`` is the platform's name for it."""

    id: str
    platform: Platform
    is_dm: bool
    title: str | None
    created_at: datetime


def allows(role: Role | None, permission: Permission) -> bool:
    """Whether someone of ``role`` in a space (``None``: not in it) holds ``permission``."""
    return role is not None and role in PERMISSIONS[permission]


def _space(row: Row) -> Space:
    return Space(
        id=row["id"],
        platform=row["platform"],
        # From the id, as every rule reads it: a row written when Slack's G… channels were
        # taken for DMs (before #34) says so no more.
        is_dm=parse_space_id(row["id"]).is_dm,
        title=row["title"],
        created_at=from_micros(int(row["created_at"])),
    )


class Spaces:
    """The spaces and their members, in the state store, with the file's word on roles.

    ``people`` says whose the file's entries are (without it, each entry is only itself);
    :attr:`names` is that resolution, which mutes share.
    """

    def __init__(
        self,
        db: Database,
        config: Mapping[str, SpaceConfig],
        *,
        people: People | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self._db = db
        self._config = config
        self._clock = clock
        self._ready = False
        self.names: Final = Names(people, clock=clock)

    async def ensure_schema(self) -> None:
        """Create the tables if needed; done lazily by every call, idempotent."""
        if not self._ready:
            await self._db.migrate(_SCHEMA)
            self._ready = True

    async def open(self, ref: SpaceRef, *, title: str | None = None) -> Space:
        """The space ``ref`` names, made now if it is new; a ``title`` given replaces the old.

        A space already known with the same title (or none given) costs one key lookup.
        """
        parse_space_id(ref.id)
        known = await self.get(ref.id)
        if known is not None and (title is None or title == known.title):
            return known
        row = await self._db.fetch_one(
            "INSERT INTO spaces (id, platform, is_dm, title, created_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET title = COALESCE(excluded.title, spaces.title) "
            "RETURNING id, platform, is_dm, title, created_at",
            (ref.id, ref.platform, int(ref.is_dm), title, to_micros(self._clock())),
        )
        assert row is not None  # noqa: S101 - an upsert RETURNING always gives its row
        return _space(row)

    async def get(self, space_id: str) -> Space | None:
        """The space, if the assistant has heard from it."""
        await self.ensure_schema()
        row = await self._db.fetch_key(
            "SELECT id, platform, is_dm, title, created_at FROM spaces WHERE id = ?", (space_id,)
        )
        return None if row is None else _space(row)

    async def join(self, space_id: str, person_key: str, *, name: str | None = None) -> None:
        """Record that ``person_key`` takes part in the space, seen under ``name`` (the
        directory's or the platform's); a key lookup once they do, under the same name."""
        parse_space_id(space_id)
        await self.ensure_schema()
        row = await self._db.fetch_key(
            "SELECT name FROM space_members WHERE space_id = ? AND person_key = ?",
            (space_id, person_key),
        )
        if row is not None and (name is None or name == row[0]):
            return
        await self._db.execute(
            "INSERT INTO space_members (space_id, person_key, joined_at, name) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (space_id, person_key) DO UPDATE SET "
            "name = COALESCE(excluded.name, space_members.name)",
            (space_id, person_key, to_micros(self._clock()), name),
        )

    async def _joined(self, space_id: str, person_key: str) -> bool:
        await self.ensure_schema()
        row = await self._db.fetch_key(
            "SELECT 1 FROM space_members WHERE space_id = ? AND person_key = ?",
            (space_id, person_key),
        )
        return row is not None

    async def members(self, space_id: str) -> builtins.list[tuple[str, str | None]]:
        """Who took part in the space, with the name each was last seen under, and who
        the file names there (each entry as the person it belongs to, named as the directory
        names them), by key."""
        parse_space_id(space_id)
        await self.ensure_schema()
        rows = await self._db.fetch_all(
            "SELECT person_key, name FROM space_members WHERE space_id = ?", (space_id,)
        )
        found: dict[str, str | None] = {row[0]: row[1] for row in rows}
        configured = self._config.get(space_id)
        if configured is not None:
            for entry in (*configured.admins, *configured.members):
                key = await self.names.person(entry) or entry
                if found.get(key) is None:
                    found[key] = await self.names.display_name(entry)
        return sorted(found.items())

    async def roster(self, space_id: str) -> builtins.list[tuple[str, str | None, Role]]:
        """Everyone with a role in the space, by key: who took part (with the name each was
        last seen under) and whom the file names (as the directory names them), each with
        the role :meth:`role` gives them. One read of the members, however many there are
        (the file's entries are placed by the directory, as :meth:`role` places them)."""
        ref = parse_space_id(space_id)
        await self.ensure_schema()
        rows = await self._db.fetch_all(
            "SELECT person_key, name FROM space_members WHERE space_id = ? "
            "ORDER BY joined_at, person_key",
            (space_id,),
        )
        found: dict[str, str | None] = {row[0]: row[1] for row in rows}
        # A direct message's first person is its admin (the order :meth:`_opened` reads).
        opener = rows[0][0] if ref.is_dm and rows else None
        admins: set[str] = set()
        members: set[str] = set()
        configured = self._config.get(space_id)
        if configured is not None:
            for entries, named in ((configured.admins, admins), (configured.members, members)):
                for entry in entries:
                    owner = await self.names.person(entry)
                    named.update((entry, owner) if owner is not None else (entry,))
                    key = owner or entry
                    if found.get(key) is None:
                        found[key] = await self.names.display_name(entry)
        roster: builtins.list[tuple[str, str | None, Role]] = []
        for key in sorted(found):
            if key in admins:
                roster.append((key, found[key], "admin"))
            elif key in members:
                roster.append((key, found[key], "member"))
            else:
                roster.append((key, found[key], "admin" if key == opener else "member"))
        return roster

    async def names_of(self, space_id: str, keys: Iterable[str]) -> dict[str, str]:
        """The names the people ``keys`` were last seen under in the space, those known."""
        wanted = builtins.list(dict.fromkeys(keys))
        if not wanted:
            return {}
        await self.ensure_schema()
        placeholders = ", ".join(["?"] * len(wanted))
        rows = await self._db.fetch_all(
            "SELECT person_key, name FROM space_members WHERE space_id = ? "  # noqa: S608 - fixed text
            f"AND person_key IN ({placeholders}) AND name IS NOT NULL",
            (space_id, *wanted),
        )
        return {row[0]: row[1] for row in rows}

    async def role(
        self, space_id: str, person_key: str, identities: Iterable[str] = ()
    ) -> Role | None:
        """``person_key``'s role in the space (known also by ``identities``); ``None``: none.

        The file decides first (admins, then members), an entry naming any account of the
        person; then a direct message's first person is its admin; then whoever took part
        is a member. An entry the directory can't place right now counts only as written.
        """
        ref = parse_space_id(space_id)
        names = {person_key, *identities}
        configured = self._config.get(space_id)
        if configured is not None:
            if await self._named(configured.admins, person_key, names, strict=False):
                return "admin"
            if await self._named(configured.members, person_key, names, strict=False):
                return "member"
        if ref.is_dm and await self._opened(space_id, person_key):
            return "admin"
        if await self._joined(space_id, person_key):
            return "member"
        return None

    async def is_admin(
        self, space_id: str, person_key: str, identities: Iterable[str] = ()
    ) -> bool:
        """Whether :meth:`role` makes ``person_key`` an admin of the space, surely.

        Where :meth:`role` reads an admin entry the directory can't place as written, this
        raises :class:`DirectoryUnavailable`: a refusal that rests on it (an admin can't be
        muted) must not be waved through while the directory is down.
        """
        ref = parse_space_id(space_id)
        names = {person_key, *identities}
        configured = self._config.get(space_id)
        if configured is not None:
            if await self._named(configured.admins, person_key, names, strict=True):
                return True
            if await self._named(configured.members, person_key, names, strict=False):
                return False  # the file's word comes before the direct message's rule
        return ref.is_dm and await self._opened(space_id, person_key)

    async def _named(
        self, entries: Iterable[str], person_key: str, names: set[str], *, strict: bool
    ) -> bool:
        """Whether one of the file's ``entries`` names the person: as written, or an
        account of theirs."""
        entries = tuple(entries)
        if names.intersection(entries):
            return True  # the common case costs no lookup
        unplaced: str | None = None
        for entry in entries:
            owner = await self.names.person(entry)
            if owner == person_key:
                return True
            if owner is None:
                unplaced = entry
        if strict and unplaced is not None:
            raise DirectoryUnavailable(
                f"Whose account {unplaced} is can't be checked right now (the directory "
                "doesn't answer)."
            )
        return False

    async def _opened(self, space_id: str, person_key: str) -> bool:
        """Whether ``person_key`` opened the direct message ``space_id`` (spoke first)."""
        await self.ensure_schema()
        # A direct message has one person besides the bot (a group DM is a group): the
        # first to speak is its admin; ties go by key, the same on every instance.
        first = await self._db.fetch_one(
            "SELECT person_key FROM space_members WHERE space_id = ? "
            "ORDER BY joined_at, person_key LIMIT 1",
            (space_id,),
        )
        return first is not None and first[0] == person_key

    async def spaces_of(
        self, person_key: str, identities: Iterable[str] = ()
    ) -> builtins.list[Space]:
        """The spaces ``person_key`` took part in or the file names them in (under any
        account of theirs), by id.

        A space the file names that never spoke to the assistant is made now, as
        :meth:`open` would.
        """
        await self.ensure_schema()
        names = {person_key, *identities}
        rows = await self._db.fetch_all(
            "SELECT s.id, s.platform, s.is_dm, s.title, s.created_at FROM spaces s "
            "JOIN space_members m ON m.space_id = s.id WHERE m.person_key = ?",
            (person_key,),
        )
        found = {space.id: space for space in map(_space, rows)}
        for space_id, configured in self._config.items():
            if space_id not in found and await self._named(
                (*configured.admins, *configured.members), person_key, names, strict=False
            ):
                found[space_id] = await self.open(parse_space_id(space_id))
        return [found[space_id] for space_id in sorted(found)]

    async def delete(self, space_id: str) -> bool:
        """Forget the space and who took part in it; whether it was known.

        The space's preferences, mutes and ambient messages live in their own stores,
        each with its ``delete_space``.
        """
        parse_space_id(space_id)
        await self.ensure_schema()
        async with self._db.transaction(lock=f"spaces:{space_id}") as transaction:
            await transaction.execute("DELETE FROM space_members WHERE space_id = ?", (space_id,))
            deleted = await transaction.execute("DELETE FROM spaces WHERE id = ?", (space_id,))
        return deleted > 0
