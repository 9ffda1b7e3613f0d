"""The state store as the core's stores see it: the :class:`Database` port.

Every durable store (confirmations, resume slots, settings, links, logins, rate limits, the
tool log, the archive spill) talks SQL to this port and never to a driver. Two adapters sit
beside it: :mod:`core.state.sqlite` (one file under the data directory, the default) and
:mod:`core.state.postgres` (a server several instances share).

Stores write one SQL for both: ``?`` placeholders, ``INSERT … ON CONFLICT … DO UPDATE``
upserts, ``… RETURNING``, times as integer microseconds or ISO 8601 text, and schemas with
the few type tokens :mod:`core.state.schema` fills per dialect. Each call is one transaction
of its own (a write is committed when it returns); :meth:`Database.transaction` groups
statements, serialized against every other transaction holding the same ``lock`` key, on
every instance sharing the store.

Exception tree::

    StateError                   the state store failed a call
    ├── DatabaseUnavailable      the store can't be reached or stayed locked; nothing was
    │   │                        written and the same call can succeed a moment later
    │   └── DatabaseBusy         (SQLite) another process held the file locked too long
    └── DuplicateRow             a write collided with a row holding the same unique key
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from core.state.schema import Dialect, Schema

__all__ = [
    "Database",
    "DatabaseBusy",
    "DatabaseUnavailable",
    "Dialect",
    "DuplicateRow",
    "Notice",
    "Row",
    "StateError",
    "Subscription",
    "Transaction",
    "check_key_lookup",
    "is_plain_select",
]

#: What a subscriber hears: the payload of a notice, or ``None`` when notices may have been
#: missed (the listening connection dropped), so anything derived from them is suspect.
Notice = str | None


def is_plain_select(sql: str) -> bool:
    """Whether ``sql`` only reads: a write, ``… RETURNING`` included, starts otherwise."""
    return sql.lstrip()[:6].upper() == "SELECT"


def check_key_lookup(sql: str) -> None:
    """Refuse anything but a ``SELECT`` for :meth:`Database.fetch_key`."""
    if not is_plain_select(sql):
        raise ValueError(f"fetch_key runs a SELECT, not {sql.split(None, 1)[0]!r}.")


class StateError(Exception):
    """The state store failed a call."""


class DatabaseUnavailable(StateError):
    """The state store can't be reached, or stayed locked; try again shortly."""


class DatabaseBusy(DatabaseUnavailable):
    """The SQLite file stayed locked by another process past the busy timeout."""


class DuplicateRow(StateError):
    """A write collided with an existing row holding the same unique key."""


class Row(Protocol):
    """One result row, read by column name (``row["name"]``) or position (``row[0]``)."""

    def __getitem__(self, key: Any, /) -> Any: ...

    def keys(self) -> list[str]: ...


class Statements(Protocol):
    """Where statements run: a whole store, a transaction, or a lock's own connection."""

    async def execute(self, sql: str, parameters: Sequence[Any] = ()) -> int: ...

    async def fetch_all(self, sql: str, parameters: Sequence[Any] = ()) -> list[Row]: ...

    async def fetch_one(self, sql: str, parameters: Sequence[Any] = ()) -> Row | None: ...


class Transaction(Statements, Protocol):
    """Statements that commit together, or not at all, inside :meth:`Database.transaction`."""

    async def notify(self, channel: str, payload: str) -> None:
        """Announce ``payload`` on ``channel`` when, and only if, the transaction commits."""
        ...


class Subscription(Protocol):
    """A standing interest in one channel's notices."""

    @property
    def live(self) -> bool:
        """Whether every notice sent from now on will be heard (the listener is connected)."""
        ...


class Database(Protocol):
    """The durable state every instance of the surface shares."""

    @property
    def dialect(self) -> Dialect: ...

    @property
    def shared(self) -> bool:
        """Whether other processes may use the same store (PostgreSQL) or not (SQLite)."""
        ...

    async def migrate(self, schema: Schema) -> None:
        """Bring ``schema``'s tables to its newest version; idempotent, safe to race."""
        ...

    async def execute(self, sql: str, parameters: Sequence[Any] = ()) -> int:
        """Run one statement and commit; returns the number of rows it changed."""
        ...

    async def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement per parameter row, all in one transaction."""
        ...

    async def fetch_all(self, sql: str, parameters: Sequence[Any] = ()) -> list[Row]:
        """Every row a query (or a write ``… RETURNING``, then committed) gives."""
        ...

    async def fetch_one(self, sql: str, parameters: Sequence[Any] = ()) -> Row | None:
        """The first row a query (or a committed write ``… RETURNING``) gives, if any."""
        ...

    async def fetch_key(self, sql: str, parameters: Sequence[Any] = ()) -> Row | None:
        """The row a ``SELECT`` by primary key finds, if any: one small index lookup.

        For reads on a request's way in (a person's settings, an account's link), which a
        store may answer in place, without a round trip to another thread. Anything
        larger goes through :meth:`fetch_one`.
        """
        ...

    def transaction(self, *, lock: str | None = None) -> AbstractAsyncContextManager[Transaction]:
        """One transaction; with ``lock``, none other holding the same key runs meanwhile.

        Keep it short: it holds a connection (and, on SQLite, the whole file) until it ends.
        """
        ...

    def own_connection(self) -> AbstractAsyncContextManager[Statements]:
        """Statements on a connection of their own, outside the pool, while the block runs.

        For the little work that must not queue behind a busy pool (renewing claims before
        they lapse). Each statement commits by itself. SQLite has one connection: the store.
        """
        ...

    def lock(self, key: str) -> AbstractAsyncContextManager[Statements]:
        """Hold ``key`` while the block runs: no other holder of it, on any instance, runs.

        For work that must not overlap but isn't one transaction (it waits on the network
        between statements). On PostgreSQL it keeps one pooled connection for the duration;
        run the block's statements on what it yields (that connection, each statement
        committed by itself), not on the store, which would borrow a second connection
        while the first is held.
        """
        ...

    async def notify(self, channel: str, payload: str) -> None:
        """Tell every subscriber of ``channel``, in every instance, ``payload``."""
        ...

    async def subscribe(self, channel: str, callback: Callable[[Notice], None]) -> Subscription:
        """Call ``callback`` with each notice on ``channel``; live once this returns."""
        ...

    async def close(self) -> None: ...
