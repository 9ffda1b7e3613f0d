"""The state store in one SQLite file under the data directory: the zero-setup default.

One aiosqlite connection in WAL mode, in autocommit mode (every statement is its own
transaction unless :meth:`SqliteDatabase.transaction` opens one), whose worker thread keeps
the event loop free. An asyncio lock lets one call at a time use the connection, so a
statement from another task never lands inside someone's open transaction; a failed
statement or transaction is rolled back before the lock is released, so it never leaves a
transaction open behind it.

A plain ``SELECT`` outside a transaction goes to a second, read-only connection instead
(WAL lets a reader run beside the writer): a person's settings or links, read as a request
arrives, don't queue behind the writes of the turns already running. It sees every write
that has returned, since each is committed when it returns; a read inside a transaction
stays on the transaction's connection.

:meth:`SqliteDatabase.fetch_key` (a primary-key lookup) goes further: a third read-only
connection answers it on the event loop's own thread, in microseconds. A hop to a worker
thread costs more than the lookup: on a busy loop the thread waits for the interpreter's
lock, twice, and 64 new people arriving together waited up to 140 ms for their settings
(docs/benchmarks.md). That connection never waits for a lock: if the file is busy (a
checkpoint), the lookup takes the reader's thread instead.

Notices go to subscribers in this process only: one SQLite file serves one instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import aiosqlite

from core.state import migrations
from core.state.port import (
    DatabaseBusy,
    Dialect,
    DuplicateRow,
    Notice,
    Row,
    Statements,
    Transaction,
    check_key_lookup,
    is_plain_select,
)
from core.state.schema import Schema

__all__ = ["SqliteDatabase"]

#: How long a write waits for another process's lock on the file (MERCURY_STATE_BUSY_TIMEOUT_S).
_BUSY_TIMEOUT_S: Final = 10.0


class _Live:
    """A subscription in one process: always live."""

    live: Final = True


class SqliteDatabase:
    """An open SQLite database in WAL mode."""

    def __init__(
        self,
        connection: aiosqlite.Connection,
        path: Path,
        reader: aiosqlite.Connection,
        at_hand: sqlite3.Connection,
    ) -> None:
        self._connection = connection
        self._reader = reader
        self._at_hand = at_hand
        self.path = path
        self._lock = asyncio.Lock()
        self._subscribers: dict[str, list[Callable[[Notice], None]]] = {}
        self._migrated: set[str] = set()
        # Weak: a key's lock lives as long as someone holds or awaits it.
        self._held: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    @classmethod
    async def open(cls, path: Path, *, busy_timeout_s: float = _BUSY_TIMEOUT_S) -> SqliteDatabase:
        """Open ``path``; a write meeting another process's lock waits ``busy_timeout_s``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = await aiosqlite.connect(path, timeout=busy_timeout_s, isolation_level=None)
        connection.row_factory = sqlite3.Row
        await connection.execute("PRAGMA journal_mode=WAL")
        await connection.execute("PRAGMA synchronous=NORMAL")
        await connection.execute(f"PRAGMA busy_timeout={max(1, round(busy_timeout_s * 1000))}")
        reader = await aiosqlite.connect(path, timeout=busy_timeout_s, isolation_level=None)
        reader.row_factory = sqlite3.Row
        await reader.execute("PRAGMA query_only=ON")  # a write sent here is an error, not a race
        # timeout=0: a lookup on the event loop's thread must never sleep on a busy file.
        at_hand = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
        at_hand.row_factory = sqlite3.Row
        at_hand.execute("PRAGMA query_only=ON")
        return cls(connection, path, reader, at_hand)

    @property
    def dialect(self) -> Dialect:
        return "sqlite"

    @property
    def shared(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"SqliteDatabase({str(self.path)!r})"

    # --- the port ---------------------------------------------------------------------

    async def migrate(self, schema: Schema) -> None:
        if schema.component in self._migrated:
            return
        async with self.transaction() as transaction:
            await migrations.apply(transaction, schema, "sqlite")
        self._migrated.add(schema.component)

    async def execute(self, sql: str, parameters: Sequence[Any] = ()) -> int:
        async with self._lock, self._errors():
            cursor = await self._connection.execute(sql, parameters)
            count = cursor.rowcount
            await cursor.close()
        return count

    async def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        async with self._lock, self._errors(), self._begun():
            await self._connection.executemany(sql, rows)

    async def fetch_all(self, sql: str, parameters: Sequence[Any] = ()) -> list[Row]:
        if is_plain_select(sql):
            async with self._errors():
                # One hop to the reader's thread; aiosqlite runs its calls in order.
                return list(await self._reader.execute_fetchall(sql, parameters))
        async with self._lock, self._errors():
            return await self._fetch_all(sql, parameters)

    async def fetch_one(self, sql: str, parameters: Sequence[Any] = ()) -> Row | None:
        rows = await self.fetch_all(sql, parameters)
        return rows[0] if rows else None

    async def fetch_key(self, sql: str, parameters: Sequence[Any] = ()) -> Row | None:
        check_key_lookup(sql)
        try:
            cursor = self._at_hand.execute(sql, parameters)
            # Every row read and the cursor closed: the statement is done, so its read
            # transaction ends now and holds no snapshot back from the checkpoint.
            rows: list[Row] = cursor.fetchall()
            cursor.close()
        except sqlite3.OperationalError as error:
            message = str(error).lower()
            if "locked" not in message and "busy" not in message:
                raise
            return await self.fetch_one(sql, parameters)
        return rows[0] if rows else None

    @contextlib.asynccontextmanager
    async def transaction(self, *, lock: str | None = None) -> AsyncIterator[Transaction]:
        # BEGIN IMMEDIATE takes the file's write lock at once: with one connection per
        # process and the asyncio lock around it, every transaction is serialized, so the
        # ``lock`` key needs no further work here.
        transaction = _SqliteTransaction(self)
        async with self._lock, self._errors(), self._begun():
            yield transaction
        for channel, payload in transaction.notices:
            await self.notify(channel, payload)

    @contextlib.asynccontextmanager
    async def own_connection(self) -> AsyncIterator[Statements]:
        yield self  # one connection per file: there is no pool to queue behind

    @contextlib.asynccontextmanager
    async def lock(self, key: str) -> AsyncIterator[Statements]:
        # One process per file: an asyncio lock per key is the whole story, and the
        # statements run on the file's one connection as any others do.
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = asyncio.Lock()
        async with held:
            yield self

    async def notify(self, channel: str, payload: str) -> None:
        for callback in list(self._subscribers.get(channel, ())):
            callback(payload)

    async def subscribe(self, channel: str, callback: Callable[[Notice], None]) -> _Live:
        self._subscribers.setdefault(channel, []).append(callback)
        return _Live()

    async def close(self) -> None:
        self._at_hand.close()
        await self._reader.close()
        await self._connection.close()

    # --- inside -----------------------------------------------------------------------

    async def _fetch_all(self, sql: str, parameters: Sequence[Any]) -> list[Row]:
        cursor = await self._connection.execute(sql, parameters)
        # All rows are read before the cursor closes: a write ``… RETURNING`` is only
        # finished (and committed, in autocommit mode) once its last row has been read.
        rows = await cursor.fetchall()
        await cursor.close()
        return list(rows)

    @contextlib.asynccontextmanager
    async def _begun(self) -> AsyncIterator[None]:
        await self._connection.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            # Rolled back whatever went wrong (cancellation included), so the connection
            # never keeps a half-done transaction for the next caller to commit.
            with contextlib.suppress(sqlite3.Error):
                await asyncio.shield(self._connection.rollback())
            raise
        await self._connection.commit()

    @contextlib.asynccontextmanager
    async def _errors(self) -> AsyncIterator[None]:
        try:
            yield
        except sqlite3.IntegrityError as error:
            if "UNIQUE" in str(error) or "PRIMARY KEY" in str(error):
                raise DuplicateRow(str(error)) from error
            raise
        except sqlite3.OperationalError as error:
            message = str(error).lower()
            if "locked" in message or "busy" in message:
                raise DatabaseBusy(
                    f"The database {self.path} is locked by another process; try again shortly."
                ) from error
            raise


class _SqliteTransaction:
    def __init__(self, database: SqliteDatabase) -> None:
        self._connection = database._connection
        self._database = database
        self.notices: list[tuple[str, str]] = []

    async def notify(self, channel: str, payload: str) -> None:
        self.notices.append((channel, payload))

    async def execute(self, sql: str, parameters: Sequence[Any] = ()) -> int:
        cursor = await self._connection.execute(sql, parameters)
        count = cursor.rowcount
        await cursor.close()
        return count

    async def fetch_all(self, sql: str, parameters: Sequence[Any] = ()) -> list[Row]:
        return await self._database._fetch_all(sql, parameters)

    async def fetch_one(self, sql: str, parameters: Sequence[Any] = ()) -> Row | None:
        rows = await self.fetch_all(sql, parameters)
        return rows[0] if rows else None
