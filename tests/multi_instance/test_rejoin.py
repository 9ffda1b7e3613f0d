"""Rejoining a turn through another instance than the one running it, on one PostgreSQL.

Two ``mercury-http serve`` processes share the state store; the turn runs on ``a``, its
client drops, and comes back through ``b`` with Last-Event-ID.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from tests.conftest import ALICE, BOB, TOKENS
from tests.support.cluster import Cluster
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.postgres import PostgresServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

GRACE_S = 2
Frame = tuple[str | None, str, dict[str, Any]]


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    ollama_session: OllamaStandIn,
    postgres_server: PostgresServer,
) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("rejoin-cluster")
    shared = {
        "MERCURY_STATE_URL": postgres_server.create_database(),
        "AUTH_STATIC_TOKENS": json.dumps(TOKENS),
        "HTTP_SURFACE_REJOIN_S": str(GRACE_S),
    }
    with Cluster(workdir, ollama_session.url, count=2, shared=shared) as running:
        yield running


async def read_some(url: str, body: dict[str, Any], count: int) -> list[Frame]:
    """Opens a turn, reads ``count`` events (the ``turn`` one included) and drops the line."""
    frames: list[Frame] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        async with aconnect_sse(client, "POST", "/turn", json=body, headers=ALICE) as source:
            async for event in source.aiter_sse():
                if event.data:
                    frames.append((event.id, event.event, json.loads(event.data)))
                    if len(frames) == count:
                        break
    return frames


async def rejoin(
    url: str,
    turn_id: str,
    last_event_id: str | None,
    headers: dict[str, str] = ALICE,
    count: int | None = None,
) -> tuple[int, list[Frame]]:
    extra = {"last-event-id": last_event_id} if last_event_id is not None else {}
    frames: list[Frame] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        async with aconnect_sse(
            client, "GET", "/turn/events", params={"turnId": turn_id}, headers={**headers, **extra}
        ) as source:
            if source.response.status_code != 200:
                await source.response.aread()
                return source.response.status_code, [("", "", source.response.json())]
            async for event in source.aiter_sse():
                if event.data:
                    frames.append((event.id, event.event, json.loads(event.data)))
                    if len(frames) == count:
                        break
    return 200, frames


def numbers(frames: list[Frame]) -> list[int]:
    return [int((frame_id or "").rsplit(".", 1)[1]) for frame_id, _, _ in frames]


async def test_a_turn_dropped_on_a_is_rejoined_through_b_whole_and_twice_the_same(
    cluster: Cluster, ollama: OllamaStandIn
) -> None:
    words = " ".join(f"w{n}" for n in range(40))
    # Longer than the grace period: the reader on b must count as attached on a.
    ollama.enqueue(ChatScript.words(words, delay_s=0.15))
    first = await read_some(cluster["a"].url, {"text": "go", "conversationId": "x1"}, 4)
    assert first[0][1] == "turn"
    turn_id = first[0][2]["turnId"]

    status, rest = await rejoin(cluster["b"].url, turn_id, first[-1][0])

    assert status == 200, rest
    frames = first + rest
    assert numbers(frames) == list(range(len(frames)))  # no gap, no repeat
    text = "".join(data["chunk"] for _, name, data in frames if name == "text")
    finals = [data for _, name, data in frames if name == "final"]
    assert [{k: v for k, v in f.items() if k != "usage"} for f in finals] == [{"text": text}]
    assert text == words
    assert len(ollama.requests) == 1

    _, again = await rejoin(cluster["b"].url, turn_id, first[-1][0])
    _, once_more = await rejoin(cluster["b"].url, turn_id, first[-1][0])
    assert again == once_more == rest
    _, whole = await rejoin(cluster["b"].url, turn_id, None)
    assert whole == frames


async def test_another_persons_rejoin_through_b_is_404_like_an_unknown_turn(
    cluster: Cluster, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("a private answer"))
    first = await read_some(cluster["a"].url, {"text": "hi", "conversationId": "x2"}, 1)
    turn_id = first[0][2]["turnId"]
    status, own = await rejoin(cluster["b"].url, turn_id, None)
    assert status == 200 and own[-1][1] == "final"

    status, body = await rejoin(cluster["b"].url, turn_id, None, headers=BOB)
    unknown, unknown_body = await rejoin(cluster["b"].url, "x" * 24, None, headers=BOB)

    assert status == unknown == 404
    assert body[0][2]["ok"] is False and body[0][2]["error"] == unknown_body[0][2]["error"]
    assert "private" not in json.dumps(body)


async def test_when_the_reader_on_b_leaves_the_turn_on_a_is_cancelled_after_the_grace(
    cluster: Cluster, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("word " * 300, delay_s=0.1))
    first = await read_some(cluster["a"].url, {"text": "go", "conversationId": "x3"}, 3)
    turn_id = first[0][2]["turnId"]
    # Attached through b for longer than the grace: a must not cancel meanwhile.
    status, more = await rejoin(cluster["b"].url, turn_id, first[-1][0], count=40)
    left = time.monotonic()
    assert status == 200 and len(more) == 40
    assert numbers(first + more) == list(range(len(first) + len(more)))
    assert ollama.closed_at == []

    closed = await ollama.wait_for_closed_async(1, timeout=30)

    assert closed[0] - left > GRACE_S - 0.5
    assert closed[0] - left < GRACE_S + 8  # the grace, a reader's lease, a loaded machine
