"""The bound on a bot loop: turns a space runs in a row for a sender writing back at once,
counted in the state store across instances (on SQLite and on the real PostgreSQL)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from core.clock import ManualClock
from core.spaces.bot_turns import BotTurns, Sender
from tests.support.state import StateBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SPACE = "matrix:!room:localhost"
ECHO = "matrix:@echo:localhost"
ANN = "matrix:@ann:localhost"


async def instance(state: StateBackend, clock: ManualClock, max_turns: int = 3) -> BotTurns:
    made = BotTurns(await state.open(), clock=clock, max_turns=max_turns, reply_s=3.0)
    await made.ensure_schema()
    return made


async def echo_round(
    asked: BotTurns, answering: BotTurns, clock: ManualClock, sender: str = ECHO
) -> Sender:
    """``sender`` writes back a second after an answer to it showed (judged by ``asked``),
    and, unless held, its turn's answer shows and ends (on ``answering``)."""
    clock.advance(timedelta(seconds=1))
    judged = await asked.judge(SPACE, sender, turn=True)
    if judged != "held":
        await answering.shown(SPACE, sender, for_s=60)
        clock.advance(timedelta(seconds=2))
        await answering.answered(SPACE, sender)
    return judged


async def test_an_echo_loop_gets_the_bound_of_turns_across_instances_and_one_log_line(
    state: StateBackend, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    a, b = await instance(state, clock), await instance(state, clock)
    # The echo bot's first message is a person's as far as anyone can tell: it runs.
    assert await a.judge(SPACE, ECHO, turn=True) == "person"
    await a.shown(SPACE, ECHO, for_s=60)
    await a.answered(SPACE, ECHO)
    caplog.set_level(logging.WARNING, "mercury.spaces.bot_turns")
    # Each echo is taken by either instance: they count one streak.
    judged = [await echo_round(x, y, clock) for x, y in ((b, a), (a, b), (b, b), (a, a), (b, a))]
    assert judged == ["program", "program", "program", "held", "held"]
    [line] = [r for r in caplog.records if r.name == "mercury.spaces.bot_turns"]
    assert "bot loop" in line.getMessage() and SPACE in line.getMessage()


async def test_a_person_writing_ends_the_streak_and_the_bot_gets_the_bound_again(
    state: StateBackend,
) -> None:
    clock = ManualClock()
    a, b = await instance(state, clock, max_turns=2), await instance(state, clock, max_turns=2)
    await a.shown(SPACE, ECHO, for_s=60)
    assert [await echo_round(a, b, clock) for _ in range(3)] == ["program", "program", "held"]
    # Ann says something, to no one in particular: it starts no turn, and ends the streak.
    assert await b.judge(SPACE, ANN, turn=False) == "person"
    await a.shown(SPACE, ECHO, for_s=60)
    assert [await echo_round(b, a, clock) for _ in range(3)] == ["program", "program", "held"]


async def test_a_reply_after_the_window_or_words_that_start_no_turn_count_nothing(
    state: StateBackend,
) -> None:
    clock = ManualClock()
    turns = await instance(state, clock, max_turns=1)
    await turns.shown(SPACE, ECHO, for_s=60)
    clock.advance(timedelta(seconds=5))
    await turns.answered(SPACE, ECHO)
    # Talk of the bot that addresses no one is its own, but no turn: never counted.
    for _ in range(3):
        assert await turns.judge(SPACE, ECHO, turn=False) == "program"
    assert await turns.judge(SPACE, ECHO, turn=True) == "program"
    await turns.answered(SPACE, ECHO)
    clock.advance(timedelta(seconds=3, milliseconds=1))
    # Past reply_s after the answer ended: a person reading and writing back, not a loop.
    assert await turns.judge(SPACE, ECHO, turn=True) == "person"
    await turns.answered(SPACE, ECHO)
    assert await turns.judge(SPACE, ECHO, turn=True) == "program"  # the streak began anew
    # Another space's streak is its own.
    assert await turns.judge("matrix:!other:localhost", ECHO, turn=True) == "person"


async def test_an_answer_to_someone_else_showing_since_makes_the_next_echo_a_persons(
    state: StateBackend,
) -> None:
    clock = ManualClock()
    turns = await instance(state, clock, max_turns=1)
    await turns.shown(SPACE, ECHO, for_s=60)
    assert await turns.judge(SPACE, ECHO, turn=True) == "program"
    await turns.shown(SPACE, ANN, for_s=60)  # Ann asked meanwhile
    await turns.answered(SPACE, ECHO)  # the bot's answer ending takes nothing back from Ann's
    assert await turns.judge(SPACE, ECHO, turn=True) == "person"
    await turns.delete_space(SPACE)
    assert await turns.judge(SPACE, ANN, turn=True) == "person"
