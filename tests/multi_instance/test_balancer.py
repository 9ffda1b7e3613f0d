"""The load-balancer harness itself: HAProxy round robin over real instances, SSE unbuffered."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from itertools import pairwise

import httpx
import pytest

from tests.conftest import ALICE
from tests.reliability.support import read_turn
from tests.support.cluster import Cluster
from tests.support.ollama_standin import ChatScript, OllamaStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, ollama_session: OllamaStandIn
) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("balancer"), ollama_session.url) as running:
        yield running


def test_requests_through_the_balancer_go_round_robin_over_every_instance(
    cluster: Cluster,
) -> None:
    with httpx.Client(base_url=cluster.url, timeout=10) as client:  # one kept-alive connection
        served = [client.get("/version").headers["x-served-by"] for _ in range(9)]

    assert Counter(served) == {"a": 3, "b": 3, "c": 3}
    assert all(one != two for one, two in pairwise(served))


async def test_a_turn_streams_through_the_balancer_as_the_model_makes_it(
    cluster: Cluster, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.paced(20, rate_per_s=8.0))
    arrivals: list[tuple[str, float]] = []
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
        async with client.stream("POST", "/turn", json={"text": "hi"}, headers=ALICE) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    arrivals.append((line.removeprefix("event: "), time.monotonic() - started))

    texts = [at for name, at in arrivals if name == "text"]
    final = next(at for name, at in arrivals if name == "final")
    # Unbuffered: the first words arrive long before the last, as the model sends them.
    assert texts, arrivals
    assert texts[0] < 0.5 * final
    assert texts[-1] - texts[0] > 0.5 * (final - texts[0])


async def test_a_turn_through_the_balancer_ends_with_its_final_event(
    cluster: Cluster, ollama: OllamaStandIn
) -> None:
    async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
        outcome = await read_turn(client, {"text": "hello there"}, ALICE)

    assert outcome.status == 200
    assert outcome.names()[-1] == "final"
    assert outcome.text.endswith("] hello there")


def test_an_instance_that_dies_leaves_the_rotation_and_no_request_fails(
    cluster: Cluster,
) -> None:
    cluster["b"].process.kill()  # type: ignore[union-attr]
    cluster["b"].wait(10)
    try:
        with httpx.Client(base_url=cluster.url, timeout=10) as client:
            served = [client.get("/version") for _ in range(12)]
    finally:
        # b again on its port, and back in the rotation, for the module's other tests.
        cluster["b"].start(120.0)
        cluster.balancer.wait_until_up(len(cluster.names), 60.0)

    assert all(response.status_code == 200 for response in served)
    assert {response.headers["x-served-by"] for response in served} == {"a", "c"}
