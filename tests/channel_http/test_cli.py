"""`mercury-http serve` as an operator meets it: help, bad settings, the development token."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.ollama_standin import OllamaStandIn

pytestmark = [pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]


def run(env: dict[str, str], *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "channel_http", *args],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "MERCURY_CONFIG_FILE": "", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_serve_help_lists_every_setting_with_its_default() -> None:
    result = run({}, "serve", "--help")
    assert result.returncode == 0
    for name in (
        "HTTP_SURFACE_PORT",
        "MERCURY_AUTH",
        "OLLAMA_HOST",
        "MERCURY_DEFAULT_TIME_ZONE",
        "MERCURY_STATE_URL",
    ):
        assert name in result.stdout
    assert "4100" in result.stdout


def test_serve_help_never_runs_a_name_into_its_description() -> None:
    """Every setting line is a name alone, or a name, two spaces or more, then its text."""
    result = run({}, "serve", "--help")
    assert result.returncode == 0
    settings = result.stdout.split("Settings (environment variables", 1)[1].splitlines()[3:]
    entries = [line for line in settings if line.startswith("  ") and line[2] != " "]
    assert len(entries) > 40
    for line in entries:
        name, _, rest = line[2:].partition(" ")
        assert re.fullmatch(r"[A-Z][A-Z0-9_<>]*", name), line
        assert rest == "" or rest.startswith(" "), line
        continuation = settings[settings.index(line) + 1] if rest == "" else None
        if continuation is not None:  # a long name: its description starts on the next line
            assert continuation.startswith(" " * 38) and continuation.strip(), line
    assert "  MERCURY_SERVICE_<NAME>_CLIENT_SECRET\n" in result.stdout


def test_a_bad_value_stops_start_up_with_one_clear_line(tmp_path: Path) -> None:
    result = run({"HTTP_SURFACE_PORT": "abc", "MERCURY_DATA_DIR": str(tmp_path)}, "serve")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "HTTP_SURFACE_PORT" in lines[0] and "Traceback" not in result.stderr


def test_an_unreachable_state_store_stops_start_up_with_one_line_and_no_password(
    tmp_path: Path,
) -> None:
    env = {
        "MERCURY_AUTH": "static",
        "AUTH_STATIC_TOKENS": '{"t": {"id": "a"}}',
        "MERCURY_DATA_DIR": str(tmp_path),
        "MERCURY_STATE_URL": f"postgresql://mercury:pw-hunter2@127.0.0.1:{free_port()}/mercury",
        "MERCURY_STATE_CONNECT_TIMEOUT_S": "1",  # retried for 1 s, not the default 10
    }
    result = run(env, "serve", timeout=60)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "pw-hunter2" not in result.stderr + result.stdout
    [line] = [line for line in result.stderr.splitlines() if line.startswith("mercury-http:")]
    assert "Couldn't connect to PostgreSQL at 127.0.0.1" in line
    assert "within 1 s" in line


def test_without_a_loadable_auth_provider_the_surface_never_opens(tmp_path: Path) -> None:
    env = {"MERCURY_AUTH": "static", "AUTH_STATIC_TOKENS": "[1]", "MERCURY_DATA_DIR": str(tmp_path)}
    result = run(env, "serve")
    assert result.returncode == 2
    assert "No auth provider could be loaded" in result.stderr
    assert "AUTH_STATIC_TOKENS" in result.stderr
    nothing = run({"MERCURY_DATA_DIR": str(tmp_path)}, "serve")
    assert nothing.returncode == 2
    assert "MERCURY_AUTH" in nothing.stderr


def test_serve_dev_prints_a_token_and_a_curl_line_that_works(
    tmp_path: Path, ollama: OllamaStandIn
) -> None:
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "MERCURY_CONFIG_FILE": "",
        "MERCURY_DATA_DIR": str(tmp_path / "data"),
        "HTTP_SURFACE_HOST": "127.0.0.1",
        "HTTP_SURFACE_PORT": str(port),
        "OLLAMA_HOST": ollama.url,
        "MERCURY_MEMORY_STORE": "off",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "channel_http", "serve", "--dev"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 30
        while not any(line.startswith("Try: curl") for line in lines):
            assert time.monotonic() < deadline, lines
            lines.append(process.stdout.readline())
        curl = next(line for line in lines if line.startswith("Try: curl"))
        token = re.search(r"Bearer (\S+)'", curl)
        assert token is not None
        assert f"http://127.0.0.1:{port}/turn" in curl
        body = json.loads(re.search(r"-d '(.+)'", curl).group(1))  # type: ignore[union-attr]
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.post(
                    f"http://127.0.0.1:{port}/turn",
                    headers={"authorization": f"Bearer {token.group(1)}"},
                    json=body,
                    timeout=10,
                )
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert response.status_code == 200
        assert b"event: final" in response.content
        assert (tmp_path / "data" / "dev-token").read_text().strip() == token.group(1)
    finally:
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        assert process.wait(20) in (0, -signal.SIGTERM)
        if process.stdout is not None:
            process.stdout.close()
