"""Which platform deliveries have been taken, so a retried one runs nothing twice.

Slack re-sends an event it had no answer for in 3 s (``X-Slack-Retry-Num``), Telegram
re-delivers an update until it gets a 200, Meta re-sends a webhook it could not deliver. Each
carries the id it was first sent under; the first instance to record that id runs it, every
other sight of it (on any instance sharing the store) is answered and dropped. One
conditional insert decides, so two instances racing on the same retry can't both win.
Ids older than a day are forgotten: no platform retries that late.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from core.clock import Clock, system_clock
from core.codes import to_micros
from core.state import Database, Migration, Schema

__all__ = ["Deliveries"]

#: How long a delivery id is remembered.
KEEP: Final = timedelta(days=1)

_SCHEMA: Final = Schema(
    "bridge_deliveries",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS bridge_deliveries (
    platform     TEXT NOT NULL,
    delivery_id  TEXT NOT NULL,
    received_us  BIGINT NOT NULL,
    PRIMARY KEY (platform, delivery_id)
);
CREATE INDEX IF NOT EXISTS bridge_deliveries_received ON bridge_deliveries (received_us);
""",
        ),
    ),
)


class Deliveries:
    """The delivery ids taken so far, in the state store every instance shares."""

    def __init__(self, db: Database, *, clock: Clock = system_clock) -> None:
        self._db = db
        self._clock = clock

    async def ensure_schema(self) -> None:
        await self._db.migrate(_SCHEMA)

    async def first(self, platform: str, delivery_id: str) -> bool:
        """Record ``delivery_id``; True only for its first sight, on any instance."""
        inserted = await self._db.execute(
            "INSERT INTO bridge_deliveries (platform, delivery_id, received_us) VALUES (?, ?, ?) "
            "ON CONFLICT (platform, delivery_id) DO NOTHING",
            (platform, delivery_id[:200], to_micros(self._clock())),
        )
        return inserted == 1

    async def purge(self) -> int:
        """Forget the ids older than a day; returns how many went."""
        cutoff = to_micros(self._clock() - KEEP)
        return await self._db.execute(
            "DELETE FROM bridge_deliveries WHERE received_us < ?", (cutoff,)
        )
