"""Faults: Ollama absent, slow, failing, breaking off; memory down and back; the directory
failing; SQLite locked by another process.

Each ends in its documented response (one ``error`` event, a 503, empty reads) within a
deadline, never a hang or a 500, and nothing already accepted is lost: the next turn of the
same conversation still carries what came before.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from core.memory.edge import EdgeStore
from core.people.directory import DirectoryPerson, DirectoryUnavailable
from core.people.people import People
from tests.conftest import ALICE, BOB
from tests.reliability.support import Outcome, eventually, free_port, read_turn
from tests.support.memory_doubles import DownStore
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

AUTHENTICATED_READS = ["/me", "/confirmations", "/tool-log", "/wiki/list", "/manifest", "/health"]


def only_error(outcome: Outcome) -> str:
    """The message of the one terminal event, which must be an error, and must be last."""
    assert outcome.status == 200, outcome.body
    assert outcome.broke_off is None, outcome.broke_off
    terminals = outcome.terminals()
    assert [name for name, _ in terminals] == ["error"], outcome.events
    assert outcome.events[-1][0] == "error"
    message: str = terminals[0][1]["message"]
    assert message.strip(), outcome.events
    return message


async def a_turn(server: RunningServer, text: str, conversation: str = "c1") -> Outcome:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        return await read_turn(client, {"text": text, "conversationId": conversation}, ALICE)


async def test_ollama_absent_ends_the_turn_with_one_error_naming_the_host(
    make_server: Callable[..., RunningServer],
) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    server = make_server(None, OLLAMA_HOST=host, OLLAMA_CONNECT_TIMEOUT_S="2")
    message = only_error(await a_turn(server, "hello?"))
    assert "can't be reached" in message and host.removeprefix("http://") in message
    assert httpx.get(server.url + "/health", headers=ALICE).json()["ollamaReachable"] is False


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (ChatScript(status=500, error="out of memory"), "answered with an error"),
        (ChatScript(status=404, error="model not found"), "answered with an error"),
        # Ollama's mid-stream error line carries its reason into the error event.
        (ChatScript.words("one two three four", error_after=2), "answered with an error"),
        (ChatScript.words("one two three four", close_after=2), "stopped answering"),
    ],
    ids=["http-500", "http-404", "error-line-mid-stream", "closed-mid-stream"],
)
async def test_a_failing_model_ends_the_turn_with_one_error_and_loses_nothing_accepted(
    server: RunningServer, ollama: OllamaStandIn, script: ChatScript, expected: str
) -> None:
    ollama.enqueue(script)
    message = only_error(await a_turn(server, "first-message-3c1"))
    assert expected in message.lower(), message
    # The conversation goes on, and the message the failed turn accepted is still in it.
    after = await a_turn(server, "second-message")
    assert [name for name, _ in after.terminals()] == ["final"]
    sent = json.dumps(ollama.requests[-1]["messages"])
    assert "first-message-3c1" in sent and "second-message" in sent
    await ollama.wait_until_async(lambda: ollama.open_streams == 0, what="the streams closing")


async def test_a_model_slower_than_its_timeout_ends_in_an_error_not_a_hang(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server(None, OLLAMA_TIMEOUT_S="0.5")
    ollama.enqueue(ChatScript.words("slow words here", delay_s=3.0))
    started = time.monotonic()
    only_error(await a_turn(server, "are you there?"))
    assert time.monotonic() - started < 10
    ollama.wait_for_closed(1, timeout=10)


async def test_a_slow_model_within_its_timeout_is_kept_alive_by_heartbeats(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server(None, HTTP_SURFACE_HEARTBEAT_S="0.1")
    ollama.enqueue(ChatScript.words("slow but fine", first_delay_s=0.6, delay_s=0.2))
    got = await a_turn(server, "take your time")
    assert [name for name, _ in got.terminals()] == ["final"]
    assert got.text == "slow but fine"


async def warm_the_model_pool(server: RunningServer, ollama: OllamaStandIn, count: int) -> None:
    """Leave ``count`` idle keep-alive connections in the server's pool to the model."""
    ollama.responder = lambda _request: ChatScript.words("warming up", delay_s=0.4)
    before = ollama.connections
    turns = [a_turn(server, f"warm {i}", conversation=f"warm-{i}") for i in range(count)]
    for outcome in await asyncio.gather(*turns):
        assert [name for name, _ in outcome.terminals()] == ["final"], outcome.events
    assert ollama.connections - before >= count
    ollama.responder = None


async def test_a_model_slow_to_answer_gets_the_request_once_over_a_warm_pool(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    # Adversarial review: a read timeout on a pooled connection was taken for a stale
    # keep-alive and the request re-sent on every idle connection (11 times with 10).
    server = make_server(None, OLLAMA_TIMEOUT_S="1")
    await warm_the_model_pool(server, ollama, 6)
    ollama.responder = lambda _request: ChatScript.words("too late", first_delay_s=6)
    sent = len(ollama.requests)
    message = only_error(await a_turn(server, "anyone there?", conversation="slow"))
    assert "stopped answering" in message, message
    assert len(ollama.requests) - sent == 1
    # The pool is still usable afterwards.
    ollama.responder = None
    again = await a_turn(server, "and now?", conversation="slow")
    assert again.text.endswith("and now?"), again.events


async def test_a_stale_pooled_connection_is_retried_once_on_a_fresh_one(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server(None)
    await warm_the_model_pool(server, ollama, 4)
    # The host dropped the idle connection as the request reached it: retried, once.
    ollama.enqueue(ChatScript(drop=True), ChatScript.words("fresh answer"))
    sent = len(ollama.requests)
    got = await a_turn(server, "first", conversation="stale")
    assert got.text == "fresh answer", got.events
    assert len(ollama.requests) - sent == 2
    # Dropped again on the retry: the turn ends with an error, not a walk through the pool.
    ollama.enqueue(ChatScript(drop=True), ChatScript(drop=True), ChatScript(drop=True))
    sent = len(ollama.requests)
    only_error(await a_turn(server, "second", conversation="stale"))
    assert len(ollama.requests) - sent == 2


class FailingDirectory:
    """A directory that can't be asked (raises), until it is told to answer again."""

    name = "people"

    def __init__(self) -> None:
        self.failing = True

    async def resolve(self, user_key: str) -> DirectoryPerson | None:
        if self.failing:
            raise DirectoryUnavailable("The directory of the reliability suite is down.")
        return DirectoryPerson(id=user_key.split(":", 1)[1])


async def test_a_failing_directory_is_a_503_unavailable_on_every_route_then_recovers(
    server: RunningServer,
) -> None:
    directory = FailingDirectory()
    people = People(directory, access_unknown="refuse")
    people.attach_links(server.services.linking)
    server.services.people = people  # the composition's port, swapped for a failing one
    for path in AUTHENTICATED_READS:
        refused = httpx.get(server.url + path, headers=ALICE, timeout=10)
        assert refused.status_code == 503, (path, refused.text)
        assert refused.json()["reason"] == "unavailable"
    turned = httpx.post(server.url + "/turn", headers=BOB, json={"text": "hi"}, timeout=10)
    assert turned.status_code == 503 and turned.json()["reason"] == "unavailable"
    directory.failing = False
    people.invalidate()
    assert httpx.get(server.url + "/me", headers=ALICE, timeout=10).status_code == 200


LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("COMMIT")
"""


def lock_database(path: Path, seconds: float) -> subprocess.Popen[str]:
    locker = subprocess.Popen(  # noqa: S603 - our interpreter, our script
        [sys.executable, "-c", LOCKER, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert locker.stdout is not None
    assert locker.stdout.readline().strip() == "locked"
    return locker


async def test_a_database_briefly_locked_by_another_process_delays_writes_but_loses_none(
    server: RunningServer,
) -> None:
    locker = lock_database(server.services.db.path, 1.5)
    try:
        started = time.monotonic()
        saved = httpx.patch(
            server.url + "/me", headers=ALICE, json={"timeZone": "Europe/Rome"}, timeout=30
        )
        assert saved.status_code == 200, saved.text
        assert time.monotonic() - started >= 0.5  # it waited for the lock, then wrote
    finally:
        locker.communicate(timeout=10)
    assert httpx.get(server.url + "/me", headers=ALICE).json()["timeZone"] == "Europe/Rome"


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_database_locked_past_its_busy_timeout_is_a_503_not_a_500(
    server: RunningServer,
) -> None:
    # Warm: every store has made its tables, so only the write itself meets the lock.
    assert httpx.get(server.url + "/me", headers=ALICE).status_code == 200
    assert httpx.patch(server.url + "/me", headers=ALICE, json={"timeZone": "UTC"}).is_success
    locker = lock_database(server.services.db.path, 14)
    try:
        saved = httpx.patch(
            server.url + "/me", headers=ALICE, json={"timeZone": "Europe/Rome"}, timeout=60
        )
        assert saved.status_code == 503, (saved.status_code, saved.text)
    finally:
        locker.communicate(timeout=30)


async def test_memory_down_then_back_reads_empty_then_catches_up_with_nothing_lost(
    make_server: Callable[..., RunningServer], tmp_path: Path, ollama: OllamaStandIn
) -> None:
    down = DownStore(EdgeStore(tmp_path / "edge"))
    server = make_server({"memory": down})
    probe = httpx.get(server.url + "/conversation", headers=ALICE, params={"id": "c1"})
    assert probe.status_code == 200, (probe.status_code, probe.text)
    for i in range(5):
        got = await a_turn(server, f"while-down-{i}")
        assert [name for name, _ in got.terminals()] == ["final"]
    page = httpx.get(server.url + "/conversation", headers=ALICE, params={"id": "c1"}).json()
    assert page == {"ok": True, "messages": [], "nextOffset": None}
    assert httpx.get(server.url + "/health", headers=ALICE).json()["qdrantReachable"] is False
    down.revive()

    def archived() -> list[str]:
        page = httpx.get(server.url + "/conversation", headers=ALICE, params={"id": "c1"})
        contents = [m["content"] for m in page.json()["messages"] if m["role"] == "user"]
        return contents if len(contents) == 5 else []

    contents = await eventually(archived, timeout_s=30, what="the queued messages landing")
    assert contents == [f"while-down-{i}" for i in range(5)]


async def test_a_client_gone_before_its_body_arrives_is_not_a_server_error(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    import socket

    host, port = server.url.removeprefix("http://").split(":")
    for _ in range(3):
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            raw.sendall(
                b"POST /turn HTTP/1.1\r\nhost: x\r\nauthorization: Bearer alice-token\r\n"
                b'content-type: application/json\r\ncontent-length: 100\r\n\r\n{"text": '
            )
            time.sleep(0.2)  # the handler is waiting for the rest of the body
    time.sleep(0.3)
    errors = [r for r in caplog.records if r.levelname == "ERROR" and "500" in r.getMessage()]
    assert errors == [], [r.getMessage() for r in errors]
