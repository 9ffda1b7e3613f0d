"""Server-Timing: what the server spent before the first byte, on every response."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import anyio
import httpx
import pytest

from core.engine.sessions import TurnInput
from core.people.principal import Person, Principal
from tests.conftest import ALICE
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def timings(response: httpx.Response) -> dict[str, float]:
    """``{"auth": 0.4, ...}`` in milliseconds, from the header."""
    parsed = {}
    for entry in response.headers["server-timing"].split(","):
        name, _, rest = entry.strip().partition(";dur=")
        parsed[name] = float(rest.split(";")[0])
    return parsed


async def test_every_response_carries_it_and_authenticated_ones_name_their_steps(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        public = await client.get("/livez")
        refused = await client.get("/me")
        me = await client.get("/me", headers=ALICE)
        missing = await client.get("/nowhere", headers=ALICE)
    assert set(timings(public)) == {"app"}
    assert set(timings(refused)) == {"auth", "app"}
    assert set(timings(me)) == {"auth", "admission", "settings", "app"}
    assert set(timings(missing)) == {"app"}
    steps = timings(me)
    assert steps["auth"] + steps["admission"] + steps["settings"] <= steps["app"]


async def test_a_turn_reports_its_wait_behind_the_conversations_earlier_turn(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("first answer", first_delay_s=0.6), ChatScript.words("second"))
    body = {"text": "hi", "conversationId": "c1"}
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        with anyio.fail_after(30):
            async with client.stream("POST", "/turn", json=body, headers=ALICE) as first:
                await anyio.to_thread.run_sync(lambda: ollama.wait_for_requests(1, timeout=10))
                second = await client.post("/turn", json=body, headers=ALICE)
                await first.aread()
    one, two = timings(first), timings(second)
    steps = {"auth", "admission", "settings", "body", "rate", "queue", "app"}
    assert set(one) == steps
    assert set(two) == steps
    # The first held its conversation at once; the second, behind the first's model call
    # (at least 0.6 s), doesn't hold its headers for it: it says it is waiting.
    assert "queue;dur=" in first.headers["server-timing"]
    assert 'desc="waiting"' not in first.headers["server-timing"]
    assert 'desc="waiting"' in second.headers["server-timing"]
    assert two["queue"] > one["queue"]
    assert "event: final" in second.text


async def test_a_turn_that_waits_for_no_one_is_admitted_before_its_task_runs(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    # Under load the loop takes milliseconds to give a new task its first step; a turn whose
    # conversation is free (or one-off) must not hold its headers for that step.
    ollama.enqueue(*(ChatScript.words("answer", first_delay_s=0.3) for _ in range(4)))
    person = Person(key="static:alice")
    principal = Principal(id="alice", provider="static")

    def turn_input(conversation: str | None) -> TurnInput:
        return TurnInput(
            principal=principal,
            person=person,
            conversation_id=conversation,
            text="hi",
            language="en",
            time_zone="UTC",
            received_at=datetime.now(UTC),
        )

    async def open_turns() -> tuple[bool, bool, bool, bool]:
        manager = server.services.manager
        one_off = manager.open_turn(turn_input(None))
        free = manager.open_turn(turn_input("c-free"))
        at_once = (one_off.admitted.is_set(), free.admitted.is_set())
        while not free.admitted.is_set() or free.task is None:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the first turn now holds c-free, waiting for its model
        behind = manager.open_turn(turn_input("c-free"))
        waits = behind.admitted.is_set()
        for turn in (one_off, free, behind):
            while (await turn.events.take())[-1] is not None:
                pass
        return (*at_once, waits, behind.admitted.is_set())

    one_off, free, behind_at_once, behind_in_the_end = server.call(open_turns(), timeout=30)
    assert one_off and free
    assert not behind_at_once  # it waits for the first turn on its conversation
    assert behind_in_the_end
