"""The rate limit as the core sees it: the :class:`RateLimiter` port and its decision.

A sliding window on the messages a person sends, per space. Each bucket is keyed
``<space>:<person>`` (see :func:`bucket_key`; a channel without spaces uses the person as the
space) and remembers when its recent requests were let through. A request is allowed while
fewer than the limit were let through in the last window; an allowed request is recorded, a
refused one isn't, so hammering a full bucket never pushes its reopening further away. A
bucket never holds more stamps than the largest limit it was checked against.

Two adapters sit beside the port: :mod:`core.rate_limits.memory` (one instance: the buckets
live in the process, as the original agent keeps them) and :mod:`core.rate_limits.shared`
(the state store every instance shares, when it is PostgreSQL). :func:`rate_limiter` picks
the one that fits the store.

Exception tree::

    InvalidRateLimitError(ValueError)   a limit below one or a window that isn't positive
                                        (programmer or configuration mistakes)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

import msgspec

__all__ = [
    "InvalidRateLimitError",
    "RateDecision",
    "RateLimiter",
    "bucket_key",
    "check_limit",
    "decide",
    "window_micros",
]


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


class RateLimiter(Protocol):
    """At most ``limit`` requests per bucket in any ``window``."""

    limit: int
    window: timedelta

    async def ensure_schema(self) -> None:
        """Create what the limiter keeps, if it keeps it in the state store."""
        ...

    async def check(self, key: str, override: int | None = None) -> RateDecision:
        """Decide on one request in bucket ``key`` and record it if allowed.

        ``override`` replaces the limit for this check (a space's own setting).
        """
        ...

    async def cleanup(self) -> int:
        """Forget every bucket with nothing left in its window; returns how many went."""
        ...

    async def clear(self) -> None:
        """Forget every bucket."""
        ...

    async def bucket_count(self) -> int:
        """How many buckets are held."""
        ...


def bucket_key(space: str, person: str) -> str:
    """The bucket of ``person`` in ``space``."""
    return f"{space}:{person}"


def check_limit(limit: int, what: str) -> None:
    if limit < 1:
        raise InvalidRateLimitError(
            f"{what} of {limit} would refuse every message; give a limit of at least 1."
        )


def window_micros(window: timedelta) -> int:
    """The window in microseconds, refused when it could never hold a request."""
    if window <= timedelta(0):
        raise InvalidRateLimitError(
            f"A rate-limit window of {window} never holds a request; give a positive duration."
        )
    return window // timedelta(microseconds=1)


def decide(stamps: Sequence[int], now_us: int, window_us: int, limit: int) -> RateDecision:
    """The decision for a request at ``now_us`` on a bucket holding ``stamps`` (oldest first,
    all inside the window)."""
    if len(stamps) < limit:
        return RateDecision(allowed=True, retry_after_s=0, remaining=limit - len(stamps) - 1)
    # A lowered override can leave more stamps than the limit: the request gets through once
    # enough of them age out to leave room for one more.
    frees_room = stamps[len(stamps) - limit] + window_us
    wait = math.ceil((frees_room - now_us) / 1_000_000)
    return RateDecision(allowed=False, retry_after_s=max(1, wait), remaining=0)
