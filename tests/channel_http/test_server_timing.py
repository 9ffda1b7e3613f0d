"""Server-Timing: what the server spent before the first byte, on every response."""

from __future__ import annotations

import anyio
import httpx
import pytest

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
    assert set(timings(me)) == {"auth", "admission", "app"}
    assert set(timings(missing)) == {"app"}
    steps = timings(me)
    assert steps["auth"] + steps["admission"] <= steps["app"]


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
    assert set(one) == {"auth", "admission", "body", "queue", "app"}
    assert set(two) == {"auth", "admission", "body", "queue", "app"}
    # The first held its conversation at once; the second, behind the first's model call
    # (at least 0.6 s), doesn't hold its headers for it: it says it is waiting.
    assert "queue;dur=" in first.headers["server-timing"]
    assert 'desc="waiting"' not in first.headers["server-timing"]
    assert 'desc="waiting"' in second.headers["server-timing"]
    assert two["queue"] > one["queue"]
    assert "event: final" in second.text
