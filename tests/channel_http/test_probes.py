"""GET /livez and GET /readyz: public, cheap, and honest about what isn't ready."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anyio
import httpx
import pytest

from tests.conftest import ALICE
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.support.sse import turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def models(ollama: OllamaStandIn) -> Iterator[Callable[..., None]]:
    """Say which models the stand-in has (by default it has none and accepts any)."""
    before = ollama.models

    def have(*names: str) -> None:
        ollama.models = list(names)

    yield have
    ollama.models = before


async def test_livez_answers_without_a_token(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.get("/livez")
    assert response.status_code == 200
    assert response.json() == {"ok": True}


async def test_readyz_is_ok_when_the_state_store_and_the_model_host_answer(
    server: RunningServer, models: Callable[..., None]
) -> None:
    models("llama3.2", "nomic-embed-text")
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.get("/readyz")
    assert response.status_code == 200, response.text
    assert response.json() == {"ok": True, "checks": {"state": True, "model": True}}


async def test_readyz_checks_the_memory_store_when_memory_is_on(
    make_server: Callable[..., RunningServer], models: Callable[..., None]
) -> None:
    models("llama3.2", "nomic-embed-text")
    server = make_server(MERCURY_MEMORY_STORE="edge")
    async with httpx.AsyncClient(base_url=server.url) as client:
        # A balancer polls: the store opens its shards in the first seconds.
        with anyio.fail_after(20):
            while (response := await client.get("/readyz")).status_code != 200:
                await anyio.sleep(0.2)
    assert response.json()["checks"] == {"state": True, "model": True, "memory": True}


async def test_readyz_names_a_missing_model_and_the_command_that_pulls_it(
    server: RunningServer, models: Callable[..., None]
) -> None:
    models("some-other-model")
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["ok"] is False
    assert body["checks"] == {"state": True, "model": False}
    assert "ollama pull llama3.2" in body["error"]
    assert "Traceback" not in body["error"]


async def test_readyz_is_503_within_its_bound_when_the_model_host_is_down(
    make_server: Callable[..., RunningServer],
) -> None:
    with anyio.fail_after(30):
        server = make_server(OLLAMA_HOST="http://127.0.0.1:9")
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(10):
            response = await client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["model"] is False
    assert body["checks"]["state"] is True
    assert body["error"] == "The model host doesn't answer."


async def test_readyz_turns_503_at_once_when_the_shutdown_begins_while_a_stream_drains(
    server: RunningServer, ollama: OllamaStandIn, models: Callable[..., None]
) -> None:
    models("llama3.2", "nomic-embed-text")
    ollama.enqueue(ChatScript.paced(200, rate_per_s=20))
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        async with anyio.create_task_group() as group:
            results: dict[str, object] = {}

            async def stream() -> None:
                results["turn"] = await turn(client, {"text": "long"}, ALICE)

            group.start_soon(stream)
            await anyio.to_thread.run_sync(lambda: ollama.wait_for_requests(1, timeout=10))
            assert (await client.get("/readyz")).status_code == 200
            # What the SIGTERM handler starts: every open turn ends, no new one runs.
            server.call(server.services.manager.stop_turns())
            response = await client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["error"].startswith("The server is stopping")
    got = results["turn"]
    assert got.names()[-1] == "error"  # type: ignore[attr-defined]


async def test_health_keeps_its_token_while_the_probes_answer_anyone(
    server: RunningServer, models: Callable[..., None]
) -> None:
    models("llama3.2", "nomic-embed-text")
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.get("/health")).status_code == 401  # health keeps its token
        for _ in range(20):
            assert (await client.get("/livez")).status_code == 200
            assert (await client.get("/readyz")).status_code == 200
