"""Which platform deliveries were taken and which were handled: at least once, never twice at once.

Slack re-sends an event it had no answer for in 3 s (``X-Slack-Retry-Num``), Telegram
re-delivers an update until it gets a 200, Meta re-sends a webhook it could not deliver. Each
carries the id it was first sent under. A delivery goes through two marks:

A button press (#37) is a delivery like a message, kept under ``press:<its id>``.

**taken**: the first instance to record the id holds it, under a **lease** (its holder and
until when), with the message as its bridge parsed it. One conditional insert decides, so two
instances racing on the same delivery can't both win. The holder renews the leases of every
delivery it has in hand in one statement per interval (:meth:`Deliveries.renew`), however
long the turns take.

**handled**: set once the reply was sent, the message was kept as ambient context, or it was
deliberately dropped (a muted author, a refused command). Only then is a retry of the id
answered and dropped as a duplicate.

A delivery taken and never handled (its instance died: ``kill -9``, a lost machine) runs
again once its lease has lapsed: a platform retry of the id takes it over, and every
instance looks for such deliveries on start and every few seconds (:meth:`Deliveries.stale`),
re-running the stored message with its bridge. Taking it over is a conditional ``UPDATE``
(the lease must have lapsed), so it runs on one instance only. A delivery whose handling
failed is let go at once (:meth:`Deliveries.release`) and tried again, at most
:data:`MAX_ATTEMPTS` times in all, so a message that crashes every run is not run forever.

At least once, not exactly once: an instance that dies between sending a reply and marking
it handled (one statement) sends that reply again on the next run.

**its reply**: the platform's reference to the first message of a live answer, kept with the
delivery once it is posted (:meth:`Deliveries.posted`, one write per delivery). Whoever takes
the delivery over gets it back (:meth:`Deliveries.left_reply`) and writes the new run's answer
into that message, so a run cut short mid-answer leaves no half-written message behind.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection
from datetime import timedelta
from typing import Final

import msgspec

from bridges.port import Pressed, Received
from core.clock import Clock, system_clock
from core.codes import to_micros
from core.state import Database, Migration, Schema

__all__ = ["KEEP", "MAX_ATTEMPTS", "Deliveries"]

log = logging.getLogger("mercury.bridges")

#: How long a handled delivery id is remembered. Meta re-sends a webhook for up to 7 days,
#: longer than any other platform, and a delivery older than the stale-message window
#: (at most 7 days) is refused as stale: an id forgotten after 8 days can't run again.
KEEP: Final = timedelta(days=8)
#: How many times a delivery is run before it is given up (a platform retry included).
MAX_ATTEMPTS: Final = 3
#: The longest delivery id kept (the platforms' ids are far shorter).
_ID_CHARS: Final = 200

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
        # #34: taken is not handled. The ids taken before this step were handled then.
        Migration(
            2,
            """
ALTER TABLE bridge_deliveries ADD COLUMN handled_us BIGINT;
UPDATE bridge_deliveries SET handled_us = received_us;
ALTER TABLE bridge_deliveries ADD COLUMN holder TEXT NOT NULL DEFAULT '';
ALTER TABLE bridge_deliveries ADD COLUMN lease_until_us BIGINT NOT NULL DEFAULT 0;
ALTER TABLE bridge_deliveries ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE bridge_deliveries ADD COLUMN message TEXT;
CREATE INDEX IF NOT EXISTS bridge_deliveries_unhandled
    ON bridge_deliveries (lease_until_us) WHERE handled_us IS NULL;
""",
        ),
        # The first message of a live answer, for whoever takes the delivery over.
        Migration(3, "ALTER TABLE bridge_deliveries ADD COLUMN reply_ref TEXT;"),
    ),
)

_TAKE_OVER: Final = (
    "UPDATE bridge_deliveries SET holder = ?, lease_until_us = ?, attempts = attempts + 1 "
    "WHERE platform = ? AND delivery_id = ? AND handled_us IS NULL "
    "AND lease_until_us < ? AND attempts < ?"
)


def _key(item: Received | Pressed) -> str:
    """The id a delivery is kept under: a press's apart from the platform's message ids."""
    if isinstance(item, Pressed):
        return f"press:{item.delivery_id}"[:_ID_CHARS]
    return item.delivery_id[:_ID_CHARS]


def _decoded(text: str) -> Received | Pressed:
    try:
        return msgspec.json.decode(text, type=Received)
    except msgspec.DecodeError:
        return msgspec.json.decode(text, type=Pressed)


_STALE: Final = (
    "SELECT platform, delivery_id FROM bridge_deliveries "
    "WHERE handled_us IS NULL AND lease_until_us < ? AND attempts < ?"
)


class Deliveries:
    """The deliveries taken and handled so far, in the state store every instance shares."""

    def __init__(
        self,
        db: Database,
        *,
        lease_s: float = 15.0,
        clock: Clock = system_clock,
        holder: str | None = None,
    ) -> None:
        self._db = db
        self._clock = clock
        #: Seconds a taken delivery stays this instance's without a renewal.
        self.lease_s = lease_s
        #: Who this instance is in the leases it holds.
        self.holder = holder or uuid.uuid4().hex
        #: The replies left by earlier runs of the deliveries this instance took over, by key.
        self._left: dict[tuple[str, str], str] = {}

    async def ensure_schema(self) -> None:
        await self._db.migrate(_SCHEMA)

    def _now_and_until(self) -> tuple[int, int]:
        now = to_micros(self._clock())
        return now, now + int(self.lease_s * 1_000_000)

    async def take(self, message: Received | Pressed) -> bool:
        """Hold ``message``'s delivery; True when this instance is to run it.

        True for its first sight, on any instance, and for a retry of a delivery taken but
        not handled whose lease has lapsed; False for a handled one or one another holder
        is running.
        """
        now, until = self._now_and_until()
        delivery_id = _key(message)
        inserted = await self._db.execute(
            "INSERT INTO bridge_deliveries "
            "(platform, delivery_id, received_us, holder, lease_until_us, attempts, message) "
            "VALUES (?, ?, ?, ?, ?, 1, ?) ON CONFLICT (platform, delivery_id) DO NOTHING",
            (
                message.platform,
                delivery_id,
                now,
                self.holder,
                until,
                msgspec.json.encode(message).decode(),
            ),
        )
        if inserted == 1:
            return True
        taken = await self._db.fetch_one(
            _TAKE_OVER + " RETURNING reply_ref",
            (self.holder, until, message.platform, delivery_id, now, MAX_ATTEMPTS),
        )
        if taken is None:
            return False
        log.info("%s delivery %s taken over: its lease lapsed", message.platform, delivery_id)
        self._keep_left(message.platform, delivery_id, taken["reply_ref"])
        return True

    def _keep_left(self, platform: str, delivery_id: str, ref: str | None) -> None:
        if ref:
            self._left[(platform, delivery_id)] = ref

    def left_reply(self, message: Received | Pressed) -> str | None:
        """The reply an earlier run of ``message``'s delivery posted, when this instance took
        it over from that run (once: the new run writes on in it); None for a first run."""
        return self._left.pop((message.platform, _key(message)), None)

    async def posted(self, message: Received | Pressed, ref: str) -> None:
        """Keep ``ref``, the first message of ``message``'s live answer, with its delivery
        (while this instance holds it), for a run that takes it over."""
        await self._db.execute(
            "UPDATE bridge_deliveries SET reply_ref = ? "
            "WHERE platform = ? AND delivery_id = ? AND holder = ? AND handled_us IS NULL",
            (ref, message.platform, _key(message), self.holder),
        )

    async def handled(self, message: Received | Pressed) -> None:
        """Mark ``message``'s delivery handled: a retry of it is a duplicate from now on."""
        await self._db.execute(
            "UPDATE bridge_deliveries SET handled_us = ?, holder = '', message = NULL, "
            "reply_ref = NULL "
            "WHERE platform = ? AND delivery_id = ?",
            (
                to_micros(self._clock()),
                message.platform,
                _key(message),
            ),
        )

    async def release(self, message: Received | Pressed) -> None:
        """Let go of a delivery whose handling failed: it may be taken again at once."""
        await self._db.execute(
            "UPDATE bridge_deliveries SET holder = '', lease_until_us = 0 "
            "WHERE platform = ? AND delivery_id = ? AND holder = ? AND handled_us IS NULL",
            (message.platform, _key(message), self.holder),
        )

    async def renew(self) -> int:
        """Renew the lease of every delivery this instance has in hand; returns how many."""
        _, until = self._now_and_until()
        return await self._db.execute(
            "UPDATE bridge_deliveries SET lease_until_us = ? "
            "WHERE holder = ? AND handled_us IS NULL",
            (until, self.holder),
        )

    async def stale(self, platforms: Collection[str], limit: int = 100) -> list[Received | Pressed]:
        """Take over up to ``limit`` deliveries of ``platforms`` taken and never handled
        whose lease lapsed (their instance died), oldest first: the messages to run again."""
        if not platforms or limit <= 0:
            return []
        now, until = self._now_and_until()
        marks = ", ".join("?" for _ in platforms)
        # Only placeholders are joined in: the platforms go as parameters.
        sql = f"{_STALE} AND platform IN ({marks}) ORDER BY received_us LIMIT ?"
        rows = await self._db.fetch_all(sql, (now, MAX_ATTEMPTS, *platforms, limit))
        found: list[Received | Pressed] = []
        for row in rows:
            platform, delivery_id = row["platform"], row["delivery_id"]
            taken = await self._db.fetch_one(
                _TAKE_OVER + " RETURNING message, reply_ref",
                (self.holder, until, platform, delivery_id, now, MAX_ATTEMPTS),
            )
            if taken is None:
                continue  # another instance took it first
            try:
                found.append(_decoded(taken["message"] or ""))
                self._keep_left(platform, delivery_id, taken["reply_ref"])
            except msgspec.DecodeError:
                log.warning("%s delivery %s can't be run again: unreadable", platform, delivery_id)
                await self._db.execute(
                    "UPDATE bridge_deliveries SET handled_us = ?, holder = '' "
                    "WHERE platform = ? AND delivery_id = ?",
                    (now, platform, delivery_id),
                )
        return found

    async def purge(self) -> int:
        """Forget the ids older than :data:`KEEP`; returns how many went."""
        cutoff = to_micros(self._clock() - KEEP)
        return await self._db.execute(
            "DELETE FROM bridge_deliveries WHERE received_us < ?", (cutoff,)
        )
