"""Shutdown and crash, with the real ``python -m channel_http serve`` in a child process.

SIGTERM during open turns: every stream gets a terminal ``error`` event saying the server is
stopping and the process exits within its graceful timeout; after a restart the pending
confirmations and the archive are intact. ``kill -9`` in the middle of writes: SQLite and the
memory store reopen consistent and the server serves again.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import ALICE, BOB
from tests.reliability.support import ChildServer, Outcome, child_env, eventually, read_turn
from tests.support.ollama_standin import ChatScript, OllamaStandIn

pytestmark = [pytest.mark.anyio]

GRACEFUL_S = 3.0
LONG = ChatScript.paced(2000, rate_per_s=20.0)  # 100 s: only a signal ends these


def responder(request: dict[str, Any]) -> ChatScript:
    last = str(request["messages"][-1].get("content", ""))
    if "stage it" in last:
        return ChatScript(
            tool_calls=[{"name": "promote_note", "arguments": {"path": "personal/notes/a.md"}}]
        )
    if "long" in last:
        return LONG
    if request["messages"][-1].get("role") == "tool":
        return ChatScript.words("Waiting for you.")
    return ChatScript.words("ok " + last[-40:])


@pytest.fixture
def child(tmp_path: Path, ollama: OllamaStandIn) -> Iterator[ChildServer]:
    ollama.responder = responder
    env = child_env(
        tmp_path / "data",
        ollama.url,
        HTTP_SURFACE_GRACEFUL_TIMEOUT_S=str(GRACEFUL_S),
        HTTP_SURFACE_HEARTBEAT_S="0.5",
        MERCURY_RATE_LIMIT_PER_USER="1000",
        MERCURY_MEMORY_STORE="edge",
    )
    server = ChildServer(env, tmp_path / "server.log")
    try:
        yield server
    finally:
        server.stop()


def restarted(server: ChildServer) -> ChildServer:
    again = ChildServer(server.env, server.log_path)
    return again.start()


async def stage_one(client: httpx.AsyncClient) -> str:
    staged = await read_turn(client, {"text": "stage it", "conversationId": "keep"}, ALICE)
    pending = [data for name, data in staged.events if name == "pending"]
    assert pending, staged.events
    return str(pending[0]["token"])


async def open_turns_then_sigterm(server: ChildServer, count: int) -> tuple[list[Outcome], float]:
    outcomes: list[Outcome] = [Outcome(status=0) for _ in range(count)]
    started = anyio.Event()
    streaming = 0
    limits = httpx.Limits(max_connections=count + 4)
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:

        async def one(i: int) -> None:
            nonlocal streaming
            body = {"text": f"long {i}", "conversationId": f"open-{i}"}
            headers = ALICE if i % 2 else BOB
            async with client.stream("POST", "/turn", json=body, headers=headers) as response:
                outcome = outcomes[i]
                outcome.status = response.status_code
                buffer = ""
                counted = False
                try:
                    async for chunk in response.aiter_text():
                        buffer += chunk
                        if not counted and "event: text" in buffer:
                            counted = True
                            streaming += 1
                            if streaming == count:
                                started.set()
                except httpx.TransportError as error:
                    outcome.broke_off = repr(error)
                for block in buffer.split("\n\n"):
                    lines = dict(
                        line.split(": ", 1)
                        for line in block.split("\n")
                        if ": " in line and not line.startswith(":")
                    )
                    if "event" in lines:
                        outcome.events.append((lines["event"], json.loads(lines["data"])))

        async with anyio.create_task_group() as group:
            for i in range(count):
                group.start_soon(one, i)
            with anyio.fail_after(30):
                await started.wait()
            signalled = time.monotonic()
            server.signal(signal.SIGTERM)
            with anyio.fail_after(GRACEFUL_S + 20):
                await anyio.to_thread.run_sync(server.wait, GRACEFUL_S + 20)
            exited_after = time.monotonic() - signalled
    return outcomes, exited_after


def stopping_errors(outcomes: list[Outcome]) -> None:
    for i, outcome in enumerate(outcomes):
        assert outcome.status == 200, (i, outcome)
        terminals = outcome.terminals()
        assert [name for name, _ in terminals] == ["error"], (i, outcome.events[-3:], outcome)
        assert "server is stopping" in terminals[0][1]["message"], terminals


@pytest.mark.timeout(120)
async def test_sigterm_ends_every_open_stream_with_a_stopping_error_and_exits_in_time(
    child: ChildServer,
) -> None:
    child.start()
    async with httpx.AsyncClient(base_url=child.url, timeout=30) as client:
        token = await stage_one(client)
        said = await read_turn(client, {"text": "remember-me-4b", "conversationId": "keep"}, ALICE)
        assert said.names()[-1] == "final"
    outcomes, exited_after = await open_turns_then_sigterm(child, 6)
    stopping_errors(outcomes)
    # uvicorn re-raises the signal once shut down, so a clean stop reads as -SIGTERM.
    assert child.process is not None
    assert child.process.returncode in (0, -signal.SIGTERM), child.log()[-2000:]
    assert "Traceback" not in child.log(), child.log()[-3000:]
    assert exited_after < GRACEFUL_S + 5, exited_after
    # After a restart: the pending confirmation and the archive are intact.
    again = restarted(child)
    try:
        pending = httpx.get(again.url + "/confirmations", headers=ALICE).json()["pending"]
        assert [item["sessionKey"] for item in pending] == ["static:alice:keep"]
        page = httpx.get(again.url + "/conversation", headers=ALICE, params={"id": "keep"})
        assert page.status_code == 200, (page.status_code, page.text)
        await eventually(
            lambda: (
                "remember-me-4b"
                in httpx.get(again.url + "/conversation", headers=ALICE, params={"id": "keep"}).text
            ),
            timeout_s=20,
            what="the archived message after the restart",
        )
        confirmed = httpx.post(
            again.url + "/confirm", headers=ALICE, json={"token": token, "conversationId": "keep"}
        ).json()
        assert confirmed["resolved"] is True
    finally:
        again.stop()


async def write_storm(url: str, seconds: float, seed: int) -> int:
    """Turns, settings and codes written as fast as they go, for ``seconds``; returns how many."""
    rng = random.Random(seed)
    done = 0
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=40)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=10) as client:

        async def worker(i: int) -> None:
            nonlocal done
            while time.monotonic() < deadline:
                try:
                    pick = rng.random()
                    headers = ALICE if i % 2 else BOB
                    if pick < 0.5:
                        body = {"text": f"w{i}-{done}", "conversationId": f"k{i % 5}"}
                        await read_turn(client, body, headers, deadline_s=10)
                    elif pick < 0.7:
                        await read_turn(
                            client, {"text": "stage it", "conversationId": f"k{i}"}, headers
                        )
                    elif pick < 0.9:
                        zone = rng.choice(["Europe/Rome", "Asia/Tokyo", "UTC"])
                        await client.patch("/me", json={"timeZone": zone}, headers=headers)
                    else:
                        await client.post("/link", headers=headers)
                    done += 1
                except (httpx.TransportError, TimeoutError):
                    return  # the server died under us: that is the point

        async with anyio.create_task_group() as group:
            for i in range(16):
                group.start_soon(worker, i)
    return done


def integrity(db_path: Path) -> str:
    with sqlite3.connect(db_path) as db:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])


async def kill_during_writes_then_reopen(child: ChildServer, seed: int) -> int:
    child.start()
    async with anyio.create_task_group() as group:
        written: list[int] = []

        async def storm() -> None:
            written.append(await write_storm(child.url, 30, seed))

        group.start_soon(storm)
        await anyio.sleep(1.0 + random.Random(seed).random() * 1.5)
        child.signal(signal.SIGKILL)
    child.wait(10)
    assert child.process is not None and child.process.returncode == -signal.SIGKILL
    db_path = Path(child.env["MERCURY_DATA_DIR"]) / "mercury.db"
    assert integrity(db_path) == "ok"
    again = restarted(child)
    try:
        for path in ("/me", "/confirmations", "/tool-log", "/wiki/list", "/conversations"):
            response = httpx.get(again.url + path, headers=ALICE, timeout=10)
            assert response.status_code in (200, 404), (path, response.text)
            if path != "/conversations":
                assert response.status_code == 200
        async with httpx.AsyncClient(base_url=again.url, timeout=30) as client:
            after = await read_turn(client, {"text": "alive?", "conversationId": "k0"}, ALICE)
        assert [name for name, _ in after.terminals()] == ["final"], after.events
        assert "Traceback" not in again.log().split("Started server process")[-1]
    finally:
        again.stop()
    assert integrity(db_path) == "ok"
    child.process = again.process
    return written[0] if written else 0


@pytest.mark.timeout(120)
async def test_kill_9_during_writes_leaves_sqlite_and_the_stores_consistent(
    child: ChildServer,
) -> None:
    assert await kill_during_writes_then_reopen(child, seed=1) > 0


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", range(2, 8))
async def test_kill_9_again_and_again_during_writes_reopens_consistent(
    child: ChildServer, seed: int
) -> None:
    assert await kill_during_writes_then_reopen(child, seed=seed) > 0


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_sigterm_with_forty_open_streams_ends_each_with_a_stopping_error(
    child: ChildServer,
) -> None:
    child.start()
    outcomes, exited_after = await open_turns_then_sigterm(child, 40)
    stopping_errors(outcomes)
    assert exited_after < GRACEFUL_S + 10
