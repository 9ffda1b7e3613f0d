"""A sliding-window rate limit on the messages a person sends, per space.

Each bucket is keyed ``<space>:<person>`` (see :func:`bucket_key`; a channel without spaces
uses the person as the space) and remembers when its recent requests were let through. A
request is allowed while fewer than the limit were let through in the last window; an
allowed request is recorded, a refused one isn't, so hammering a full bucket never pushes
its reopening further away.

The buckets live in the state store, so a person's limit counts across every instance
sharing it: a check is one short transaction holding the bucket's lock (an advisory lock on
PostgreSQL; SQLite serializes every transaction), which drops the bucket's stamps older than
the window, counts the rest and records the request if it fits. A bucket never holds more
stamps than the largest limit it was checked against, and :meth:`RateLimiter.cleanup`
forgets buckets whose window has passed.

Exception tree::

    InvalidRateLimitError(ValueError)   a limit below one or a window that isn't positive
                                        (programmer or configuration mistakes)
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Final

import msgspec

from core.clock import Clock
from core.codes import to_micros
from core.state import Database, Migration, Schema

__all__ = ["InvalidRateLimitError", "RateDecision", "RateLimiter", "bucket_key"]


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


class InvalidRateLimitError(ValueError):
    """A rate limit that could never let anything through, or a window that never ends."""


class RateDecision(msgspec.Struct, frozen=True, kw_only=True):
    """Whether a request may go ahead.

    ``retry_after_s`` is 0 when allowed and the whole seconds (rounded up, at least one)
    until a refused request would be let through; ``remaining`` is what the window still
    allows after this request.
    """

    allowed: bool
    retry_after_s: int
    remaining: int


def bucket_key(space: str, person: str) -> str:
    """The bucket of ``person`` in ``space``."""
    return f"{space}:{person}"


def _check_limit(limit: int, what: str) -> None:
    if limit < 1:
        raise InvalidRateLimitError(
            f"{what} of {limit} would refuse every message; give a limit of at least 1."
        )


class RateLimiter:
    """At most ``limit`` requests per bucket in any ``window``."""

    def __init__(self, db: Database, limit: int, window: timedelta, *, clock: Clock) -> None:
        _check_limit(limit, "A rate limit")
        if window <= timedelta(0):
            raise InvalidRateLimitError(
                f"A rate-limit window of {window} never holds a request; give a positive duration."
            )
        self._db = db
        self.limit = limit
        self.window = window
        self._clock = clock
        self._window_us = window // timedelta(microseconds=1)

    async def ensure_schema(self) -> None:
        await self._db.migrate(_SCHEMA)

    async def check(self, key: str, override: int | None = None) -> RateDecision:
        """Decide on one request in bucket ``key`` and record it if allowed.

        ``override`` replaces the limit for this check (a space's own setting).
        """
        if override is not None:
            _check_limit(override, "A rate-limit override")
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
            stamps = [int(row[0]) for row in rows]
            if len(stamps) < limit:
                await transaction.execute(
                    "INSERT INTO rate_stamps (bucket, at) VALUES (?, ?)", (key, now)
                )
                return RateDecision(
                    allowed=True, retry_after_s=0, remaining=limit - len(stamps) - 1
                )
        # A lowered override can leave more stamps than the limit: the request gets through
        # once enough of them age out to leave room for one more.
        frees_room = stamps[len(stamps) - limit] + self._window_us
        wait = math.ceil((frees_room - now) / 1_000_000)
        return RateDecision(allowed=False, retry_after_s=max(1, wait), remaining=0)

    async def cleanup(self) -> int:
        """Forget every bucket with nothing left in its window; returns how many went."""
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
        """Forget every bucket."""
        await self.ensure_schema()
        await self._db.execute("DELETE FROM rate_stamps")

    async def bucket_count(self) -> int:
        """How many buckets are held."""
        await self.ensure_schema()
        row = await self._db.fetch_one("SELECT COUNT(DISTINCT bucket) FROM rate_stamps")
        return 0 if row is None else int(row[0])
