"""The rate limit shared by every instance: each bucket's stamps in the state store.

A person's limit counts across every instance sharing the store (PostgreSQL): a check is one
short transaction holding the bucket's advisory lock, which drops the bucket's stamps older
than the window, counts the rest and records the request if it fits.
:meth:`SharedRateLimiter.cleanup` forgets buckets whose window has passed. See
:mod:`core.rate_limits.port` for what a bucket and a decision are.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from core.clock import Clock
from core.codes import to_micros
from core.rate_limits.port import RateDecision, check_limit, decide, window_micros
from core.state import Database, Migration, Schema

__all__ = ["SharedRateLimiter"]


_SCHEMA: Final = Schema(
    "rate_limits",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS rate_stamps (
    bucket TEXT NOT NULL,
    at     BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS rate_stamps_bucket ON rate_stamps (bucket, at);
CREATE INDEX IF NOT EXISTS rate_stamps_at ON rate_stamps (at);
""",
        ),
    ),
)


class SharedRateLimiter:
    """At most ``limit`` requests per bucket in any ``window``, in the shared state store."""

    def __init__(self, db: Database, limit: int, window: timedelta, *, clock: Clock) -> None:
        check_limit(limit, "A rate limit")
        self._window_us = window_micros(window)
        self._db = db
        self.limit = limit
        self.window = window
        self._clock = clock

    async def ensure_schema(self) -> None:
        await self._db.migrate(_SCHEMA)

    async def check(self, key: str, override: int | None = None) -> RateDecision:
        if override is not None:
            check_limit(override, "A rate-limit override")
        limit = self.limit if override is None else override
        await self.ensure_schema()
        now = to_micros(self._clock())
        horizon = now - self._window_us
        async with self._db.transaction(lock=f"rate:{key}") as transaction:
            await transaction.execute(
                "DELETE FROM rate_stamps WHERE bucket = ? AND at <= ?", (key, horizon)
            )
            rows = await transaction.fetch_all(
                "SELECT at FROM rate_stamps WHERE bucket = ? ORDER BY at", (key,)
            )
            decision = decide([int(row[0]) for row in rows], now, self._window_us, limit)
            if decision.allowed:
                await transaction.execute(
                    "INSERT INTO rate_stamps (bucket, at) VALUES (?, ?)", (key, now)
                )
        return decision

    async def cleanup(self) -> int:
        await self.ensure_schema()
        horizon = to_micros(self._clock()) - self._window_us
        row = await self._db.fetch_one(
            "SELECT COUNT(*) FROM (SELECT bucket FROM rate_stamps GROUP BY bucket "
            "HAVING MAX(at) <= ?) idle",
            (horizon,),
        )
        await self._db.execute("DELETE FROM rate_stamps WHERE at <= ?", (horizon,))
        return 0 if row is None else int(row[0])

    async def clear(self) -> None:
        await self.ensure_schema()
        await self._db.execute("DELETE FROM rate_stamps")

    async def bucket_count(self) -> int:
        await self.ensure_schema()
        row = await self._db.fetch_one("SELECT COUNT(DISTINCT bucket) FROM rate_stamps")
        return 0 if row is None else int(row[0])
