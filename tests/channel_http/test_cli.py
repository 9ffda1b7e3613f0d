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
from tests.support.ports import free_port

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


def listening_line(env: dict[str, str], *args: str) -> str:
    """Start ``serve`` with ``env``, return its "listening on" line, then stop it."""
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "channel_http", "serve", *args],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "MERCURY_CONFIG_FILE": "", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 45
        while not any(line.startswith("mercury-http: listening on") for line in lines):
            assert time.monotonic() < deadline and process.poll() is None, lines
            lines.append(process.stdout.readline())
        return next(line for line in lines if line.startswith("mercury-http: listening on"))
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) in (0, -signal.SIGTERM)
        if process.stdout is not None:
            process.stdout.close()


def bound_hosts(port: int) -> set[str]:
    """The local addresses listening on ``port`` (IPv4, from /proc/net/tcp)."""
    hosts = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, hex_port = local.partition(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            hosts.add(socket.inet_ntoa(int(address, 16).to_bytes(4, "little")))
    return hosts


@pytest.mark.parametrize("dev", [False, True], ids=["auth-configured", "development-token"])
def test_serve_listens_on_this_machine_only_unless_a_host_is_given(
    tmp_path: Path, ollama: OllamaStandIn, dev: bool
) -> None:
    """Issue #36: with or without auth configured, 127.0.0.1 unless told, said at start."""
    env = {
        "MERCURY_DATA_DIR": str(tmp_path / "data"),
        "OLLAMA_HOST": ollama.url,
        "MERCURY_MEMORY_STORE": "off",
    }
    if not dev:
        env |= {"MERCURY_AUTH": "static", "AUTH_STATIC_TOKENS": '{"t": {"id": "a"}}'}
    flags = ("--dev",) if dev else ()
    port = free_port()
    line = listening_line(env | {"HTTP_SURFACE_PORT": str(port)}, *flags)
    assert line.strip() == f"mercury-http: listening on http://127.0.0.1:{port}"
    port = free_port()
    line = listening_line(env | {"HTTP_SURFACE_PORT": str(port)}, *flags, "--host", "0.0.0.0")  # noqa: S104
    assert line.strip() == f"mercury-http: listening on http://0.0.0.0:{port}"
    port = free_port()
    line = listening_line(
        env | {"HTTP_SURFACE_PORT": str(port), "HTTP_SURFACE_HOST": "0.0.0.0"},  # noqa: S104
        *flags,
    )
    assert line.strip() == f"mercury-http: listening on http://0.0.0.0:{port}"


def test_the_announced_address_is_the_bound_one(tmp_path: Path, ollama: OllamaStandIn) -> None:
    env = {
        "MERCURY_DATA_DIR": str(tmp_path / "data"),
        "OLLAMA_HOST": ollama.url,
        "MERCURY_MEMORY_STORE": "off",
        "MERCURY_AUTH": "static",
        "AUTH_STATIC_TOKENS": '{"t": {"id": "a"}}',
        "HTTP_SURFACE_PORT": "0",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "channel_http", "serve"],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "MERCURY_CONFIG_FILE": "", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 45
        line = ""
        while not line.startswith("mercury-http: listening on"):
            assert time.monotonic() < deadline and process.poll() is None
            line = process.stdout.readline()
        announced = re.fullmatch(r"mercury-http: listening on http://([\d.]+):(\d+)", line.strip())
        assert announced is not None, line
        assert announced.group(1) == "127.0.0.1"
        assert bound_hosts(int(announced.group(2))) == {"127.0.0.1"}
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) in (0, -signal.SIGTERM)
        if process.stdout is not None:
            process.stdout.close()
