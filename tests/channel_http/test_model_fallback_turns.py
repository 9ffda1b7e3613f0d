"""``model.fallbacks`` on a real server: a turn the first model can't start is answered by
the next, the request log and the metrics say which model answered, and the server stays
ready while one model of the chain answers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.channel_http.test_metrics import scrape, value
from tests.conftest import ALICE
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.openai_standin import OpenAIStandIn
from tests.support.ports import free_port
from tests.support.server import RunningServer
from tests.support.sse import turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def backup_session() -> Iterator[OpenAIStandIn]:
    with OpenAIStandIn(models=["backup"]) as standin:
        yield standin


@pytest.fixture
def backup(backup_session: OpenAIStandIn) -> Iterator[OpenAIStandIn]:
    backup_session.reset()
    yield backup_session
    backup_session.reset()


def chain_file(folder: Path, backup: OpenAIStandIn) -> str:
    path = folder / "mercury.yaml"
    path.write_text(
        "model:\n  fallbacks:\n"
        f"    - {{provider: openai, model: backup, base_url: '{backup.base_url}'}}\n",
        encoding="utf-8",
    )
    return str(path)


class Lines(logging.Handler):
    """The request log's structured fields, one dict per request."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.fields.append(getattr(record, "request", {}))


async def test_a_turn_the_first_model_cant_start_is_answered_by_the_next(
    make_server: Callable[..., RunningServer],
    ollama: OllamaStandIn,
    backup: OpenAIStandIn,
    tmp_path: Path,
) -> None:
    server = make_server(MERCURY_CONFIG_FILE=chain_file(tmp_path, backup))
    ollama.enqueue(ChatScript(status=503, error="overloaded"))
    lines = Lines()
    requests_log = logging.getLogger("mercury.http.requests")
    level = requests_log.level
    requests_log.addHandler(lines)
    requests_log.setLevel(logging.INFO)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
            with anyio.fail_after(30):
                first = await turn(client, {"text": "hello there", "conversationId": "c"}, ALICE)
                # Cooling down: the second turn goes straight to the backup.
                second = await turn(client, {"text": "and again", "conversationId": "c"}, ALICE)
                while sum(1 for f in lines.fields if f.get("route") == "/turn") < 2:
                    await anyio.sleep(0.02)
                samples = await scrape(client)
    finally:
        requests_log.removeHandler(lines)
        requests_log.setLevel(level)
    assert "error" not in first.names() and "error" not in second.names()
    assert first.final["text"] and second.final["text"]
    assert len(ollama.requests) == 1
    assert len(backup.requests) == 2
    turns = [f for f in lines.fields if f.get("route") == "/turn"]
    assert [f["model"] for f in turns] == ["backup", "backup"]
    assert value(samples, "mercury_model_calls_total", model="backup") == 2
    assert value(samples, "mercury_model_calls_total", model="llama3.2") == 0
    assert (
        value(samples, "mercury_model_failures_total", model="llama3.2", reason="server_error") == 1
    )


async def test_a_refused_request_is_the_turns_error_and_no_fallback_is_asked(
    make_server: Callable[..., RunningServer],
    ollama: OllamaStandIn,
    backup: OpenAIStandIn,
    tmp_path: Path,
) -> None:
    server = make_server(MERCURY_CONFIG_FILE=chain_file(tmp_path, backup))
    ollama.enqueue(ChatScript(status=400, error="the prompt is too long"))
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        with anyio.fail_after(30):
            got = await turn(client, {"text": "hello", "conversationId": "c"}, ALICE)
    assert got.names()[-1] == "error"
    assert backup.requests == []


async def test_the_server_is_ready_while_one_model_of_the_chain_answers(
    make_server: Callable[..., RunningServer], backup: OpenAIStandIn, tmp_path: Path
) -> None:
    server = make_server(
        MERCURY_CONFIG_FILE=chain_file(tmp_path, backup),
        OLLAMA_HOST=f"http://127.0.0.1:{free_port()}",
    )
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        with anyio.fail_after(30):
            ready = await client.get("/readyz")
            answered = await turn(client, {"text": "hello", "conversationId": "c"}, ALICE)
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"]["model"] is True
    assert answered.final["text"]
