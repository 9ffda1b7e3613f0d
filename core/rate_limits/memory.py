"""The rate limit of one instance: each bucket's stamps in this process.

A check touches no database and no lock: it drops the bucket's stamps older than the window,
decides, and records the request if allowed, all without awaiting anything, so two checks
can never interleave. Used when the state store is this instance's own (SQLite): a turn's
start then pays nothing for the limit, however many turns start at once. A restart forgets
the windows, as the original agent's limiter does.
"""

from __future__ import annotations

from collections import deque
from datetime import timedelta

from core.clock import Clock
from core.codes import to_micros
from core.rate_limits.port import RateDecision, check_limit, decide, window_micros

__all__ = ["MemoryRateLimiter"]


class MemoryRateLimiter:
    """At most ``limit`` requests per bucket in any ``window``, kept in this process."""

    def __init__(self, limit: int, window: timedelta, *, clock: Clock) -> None:
        check_limit(limit, "A rate limit")
        self._window_us = window_micros(window)
        self.limit = limit
        self.window = window
        self._clock = clock
        self._buckets: dict[str, deque[int]] = {}

    async def ensure_schema(self) -> None:
        """Nothing to create: the buckets live in memory."""

    async def check(self, key: str, override: int | None = None) -> RateDecision:
        if override is not None:
            check_limit(override, "A rate-limit override")
        limit = self.limit if override is None else override
        now = to_micros(self._clock())
        horizon = now - self._window_us
        stamps = self._buckets.get(key)
        if stamps is None:
            stamps = self._buckets[key] = deque()
        while stamps and stamps[0] <= horizon:
            stamps.popleft()
        decision = decide(stamps, now, self._window_us, limit)
        if decision.allowed:
            stamps.append(now)
        return decision

    async def cleanup(self) -> int:
        horizon = to_micros(self._clock()) - self._window_us
        idle = [key for key, stamps in self._buckets.items() if not stamps or stamps[-1] <= horizon]
        for key in idle:
            del self._buckets[key]
        return len(idle)

    async def clear(self) -> None:
        self._buckets.clear()

    async def bucket_count(self) -> int:
        return len(self._buckets)
