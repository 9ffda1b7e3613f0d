"""The request log of a real `mercury-http serve` process, read from its own output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ALICE, BOB, TOKENS
from tests.support.ollama_standin import OllamaStandIn
from tests.support.ports import free_port

pytestmark = [pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def process(tmp_path: Path, ollama: OllamaStandIn, **env: str) -> Iterator[tuple[str, Path]]:
    """``python -m channel_http serve`` with its stderr in a file; yields (url, that file)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    output = tmp_path / "server.log"
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MERCURY_", "OLLAMA_"))},
        "MERCURY_CONFIG_FILE": "",
        "MERCURY_AUTH": "static",
        "AUTH_STATIC_TOKENS": json.dumps(TOKENS),
        "MERCURY_DATA_DIR": str(tmp_path / "data"),
        "OLLAMA_HOST": ollama.url,
        "MERCURY_MEMORY_STORE": "off",
        "HTTP_SURFACE_HOST": "127.0.0.1",
        "HTTP_SURFACE_PORT": str(port),
        "HTTP_SURFACE_PUBLIC_URL": url + "/",
        "MERCURY_SECRET_KEY": "s" * 40,
        **env,
    }
    with output.open("wb") as sink:
        child = subprocess.Popen(
            [sys.executable, "-m", "channel_http", "serve"],
            cwd=ROOT,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 90  # imports take tens of seconds on a busy machine
            while True:
                assert child.poll() is None, output.read_text()
                try:
                    if httpx.get(url + "/livez", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
            yield url, output
        finally:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(5)


def post_turn(url: str, text: str, headers: dict[str, str]) -> str:
    response = httpx.post(url + "/turn", json={"text": text}, headers=headers, timeout=20)
    assert response.status_code == 200, response.text
    return response.text


def test_json_request_lines_carry_the_request_and_never_a_secret(
    tmp_path: Path, ollama: OllamaStandIn
) -> None:
    secrets = ["alice-token", "bob-token", "wrong-token-secret", "CODE-SECRET-1", "STATE-SECRET-2"]
    with process(tmp_path, ollama, MERCURY_LOG_FORMAT="json") as (url, output):
        callback = httpx.get(
            url + "/login/callback?code=CODE-SECRET-1&state=STATE-SECRET-2", timeout=10
        )
        assert callback.status_code == 400
        code = httpx.post(url + "/link", headers=ALICE, timeout=10).json()["code"]
        secrets.append(code)
        assert "event: final" in post_turn(url, code, BOB)  # the link code as turn text
        secrets.append("k9m2-x7q4")
        assert "event: final" in post_turn(url, "k9m2-x7q4", ALICE)  # a confirmation token
        answer = post_turn(url, "Hello there", ALICE)
        assert "event: final" in answer
        bad = {"authorization": "Bearer wrong-token-secret"}
        assert httpx.get(url + "/me", headers=bad, timeout=10).status_code == 401
    text = output.read_text()
    for secret in secrets:
        assert secret not in text, f"{secret!r} reached the log"
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    for line in lines:
        assert {"ts", "level", "logger", "message"} <= line.keys(), line
    requests = [line for line in lines if "route" in line]
    by_route: dict[str, list[dict[str, Any]]] = {}
    for line in requests:
        by_route.setdefault(line["route"], []).append(line)
    assert by_route["/login/callback"][0]["status"] == 400
    turns = by_route["/turn"]
    assert [t["outcome"] for t in turns] == ["final", "final", "final"]
    assert [t["person"] for t in turns] == ["static:bob", "static:alice", "static:alice"]
    assert all(t["bytes"] > 0 and t["durationMs"] >= 0 and t["method"] == "POST" for t in turns)
    # The stream's frames skip the inner layers' wrappers and count themselves: the line
    # says every byte of the body the client read.
    assert turns[-1]["bytes"] == len(answer.encode())
    assert by_route["/me"][0]["status"] == 401 and "person" not in by_route["/me"][0]
    assert by_route["/link"][0]["person"] == "static:alice"


def test_the_log_level_and_the_text_format_apply(tmp_path: Path, ollama: OllamaStandIn) -> None:
    with process(tmp_path, ollama, MERCURY_LOG_LEVEL="warning") as (url, output):
        assert httpx.get(url + "/me", headers=ALICE, timeout=10).status_code == 200
    text = output.read_text()
    assert "GET /me 200" not in text  # request lines are info
    with process(tmp_path, ollama, MERCURY_LOG_LEVEL="info") as (url, output):
        assert httpx.get(url + "/me", headers=ALICE, timeout=10).status_code == 200
    text = output.read_text()
    line = next(line for line in text.splitlines() if "GET /me 200" in line)
    assert " INFO mercury.http.requests: GET /me 200 " in line
    assert line.endswith("person=static:alice")
    # The start-up check names the missing model and the exact command, in one sentence.
    warning = next(line for line in text.splitlines() if "lacks the model" in line)
    assert warning.endswith("run: ollama pull llama3.2")
