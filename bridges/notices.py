"""Notices told once a window, whichever instance takes the message: a claim in the state store.

A person over a space's rate limit is told so once a window, not once per message; ``stop``
and ``compact`` answer once a window per person too (40 ``stop`` messages make one post).
With several instances on one store, each would tell the person once: the first instance to
**claim** the notice's bucket for the window tells it, every other one stays silent.

A claim is one row per bucket holding until when it is told. One conditional upsert decides:
it inserts the row, or takes over a row whose window has passed, and says whether it did, so
two instances racing for the same bucket can't both win. Each instance remembers what it
claimed or lost until the window ends, so a flood of refused messages costs one statement
per bucket and window, and none per message or token. Claims whose window has passed are
swept now and then, by whichever instance claims.
"""

from __future__ import annotations

from typing import Final

from core.clock import Clock
from core.codes import to_micros
from core.state import Database, Migration, Schema

__all__ = ["NoticeClaims"]

#: Seconds between sweeps of the claims whose window has passed, per instance.
_SWEEP_S: Final = 300.0
#: The most windows remembered in memory before the passed ones are forgotten.
_REMEMBERED: Final = 10_000

_SCHEMA: Final = Schema(
    "bridge_notices",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS notice_claims (
    bucket      TEXT PRIMARY KEY,
    told_until  BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS notice_claims_until ON notice_claims (told_until);
""",
        ),
    ),
)

_CLAIM: Final = (
    "INSERT INTO notice_claims (bucket, told_until) VALUES (?, ?) "
    "ON CONFLICT (bucket) DO UPDATE SET told_until = excluded.told_until "
    "WHERE notice_claims.told_until <= ? RETURNING told_until"
)


class NoticeClaims:
    """Which instance tells a notice, once per window and bucket, across every instance."""

    def __init__(self, db: Database, *, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        #: Per bucket, until when it is told (by this instance or another), in microseconds.
        self._told: dict[str, int] = {}
        self._swept_at = 0

    async def ensure_schema(self) -> None:
        await self._db.migrate(_SCHEMA)

    async def claim(self, bucket: str, window_s: float) -> bool:
        """Whether to tell ``bucket``'s notice now: True once per ``window_s``, on one
        instance; the window starts with the claim."""
        now = to_micros(self._clock())
        if self._told.get(bucket, 0) > now:
            return False  # told already in this window, here or elsewhere: no statement
        until = now + max(1, round(window_s * 1_000_000))
        row = await self._db.fetch_one(_CLAIM, (bucket, until, now))
        if row is None:
            # Another instance holds the window: learn until when, and stay silent till then.
            held = await self._db.fetch_one(
                "SELECT told_until FROM notice_claims WHERE bucket = ?", (bucket,)
            )
            until = until if held is None else int(held[0])
        self._remember(bucket, until, now)
        await self._sweep(now)
        return row is not None

    def _remember(self, bucket: str, until: int, now: int) -> None:
        if len(self._told) >= _REMEMBERED:
            self._told = {b: t for b, t in self._told.items() if t > now}
        self._told[bucket] = until

    async def _sweep(self, now: int) -> None:
        if now - self._swept_at < _SWEEP_S * 1_000_000:
            return
        self._swept_at = now
        await self._db.execute("DELETE FROM notice_claims WHERE told_until <= ?", (now,))
