"""Helpers of the reliability suite: the server as a child process, turns read with a deadline.

The in-thread server of ``tests/support/server.py`` serves most tests; signals (SIGTERM,
SIGKILL) and file locks held by another process need the real ``python -m channel_http
serve`` in a process of its own, which :class:`ChildServer` starts and watches.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import httpx
from httpx_sse import aconnect_sse

from tests.conftest import TOKENS
from tests.support.ports import free_port as free_port  # the suite imports it from here

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = frozenset({"final", "error"})


def child_env(data_dir: Path, ollama_url: str, **overrides: str) -> dict[str, str]:
    """The environment of a child server on a free port, with the suite's two static tokens."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MERCURY_", "OLLAMA_", "HTTP_SURFACE_", "AUTH_", "QDRANT_"))
    }
    env.update(
        {
            "MERCURY_CONFIG_FILE": "",
            "MERCURY_AUTH": "static",
            "AUTH_STATIC_TOKENS": json.dumps(TOKENS),
            "MERCURY_DATA_DIR": str(data_dir),
            "OLLAMA_HOST": ollama_url,
            "OLLAMA_MODEL": "llama3.2",
            "HTTP_SURFACE_HOST": "127.0.0.1",
            "HTTP_SURFACE_PORT": str(free_port()),
            "MERCURY_MEMORY_STORE": "off",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(overrides)
    return env


@dataclass
class ChildServer:
    """``python -m channel_http serve`` in a child process, ready once /version answers."""

    env: Mapping[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    url: str = field(init=False)

    def __post_init__(self) -> None:
        self.url = f"http://127.0.0.1:{self.env['HTTP_SURFACE_PORT']}"

    def start(self, timeout_s: float = 90.0) -> Self:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "channel_http", "serve"],
            cwd=ROOT,
            env=dict(self.env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the child server exited early:\n{self.log()}")
            try:
                if httpx.get(self.url + "/version", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the child server did not start in {timeout_s} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def wait(self, timeout_s: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout_s)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@dataclass
class Outcome:
    """What one client saw of one turn."""

    status: int
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    body: Any = None
    broke_off: str | None = None

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def terminals(self) -> list[tuple[str, dict[str, Any]]]:
        return [(name, data) for name, data in self.events if name in TERMINAL]

    @property
    def text(self) -> str:
        return "".join(data["chunk"] for name, data in self.events if name == "text")


async def read_turn(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    headers: Mapping[str, str],
    *,
    deadline_s: float = 30.0,
) -> Outcome:
    """POST a turn and read it to the end (or to a broken connection), within a deadline."""
    with anyio.fail_after(deadline_s):
        try:
            async with aconnect_sse(
                client, "POST", "/turn", json=body, headers=dict(headers)
            ) as source:
                response = source.response
                outcome = Outcome(status=response.status_code)
                if response.status_code != 200:
                    await response.aread()
                    outcome.body = response.json()
                    return outcome
                try:
                    async for event in source.aiter_sse():
                        # The rejoin extension's opening event; and the empty event httpx_sse
                        # makes of a heartbeat once an id was seen (the SSE spec dispatches none).
                        if event.event == "turn" or not event.data:
                            continue
                        outcome.events.append((event.event, json.loads(event.data)))
                except httpx.TransportError as error:
                    outcome.broke_off = repr(error)
                return outcome
        except httpx.TransportError as error:
            return Outcome(status=0, broke_off=repr(error))


def open_fds(pid: int | None = None) -> int:
    """How many file descriptors a process (this one by default) holds."""
    return len(os.listdir(f"/proc/{pid or os.getpid()}/fd"))


def rss_bytes(pid: int | None = None) -> int:
    """A process's resident memory now (not its peak)."""
    with open(f"/proc/{pid or 'self'}/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def signal_name(sig: int) -> str:
    return signal.Signals(sig).name


# ------------------------------------------------------------------ a plugin of the suite's own


class Ledger:
    """A plugin of the suite's own: a plain tool, a staged one and a staged one handing back."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    async def _record(self, context: Any, arguments: Mapping[str, Any]) -> str:
        self.runs.append({"person": context.person.key, **arguments})
        return f"recorded {arguments.get('entry')}"

    def plugin(self) -> Any:
        from core.tools.registry import Plugin, Tool

        schema = {
            "type": "object",
            "properties": {"entry": {"type": "string"}},
            "required": ["entry"],
            "additionalProperties": False,
        }
        return Plugin(
            name="ledger",
            api_version=4,
            tools=(
                Tool(name="jot", description="Jot an entry.", parameters=schema, run=self._record),
                Tool(
                    name="book",
                    description="Book an entry, once confirmed.",
                    parameters=schema,
                    run=self._record,
                    confirm=True,
                    summary=lambda context, arguments: f"Book {arguments['entry']}",
                ),
                Tool(
                    name="book_and_tell",
                    description="Book an entry and read the result back.",
                    parameters=schema,
                    run=self._record,
                    confirm=True,
                    hands_back=True,
                ),
            ),
        )


def tool_then_answer(name: str, answer: str = "Done.", **arguments: Any) -> Any:
    """A stand-in responder: one tool call, then plain answers."""
    from tests.support.ollama_standin import ChatScript

    pending = [ChatScript(tool_calls=[{"name": name, "arguments": arguments}])]

    def respond(request: dict[str, Any]) -> ChatScript:
        return pending.pop() if pending else ChatScript.words(answer)

    return respond


async def eventually(check: Any, timeout_s: float = 15.0, what: str = "the condition") -> Any:
    """Poll ``check`` (sync) until it returns something truthy, or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} never held in {timeout_s} s")
        await anyio.sleep(0.05)
