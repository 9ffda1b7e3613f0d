"""Opening the state store ``MERCURY_STATE_URL`` names: SQLite when it is unset."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from core.state.port import Database

__all__ = ["SQLITE_FILE", "connect", "is_postgres_url"]

#: The default store's file, under the data directory.
SQLITE_FILE: Final = "mercury.db"

_POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL server (``postgresql://…`` or ``postgres://…``)."""
    return url.startswith(_POSTGRES_SCHEMES)


async def connect(
    url: str | None,
    data_dir: Path,
    *,
    pool_size: int = 10,
    busy_timeout_s: float = 10.0,
    connect_timeout_s: float = 10.0,
) -> Database:
    """The state store: PostgreSQL at ``url``, or SQLite under ``data_dir`` when it is None.

    ``busy_timeout_s`` is how long a SQLite write waits for another process's lock on the
    file; ``connect_timeout_s`` how long connecting to PostgreSQL is retried.
    """
    if url is None:
        from core.state.sqlite import SqliteDatabase

        return await SqliteDatabase.open(data_dir / SQLITE_FILE, busy_timeout_s=busy_timeout_s)
    if not is_postgres_url(url):
        raise ValueError(
            "MERCURY_STATE_URL must be a postgresql:// URL; leave it unset for SQLite."
        )
    from core.state.postgres import PostgresDatabase

    return await PostgresDatabase.open(url, max_size=pool_size, connect_timeout_s=connect_timeout_s)
