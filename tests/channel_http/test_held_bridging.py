"""A held connection runs only while its instance holds the lease (#39).

The bridge here is a real :class:`~bridges.port.HeldBridge` of the test's own whose ``run``
holds nothing but a flag; the leases are real, on PostgreSQL (the store instances share).
Its run is cancelled when another instance takes the lease, or when the state store stops
confirming it; it starts again, from the checkpoint, once the lease is its own again; a
clean stop hands the lease over at once, with the checkpoint.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from bridges.holding import ConnectionLeases, Holding
from bridges.port import Attachment, Deliver, EgressFile, HeldBridge, Received, ThreadInfo
from channel_http import bridging
from core.clock import ManualClock, system_clock
from core.state import Database
from tests.support.state import StateBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

LEASE_S = 0.9


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Held:
    """A held connection that records its runs, their ends and what it was restored from."""

    platform = "held"
    connection_name = "held:one"

    def __init__(self) -> None:
        self.runs = 0
        self.running = False
        self.restored: list[bytes] = []
        self.position = 0

    def checkpoint(self) -> bytes | None:
        return str(self.position).encode() if self.position else None

    def restore(self, checkpoint: bytes) -> None:
        self.restored.append(checkpoint)

    async def run(self, deliver: Deliver) -> None:
        self.runs += 1
        self.running = True
        try:
            while True:
                self.position += 1
                await asyncio.sleep(0.05)
        finally:
            self.running = False

    def parse_thread(self, thread_id: str) -> ThreadInfo:
        raise NotImplementedError

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        raise NotImplementedError

    async def start_typing(self, message: Received) -> None:
        return None

    async def send_reply(self, to: Received, text: str, files: Sequence[EgressFile] = ()) -> None:
        return None

    async def close(self) -> None:
        return None


class Cuttable:
    """A state store whose statements fail while it is cut off (the network to it lost)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.cut = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    async def execute(self, sql: str, parameters: Sequence[Any] = ()) -> int:
        if self.cut:
            raise ConnectionError("the state store can't be reached")
        return await self._db.execute(sql, parameters)

    async def fetch_one(self, sql: str, parameters: Sequence[Any] = ()) -> Any:
        if self.cut:
            raise ConnectionError("the state store can't be reached")
        return await self._db.fetch_one(sql, parameters)


async def until(predicate: Any, timeout_s: float = 10.0) -> float:
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout_s
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def leases_on(db: Any, holder: str, clock: Any = system_clock) -> ConnectionLeases:
    leases = ConnectionLeases(db, lease_s=LEASE_S, holder=holder, clock=clock)
    await leases.ensure_schema()
    return leases


async def test_the_run_stops_when_another_instance_takes_the_lease_and_stands_by_after(
    shared_state: StateBackend,
) -> None:
    held = Held()
    assert isinstance(held, HeldBridge)
    a = await leases_on(await shared_state.open(), "a")
    task = asyncio.create_task(bridging._held(held, None, a))  # type: ignore[arg-type]
    try:
        await until(lambda: held.running)
        assert a.held == {"held:one"}
        # Another instance whose clock says the lease lapsed long ago takes it over.
        later = ManualClock()
        later.advance(timedelta(days=365 * 20))
        b = await leases_on(await shared_state.open(), "b", clock=later)
        await until(lambda: held.position > 30)  # a few renewals saved a checkpoint
        taken = await b.acquire("held:one")
        assert taken is not None and taken.checkpoint is not None
        await until(lambda: not held.running, 3 * LEASE_S)  # at its next renewal
        assert a.held == set()
        await asyncio.sleep(3 * LEASE_S)
        assert held.runs == 1  # standing by: b holds it
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_store_out_of_reach_stops_the_run_before_the_lease_lapses_and_it_resumes_after(
    shared_state: StateBackend,
) -> None:
    held = Held()
    db = Cuttable(await shared_state.open())
    a = await leases_on(db, "a")
    task = asyncio.create_task(bridging._held(held, None, a))  # type: ignore[arg-type]
    try:
        await until(lambda: held.running)
        await asyncio.sleep(LEASE_S)  # renewed with checkpoints
        db.cut = True
        await until(lambda: not held.running, 3 * LEASE_S)
        stopped_us = time.time() * 1_000_000
        assert a.held == set()
        row = await db._db.fetch_one(
            "SELECT expires_us FROM bridge_connections WHERE name = 'held:one'"
        )
        assert row is not None and stopped_us < row["expires_us"]  # before another could take it
        db.cut = False
        await until(lambda: held.running, 3 * LEASE_S)  # its own lease, taken again
        assert held.runs == 2
        assert held.restored and int(held.restored[-1]) > 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_clean_stop_hands_the_lease_over_at_once_with_the_checkpoint(
    shared_state: StateBackend,
) -> None:
    held = Held()
    a = await leases_on(await shared_state.open(), "a")
    task = asyncio.create_task(bridging._held(held, None, a))  # type: ignore[arg-type]
    await until(lambda: held.running)
    await asyncio.sleep(0.3)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert not held.running
    b = await leases_on(await shared_state.open(), "b")
    assert await b.acquire("held:one") == Holding(
        name="held:one", checkpoint=str(held.position).encode()
    )
