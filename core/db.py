"""The core's SQLite database: one file under the data directory, WAL, opened once.

Each store declares its own schema (``CREATE TABLE IF NOT EXISTS …``) and applies it with
:meth:`Database.ensure`. Every statement goes through one aiosqlite connection, whose
worker thread serializes them, so no store blocks the event loop. A write and its commit
run as one unit that nothing interleaves with, and a unit that fails is rolled back, so
the connection never keeps a transaction open past the call that opened it.

Exception tree::

    DatabaseBusy    another process held the database locked past the busy timeout;
                    nothing was written, and the same call can succeed a moment later
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

Row = sqlite3.Row


class DatabaseBusy(Exception):
    """The database stayed locked by another process past the busy timeout."""


@contextlib.asynccontextmanager
async def _busy_as_error(path: Path) -> AsyncIterator[None]:
    try:
        yield
    except sqlite3.OperationalError as error:
        message = str(error).lower()
        if "locked" in message or "busy" in message:
            raise DatabaseBusy(
                f"The database {path} is locked by another process; try again shortly."
            ) from error
        raise


class Database:
    """An open SQLite database in WAL mode."""

    def __init__(self, connection: aiosqlite.Connection, path: Path) -> None:
        self._connection = connection
        self.path = path
        # One unit at a time on the shared connection: another caller's statement must not
        # land inside a transaction this one is about to commit or roll back.
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path) -> Database:
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = await aiosqlite.connect(path, timeout=10.0)
        connection.row_factory = sqlite3.Row
        await connection.execute("PRAGMA journal_mode=WAL")
        await connection.execute("PRAGMA synchronous=NORMAL")
        await connection.execute("PRAGMA busy_timeout=10000")
        await connection.commit()
        return cls(connection, path)

    @contextlib.asynccontextmanager
    async def _unit(self) -> AsyncIterator[None]:
        """Statements then a commit, alone on the connection; any failure rolls back."""
        async with self._lock, _busy_as_error(self.path):
            try:
                yield
                await self._connection.commit()
            except BaseException:
                # sqlite3 opened a transaction for the failed statement. Left open, a read
                # on this connection pins its snapshot; once another process commits, the
                # snapshot is stale and every later write fails as busy until a restart.
                await self._connection.rollback()
                raise

    async def ensure(self, schema: str) -> None:
        """Apply a schema script (idempotent ``CREATE … IF NOT EXISTS`` statements)."""
        async with self._unit():
            await self._connection.executescript(schema)

    async def execute(self, sql: str, parameters: Sequence[Any] = ()) -> int:
        """Run one statement and commit; returns the number of rows it changed."""
        async with self._unit():
            cursor = await self._connection.execute(sql, parameters)
        return cursor.rowcount

    async def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        async with self._unit():
            await self._connection.executemany(sql, rows)

    async def fetch_all(self, sql: str, parameters: Sequence[Any] = ()) -> list[Row]:
        async with self._lock, _busy_as_error(self.path):
            cursor = await self._connection.execute(sql, parameters)
            rows = await cursor.fetchall()
            await cursor.close()
        return list(rows)

    async def fetch_one(self, sql: str, parameters: Sequence[Any] = ()) -> Row | None:
        async with self._lock, _busy_as_error(self.path):
            cursor = await self._connection.execute(sql, parameters)
            row = await cursor.fetchone()
            await cursor.close()
        return row

    async def close(self) -> None:
        await self._connection.close()
