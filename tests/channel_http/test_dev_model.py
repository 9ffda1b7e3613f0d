"""The scripted model as a newcomer meets it (#36): the command and ``serve --dev-model``.

The command runs as a process and is spoken to through the real ``ollama`` client and
OpenAI's protocol; ``serve --dev --dev-model`` runs as a process too, and each ``/demo``
keyword is sent through its ``/turn`` as a UI would, the events read off the stream.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import ollama
import pytest

from core.model.openai import OpenAIModel
from core.model.port import ChatMessage
from dev_model.demo import DEMOS

pytestmark = [pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Running:
    process: subprocess.Popen[str]
    lines: list[str]

    def wait_for(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines:
                found = re.search(pattern, line)
                if found is not None:
                    return found
            assert time.monotonic() < deadline and self.process.poll() is None, self.lines
            self.lines.append(self.process.stdout.readline())


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    started: list[Running] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Running:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "channel_http", *args],
            cwd=tmp_path,  # no mercury.yaml here
            env={
                "PATH": os.environ["PATH"],
                "PYTHONPATH": str(ROOT),
                "MERCURY_DATA_DIR": str(tmp_path / "data"),
                "MERCURY_MEMORY_STORE": "off",
                **(env or {}),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        running = Running(process, [])
        started.append(running)
        return running

    yield start
    for running in started:
        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(20) in (0, -signal.SIGTERM)
        if running.process.stdout is not None:
            running.process.stdout.close()


def test_the_command_speaks_ollama_and_openai_with_the_default_model_names(start: Any) -> None:
    command = start("dev-model", "--port", "0")
    url = command.wait_for(r"Ollama's protocol on (http://127\.0\.0\.1:\d+),").group(1)
    with ollama.Client(host=url) as client:
        names = {model.model for model in client.list().models}
        assert names >= {"llama3.2:latest", "nomic-embed-text:latest"}
        thinking, content = "", ""
        for part in client.chat(
            model="llama3.2", messages=[{"role": "user", "content": "hello"}], stream=True
        ):
            thinking += part.message.thinking or ""
            content += part.message.content or ""
        assert thinking == "A new conversation."
        assert (
            content.startswith("Hello! I'm Mercury's scripted model.")
            and "You said: hello" in content
        )
        assert len(client.embed(model="nomic-embed-text", input="hello").embeddings[0]) > 0

    models = httpx.get(f"{url}/v1/models", timeout=10).json()
    assert {"llama3.2", "nomic-embed-text"} <= {m["id"] for m in models["data"]}
    model = OpenAIModel(f"{url}/v1", "llama3.2")

    async def ask() -> tuple[str, str]:
        reasoning, text = "", ""
        async for batch in model.chat([ChatMessage(role="user", content="/demo reasoning")]):
            for chunk in batch:
                if chunk.message is not None:
                    reasoning += chunk.message.thinking or ""
                    text += chunk.message.content or ""
        await model.close()
        return reasoning, text

    reasoning, text = anyio.run(ask)
    assert reasoning.startswith("The person asked for a long reasoning.")
    assert text == "After all that thinking: the answer is 42."


def test_the_command_says_so_when_its_port_is_taken(start: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = subprocess.run(  # noqa: S603 - our own interpreter and module
            [
                sys.executable,
                "-m",
                "channel_http",
                "dev-model",
                "--port",
                str(taken.getsockname()[1]),
            ],
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert result.returncode == 1
    assert "can't listen on 127.0.0.1" in result.stderr and "--port" in result.stderr
    assert "Traceback" not in result.stderr


# --- every demo through a real server's /turn --------------------------------------------


@dataclass
class Turn:
    events: list[tuple[str, dict[str, Any]]]
    times: list[float]

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [data for event, data in self.events if event == name]

    @property
    def text(self) -> str:
        return "".join(data["chunk"] for data in self.of("text"))


def post_turn(
    base: str, token: str, text: str, conversation: str, *, until: str | None = None
) -> Turn:
    """POST a turn and read its events to the end of the stream (or to event ``until``)."""
    turn = Turn([], [])
    headers = {"authorization": f"Bearer {token}"}
    body = {"text": text, "conversationId": conversation}
    with httpx.stream("POST", f"{base}/turn", json=body, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        name = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name:
                if name != "turn":  # the turn's id, first in every stream
                    turn.events.append((name, json.loads(line[6:])))
                    turn.times.append(time.monotonic())
                if name == until:
                    break
    return turn


@pytest.fixture
def server(start: Any) -> tuple[str, str, Running]:
    port = free_port()
    running = start("serve", "--dev", "--dev-model", "--port", str(port))
    token = running.wait_for(r"Bearer (dev-[\w-]+)'").group(1)
    running.wait_for(r"mercury-http: listening on")
    return f"http://127.0.0.1:{port}", token, running


def test_serve_dev_model_lists_the_demos_and_echoes_a_message(
    server: tuple[str, str, Running],
) -> None:
    base, token, running = server
    for name in DEMOS:
        running.wait_for(rf"/demo {name} ")
    turn = post_turn(base, token, "hello there", "echo")
    assert turn.names()[0] == "reasoning" and turn.names()[-1] == "final"
    assert turn.text.startswith("Hello!") and "You said: hello there" in turn.text
    again = post_turn(base, token, "and again", "echo")
    assert again.text.startswith("You said: and again")
    listed = post_turn(base, token, "/demo", "help")
    for name in DEMOS:
        assert f"/demo {name}" in listed.text
    ready = httpx.get(f"{base}/readyz", timeout=30)
    assert ready.status_code == 200 and ready.json()["checks"]["model"] is True


def test_a_server_on_openais_protocol_runs_the_demos_against_the_command(start: Any) -> None:
    command = start("dev-model", "--port", "0")
    url = command.wait_for(r"Ollama's protocol on (http://127\.0\.0\.1:\d+),").group(1)
    port = free_port()
    env = {
        "MERCURY_MODEL_PROVIDER": "openai",
        "OPENAI_BASE_URL": f"{url}/v1",
        "OPENAI_MODEL": "llama3.2",
        "OPENAI_EMBEDDING_MODEL": "nomic-embed-text",
    }
    server = start("serve", "--dev", "--port", str(port), env=env)
    token = server.wait_for(r"Bearer (dev-[\w-]+)'").group(1)
    server.wait_for(r"mercury-http: listening on")
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{base}/readyz", timeout=30).json()["checks"]["model"] is True
    tool = post_turn(base, token, "/demo tool", "openai-tool")
    assert "reasoning" in tool.names()
    assert [t["name"] for t in tool.of("tool")] == ["wiki_list"]
    assert tool.names()[-1] == "final" and tool.text.startswith("I listed the notes")
    error = post_turn(base, token, "/demo error", "openai-error")
    assert error.names()[-1] == "error"


def test_each_demo_yields_its_events_through_a_real_server(
    server: tuple[str, str, Running],
) -> None:
    base, token, _ = server

    reasoning = post_turn(base, token, "/demo reasoning", "reasoning")
    assert len(reasoning.of("reasoning")) > 20 and "reasoning_end" in reasoning.names()
    thought = [
        t for (n, _), t in zip(reasoning.events, reasoning.times, strict=True) if n == "reasoning"
    ]
    assert thought[-1] - thought[0] > 2  # paced: a UI shows it arriving for seconds
    assert reasoning.names()[-1] == "final"

    tool = post_turn(base, token, "/demo tool", "tool")
    assert [t["name"] for t in tool.of("tool")] == ["wiki_list"]
    assert tool.of("tool_finish")[0]["outcome"] == "success"
    assert tool.names()[-1] == "final" and tool.text.startswith("I listed the notes")

    confirm = post_turn(base, token, "/demo confirm", "confirm")
    [pending] = confirm.of("pending")
    assert pending["choices"] and "Archive a demo note" in pending["command"]
    # A sentence for the person, never the instructions the server wrote for the model.
    assert confirm.text.startswith("Archiving the demo note") and "tell them" not in confirm.text

    choices = post_turn(base, token, "/demo choices", "choices")
    assert [t["name"] for t in choices.of("tool")] == ["wiki_write", "wiki_write"]
    [pending] = choices.of("pending")
    assert [c["label"] for c in pending["choices"]] == ["Replace the note", "Append to the note"]
    assert choices.text.startswith("The note exists already")

    present = post_turn(base, token, "/demo present", "present")
    assert [t["name"] for t in present.of("tool")] == ["present"]
    assert "Mercury | 58.6" in json.dumps(present.events)
    assert "Here are the days on the inner planets" in present.text

    markdown = post_turn(base, token, "/demo markdown", "markdown")
    assert "| Planet | Moons |" in markdown.text

    error = post_turn(base, token, "/demo error", "error")
    assert error.names()[-1] == "error" and "final" not in error.names()
    assert "(/demo error)" in error.of("error")[0]["message"]

    slow = post_turn(base, token, "/demo slow", "slow")
    texts = [t for (name, _), t in zip(slow.events, slow.times, strict=True) if name == "text"]
    assert len(texts) >= 40 and slow.names()[-1] == "final"
    assert texts[-1] - texts[0] > 5  # 40 words at 4 a second: about 10 s, never bunched

    stalled = post_turn(base, token, "/demo cancel", "cancel", until="text")
    assert stalled.names()[-1] == "text"  # the client leaves: the turn is cancelled
    after = post_turn(base, token, "hello again", "cancel-after")
    assert after.names()[-1] == "final"


def test_the_login_demo_signs_in_through_the_scripted_service(
    server: tuple[str, str, Running],
) -> None:
    base, token, _ = server
    first = post_turn(base, token, "/demo login", "login")
    [login] = first.of("login")
    assert login["service"] == "demo_account"
    assert "/oauth/authorize?" in login["url"]
    assert first.text.startswith("I need you to sign in") and "Never write" not in first.text
    page = httpx.get(login["url"], follow_redirects=True, timeout=30)
    assert page.status_code == 200 and str(page.url).startswith(f"{base}/login/callback")
    again = post_turn(base, token, "/demo login", "login")
    assert "login" not in again.names()
    assert "signed in to the demo service as Developer (dev)" in again.text


def test_the_demo_services_and_the_demo_space_join_a_settings_file_of_ones_own(
    start: Any, tmp_path: Path
) -> None:
    own = (
        "# mine\n"
        'spaces:\n  "slack:COWN":\n    admins: ["static:dev"]\n'
        "services:\n  - name: own\n    base_url: http://127.0.0.1:9/own\n"
        "    operations:\n      - {name: ping, description: Ping., method: GET, path: /ping}\n"
    )
    (tmp_path / "mercury.yaml").write_text(own, encoding="utf-8")
    port = free_port()
    running = start("serve", "--dev", "--dev-model", "--port", str(port))
    token = running.wait_for(r"Bearer (dev-[\w-]+)'").group(1)
    running.wait_for(r"mercury-http: listening on")
    base = f"http://127.0.0.1:{port}"
    headers = {"authorization": f"Bearer {token}"}

    confirm = post_turn(base, token, "/demo confirm", "with-file")
    assert confirm.of("pending"), confirm.names()  # the demo services are declared
    assert (tmp_path / "mercury.yaml").read_text(encoding="utf-8") == own  # never written into

    listed = httpx.get(f"{base}/spaces", headers=headers, timeout=30).json()["spaces"]
    roles = {space["spaceId"]: space["role"] for space in listed}
    assert roles == {"slack:CDEMO": "admin", "slack:COWN": "admin"}
    space = f"{base}/spaces/slack:CDEMO"
    people = httpx.get(space, headers=headers, timeout=30).json()["members"]
    assert {p["id"] for p in people} >= {"people:ann", "people:ben"}
    changed = httpx.put(f"{space}/settings/rate_limit", json={"value": 3}, headers=headers)
    assert changed.status_code == 200 and changed.json()["setting"]["value"] == 3
    muted = httpx.post(
        f"{space}/mutes",
        json={"person": "slack:UDEMOBEN", "duration": "10m", "confirm": True},
        headers=headers,
        timeout=30,
    )
    assert muted.status_code == 200 and muted.json()["mute"]["person"] == "people:ben"
    pairing = httpx.get(f"{base}/pairing", headers=headers, timeout=30)
    assert pairing.status_code == 200  # the development person may approve strangers


def test_dev_mode_allows_a_walk_through_every_demo_without_a_429(
    server: tuple[str, str, Running],
) -> None:
    base, token, _ = server
    for n in range(len(DEMOS) + 2):
        assert post_turn(base, token, f"hello {n}", f"walk-{n}").names()[-1] == "final"
