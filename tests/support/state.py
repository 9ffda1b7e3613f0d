"""The state store for a test, on SQLite or on the real PostgreSQL: the ``state`` fixture.

A :class:`StateBackend` stands for one empty store (a fresh SQLite file, or a fresh
PostgreSQL database). Each :meth:`StateBackend.open` is a new connection to it, as a
restarted process or a second instance would have; everything opened is closed after the
test.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Literal

import pytest

from core.state import Database, connect
from tests.support.postgres import PostgresServer, PostgresUnavailable, running_postgres
from tests.support.system import missing

Backend = Literal["sqlite", "postgresql"]
BACKENDS: tuple[Backend, ...] = ("sqlite", "postgresql")


class StateBackend:
    """One empty store, opened as many times as a test needs."""

    def __init__(
        self,
        name: Backend,
        data_dir: Path,
        url: str | None,
        server: PostgresServer | None = None,
    ) -> None:
        self.name = name
        self.data_dir = data_dir
        self.url = url
        self._server = server  # drops the database after the test
        self._opened: list[Database] = []

    async def open(self, *, pool_size: int = 10) -> Database:
        database = await connect(self.url, self.data_dir, pool_size=pool_size)
        self._opened.append(database)
        return database

    async def close(self) -> None:
        for database in self._opened:
            await database.close()
        self._opened.clear()
        if self._server is not None and self.url is not None:
            # Dropped, not left for the session's end: a few hundred databases would fill
            # the cluster's directory with gigabytes to write, then remove.
            await asyncio.to_thread(self._server.drop_database, self.url)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(running_postgres())
        except PostgresUnavailable as error:
            missing(str(error))
        yield server


def backend_for(request: pytest.FixtureRequest, name: Backend, tmp_path: Path) -> StateBackend:
    if name == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        return StateBackend(name, tmp_path, server.create_database(), server)
    return StateBackend(name, tmp_path, None)


@pytest.fixture(params=BACKENDS)
async def state(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateBackend]:
    """An empty state store, on each backend in turn."""
    backend = backend_for(request, request.param, tmp_path)
    yield backend
    await backend.close()


@pytest.fixture
async def shared_state(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StateBackend]:
    """An empty PostgreSQL database, for tests of what several instances share."""
    backend = backend_for(request, "postgresql", tmp_path)
    yield backend
    await backend.close()
