"""The connection leases on SQLite and PostgreSQL: one holder, takeover once lapsed (#39).

Two instances are two :class:`ConnectionLeases` on connections of their own to one store,
with holders of their own, as two processes would be. Instances sharing a store is
PostgreSQL's case; on SQLite (one instance) a lease left behind is taken over at once.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from bridges.holding import ConnectionLeases, Holding
from core.clock import ManualClock
from tests.support.state import StateBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

LEASE_S = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


async def instance(state: StateBackend, clock: ManualClock, holder: str) -> ConnectionLeases:
    leases = ConnectionLeases(await state.open(), lease_s=LEASE_S, clock=clock, holder=holder)
    await leases.ensure_schema()
    return leases


async def test_one_instance_holds_a_connection_and_the_other_stands_by_while_it_renews(
    shared_state: StateBackend, clock: ManualClock
) -> None:
    a = await instance(shared_state, clock, "a")
    b = await instance(shared_state, clock, "b")

    assert await a.acquire("discord") == Holding(name="discord", checkpoint=None)
    assert await b.acquire("discord") is None
    assert await a.acquire("discord") is not None  # its own: held again
    for _ in range(5):  # renewed every third of a lease: never lapses
        clock.advance(timedelta(seconds=LEASE_S / 3))
        assert await a.renew("discord", b"cp") is True
        assert await b.acquire("discord") is None
    assert a.held == {"discord"} and b.held == set()
    assert await b.holders() == {"discord": "a"}
    # Another connection's lease is its own.
    assert await b.acquire("matrix:@bot:example.org") is not None
    assert await a.holders() == {"discord": "a", "matrix:@bot:example.org": "b"}


async def test_a_lapsed_lease_is_taken_over_with_the_last_checkpoint_and_the_old_holder_lost_it(
    shared_state: StateBackend, clock: ManualClock
) -> None:
    a = await instance(shared_state, clock, "a")
    b = await instance(shared_state, clock, "b")
    assert await a.acquire("discord") is not None
    assert await a.renew("discord", b'{"seq": 7}') is True
    assert await a.renew("discord", None) is True  # nothing new: the checkpoint stays

    clock.advance(timedelta(seconds=LEASE_S - 0.5))
    assert await b.acquire("discord") is None  # not lapsed yet
    clock.advance(timedelta(seconds=1))
    assert await b.acquire("discord") == Holding(name="discord", checkpoint=b'{"seq": 7}')

    # The old holder wakes (a stalled loop): its renewal finds it lost the connection.
    assert await a.renew("discord", b'{"seq": 9}') is False
    assert a.held == set()
    assert await a.acquire("discord") is None
    assert await b.renew("discord", b'{"seq": 8}') is True
    clock.advance(timedelta(seconds=LEASE_S + 1))
    assert await a.acquire("discord") == Holding(name="discord", checkpoint=b'{"seq": 8}')


async def test_a_released_connection_is_taken_over_at_once_with_the_checkpoint_saved_at_stop(
    state: StateBackend, clock: ManualClock
) -> None:
    a = await instance(state, clock, "a")
    b = await instance(state, clock, "b")
    assert await a.acquire("discord") is not None
    await a.release("discord", b"at-stop")
    assert a.held == set()
    assert await a.holders() == {}
    assert await b.acquire("discord") == Holding(name="discord", checkpoint=b"at-stop")
    await a.release("discord", b"not-mine")  # only the holder's release counts
    assert await b.renew("discord", None) is True
    await b.release("discord", None)
    assert await a.acquire("discord") == Holding(name="discord", checkpoint=b"at-stop")


async def test_instances_racing_for_a_connection_elect_exactly_one(
    shared_state: StateBackend, clock: ManualClock
) -> None:
    racers = [await instance(shared_state, clock, f"i{n}") for n in range(4)]

    won = await asyncio.gather(*(r.acquire("discord") for r in racers))
    assert sum(w is not None for w in won) == 1
    # Lapsed: they race again, and again one wins.
    clock.advance(timedelta(seconds=LEASE_S + 1))
    won = await asyncio.gather(*(r.acquire("discord") for r in racers))
    assert sum(w is not None for w in won) == 1


async def test_on_sqlite_a_restarted_instance_takes_over_the_lease_its_killed_run_left_at_once(
    state: StateBackend, clock: ManualClock
) -> None:
    killed = await instance(state, clock, "killed")
    assert await killed.acquire("discord") is not None
    await killed.renew("discord", b"cp")
    restarted = await instance(state, clock, "restarted")  # same file, a new process
    holding = await restarted.acquire("discord")
    if state.name == "sqlite":  # nobody else can share the file: no lease to wait out
        assert holding == Holding(name="discord", checkpoint=b"cp")
    else:  # another live instance may hold it: wait for the lease to lapse
        assert holding is None
