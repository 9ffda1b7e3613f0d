"""The rate limit on the turns a person starts: the port, its memory and shared adapters."""

from datetime import timedelta

from core.clock import Clock
from core.rate_limits.memory import MemoryRateLimiter
from core.rate_limits.port import InvalidRateLimitError, RateDecision, RateLimiter, bucket_key
from core.rate_limits.shared import SharedRateLimiter
from core.state import Database

__all__ = [
    "InvalidRateLimitError",
    "MemoryRateLimiter",
    "RateDecision",
    "RateLimiter",
    "SharedRateLimiter",
    "bucket_key",
    "rate_limiter",
]


def rate_limiter(db: Database, limit: int, window: timedelta, *, clock: Clock) -> RateLimiter:
    """The limiter for a store: in this process when the store is this instance's own, in the
    store when several instances share it (so a person's limit counts across all of them)."""
    if db.shared:
        return SharedRateLimiter(db, limit, window, clock=clock)
    return MemoryRateLimiter(limit, window, clock=clock)
