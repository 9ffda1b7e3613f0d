"""Which instance holds each connection only one may hold at a time, and where to resume it (#39).

A platform connection such as Discord's gateway must be open once, whatever the number of
instances running the bridge: two gateway sessions would hand every message on twice and
race for the same replies. Each such connection (a :class:`~bridges.port.HeldBridge`) has a
**lease** in the state store every instance shares: its name (``discord``), its holder, until
when it holds it, and the connection's **checkpoint** (what the next holder resumes from)::

    standby ──acquire──► holder ──renew (every third of the lease, with the checkpoint)──┐
       ▲                   │  ◄──────────────────────────────────────────────────────────┘
       │                   ├─ release (a clean stop: expires at once, checkpoint saved)
       └───────────────────┴─ lease lapsed (kill -9, state store lost, a stalled loop)

:meth:`ConnectionLeases.acquire` is one conditional statement: the first instance inserts the
row; afterwards the row is taken over only when its lease lapsed (or it is already this
instance's), so two instances starting at the same moment can't both hold it.
:meth:`ConnectionLeases.renew` extends it only while the row is still this instance's: a
holder that stalled past its lease finds, on waking, that another took it over, and stops.
The checkpoint goes with each renewal (a few seconds apart), never per event: a holder that
dies resumes from a little earlier, and the events replayed again are dropped as duplicates
(:mod:`bridges.deliveries`).

On SQLite one instance uses the store: it acquires at once, as before leases existed, even
the lease a killed earlier run of it left behind.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Final

from core.clock import Clock, system_clock
from core.codes import to_micros
from core.state import Database, Migration, Schema

__all__ = ["ConnectionLeases", "Holding"]

log = logging.getLogger("mercury.bridges")

_SCHEMA: Final = Schema(
    "bridge_connections",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS bridge_connections (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    expires_us  BIGINT NOT NULL,
    checkpoint  {blob},
    updated_us  BIGINT NOT NULL
);
""",
        ),
    ),
)

#: Later than any lease ends, in microseconds.
_NEVER: Final = 2**62


@dataclass(frozen=True, slots=True)
class Holding:
    """A connection's lease just acquired, and the checkpoint its last holder left (if any)."""

    name: str
    checkpoint: bytes | None


def _holder() -> str:
    """Who this instance is in the leases: its host and process, and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"[:120]


class ConnectionLeases:
    """The connection leases in the state store every instance shares."""

    def __init__(
        self,
        db: Database,
        *,
        lease_s: float = 10.0,
        clock: Clock = system_clock,
        holder: str | None = None,
    ) -> None:
        self._db = db
        self._clock = clock
        #: Seconds a connection stays this instance's without a renewal.
        self.lease_s = lease_s
        #: Who this instance is in the leases it holds.
        self.holder = holder or _holder()
        #: The connections this instance holds now (for ``/readyz`` and ``/metrics``).
        self.held: set[str] = set()

    async def ensure_schema(self) -> None:
        await self._db.migrate(_SCHEMA)

    def _now_and_until(self) -> tuple[int, int]:
        now = to_micros(self._clock())
        return now, now + int(self.lease_s * 1_000_000)

    async def acquire(self, name: str) -> Holding | None:
        """Hold ``name``'s connection when nobody does (or its holder's lease lapsed).

        None while another instance holds it. The checkpoint is the last holder's.
        """
        now, until = self._now_and_until()
        inserted = await self._db.execute(
            "INSERT INTO bridge_connections (name, holder, expires_us, checkpoint, updated_us) "
            "VALUES (?, ?, ?, NULL, ?) ON CONFLICT (name) DO NOTHING",
            (name, self.holder, until, now),
        )
        if inserted == 1:
            self.held.add(name)
            return Holding(name=name, checkpoint=None)
        # A store no other process shares (SQLite): a lease left there is an earlier run's
        # of this instance (it was killed), taken over at once rather than waited out.
        lapsed_before = now if self._db.shared else _NEVER
        row = await self._db.fetch_one(
            "UPDATE bridge_connections SET holder = ?, expires_us = ?, updated_us = ? "
            "WHERE name = ? AND (holder = ? OR expires_us < ?) RETURNING checkpoint",
            (self.holder, until, now, name, self.holder, lapsed_before),
        )
        if row is None:
            return None
        self.held.add(name)
        checkpoint = row["checkpoint"]
        return Holding(name=name, checkpoint=bytes(checkpoint) if checkpoint is not None else None)

    async def renew(self, name: str, checkpoint: bytes | None) -> bool:
        """Extend this instance's lease of ``name``, saving ``checkpoint`` (unless None);
        False when another instance holds it now (this one must let the connection go)."""
        now, until = self._now_and_until()
        changed = await self._db.execute(
            "UPDATE bridge_connections SET expires_us = ?, updated_us = ?, "
            "checkpoint = COALESCE(?, checkpoint) WHERE name = ? AND holder = ?",
            (until, now, checkpoint, name, self.holder),
        )
        if changed != 1:
            self.held.discard(name)
        return changed == 1

    async def release(self, name: str, checkpoint: bytes | None) -> None:
        """Let go of ``name`` at a clean stop: saved ``checkpoint``, and expired at once so a
        standby instance takes the connection over at its next look."""
        self.held.discard(name)
        now = to_micros(self._clock())
        await self._db.execute(
            "UPDATE bridge_connections SET expires_us = 0, updated_us = ?, "
            "checkpoint = COALESCE(?, checkpoint) WHERE name = ? AND holder = ?",
            (now, checkpoint, name, self.holder),
        )

    def lost(self, name: str) -> None:
        """Note that this instance no longer holds ``name`` (it gave up renewing it)."""
        self.held.discard(name)

    async def holders(self) -> dict[str, str]:
        """Every connection whose lease has not lapsed, and its holder."""
        now = to_micros(self._clock())
        rows = await self._db.fetch_all(
            "SELECT name, holder FROM bridge_connections WHERE expires_us >= ? ORDER BY name",
            (now,),
        )
        return {row["name"]: row["holder"] for row in rows}
