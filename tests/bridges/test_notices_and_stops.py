"""The notice claims and the stops across instances, on SQLite and on the real PostgreSQL (#39).

Two instances are two stores on connections of their own to one database, as two processes
would be.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from bridges.notices import NoticeClaims
from bridges.stops import StopAsk, StopOutcome, TurnStops
from core.clock import ManualClock
from tests.support.state import StateBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def claims(state: StateBackend, clock: ManualClock) -> NoticeClaims:
    made = NoticeClaims(await state.open(), clock=clock)
    await made.ensure_schema()
    return made


async def test_a_notice_is_claimed_once_a_window_by_one_instance_of_all(
    state: StateBackend,
) -> None:
    clock = ManualClock()
    a, b = await claims(state, clock), await claims(state, clock)
    assert await a.claim("slack:C1:ann", 30) is True
    assert await a.claim("slack:C1:ann", 30) is False
    assert await b.claim("slack:C1:ann", 30) is False  # the other instance: silent too
    assert await b.claim("slack:C1:ben", 30) is True  # another person's bucket is their own
    clock.advance(timedelta(seconds=29))
    assert [await a.claim("slack:C1:ann", 30), await b.claim("slack:C1:ann", 30)] == [False] * 2
    clock.advance(timedelta(seconds=2))
    assert await b.claim("slack:C1:ann", 30) is True  # a new window: whoever comes first
    assert await a.claim("slack:C1:ann", 30) is False


async def test_instances_racing_for_one_notice_let_exactly_one_tell_it(
    state: StateBackend,
) -> None:
    clock = ManualClock()
    many = [await claims(state, clock) for _ in range(4)]
    won = await asyncio.gather(*(c.claim("slack:C1:ann", 60) for c in many for _ in range(3)))
    assert won.count(True) == 1


async def test_an_instance_that_lost_a_claim_asks_the_store_no_more_until_the_window_ends(
    state: StateBackend,
) -> None:
    clock = ManualClock()
    a, b = await claims(state, clock), await claims(state, clock)
    assert await a.claim("slack:C1:ann", 30) is True
    assert await b.claim("slack:C1:ann", 30) is False
    await b._db.close()  # b remembers the window: no statement needed to stay silent
    assert await b.claim("slack:C1:ann", 30) is False


async def stops(state: StateBackend, **options: float) -> TurnStops:
    made = TurnStops(await state.open(), **options)  # type: ignore[arg-type]
    await made.start()
    return made


async def test_a_stop_asked_by_one_instance_is_answered_by_the_one_running_the_turn(
    state: StateBackend,
) -> None:
    if state.name == "sqlite":
        pytest.skip("one instance per SQLite file: nobody else to ask")
    a, b, c = await stops(state), await stops(state), await stops(state)
    asked: list[StopAsk] = []

    async def running_ann_turn(ask: StopAsk) -> StopOutcome | None:
        asked.append(ask)
        if ask.mark != "m1":
            return None
        return "stopped" if ask.person_key == "person:ann" else "refused"

    async def running_nothing(ask: StopAsk) -> StopOutcome | None:
        return None

    b.serve(running_ann_turn)
    c.serve(running_nothing)
    a.serve(running_ann_turn)  # its own asks never reach it
    ann = StopAsk(mark="m1", person_key="person:ann", caller_id="slack:UANN", button="b1")
    assert await a.ask(ann) == "stopped"
    assert await a.ask(StopAsk(mark="m1", person_key="person:ben")) == "refused"
    assert len(asked) == 2 and asked[0] == ann  # who and which button, as sent


async def test_a_stop_nobody_answers_is_nothing_running_after_the_wait(
    state: StateBackend,
) -> None:
    a = await stops(state, answer_within_s=0.3)
    b = await stops(state)

    async def running_nothing(ask: StopAsk) -> StopOutcome | None:
        return None

    b.serve(running_nothing)
    assert await a.ask(StopAsk(mark="m1", person_key="person:ann")) is None
    assert a.shared is (state.name == "postgresql")
