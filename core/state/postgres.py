"""The state store on a PostgreSQL server, shared by every instance of the surface.

Built on psycopg 3 and psycopg_pool: a pool of autocommit connections (each call borrows
one for as long as it runs, never for a whole turn), explicit transactions where a store
asks for one, advisory locks to serialize them, and ``LISTEN``/``NOTIFY`` for notices.

The stores' SQL is written once, with ``?`` placeholders; here they become psycopg's
``%s`` (and a literal ``%`` becomes ``%%``), outside quoted literals only.

The connection string (``MERCURY_STATE_URL``) holds a password: it is never logged, and
errors name the server by host, port and database only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Final

import psycopg
import psycopg.errors
from psycopg import sql as pgsql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from core.state import migrations
from core.state.port import (
    DatabaseUnavailable,
    Dialect,
    DuplicateRow,
    Notice,
    Row,
    Statements,
    Transaction,
    check_key_lookup,
)
from core.state.schema import Schema

__all__ = ["PostgresDatabase", "postgres_sql"]

log = logging.getLogger("mercury.state")

_CONNECT_TIMEOUT_S: Final = 10.0
_RECONNECT_MAX_S: Final = 5.0


class Record:
    """A result row, by column name or position (what ``sqlite3.Row`` offers)."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: Sequence[Any], index: dict[str, int]) -> None:
        self._values = values
        self._index = index

    def __getitem__(self, key: Any, /) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[str]:
        return list(self._index)

    def __repr__(self) -> str:
        return f"Record({dict(zip(self._index, self._values, strict=True))!r})"


def _records(cursor: Any) -> Callable[[Sequence[Any]], Record]:
    description = cursor.description or ()
    index = {column.name: position for position, column in enumerate(description)}

    def make(values: Sequence[Any]) -> Record:
        return Record(values, index)

    return make


@functools.lru_cache(maxsize=512)
def postgres_sql(sql: str) -> str:
    """``sql`` with ``?`` placeholders as psycopg's ``%s`` and ``%`` escaped, literals kept."""
    out: list[str] = []
    quoted = False
    for char in sql:
        if char == "'":
            quoted = not quoted
            out.append(char)
        elif quoted:
            out.append("%%" if char == "%" else char)
        elif char == "?":
            out.append("%s")
        elif char == "%":
            out.append("%%")
        else:
            out.append(char)
    return "".join(out)


def describe(url: str) -> str:
    """The server a connection string names, without its password: ``host:port/db``."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "the PostgreSQL server in MERCURY_STATE_URL"
    host = parts.get("host") or "localhost"
    port = parts.get("port") or 5432
    return f"PostgreSQL at {host}:{port}/{parts.get('dbname') or ''}"


class _Listener:
    """One channel's notices, on a connection of its own, reconnected when it drops."""

    def __init__(self, url: str, channel: str, callback: Callable[[Notice], None]) -> None:
        self._url = url
        self._channel = channel
        self._callback = callback
        self._connection: psycopg.AsyncConnection[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self.live = False

    async def start(self) -> None:
        await self._connect()
        self._task = asyncio.get_running_loop().create_task(
            self._listen(), name=f"state-listen-{self._channel}"
        )

    async def _connect(self) -> None:
        connection = await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, connect_timeout=int(_CONNECT_TIMEOUT_S)
        )
        await connection.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(self._channel)))
        self._connection = connection
        self.live = True

    async def _listen(self) -> None:
        delay = 0.1
        while True:
            assert self._connection is not None  # noqa: S101 - connected before the loop
            try:
                async for notice in self._connection.notifies():
                    self._callback(notice.payload)
            except psycopg.Error as error:
                log.warning("Lost the %s notices (%s); reconnecting.", self._channel, error)
            # Whatever was sent while nobody listened is lost: say so, then reconnect.
            self.live = False
            self._callback(None)
            with contextlib.suppress(psycopg.Error):
                await self._connection.close()
            while True:
                await asyncio.sleep(delay)
                try:
                    await self._connect()
                except psycopg.Error:
                    delay = min(delay * 2, _RECONNECT_MAX_S)
                    continue
                delay = 0.1
                self._callback(None)  # anything derived meanwhile is suspect too
                break

    async def close(self) -> None:
        self.live = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._connection is not None:
            with contextlib.suppress(psycopg.Error):
                await self._connection.close()


class PostgresDatabase:
    """A pool of connections to one PostgreSQL database."""

    def __init__(self, pool: AsyncConnectionPool[Any], url: str) -> None:
        self._pool = pool
        self._url = url
        self.description = describe(url)
        self._listeners: list[_Listener] = []
        self._migrated: set[str] = set()

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout_s: float = _CONNECT_TIMEOUT_S,
    ) -> PostgresDatabase:
        """Connect to ``url``; raises DatabaseUnavailable when the server can't be reached.

        Connecting is retried for ``connect_timeout_s`` (a server still starting is waited
        for) before the store is called unavailable.
        """
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            open=False,
            timeout=_CONNECT_TIMEOUT_S,
            kwargs={
                "autocommit": True,
                "row_factory": _records,
                "connect_timeout": int(_CONNECT_TIMEOUT_S),
            },
            name="mercury-state",
        )
        try:
            await pool.open(wait=True, timeout=connect_timeout_s)
        except (PoolTimeout, psycopg.Error) as error:
            await pool.close()
            raise DatabaseUnavailable(
                f"Couldn't connect to {describe(url)} within {connect_timeout_s:g} s; check "
                "MERCURY_STATE_URL and that the server is running."
            ) from error
        return cls(pool, url)

    @property
    def dialect(self) -> Dialect:
        return "postgresql"

    @property
    def shared(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"PostgresDatabase({self.description!r})"

    # --- the port ---------------------------------------------------------------------

    async def migrate(self, schema: Schema) -> None:
        if schema.component in self._migrated:
            return
        async with self.transaction() as transaction:
            await transaction.execute(
                "SELECT pg_advisory_xact_lock(?)", (migrations.MIGRATION_LOCK,)
            )
            ran = await migrations.apply(transaction, schema, "postgresql")
        if ran:
            log.info("Migrated the %s tables to version %d.", schema.component, schema.version)
        self._migrated.add(schema.component)

    async def execute(self, sql: str, parameters: Sequence[Any] = ()) -> int:
        async with self._errors(), self._pool.connection() as connection:
            cursor = await connection.execute(postgres_sql(sql), parameters)
            return int(cursor.rowcount)

    async def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        batch = list(rows)
        if not batch:
            return
        async with (
            self._errors(),
            self._pool.connection() as connection,
            connection.transaction(),
            connection.cursor() as cursor,
        ):
            await cursor.executemany(postgres_sql(sql), batch)

    async def fetch_all(self, sql: str, parameters: Sequence[Any] = ()) -> list[Row]:
        async with self._errors(), self._pool.connection() as connection:
            cursor = await connection.execute(postgres_sql(sql), parameters)
            return list(await cursor.fetchall())

    async def fetch_one(self, sql: str, parameters: Sequence[Any] = ()) -> Row | None:
        rows = await self.fetch_all(sql, parameters)
        return rows[0] if rows else None

    async def fetch_key(self, sql: str, parameters: Sequence[Any] = ()) -> Row | None:
        check_key_lookup(sql)
        return await self.fetch_one(sql, parameters)  # the network trip is the cost here

    @contextlib.asynccontextmanager
    async def transaction(self, *, lock: str | None = None) -> AsyncIterator[Transaction]:
        async with self._errors(), self._pool.connection() as connection:
            async with connection.transaction():
                if lock is not None:
                    # Held until the transaction ends, on whichever instance took it.
                    await connection.execute(
                        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (lock,)
                    )
                yield _PostgresTransaction(connection)

    @contextlib.asynccontextmanager
    async def own_connection(self) -> AsyncIterator[Statements]:
        async with self._errors():
            connection = await psycopg.AsyncConnection.connect(
                self._url,
                autocommit=True,
                row_factory=_records,
                connect_timeout=int(_CONNECT_TIMEOUT_S),
            )
            try:
                yield _PostgresTransaction(connection)
            finally:
                await connection.close()

    @contextlib.asynccontextmanager
    async def lock(self, key: str) -> AsyncIterator[Statements]:
        async with self._errors(), self._pool.connection() as connection:
            await connection.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (key,))
            try:
                # The pool's connections commit each statement (autocommit).
                yield _PostgresTransaction(connection)
            finally:
                try:
                    await asyncio.shield(
                        connection.execute(
                            "SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,)
                        )
                    )
                except (psycopg.Error, asyncio.CancelledError):
                    # A session lock dies with its connection: close it rather than hand a
                    # connection still holding the lock back to the pool.
                    await connection.close()
                    raise

    async def notify(self, channel: str, payload: str) -> None:
        await self.execute("SELECT pg_notify(?, ?)", (channel, payload))

    async def subscribe(self, channel: str, callback: Callable[[Notice], None]) -> _Listener:
        listener = _Listener(self._url, channel, callback)
        try:
            await listener.start()
        except psycopg.Error as error:
            raise DatabaseUnavailable(
                f"Couldn't listen for {channel} notices on {self.description}."
            ) from error
        self._listeners.append(listener)
        return listener

    async def close(self) -> None:
        for listener in self._listeners:
            await listener.close()
        await self._pool.close()

    # --- inside -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _errors(self) -> AsyncIterator[None]:
        try:
            yield
        except psycopg.errors.UniqueViolation as error:
            raise DuplicateRow(str(error)) from error
        except (PoolTimeout, psycopg.OperationalError) as error:
            raise DatabaseUnavailable(
                f"{self.description} can't be reached or is overloaded; try again shortly."
            ) from error


class _PostgresTransaction:
    def __init__(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self._connection = connection

    async def notify(self, channel: str, payload: str) -> None:
        # PostgreSQL delivers a notice sent inside a transaction when it commits.
        await self._connection.execute("SELECT pg_notify(%s, %s)", (channel, payload))

    async def execute(self, sql: str, parameters: Sequence[Any] = ()) -> int:
        cursor = await self._connection.execute(postgres_sql(sql), parameters)
        return cursor.rowcount

    async def fetch_all(self, sql: str, parameters: Sequence[Any] = ()) -> list[Row]:
        cursor = await self._connection.execute(postgres_sql(sql), parameters)
        return list(await cursor.fetchall())

    async def fetch_one(self, sql: str, parameters: Sequence[Any] = ()) -> Row | None:
        rows = await self.fetch_all(sql, parameters)
        return rows[0] if rows else None
