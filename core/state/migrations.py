"""Applying versioned schemas, once, even when several instances start at the same moment.

Each adapter opens a transaction that excludes every other migration (PostgreSQL: an
advisory lock taken inside the transaction; SQLite: ``BEGIN IMMEDIATE``, which holds the
file's write lock), then calls :func:`apply`: read the component's version, run the steps
after it, record the new version, commit. An instance that waited on the lock finds the
work done and runs nothing.
"""

from __future__ import annotations

from typing import Final

from core.state.port import StateError, Transaction
from core.state.schema import Dialect, Schema, statements

__all__ = ["MIGRATION_LOCK", "apply"]

#: The advisory-lock key every migration takes (an arbitrary constant: "mercury" in ASCII).
MIGRATION_LOCK: Final = 0x6D65726375727900

_VERSIONS: Final = """
CREATE TABLE IF NOT EXISTS schema_versions (
    component TEXT PRIMARY KEY,
    version   INTEGER NOT NULL
)
"""


async def apply(transaction: Transaction, schema: Schema, dialect: Dialect) -> int:
    """Run ``schema``'s steps newer than the recorded version; returns how many ran."""
    await transaction.execute(_VERSIONS)
    row = await transaction.fetch_one(
        "SELECT version FROM schema_versions WHERE component = ?", (schema.component,)
    )
    current = 0 if row is None else int(row[0])
    if current > schema.version:
        raise StateError(
            f"The state store's {schema.component} tables are at version {current}, newer "
            f"than this build knows ({schema.version}); run the newer build, or restore a "
            "backup taken before it was upgraded."
        )
    pending = schema.migrations[current:]
    for migration in pending:
        for statement in statements(migration.script(dialect)):
            await transaction.execute(statement)
    if pending:
        await transaction.execute(
            "INSERT INTO schema_versions (component, version) VALUES (?, ?) "
            "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
            (schema.component, schema.version),
        )
    return len(pending)
