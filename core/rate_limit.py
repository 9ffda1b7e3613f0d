"""A sliding-window rate limit on the messages a person sends, per space.

Each bucket is keyed ``<space>:<person>`` (see :func:`bucket_key`; a channel without spaces
uses the person as the space) and remembers when its recent requests were let through. A
request is allowed while fewer than the limit were let through in the last window; an
allowed request is recorded, a refused one isn't, so hammering a full bucket never pushes
its reopening further away.

Memory stays bounded: a bucket never holds more timestamps than the largest limit it was
checked against, each timestamp is appended and dropped once (amortized O(1) per check),
and :meth:`RateLimiter.cleanup` forgets buckets whose window has passed.

Exception tree::

    InvalidRateLimitError(ValueError)   a limit below one or a window that isn't positive
                                        (programmer or configuration mistakes)
"""

from __future__ import annotations

import math
from collections import deque
from datetime import datetime, timedelta

import msgspec

from core.clock import Clock

__all__ = ["InvalidRateLimitError", "RateDecision", "RateLimiter", "bucket_key"]


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

    def __init__(self, limit: int, window: timedelta, *, clock: Clock) -> None:
        _check_limit(limit, "A rate limit")
        if window <= timedelta(0):
            raise InvalidRateLimitError(
                f"A rate-limit window of {window} never holds a request; give a positive duration."
            )
        self.limit = limit
        self.window = window
        self._clock = clock
        self._buckets: dict[str, deque[datetime]] = {}

    def check(self, key: str, override: int | None = None) -> RateDecision:
        """Decide on one request in bucket ``key`` and record it if allowed.

        ``override`` replaces the limit for this check (a space's own setting).
        """
        if override is not None:
            _check_limit(override, "A rate-limit override")
        limit = self.limit if override is None else override
        now = self._clock()
        horizon = now - self.window
        stamps = self._buckets.get(key)
        if stamps is None:
            stamps = self._buckets[key] = deque()
        while stamps and stamps[0] <= horizon:
            stamps.popleft()
        if len(stamps) < limit:
            stamps.append(now)
            return RateDecision(allowed=True, retry_after_s=0, remaining=limit - len(stamps))
        # A lowered override can leave more stamps than the limit: the request gets through
        # once enough of them age out to leave room for one more.
        frees_room = stamps[len(stamps) - limit] + self.window
        wait = math.ceil((frees_room - now).total_seconds())
        return RateDecision(allowed=False, retry_after_s=max(1, wait), remaining=0)

    def cleanup(self) -> int:
        """Forget every bucket with nothing left in its window; returns how many went."""
        horizon = self._clock() - self.window
        idle = [key for key, stamps in self._buckets.items() if not stamps or stamps[-1] <= horizon]
        for key in idle:
            del self._buckets[key]
        return len(idle)

    def clear(self) -> None:
        """Forget every bucket."""
        self._buckets.clear()

    @property
    def bucket_count(self) -> int:
        """How many buckets are held."""
        return len(self._buckets)
