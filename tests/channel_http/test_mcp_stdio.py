"""An MCP server over stdio on the 2025-11-25 revision: its list changes, a slow call is
cancelled.

The server (``tests/mcp_servers/changing.py``) is written with the ``mcp`` SDK's server side
and started by Mercury as a stdio command with ``protocol: legacy`` (the 2025-11-25
handshake). It writes down, from its side of the pipe, every ``tools/list`` it is asked and
every ``notifications/cancelled`` it receives, so the tests count what reached the server
rather than what Mercury believes it sent.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from core.config.settings import Settings
from tests.conftest import ALICE
from tests.mcp_servers import HERE
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer, serve
from tests.support.sse import Received, turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class Record:
    """What the stdio server wrote down, one JSON object a line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def methods(self, method: str) -> list[dict[str, Any]]:
        return [e for e in self.entries() if e.get("method") == method]

    async def wait_for(
        self, found: Callable[[list[dict[str, Any]]], bool], within: float = 10
    ) -> None:
        deadline = time.monotonic() + within
        while not found(self.entries()):
            assert time.monotonic() < deadline, f"not seen within {within} s: {self.entries()}"
            await asyncio.sleep(0.05)


@pytest.fixture
def record(tmp_path: Path) -> Record:
    return Record(tmp_path / "server-record.jsonl")


@pytest.fixture
def mercury(
    tmp_path: Path, make_settings: Callable[..., Settings], record: Record
) -> Iterator[RunningServer]:
    servers = {
        "chg": {
            "command": sys.executable,
            "args": [str(HERE / "changing.py"), str(record.path)],
            "title": "Changing",
            "trusted": True,
            "protocol": "legacy",
            "connect_timeout": 30,
        }
    }
    path = tmp_path / "mercury.yaml"
    path.write_text(yaml.safe_dump({"mcp": {"servers": servers}}))
    with serve(make_settings(MERCURY_CONFIG_FILE=str(path))) as running:
        yield running


def call(name: str, **arguments: Any) -> ChatScript:
    return ChatScript(tool_calls=[{"name": name, "arguments": arguments}])


async def ask(client: httpx.AsyncClient, text: str) -> Received:
    return await turn(client, {"text": text, "conversationId": "c1"}, ALICE)


def offered(ollama: OllamaStandIn) -> set[str]:
    tools = ollama.requests[-1].get("tools") or []
    return {t["function"]["name"] for t in tools if t["function"]["name"].startswith("chg_")}


async def test_a_list_changed_notice_refreshes_the_cached_list_once_and_no_turn_lists(
    mercury: RunningServer, ollama: OllamaStandIn, record: Record
) -> None:
    ollama.enqueue(
        ChatScript.words("Hi."),
        ChatScript.words("Hi."),
        call("chg_grow"),
        ChatScript.words("Grown."),
        ChatScript.words("Hi."),
        ChatScript.words("Hi."),
    )
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        await ask(client, "hello")
        assert offered(ollama) == {"chg_grow", "chg_slow"}
        warm = len(record.methods("tools/list"))
        assert warm >= 1
        await ask(client, "hello")
        assert len(record.methods("tools/list")) == warm  # warm: no list call per turn

        grown = await ask(client, "grow")
        assert [f["outcome"] for f in grown.of("tool_finish")] == ["success"]
        await ask(client, "hello")
        assert offered(ollama) == {"chg_grow", "chg_second", "chg_slow"}
        await ask(client, "hello")
        assert offered(ollama) == {"chg_grow", "chg_second", "chg_slow"}
    # One list after the notice, and none for the turns around it.
    assert len(record.methods("tools/list")) == warm + 1
    health = httpx.get(f"{mercury.url}/health", headers=ALICE).json()
    (chg,) = health["mcpServers"]
    assert chg["protocol"] == "2025-11-25" and chg["transport"] == "stdio"


async def test_a_slow_call_cancelled_by_a_disconnect_is_cancelled_on_the_server(
    mercury: RunningServer, ollama: OllamaStandIn, record: Record
) -> None:
    ollama.enqueue(call("chg_slow", seconds=30))
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        waiting = asyncio.create_task(ask(client, "wait"))
        await record.wait_for(lambda entries: {"slow": "started"} in entries)
        waiting.cancel()  # the client goes away mid-turn
        with pytest.raises(asyncio.CancelledError):
            await waiting

        await record.wait_for(lambda entries: {"slow": "interrupted"} in entries)
        (cancelled,) = record.methods("notifications/cancelled")
        assert cancelled["params"]["requestId"] is not None

        # The turn ended cleanly: the same process answers the next turn at once.
        ollama.enqueue(call("chg_slow", seconds=0), ChatScript.words("Waited."))
        received = await ask(client, "wait a moment")
        assert received.final["text"] == "Waited."
        assert [f["outcome"] for f in received.of("tool_finish")] == ["success"]
    connection = mercury.services.mcp._shared["chg"]
    assert connection._opened == 1, "the stdio server was not restarted"
    assert connection.status() == "up"
