"""The durable state the core's stores share: the port, its two adapters, schemas."""

from core.state.connect import SQLITE_FILE, connect, is_postgres_url
from core.state.port import (
    Database,
    DatabaseBusy,
    DatabaseUnavailable,
    Dialect,
    DuplicateRow,
    Notice,
    Row,
    StateError,
    Statements,
    Subscription,
    Transaction,
)
from core.state.schema import Migration, Schema

__all__ = [
    "SQLITE_FILE",
    "Database",
    "DatabaseBusy",
    "DatabaseUnavailable",
    "Dialect",
    "DuplicateRow",
    "Migration",
    "Notice",
    "Row",
    "Schema",
    "StateError",
    "Statements",
    "Subscription",
    "Transaction",
    "connect",
    "is_postgres_url",
]
