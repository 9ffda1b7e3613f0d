"""The MCP reference server from npm (``@modelcontextprotocol/server-everything``).

Over stdio Mercury starts the Node process itself, once; over streamable HTTP the test runs
it on a free loopback port (bound to 127.0.0.1 only) and Mercury is given its ``url``. Either
way the model's calls go through it: text, structured content, an image the model sees and
resource links, on the 2025-11-25 handshake this server speaks; over HTTP also its form
question, which becomes the person's choices.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from core.config.settings import Settings
from tests.conftest import ALICE
from tests.mcp_servers import EVERYTHING, ensure_node_modules, everything_over_http, node
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer, serve
from tests.support.sse import turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def everything_http() -> Iterator[str]:
    with everything_over_http() as (url, address):
        assert address == "127.0.0.1", f"the reference server listens on {address}"
        yield url


def serve_with(
    tmp_path: Path, make_settings: Callable[..., Settings], servers: dict[str, Any]
) -> AbstractContextManager[RunningServer]:
    path = tmp_path / "mercury.yaml"
    path.write_text(yaml.safe_dump({"mcp": {"servers": servers}}))
    return serve(make_settings(MERCURY_CONFIG_FILE=str(path)))


@pytest.fixture
def mercury(tmp_path: Path, make_settings: Callable[..., Settings]) -> Iterator[RunningServer]:
    ensure_node_modules()
    servers = {
        "ev": {
            "command": node(),
            "args": [str(EVERYTHING), "stdio"],
            "title": "Everything",
            "trusted": True,
            "connect_timeout": 30,
        }
    }
    with serve_with(tmp_path, make_settings, servers) as running:
        yield running


@pytest.fixture
def mercury_http(
    tmp_path: Path, make_settings: Callable[..., Settings], everything_http: str
) -> Iterator[RunningServer]:
    servers = {"evh": {"url": everything_http, "title": "Everything", "trusted": True}}
    with serve_with(tmp_path, make_settings, servers) as running:
        yield running


def call(name: str, **arguments: Any) -> ChatScript:
    return ChatScript(tool_calls=[{"name": name, "arguments": arguments}])


async def test_the_reference_server_answers_over_stdio_with_text_images_and_links(
    mercury: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(
        call("ev_echo", message="hello"),
        call("ev_get-tiny-image"),
        call("ev_get-resource-links", count=2),
        ChatScript.words("Done."),
    )
    async with httpx.AsyncClient(base_url=mercury.url, timeout=60) as client:
        received = await turn(client, {"text": "try it", "conversationId": "c1"}, ALICE)
    assert received.final["text"] == "Done."
    assert [f["outcome"] for f in received.of("tool_finish")] == ["success"] * 3
    tools = [m for m in ollama.requests[-1]["messages"] if m["role"] == "tool"]
    assert "Echo: hello" in tools[0]["content"]
    assert tools[1].get("images"), "the model sees the image"
    assert "[resource link:" in tools[2]["content"]
    health = httpx.get(f"{mercury.url}/health", headers=ALICE).json()
    (ev,) = health["mcpServers"]
    assert ev["transport"] == "stdio" and ev["status"] == "up" and ev["tools"] >= 10


async def test_the_reference_server_answers_over_streamable_http_and_its_question_is_staged(
    mercury_http: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(
        call("evh_echo", message="over http"),
        call("evh_get-tiny-image"),
        call("evh_get-resource-links", count=2),
        call("evh_get-structured-content", location="New York"),
        ChatScript.words("Done."),
    )
    async with httpx.AsyncClient(base_url=mercury_http.url, timeout=60) as client:
        received = await turn(client, {"text": "try it", "conversationId": "h1"}, ALICE)
        assert received.final["text"] == "Done."
        assert [f["outcome"] for f in received.of("tool_finish")] == ["success"] * 4
        offered = {t["function"]["name"] for t in ollama.requests[0].get("tools") or []}
        assert {"evh_echo", "evh_get-tiny-image", "evh_get-sum"} <= offered
        tools = [m for m in ollama.requests[-1]["messages"] if m["role"] == "tool"]
        assert "Echo: over http" in tools[0]["content"]
        assert tools[1].get("images"), "the model sees the image"
        assert "[resource link:" in tools[2]["content"]
        assert "temperature" in tools[3]["content"]

        # Not read-only: staged first; once confirmed, its form question (asked mid-call on
        # 2025-11-25) has free-text fields: the model is told to ask in the conversation, and
        # the person's next message there is the answer.
        ollama.enqueue(call("evh_trigger-elicitation-request"), ChatScript.words("Confirm."))
        staged = await turn(client, {"text": "ask me", "conversationId": "h2"}, ALICE)
        (pending,) = staged.of("pending")
        assert "Trigger Elicitation Request Tool" in pending["command"]
        answer = await client.post(
            "/confirm",
            json={"token": pending["choices"][0]["token"], "conversationId": "h2"},
            headers=ALICE,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["resume"] is True
        ollama.enqueue(ChatScript.words("What is your name?"))
        resumed = await turn(client, {"resume": True, "conversationId": "h2"}, ALICE)
        assert resumed.final["text"] == "What is your name?"
        told = ollama.requests[-1]["messages"][-1]
        assert told["role"] == "tool" and "Please provide inputs" in told["content"]
        assert '<field name="name" type="string" required="yes">' in told["content"]
        assert "next message in this conversation is taken as the answer" in told["content"]
        # Ann's next message is the form's answer: the open request (2025-11-25) gets it,
        # and the model reads what the server made of it, not her words as a turn.
        ollama.enqueue(ChatScript.words("Thanks, Ann."))
        answered = await turn(
            client, {"text": "name: Ann Example\ninteger: 7", "conversationId": "h2"}, ALICE
        )
        assert answered.final["text"] == "Thanks, Ann."
        result = ollama.requests[-1]["messages"][-1]
        assert result["role"] == "tool" and "Ann Example" in result["content"]
        assert "accept" in result["content"].lower()
    health = httpx.get(f"{mercury_http.url}/health", headers=ALICE).json()
    (ev,) = health["mcpServers"]
    assert ev["transport"] == "http" and ev["status"] == "up" and ev["tools"] >= 10
    assert ev["protocol"] == "2025-11-25"
