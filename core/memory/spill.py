"""The archive's spill: the ``archive_spill`` table of the items an :class:`ArchiveWriter`
holds outside its memory, each row claimed by one writer.

A row is ``pending`` (submitted while the queue was full, or left by a flush), ``backfill``
(stored without a vector, to be embedded again) or ``dead`` (refused by the store
``max_attempts`` times, kept for an operator). Several instances share the table on
PostgreSQL: a row is claimed by the writer that wrote it or took it up (an ``UPDATE`` of the
claim, on rows locked with ``FOR UPDATE SKIP LOCKED``) until its claim lapses unrenewed.

Exceptions: the state store's (:mod:`core.state`), raised to the writer, which retries or
logs; :meth:`Spill.forget` alone logs and swallows its failure.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, Final, Literal, cast

import msgspec

from core.memory import Collection
from core.state import Database, Migration, Schema

__all__ = ["SPILL_SCHEMA", "Item", "Spill"]

log = logging.getLogger(__name__)

SPILL_SCHEMA: Final = Schema(
    "archive_spill",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS archive_spill (
    seq {id},
    kind TEXT NOT NULL CHECK (kind IN ('pending', 'backfill', 'dead')),
    point_id TEXT NOT NULL,
    collection TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS archive_spill_kind ON archive_spill (kind, seq);
""",
        ),
        # Several instances share the table on PostgreSQL: each row is claimed by one writer.
        Migration(
            2,
            """
ALTER TABLE archive_spill ADD COLUMN claimed_by TEXT;
ALTER TABLE archive_spill ADD COLUMN claim_expires BIGINT NOT NULL DEFAULT 0;
""",
        ),
    ),
)

Kind = Literal["pending", "backfill", "dead"]


class Item(msgspec.Struct, kw_only=True):
    """One point on its way to the store, in the writer's queue or in a row of the spill."""

    id: str
    collection: Collection
    payload: dict[str, Any]
    seq: int | None = None  # the archive_spill row holding it, if any
    n: int = 0  # its place in this writer's submissions (0: left by an earlier writer)
    vector: list[float] | None = None
    attempts: int = 0


class Spill:
    """The ``archive_spill`` rows as one writer (``holder``) sees them; its claims last
    ``claim_s``."""

    def __init__(self, db: Database, *, holder: str, claim_s: float) -> None:
        self._db = db
        self._holder = holder
        self._claim_s = claim_s

    async def migrate(self) -> None:
        await self._db.migrate(SPILL_SCHEMA)

    async def insert(self, kind: Kind, items: Iterable[Item], *, claimed: bool = True) -> None:
        """Write rows, claimed by this writer unless ``claimed`` is false (left for others)."""
        holder = self._holder if claimed else None
        expiry = self._claim_expiry() if claimed else 0
        rows = [
            (kind, i.id, i.collection, msgspec.json.encode(i.payload).decode(), holder, expiry)
            for i in items
        ]
        if rows:
            await self._db.execute_many(
                "INSERT INTO archive_spill "
                "(kind, point_id, collection, payload, claimed_by, claim_expires) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )

    async def adopt_seqs(self, kind: Kind, items: list[Item]) -> None:
        """Give each item the seq of its latest row of ``kind`` (None if it has none)."""
        for item in items:
            row = await self._db.fetch_one(
                "SELECT MAX(seq) FROM archive_spill WHERE kind = ? AND point_id = ?",
                (kind, item.id),
            )
            item.seq = int(row[0]) if row and row[0] is not None else None

    async def forget(self, seqs: list[int]) -> None:
        """Delete the rows ``seqs``; a failure is logged, never raised."""
        if not seqs:
            return
        try:
            await self._db.execute_many(
                "DELETE FROM archive_spill WHERE seq = ?", [(s,) for s in seqs]
            )
        except Exception:
            # The rows only cause an idempotent resend after a restart.
            log.exception("Couldn't clear %d archive rows from SQLite.", len(seqs))

    async def renew(self) -> None:
        """Extend every claim this writer holds."""
        await self._db.execute(
            "UPDATE archive_spill SET claim_expires = ? WHERE claimed_by = ?",
            (self._claim_expiry(), self._holder),
        )

    async def claim_pending(self, after_seq: int, limit: int) -> list[Item]:
        """Claim and read up to ``limit`` pending rows: this writer's own past ``after_seq``,
        and rows nobody holds (left by a flush, or by a writer whose claims lapsed)."""
        # Claimed in one statement, so no two writers ever load the same row. The outer
        # condition is checked again on each row once it is locked, so a row another
        # writer claimed meanwhile is left out.
        now = _now_us()
        rows = await self._db.fetch_all(
            "UPDATE archive_spill SET claimed_by = ?, claim_expires = ? WHERE seq IN ("  # noqa: S608 - fixed text
            "SELECT seq FROM archive_spill WHERE kind = 'pending' AND ("
            "(claimed_by = ? AND seq > ?) OR claimed_by IS NULL "
            "OR (claimed_by <> ? AND claim_expires < ?)) "
            f"ORDER BY seq LIMIT ?{self._skip_locked}) "
            "AND (claimed_by = ? OR claimed_by IS NULL OR claim_expires < ?) "
            "RETURNING seq, point_id, collection, payload",
            (
                self._holder,
                self._claim_expiry(),
                self._holder,
                after_seq,
                self._holder,
                now,
                limit,
                self._holder,
                now,
            ),
        )
        return [_from_row(row) for row in rows]

    async def claim_backfills(self) -> list[Item]:
        """Claim and read the backfill rows nobody holds."""
        now = _now_us()
        rows = await self._db.fetch_all(
            "UPDATE archive_spill SET claimed_by = ?, claim_expires = ? WHERE seq IN ("  # noqa: S608 - fixed text
            "SELECT seq FROM archive_spill WHERE kind = 'backfill' "
            "AND (claimed_by IS NULL OR (claimed_by <> ? AND claim_expires < ?)) "
            f"ORDER BY seq{self._skip_locked}) "
            "AND (claimed_by IS NULL OR claim_expires < ?) "
            "RETURNING seq, point_id, collection, payload",
            (self._holder, self._claim_expiry(), self._holder, now, now),
        )
        return [_from_row(row) for row in rows]

    async def has_unclaimed_pending(self) -> bool:
        """Whether pending rows wait that nobody holds."""
        now = _now_us()
        orphans = await self._db.fetch_one(
            "SELECT COUNT(*) FROM archive_spill WHERE kind = 'pending' "
            "AND (claimed_by IS NULL OR (claimed_by <> ? AND claim_expires < ?))",
            (self._holder, now),
        )
        return bool(orphans and orphans[0])

    async def backfill_ids(self) -> set[str]:
        """The point ids of every backfill row."""
        return {
            row[0]
            for row in await self._db.fetch_all(
                "SELECT point_id FROM archive_spill WHERE kind = 'backfill'"
            )
        }

    async def release(self) -> None:
        """Give up every claim this writer holds, for the next writer here or elsewhere."""
        await self._db.execute(
            "UPDATE archive_spill SET claimed_by = NULL WHERE claimed_by = ?", (self._holder,)
        )

    async def waiting(self) -> int | None:
        """How many pending and backfill rows there are (None if the count came back empty)."""
        row = await self._db.fetch_one(
            "SELECT COUNT(*) FROM archive_spill WHERE kind IN ('pending', 'backfill')"
        )
        return int(row[0]) if row else None

    @property
    def _skip_locked(self) -> str:
        """PostgreSQL: rows another writer is claiming right now are skipped, not waited on."""
        return " FOR UPDATE SKIP LOCKED" if self._db.dialect == "postgresql" else ""

    def _claim_expiry(self) -> int:
        return _now_us() + int(self._claim_s * 1_000_000)


def _from_row(row: Any) -> Item:
    return Item(
        id=row["point_id"],
        collection=cast(Collection, row["collection"]),
        payload=msgspec.json.decode(row["payload"]),
        seq=int(row["seq"]),
    )


def _now_us() -> int:
    return int(time.time() * 1_000_000)
