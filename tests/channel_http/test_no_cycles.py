"""A request's objects are freed as it ends, by reference counting, not by the collector.

Anything of a request left in a reference cycle waits for the collector's middle-generation
pass, which then traverses every such request since the last one: 147-183 ms of a held
event loop after a few thousand streams (docs/benchmarks.md; da5e990), felt by every stream
open at that moment. The server's own objects must never be part of a cycle's garbage.
"""

from __future__ import annotations

import asyncio
import gc
from collections import Counter

import httpx
import pytest

from tests.conftest import ALICE, BOB
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

#: What each request makes, from the server's read of it to the turn it runs (an earlier
#: test's server, torn down, leaves its app-wide objects to the collector: not these).
PER_REQUEST = frozenset(
    {
        "uvicorn.protocols.http.httptools_impl.RequestResponseCycle",
        "uvicorn.protocols.http.h11_impl.RequestResponseCycle",
        "litestar.utils.scope.state.ScopeState",
        "litestar.connection.request.Request",
        "channel_http.access_log.BodySink",
        "channel_http.middleware.Caller",
        "core.engine.sessions.Turn",
        "core.engine.turn_events.TurnEvents",
        "core.model.wire.Wire",
    }
)


def cyclic_garbage() -> Counter[str]:
    """What a full collection finds unreachable now, by type, of a request's objects."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return Counter(
            name
            for name in (f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
            if name in PER_REQUEST
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def settled() -> None:
    """Until the server has finished the requests it answered (its request log runs last)."""
    await asyncio.sleep(0.3)


async def test_turns_and_plain_requests_leave_no_cycle_behind(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(*(ChatScript.words("an answer in words") for _ in range(3)))
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        await client.get("/me", headers=ALICE)  # the first request warms what lives on
        await settled()
        cyclic_garbage()
        answered = [
            await client.post("/turn", json={"text": "hi"}, headers=ALICE),
            await client.post("/turn", json={"text": "hi", "conversationId": "c1"}, headers=ALICE),
            await client.post("/turn", json={"text": "again"}, headers=BOB),
            await client.get("/me", headers=ALICE),
            await client.get("/livez"),
            await client.get("/me"),  # no token: 401
            await client.post("/turn", content=b"{not json", headers=ALICE),  # 400
            await client.get("/nowhere", headers=ALICE),  # 404
        ]
        await settled()
    assert [r.status_code for r in answered] == [200, 200, 200, 200, 200, 401, 400, 404]
    assert all("event: final" in r.text for r in answered[:3])
    assert cyclic_garbage() == Counter()


async def test_a_turn_its_client_left_leaves_no_cycle_behind(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("a slow answer " * 20, delay_s=0.05))
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        await client.get("/me", headers=ALICE)
        await settled()
        cyclic_garbage()
        async with client.stream("POST", "/turn", json={"text": "hi"}, headers=ALICE) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("event: text"):
                    break  # leave mid-answer: the turn is cancelled
        await asyncio.sleep(0.5)
    assert cyclic_garbage() == Counter()
