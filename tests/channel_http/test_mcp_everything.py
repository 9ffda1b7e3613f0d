"""The MCP reference server from npm (``@modelcontextprotocol/server-everything``) over stdio.

Mercury starts the Node process itself, once, and the model's calls go through it: text,
structured content, an image the model sees and resource links, on the 2025-11-25 handshake
this server speaks.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from core.config.settings import Settings
from tests.conftest import ALICE
from tests.mcp_servers import EVERYTHING, ensure_node_modules
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer, serve
from tests.support.sse import turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture
def mercury(tmp_path: Path, make_settings: Callable[..., Settings]) -> Iterator[RunningServer]:
    ensure_node_modules()
    node = shutil.which("node")
    assert node is not None, "node isn't on PATH; install Node.js 20.19+"
    servers = {
        "ev": {
            "command": node,
            "args": [str(EVERYTHING), "stdio"],
            "title": "Everything",
            "trusted": True,
            "connect_timeout": 30,
        }
    }
    path = tmp_path / "mercury.yaml"
    path.write_text(yaml.safe_dump({"mcp": {"servers": servers}}))
    with serve(make_settings(MERCURY_CONFIG_FILE=str(path))) as running:
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
