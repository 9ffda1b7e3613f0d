"""Per-conversation order across instances, on SQLite and on the real PostgreSQL.

Each "instance" is a ConversationOrder on a connection of its own to the same store, with a
holder id of its own, as separate processes would have.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from core.engine.conversation_order import ConversationOrder, HeldTurn, OrderError
from core.engine.transcript import ShownMessage, Transcript
from core.memory import InvalidCursor
from core.model import ChatMessage
from core.state import Database
from tests.support.state import StateBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Instances:
    def __init__(self, backend: StateBackend) -> None:
        self.backend = backend
        self.started: list[ConversationOrder] = []
        self.dbs: list[Database] = []

    async def open(self, *, lease_s: float = 5.0, pool_size: int = 10) -> ConversationOrder:
        self.dbs.append(await self.backend.open(pool_size=pool_size))
        order = ConversationOrder(self.dbs[-1], lease_s=lease_s)
        await order.start()
        self.started.append(order)
        return order


@pytest.fixture
async def instances(state: StateBackend) -> AsyncIterator[Instances]:
    made = Instances(state)
    yield made
    for order in made.started:
        await order.stop()


async def test_turns_of_one_conversation_run_one_at_a_time_in_arrival_order_across_instances(
    instances: Instances,
) -> None:
    a, b = await instances.open(), await instances.open()
    ran: list[tuple[str, int]] = []
    running = 0

    async def turn(order: ConversationOrder, n: int) -> None:
        nonlocal running
        async with order.hold("alice:c1"):
            running += 1
            assert running == 1, "two turns of one conversation overlapped"
            ran.append(("start", n))
            await asyncio.sleep(0.05)
            ran.append(("end", n))
            running -= 1

    watcher = await instances.backend.open()
    tasks = []
    for n in range(8):
        tasks.append(asyncio.create_task(turn(a if n % 2 else b, n)))
        await _arrived(watcher, "alice:c1", n + 1)  # arrival order: 0, 1, 2, …
    await asyncio.gather(*tasks)

    assert [n for what, n in ran if what == "start"] == list(range(8))


async def test_different_conversations_run_side_by_side_on_few_connections(
    instances: Instances,
) -> None:
    a = await instances.open(pool_size=3)
    inside = 0
    most = 0

    async def turn(n: int) -> None:
        nonlocal inside, most
        async with a.hold(f"alice:c{n}"):
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.5)  # a model turn: no connection is held meanwhile
            inside -= 1

    await asyncio.gather(*(turn(n) for n in range(30)))

    assert most == 30


async def test_a_dead_instances_turn_lapses_and_the_next_turn_runs_once_it_has(
    instances: Instances,
) -> None:
    lease = 2.0
    dying, survivor = await instances.open(lease_s=lease), await instances.open(lease_s=lease)
    held = dying.hold("alice:c1")
    await held.__aenter__()
    await dying.stop_renewing()  # the process is gone: nothing renews or leaves

    started = time.monotonic()
    async with survivor.hold("alice:c1") as turn:
        waited = time.monotonic() - started
        assert turn.version == 0

    assert waited >= lease * 0.8
    with pytest.raises(OrderError):  # the dead turn, were it to wake, can't write any more
        await dying.append(
            _held(dying, "alice:c1", ticket=1), [ChatMessage(role="user", content="late")]
        )


async def test_a_running_turn_whose_claim_a_renewal_finds_gone_is_stopped_with_an_order_error(
    instances: Instances,
) -> None:
    lease = 2.0
    stalled, other = await instances.open(lease_s=lease), await instances.open(lease_s=lease)
    running = asyncio.Event()

    async def turn() -> None:
        async with stalled.hold("alice:c1"):
            running.set()
            await asyncio.sleep(60)  # a long model answer

    task = asyncio.create_task(turn())
    await asyncio.wait_for(running.wait(), 30)
    await stalled.stop_renewing()  # the instance stalls past its lease…
    async with other.hold("alice:c1"):  # …so the conversation moves on elsewhere
        pass
    await stalled.renew()  # the stalled instance's next renewal finds the claim gone

    with pytest.raises(OrderError):
        await asyncio.wait_for(task, 10)  # stopped at once, not after its 60 s answer


async def test_a_turn_whose_claim_lapsed_learns_it_when_it_keeps_its_place(
    instances: Instances,
) -> None:
    lease = 2.0
    stalled, other = await instances.open(lease_s=lease), await instances.open(lease_s=lease)
    async with stalled.hold("alice:c1") as mine:
        await mine.keep()  # held: renewed, no error
        await stalled.stop_renewing()
        async with other.hold("alice:c1"):
            pass
        with pytest.raises(OrderError):
            await mine.keep()
        assert mine.lost


async def test_a_renewal_stops_no_turn_that_still_holds_its_place(
    instances: Instances,
) -> None:
    order = await instances.open(lease_s=2.0)
    async with order.hold("alice:c1") as first, order.hold("alice:c2") as second:
        await order.renew()
        await order.renew()
        assert not first.lost and not second.lost
        await first.append([ChatMessage(role="user", content="still mine")])


async def test_a_turn_cancelled_while_it_waits_leaves_the_queue_at_once(
    instances: Instances,
) -> None:
    a, b = await instances.open(lease_s=30.0), await instances.open(lease_s=30.0)
    first = a.hold("alice:c1")
    await first.__aenter__()
    waiting = asyncio.create_task(_enter_and_leave(b, "alice:c1"))
    await asyncio.sleep(0.3)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await first.__aexit__(None, None, None)

    started = time.monotonic()
    async with a.hold("alice:c1"):
        pass
    assert time.monotonic() - started < 5.0  # far less than the 30 s lease


async def test_a_turn_finds_the_version_and_transcript_another_instance_left(
    instances: Instances,
) -> None:
    a, b = await instances.open(), await instances.open()
    async with a.hold("alice:c1") as turn:
        await turn.append([ChatMessage(role="user", content="one")])
        await turn.append([ChatMessage(role="assistant", content="two")])
        seen_by_a = turn.version

    async with b.hold("alice:c1") as turn:
        assert turn.version == seen_by_a == 2
        assert [m.content for m in await turn.transcript()] == ["one", "two"]
    async with b.hold("alice:c2") as other:
        assert other.version == 0
        assert await other.transcript() == []


async def test_a_conversation_started_afresh_on_one_instance_is_empty_and_newer_on_the_other(
    instances: Instances,
) -> None:
    """``compact`` through one instance: the next turn on another finds a newer version and
    none of what was said before, then its own messages as usual (#39)."""
    a, b = await instances.open(), await instances.open()
    async with b.hold("space:C1:c1") as turn:
        await turn.append([ChatMessage(role="user", content="the word is tangerine")])
        before = turn.version
    async with a.hold("space:C1:c1") as turn:
        await turn.start_afresh()
        assert turn.version == before + 1
    async with b.hold("space:C1:c1") as turn:
        assert turn.version == before + 1
        assert await turn.transcript() == []
        await turn.append([ChatMessage(role="user", content="hello again")])
    async with a.hold("space:C1:c1") as turn:
        assert [m.content for m in await turn.transcript()] == ["hello again"]


async def test_a_turn_held_on_another_instance_is_claimed_elsewhere_not_here(
    instances: Instances,
) -> None:
    a, b = await instances.open(), await instances.open()
    assert not await a.claimed_elsewhere("space:C1:c1")
    async with b.hold("space:C1:c1"):
        assert await a.claimed_elsewhere("space:C1:c1")
        assert not await b.claimed_elsewhere("space:C1:c1")
        assert not await a.claimed_elsewhere("space:C1:c2")
    assert not await a.claimed_elsewhere("space:C1:c1")


def shown(person: str, role: str, content: str, *, interrupted: bool = False) -> ShownMessage:
    return ShownMessage(
        person_key=person,
        role=role,  # type: ignore[arg-type]
        content=content,
        timestamp="2026-01-02T03:04:05.000Z",
        interrupted=interrupted,
    )


async def test_what_the_person_saw_reads_back_in_order_a_page_at_a_time_through_any_instance(
    instances: Instances,
) -> None:
    a, b = await instances.open(), await instances.open()
    for n, order in enumerate([a, b, a]):
        async with order.hold("alice:c1") as turn:
            await turn.append(
                [ChatMessage(role="user", content=f"[t] q{n}")], [shown("alice", "user", f"q{n}")]
            )
            await turn.append([], [shown("alice", "assistant", f"a{n}", interrupted=n == 1)])
    async with b.hold("bob:c1") as turn:
        await turn.append([], [shown("bob", "user", "not alice's")])

    read = Transcript(instances.dbs[1])
    first = await read.conversation("alice", "alice:c1", limit=4)
    rest = await read.conversation("alice", "alice:c1", limit=4, after=first.next_cursor)
    assert [m.content for m in first.items + rest.items] == ["q0", "a0", "q1", "a1", "q2", "a2"]
    assert [m.interrupted for m in first.items] == [False, False, False, True]
    assert rest.next_cursor is None
    # Another person's key reads nothing, even with the right session key.
    assert (await read.conversation("bob", "alice:c1", limit=10)).items == []
    listed = await read.conversations("alice", limit=10)
    assert [(c.session_key, c.preview, c.title) for c in listed] == [("alice:c1", "a2", "q0")]
    # Reading only the newest messages, the first question is still looked up (#36).
    assert [c.title for c in await read.conversations("alice", limit=10, scan=2)] == ["q0"]
    with pytest.raises(InvalidCursor):
        await read.conversation("alice", "alice:c1", limit=4, after="not-a-cursor")


async def test_what_the_person_saw_is_not_written_by_a_turn_whose_claim_lapsed(
    instances: Instances,
) -> None:
    a = await instances.open()
    stale = _held(a, "alice:c9", ticket=7)  # a ticket the queue never gave, or took back
    with pytest.raises(OrderError):
        await stale.append([], [shown("alice", "assistant", "too late")])
    assert (
        await Transcript(instances.dbs[0]).conversation("alice", "alice:c9", limit=10)
    ).items == []


async def _arrived(db: Database, key: str, tickets: int) -> None:
    """Wait until ``tickets`` turns of ``key`` have taken their place in the queue."""
    async with asyncio.timeout(30):
        while True:
            row = await db.fetch_one(
                "SELECT next_ticket FROM conversation_turns WHERE session_key = ?", (key,)
            )
            if row is not None and int(row[0]) >= tickets:
                return
            await asyncio.sleep(0.005)


async def _enter_and_leave(order: ConversationOrder, key: str) -> None:
    async with order.hold(key):
        pass


def _held(order: ConversationOrder, key: str, *, ticket: int) -> HeldTurn:
    return HeldTurn(key, ticket, 0, order)


async def test_a_lapsed_claim_is_not_taken_over_between_a_writes_fence_and_its_commit(
    instances: Instances,
) -> None:
    # Taking over a lapsed claim deletes it; the next turn then reads the version. Were
    # the write's fence a plain read, the delete could land between the fence and the
    # commit, and the next turn would start without what was being written.
    a = await instances.open()
    await instances.open()  # the other instance, on connections of its own
    async with a.hold("alice:c1") as mine:
        async with instances.dbs[0].transaction() as tx:
            await a._fence(tx, mine)
            taking_over = asyncio.create_task(
                instances.dbs[1].execute(
                    "DELETE FROM conversation_queue WHERE session_key = ? AND ticket = ?",
                    ("alice:c1", mine.ticket),
                )
            )
            await asyncio.sleep(0.5)
            assert not taking_over.done()  # it waits for the write's commit
        assert await asyncio.wait_for(taking_over, 10) == 1
        with pytest.raises(OrderError):
            await mine.append([ChatMessage(role="assistant", content="too late")])


async def test_claims_are_renewed_while_the_pool_is_busy_longer_than_the_lease(
    instances: Instances,
) -> None:
    # The renewal has a connection of its own: a pool held by other work for twice the
    # lease must not let a running turn's claim lapse and another instance take its place.
    lease = 1.5
    a = await instances.open(lease_s=lease, pool_size=1)
    b = await instances.open(lease_s=lease)
    async with a.hold("alice:c1") as mine:
        overtaken = asyncio.Event()

        async def other_instance() -> None:
            async with b.hold("alice:c1"):
                overtaken.set()

        waiting = asyncio.create_task(other_instance())
        async with instances.dbs[0].lock("the pool's only connection"):
            await asyncio.sleep(lease * 2)
        assert not overtaken.is_set()
        await mine.keep()  # still held
    await asyncio.wait_for(waiting, 10)  # and the other instance's turn runs after it
    assert overtaken.is_set()
