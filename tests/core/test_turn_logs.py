"""The shared turn logs on a real PostgreSQL: batches, bounds, expiry, the owner, attachment.

Two :class:`SharedTurnLogs` on two connections to one database stand for two instances:
``here`` runs the turn, ``there`` finds and reads it.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from core.clock import Clock, ManualClock, system_clock
from core.engine import events
from core.turn_logs import DELTA_BUDGET, SharedTurnLogs, StoredLog, TurnLog
from core.turn_logs.shared import CHANNEL
from tests.support.state import StateBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def two_instances(
    shared_state: StateBackend, clock: Clock, grace_s: float = 1.0
) -> tuple[SharedTurnLogs, SharedTurnLogs]:
    here = SharedTurnLogs(await shared_state.open(), grace_s, clock=clock)
    there = SharedTurnLogs(await shared_state.open(), grace_s, clock=clock)
    await here.start()
    await there.start()
    return here, there


async def written(there: SharedTurnLogs, turn: TurnLog, owner: str = "alice") -> StoredLog:
    """The turn as the other instance finds it, once its end has been written."""
    async with asyncio.timeout(10):
        while True:
            found = await there.find(turn.turn_id, owner)
            if isinstance(found, StoredLog) and (await found.read(0))[1]:
                return found
            await asyncio.sleep(0.02)


async def test_a_stream_of_tokens_is_written_in_a_few_batches_not_one_write_per_token(
    shared_state: StateBackend,
) -> None:
    here, there = await two_instances(shared_state, ManualClock())
    notices: list[str | None] = []
    listener = await shared_state.open()
    await listener.subscribe(CHANNEL, notices.append)
    turn = here.open("alice", lambda: None)

    for n in range(400):  # a token every ~2 ms, as a fast model streams
        turn.extend([events.Text(chunk=f"t{n} ")])
        await asyncio.sleep(0.002)
    turn.extend([events.Final(text="".join(f"t{n} " for n in range(400)))])
    here.end(turn)
    stored = await written(there, turn)

    frames, ended = await stored.read(0)
    assert ended
    assert [seq for seq, _, _ in frames] == list(range(402))
    assert [name for _, name, _ in frames][:2] == [b"turn", b"text"]
    await asyncio.sleep(0.2)  # the last notices arrive
    batches = len([n for n in notices if n == turn.turn_id])
    assert 1 <= batches < 402 / 10, batches  # ~one per 50 ms, never one per token


async def test_the_stored_log_keeps_the_last_deltas_and_the_final_within_the_budget(
    shared_state: StateBackend,
) -> None:
    here, there = await two_instances(shared_state, ManualClock())
    turn = here.open("alice", lambda: None)
    chunk = "x" * 1000
    for _ in range(600):  # 600 KB of answer, in batches the flusher sees one by one
        turn.extend([events.Text(chunk=chunk)])
        await asyncio.sleep(0)
    turn.extend([events.Final(text="the whole answer")])
    here.end(turn)

    frames, _ = await (await written(there, turn)).read(0)

    deltas = [seq for seq, name, _ in frames if name == b"text"]
    kept = turn.trimmed_to  # the memory log's first kept delta: its own budget holds
    assert (601 - kept) * len(chunk) <= DELTA_BUDGET
    assert deltas == list(range(deltas[0], 601))  # the last ones, without a gap among them
    # The store drops whole rows only: what it keeps beyond the memory log's deltas is the
    # rest of the one row the trim point falls in (a loaded machine writes bigger rows).
    rows = await there._db.fetch_all(
        "SELECT first_seq, last_seq FROM turn_batches WHERE turn_id = ?", (turn.turn_id,)
    )
    extra = [seq for seq in deltas if seq < kept]
    straddling = [(int(r[0]), int(r[1])) for r in rows if int(r[0]) < kept <= int(r[1])]
    assert not extra or (len(straddling) == 1 and all(straddling[0][0] <= seq for seq in extra)), (
        extra[:3],
        straddling,
    )
    assert frames[0][1] == b"turn" and frames[-1] == (601, b"final", b'{"text":"the whole answer"}')


async def test_only_the_owner_finds_the_turn_elsewhere_and_only_until_it_expires(
    shared_state: StateBackend,
) -> None:
    clock = ManualClock()
    here, there = await two_instances(shared_state, clock, grace_s=1.0)
    plain = here.open("alice", lambda: None)
    staged = here.open("alice", lambda: None)
    plain.extend([events.Final(text="done")])
    staged.extend(
        [
            events.Pending(command="write", token="t1", choices=()),
            events.Final(text="confirm?"),
        ]
    )
    here.end(plain)
    here.end(staged)
    await written(there, plain)
    await written(there, staged)

    assert await there.find(plain.turn_id, "bob") is None
    assert await there.find("no-such-turn", "alice") is None
    clock.advance(timedelta(seconds=2))  # past the grace period
    assert await there.find(plain.turn_id, "alice") is None
    assert isinstance(await there.find(staged.turn_id, "alice"), StoredLog)  # a choice waits
    clock.advance(timedelta(seconds=300))
    assert await there.find(staged.turn_id, "alice") is None


async def test_a_reader_elsewhere_keeps_the_turn_alive_and_its_leaving_starts_the_grace(
    shared_state: StateBackend,
) -> None:
    here, there = await two_instances(shared_state, system_clock, grace_s=0.5)
    cancelled = asyncio.Event()
    turn = here.open("alice", cancelled.set)
    turn.extend([events.Text(chunk="a")])
    async with asyncio.timeout(10):
        while not isinstance(found := await there.find(turn.turn_id, "alice"), StoredLog):
            await asyncio.sleep(0.02)
    turn.attach()
    await found.attach()  # a reader through the other instance
    turn.detach()  # the reader here left: the grace timer runs

    await asyncio.sleep(1.0)  # twice the grace
    assert not cancelled.is_set()
    await found.detach()
    async with asyncio.timeout(5):
        await cancelled.wait()
