"""The delivery store on SQLite and PostgreSQL: taken is not handled, leases, retention (#34).

Two instances are two :class:`Deliveries` on connections of their own to one store, with
holders of their own, as two processes would be.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from bridges.deliveries import KEEP, MAX_ATTEMPTS, Deliveries
from bridges.port import Attachment, Pressed, Received
from core.clock import ManualClock
from core.state import Database, Migration, Schema
from tests.support.state import StateBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

LEASE_S = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def message(delivery_id: str = "Ev1", platform: str = "slack") -> Received:
    return Received(
        platform=platform,
        thread_id=f"{platform}:D1",
        delivery_id=delivery_id,
        message_id="1.000",
        author_id="U1",
        author_name="Ann <admin>",
        text="hello",
        is_dm=True,
        attachments=(Attachment(name="a.txt", ref="F1", mime_type="text/plain"),),
    )


async def instance(state: StateBackend, clock: ManualClock, holder: str) -> Deliveries:
    deliveries = Deliveries(await state.open(), lease_s=LEASE_S, clock=clock, holder=holder)
    await deliveries.ensure_schema()
    return deliveries


async def test_a_taken_delivery_is_a_duplicate_only_once_handled_or_while_its_lease_lives(
    state: StateBackend, clock: ManualClock
) -> None:
    a = await instance(state, clock, "a")
    b = await instance(state, clock, "b")
    assert await a.take(message()) is True
    assert await b.take(message()) is False  # a holds it, alive
    clock.advance(timedelta(seconds=LEASE_S / 2))
    assert await a.renew() == 1
    clock.advance(timedelta(seconds=LEASE_S * 0.9))
    assert await b.take(message()) is False  # renewed: still a's
    clock.advance(timedelta(seconds=LEASE_S))  # a died: no renewal
    assert await b.take(message()) is True  # the platform's retry runs, on b
    assert await a.take(message()) is False
    await b.handled(message())
    clock.advance(timedelta(days=1))
    assert await a.take(message()) is False and await b.take(message()) is False
    assert await a.stale(["slack"]) == []


async def test_a_dead_instances_deliveries_are_taken_over_by_one_instance_with_the_message(
    state: StateBackend, clock: ManualClock
) -> None:
    dead = await instance(state, clock, "dead")
    for number in range(5):
        assert await dead.take(message(f"Ev{number}"))
    assert await dead.take(message("Tg1", platform="telegram"))
    live = [await instance(state, clock, name) for name in ("a", "b", "c")]
    assert await live[0].stale(["slack"]) == []  # the lease still lives
    clock.advance(timedelta(seconds=LEASE_S + 1))
    found = await asyncio.gather(*(d.stale(["slack"]) for d in live))
    taken = [m.delivery_id for each in found for m in each]
    assert sorted(taken) == [f"Ev{n}" for n in range(5)]  # each once, whoever raced
    assert next(m for each in found for m in each) == message(taken[0])  # as parsed
    # A platform without a bridge here is left for an instance that has one.
    assert [m.delivery_id for m in await live[0].stale(["telegram"])] == ["Tg1"]


async def test_a_failed_delivery_is_let_go_and_given_up_after_a_few_attempts(
    state: StateBackend, clock: ManualClock
) -> None:
    a = await instance(state, clock, "a")
    assert await a.take(message())
    for _ in range(MAX_ATTEMPTS - 1):
        await a.release(message())  # its handling failed
        assert [m.delivery_id for m in await a.stale(["slack"])] == ["Ev1"]
    await a.release(message())
    assert await a.stale(["slack"]) == []
    assert await a.take(message()) is False


async def test_handled_ids_outlive_metas_seven_days_of_retries(
    state: StateBackend, clock: ManualClock
) -> None:
    a = await instance(state, clock, "a")
    assert await a.take(message())
    await a.handled(message())
    clock.advance(timedelta(days=7, hours=23))
    assert await a.purge() == 0
    assert await a.take(message()) is False  # Meta's last retry, a week on
    assert KEEP > timedelta(days=7)
    clock.advance(timedelta(hours=2))
    assert await a.purge() == 1


async def test_ids_taken_before_the_lease_column_stay_handled(
    state: StateBackend, clock: ManualClock
) -> None:
    db: Database = await state.open()
    first = Schema(
        "bridge_deliveries",
        (
            Migration(
                1,
                "CREATE TABLE IF NOT EXISTS bridge_deliveries (platform TEXT NOT NULL, "
                "delivery_id TEXT NOT NULL, received_us BIGINT NOT NULL, "
                "PRIMARY KEY (platform, delivery_id));\n",
            ),
        ),
    )
    await db.migrate(first)
    await db.execute(
        "INSERT INTO bridge_deliveries (platform, delivery_id, received_us) VALUES (?, ?, ?)",
        ("slack", "Ev1", 1),
    )
    a = await instance(state, clock, "a")
    assert await a.take(message()) is False
    assert await a.stale(["slack"]) == []


def press(delivery_id: str = "Ev1") -> Pressed:
    return Pressed(
        platform="slack",
        thread_id="slack:C1",
        delivery_id=delivery_id,
        message_id="1.000",
        author_id="U1",
        author_name="Ann",
        action="s:0123456789abcdef",
        is_dm=False,
    )


async def test_a_press_is_a_delivery_of_its_own_taken_once_and_run_again_if_its_holder_died(
    state: StateBackend, clock: ManualClock
) -> None:
    a = await instance(state, clock, "a")
    b = await instance(state, clock, "b")
    # A message and a press under the same platform id are two deliveries (#37).
    assert await a.take(message("Ev1")) is True
    assert await a.take(press("Ev1")) is True
    assert await b.take(press("Ev1")) is False
    await a.handled(message("Ev1"))
    clock.advance(timedelta(seconds=LEASE_S + 1))
    [again] = await b.stale(["slack"])
    assert again == press("Ev1")
    await b.handled(again)
    assert await a.take(press("Ev1")) is False


async def test_whoever_takes_a_delivery_over_gets_the_message_its_earlier_run_posted(
    state: StateBackend, clock: ManualClock
) -> None:
    a = await instance(state, clock, "a")
    b = await instance(state, clock, "b")
    c = await instance(state, clock, "c")
    retried, orphan = message("Ev1"), message("Ev2")
    assert await a.take(retried) and await a.take(orphan)
    assert a.left_reply(retried) is None  # a first run starts afresh
    await a.posted(retried, "1700000000.000100")
    await a.posted(orphan, "1700000000.000200")
    await b.posted(retried, "not-b's")  # only the holder notes its reply
    clock.advance(timedelta(seconds=LEASE_S + 1))  # a died
    # A platform's retry, and the look for stale deliveries, both hand the message on, once.
    assert await b.take(retried)
    assert b.left_reply(retried) == "1700000000.000100"
    assert b.left_reply(retried) is None
    assert await c.stale(["slack"]) == [orphan]
    assert c.left_reply(orphan) == "1700000000.000200"
    await b.handled(retried)
    clock.advance(timedelta(seconds=LEASE_S + 1))
    assert await c.stale(["slack"]) == [orphan]
    assert c.left_reply(orphan) == "1700000000.000200"
