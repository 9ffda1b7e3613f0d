"""A memory capture's summary is a model call like a turn's: its tokens, as each adapter's
whole answer reports them (Ollama's counts, the OpenAI protocol's ``usage`` with its cached
tokens), reach the usage ledger and ``GET /me/usage`` against the person and the space the
summary is for, under the model that answered, a fallback's where the first failed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from core.memory.edge import EdgeStore
from tests.conftest import ALICE
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.openai_standin import CompletionScript, OpenAIStandIn
from tests.support.server import RunningServer
from tests.support.sse import turn

pytestmark = [pytest.mark.timeout(90)]

MODEL = "backup-8b"
SUMMARY = json.dumps({"summary": "Alice planned a trip to Lisbon.", "facts": []})
PEOPLE = [
    {"id": "alice", "roles": ["admin", "mercury.bridge"], "identities": ["static:alice"]},
    {"id": "dan", "displayName": "Dan", "identities": ["slack:UDAN"]},
]


@pytest.fixture(scope="module")
def openai_session() -> Iterator[OpenAIStandIn]:
    with OpenAIStandIn(models=[MODEL, "embedder"]) as standin:
        yield standin


@pytest.fixture
def openai(openai_session: OpenAIStandIn) -> Iterator[OpenAIStandIn]:
    openai_session.reset()
    openai_session.__dict__.pop("_prefixes", None)  # its prompt cache, emptied
    yield openai_session
    openai_session.reset()


def summarizing(request: dict[str, Any]) -> ChatScript:
    """A capture's request (a whole answer) gets the summary; a turn's a short answer."""
    if request.get("stream") is False:
        return CompletionScript(content=[SUMMARY])
    return CompletionScript.words("Noted, have a good trip.")


def start(make_server: Callable[..., RunningServer], tmp_path: Path, **env: str) -> RunningServer:
    return make_server(
        {"memory": EdgeStore(tmp_path / "edge")},
        SESSION_CAPTURE_MESSAGE_THRESHOLD="2",
        DIRECTORY_STATIC_PEOPLE=json.dumps(PEOPLE),
        **env,
    )


def post_turn(server: RunningServer, text: str) -> Any:
    async def run() -> Any:
        async with httpx.AsyncClient(base_url=server.url) as client:
            with anyio.fail_after(30):
                return await turn(client, {"text": text, "conversationId": "c1"}, ALICE)

    received = anyio.run(run)
    assert received.of("tool_finish")[-1]["outcome"] == "success"  # the capture ran
    [final] = received.of("final")
    return final["usage"]


def my_usage(server: RunningServer) -> dict[str, Any]:
    response = httpx.get(server.url + "/me/usage?period=today&by=model", headers=ALICE, timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def summaries(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in requests if r.get("stream") is False]


def test_a_capture_s_tokens_from_ollama_reach_my_usage(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, tmp_path: Path
) -> None:
    server = start(make_server, tmp_path)
    ollama.responder = lambda request: (
        ChatScript(content=[SUMMARY])
        if request.get("stream") is False
        else ChatScript.words("Noted, have a good trip.")
    )
    turn_usage = post_turn(server, "I plan a trip to Lisbon in May")
    [summary] = summaries(ollama.requests)
    assert summary["stream"] is False  # the capture asked for a whole answer
    # Read at once: this instance's calls waiting to be written are written first.
    answer = my_usage(server)
    [row] = answer["rows"]
    assert row["model"] == "llama3.2"
    assert row["calls"] == len(ollama.requests) == 2  # the turn's call and the capture's
    # Ollama counts the summary's prompt (the instructions and the transcript) and answer.
    assert row["input"] > turn_usage["input"] and row["output"] > turn_usage["output"]
    assert row["cached"] == 0  # Ollama reports no prompt cache
    assert server.services.manager.ledger.writes == 2


def test_a_capture_s_tokens_from_the_openai_protocol_keep_its_cached_count(
    make_server: Callable[..., RunningServer], openai: OpenAIStandIn, tmp_path: Path
) -> None:
    server = start(
        make_server,
        tmp_path,
        MERCURY_MODEL_PROVIDER="openai",
        OPENAI_BASE_URL=openai.base_url,
        OPENAI_MODEL=MODEL,
        OPENAI_EMBEDDING_MODEL="embedder",
    )
    openai.responder = summarizing
    first = post_turn(server, "I plan a trip to Lisbon in May")
    second = post_turn(server, "and to Porto in June")
    assert len(summaries(openai.requests)) == 2  # a capture after each turn
    [row] = my_usage(server)["rows"]
    assert row["model"] == MODEL and row["calls"] == len(openai.requests) == 4
    assert row["input"] > first["input"] + second["input"]
    # The second summary began with the first one's instructions: the server's cache held
    # them, and its usage.prompt_tokens_details.cached_tokens says so.
    assert row["cached"] > first["cached"] + second["cached"]


def test_a_capture_the_first_model_cant_answer_is_kept_under_the_fallback(
    make_server: Callable[..., RunningServer],
    ollama: OllamaStandIn,
    openai: OpenAIStandIn,
    tmp_path: Path,
) -> None:
    config = tmp_path / "mercury.yaml"
    config.write_text(
        "model:\n  fallbacks:\n"
        f"    - {{provider: openai, model: {MODEL}, base_url: '{openai.base_url}'}}\n",
        encoding="utf-8",
    )
    server = start(make_server, tmp_path, MERCURY_CONFIG_FILE=str(config))
    # Ollama answers the turn and is overloaded when the summary is asked for.
    ollama.responder = lambda request: (
        ChatScript(status=503, error="overloaded")
        if request.get("stream") is False
        else ChatScript.words("Noted, have a good trip.")
    )
    openai.responder = summarizing
    post_turn(server, "I plan a trip to Lisbon in May")
    assert len(summaries(openai.requests)) == 1  # the summary the backup gave
    rows = {row["model"]: row for row in my_usage(server)["rows"]}
    assert set(rows) == {"llama3.2", MODEL}
    assert rows["llama3.2"]["calls"] == 1  # the turn; the failed summary cost nothing
    assert rows[MODEL]["calls"] == 1 and rows[MODEL]["input"] > 0 and rows[MODEL]["output"] > 0


def test_a_capture_in_a_space_counts_for_the_space_and_the_person_who_spoke(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, tmp_path: Path
) -> None:
    config = tmp_path / "mercury.yaml"
    config.write_text('spaces:\n  "slack:C1":\n    admins: [static:alice]\n', encoding="utf-8")
    server = start(make_server, tmp_path, MERCURY_CONFIG_FILE=str(config))
    ollama.responder = lambda request: (
        ChatScript(content=[SUMMARY])
        if request.get("stream") is False
        else ChatScript.words("Noted, have a good trip.")
    )
    body = {
        "text": "@Mercury I plan a trip to Lisbon",
        "callerId": "slack:UDAN",
        "authorName": "Dan",
        "spaceId": "slack:C1",
    }
    answered = httpx.post(server.url + "/chat", json=body, headers=ALICE, timeout=30)
    assert answered.status_code == 200, answered.text
    assert len(summaries(ollama.requests)) == 1
    response = httpx.get(
        server.url + "/usage?period=today&by=person,space", headers=ALICE, timeout=10
    )
    [row] = response.json()["rows"]
    assert row["person"] == {"id": "people:dan", "name": "Dan"}
    assert row["spaceId"] == "slack:C1" and row["calls"] == 2
