"""What the adversarial review of issue #10 broke (part A), each attack replayed over HTTP.

A folder named like a note (500 and one descriptor leaked per read), an outside write lock
held past the busy timeout (every later write a 503 until restart), integer parameters too
long for ``int()``, a grep that outran its budget inside one long line and starved every
other wiki read, two ``Authorization`` headers or a token trailed by Unicode whitespace,
and duplicate keys in a JSON body. Each must now be refused or served, never a 500, a
leak or a stuck server.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from auth_providers.provider import bearer_token
from tests.conftest import ALICE, BOB
from tests.reliability.support import (
    ChildServer,
    Ledger,
    child_env,
    open_fds,
    read_turn,
    tool_then_answer,
)
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ALICE_NOTES = Path("wiki/users/static%3Aalice/notes")


def refused(response: httpx.Response, status: int) -> str:
    """The sentence of an ``{ok:false,error}`` refusal with ``status``."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert body["ok"] is False and isinstance(body["error"], str), body
    assert body["error"].strip() and "Traceback" not in body["error"], body
    return str(body["error"])


# ------------------------------------------------------ 1. a folder named like a note


def wiki_read_then_answer(path: str) -> Callable[[dict[str, Any]], ChatScript]:
    """A responder calling ``wiki_read`` on ``path`` for every new question, then answering."""

    def respond(request: dict[str, Any]) -> ChatScript:
        if request["messages"][-1]["role"] == "tool":
            return ChatScript.words("Read.")
        return ChatScript(tool_calls=[{"name": "wiki_read", "arguments": {"path": path}}])

    return respond


async def test_reading_a_folder_named_like_a_note_is_a_404_and_leaks_no_descriptor(
    tmp_path: Path, ollama: OllamaStandIn
) -> None:
    data = tmp_path / "data"
    (data / ALICE_NOTES / "d.md").mkdir(parents=True)
    (data / "wiki/curated/c.md").mkdir(parents=True)
    env = child_env(data, ollama.url, MERCURY_RATE_LIMIT_PER_USER="1000")
    with ChildServer(env, tmp_path / "child.log") as child:
        assert child.process is not None
        pid = child.process.pid
        async with httpx.AsyncClient(base_url=child.url, timeout=30) as client:
            paths = ["personal/notes/d.md", "curated/c.md"]
            for path in paths:  # warm: the first read settles the server's own descriptors
                refused(await client.get("/wiki/read", params={"path": path}, headers=ALICE), 404)
            before = open_fds(pid)
            for number in range(300):
                path = paths[number % 2]
                response = await client.get("/wiki/read", params={"path": path}, headers=ALICE)
                refused(response, 404)
            after = open_fds(pid)
            assert after - before <= 3, (before, after)

            ollama.responder = wiki_read_then_answer("personal/notes/d.md")
            before = open_fds(pid)
            for number in range(20):
                turn = await read_turn(client, {"text": f"read d {number}"}, ALICE)
                assert turn.names()[-1] == "final", turn.events
            after = open_fds(pid)
            assert after - before <= 3, (before, after)
            log = (await client.get("/tool-log", headers=ALICE)).json()["entries"]
            reads = [entry for entry in log if entry["toolName"] == "wiki_read"]
            assert len(reads) == 20, log
            assert all("There is no wiki note" in entry["output"] for entry in reads), reads
        assert "Traceback" not in child.log()


# ------------------------------------------------------ 2. a write lock held past the timeout

HOLDER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
db.execute("CREATE TABLE IF NOT EXISTS outside_tool (at REAL)")
db.execute("INSERT INTO outside_tool VALUES (?)", (time.time(),))
print("locked", flush=True)
sys.stdin.readline()  # held until the test says so, however slow the machine
db.execute(sys.argv[2])
print("released", flush=True)
"""
BUSY_TIMEOUT_S = "2"  # the server's wait for the lock (MERCURY_STATE_BUSY_TIMEOUT_S)


def hold_database(path: Path, end: str) -> subprocess.Popen[str]:
    """Another process holding the file's write lock until ``release`` is written to it."""
    holder = subprocess.Popen(  # noqa: S603 - our interpreter, our script
        [sys.executable, "-c", HOLDER, str(path), end],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    return holder


@pytest.mark.parametrize("end", ["COMMIT", "ROLLBACK"])
async def test_a_write_lock_held_past_the_busy_timeout_is_a_503_then_every_write_recovers(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, end: str
) -> None:
    ledger = Ledger()
    server = make_server(
        {"plugins": [ledger.plugin()]},
        MERCURY_RATE_LIMIT_PER_USER="1000",
        MERCURY_STATE_BUSY_TIMEOUT_S=BUSY_TIMEOUT_S,
    )
    # Warm: every store has made its tables, so only the writes below meet the lock.
    assert httpx.patch(server.url + "/me", headers=ALICE, json={"timeZone": "UTC"}).is_success
    assert httpx.post(server.url + "/link", headers=ALICE).is_success
    reads = [("/tool-log", ALICE), ("/confirmations", ALICE), ("/me", BOB)]
    for path, headers in reads:
        assert httpx.get(server.url + path, headers=headers).status_code == 200
    holder = hold_database(server.services.db.path, end)
    try:
        waited = time.monotonic()
        during = httpx.patch(
            server.url + "/me", headers=ALICE, json={"timeZone": "Europe/Rome"}, timeout=60
        )
        refused(during, 503)
        # Refused after the busy timeout, not at once: the write waited for the lock.
        assert time.monotonic() - waited >= float(BUSY_TIMEOUT_S) / 2
        assert during.headers["retry-after"]
        # Reads go on while the lock is held (WAL); on the old code the first of them pinned
        # the failed write's open transaction to a snapshot the holder's commit made stale.
        for path, headers in reads:
            read = httpx.get(server.url + path, headers=headers, timeout=30)
            assert read.status_code == 200, (path, read.text)
    finally:
        assert holder.communicate("release\n", timeout=60)[0].strip() == "released"
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        saved = await client.patch("/me", headers=ALICE, json={"timeZone": "Europe/Paris"})
        assert saved.status_code == 200, saved.text
        assert (await client.get("/me", headers=ALICE)).json()["timeZone"] == "Europe/Paris"
        linked = await client.post("/link", headers=ALICE)
        assert linked.status_code == 200, linked.text
        ollama.responder = tool_then_answer("jot", entry="after-the-lock")
        jotted = await read_turn(client, {"text": "jot", "conversationId": "c1"}, ALICE)
        assert jotted.names()[-1] == "final", jotted.events
        ollama.responder = tool_then_answer("book", entry="staged-after-the-lock")
        staged = await read_turn(client, {"text": "book", "conversationId": "c2"}, ALICE)
        assert "pending" in staged.names(), staged.events
        pending = (await client.get("/confirmations", headers=ALICE)).json()["pending"]
        assert [item["summary"] for item in pending] == ["Book staged-after-the-lock"]
        log = (await client.get("/tool-log", headers=ALICE)).json()["entries"]
        assert any(entry["toolName"] == "jot" for entry in log), log
    assert [run["entry"] for run in ledger.runs] == ["after-the-lock"]


# ------------------------------------------------------ 7. integers too long for int()


async def test_integer_query_parameters_of_any_length_are_a_400_with_a_sentence(
    make_server: Callable[..., RunningServer],
) -> None:
    server = make_server(None, MERCURY_MEMORY_STORE="edge")
    huge = "9" * 5000
    zeros = "0" * 5000 + "7"
    cursor = base64.urlsafe_b64encode(
        f'[{huge}, "00000000-0000-0000-0000-000000000000"]'.encode()
    ).decode()
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        for path, query in [
            ("/conversations", {"limit": huge}),
            ("/conversation", {"id": "c1", "limit": huge}),
            ("/memory/scroll", {"collection": "semantic_facts", "limit": huge}),
            ("/conversations", {"limit": "-" + huge}),
        ]:
            message = refused(await client.get(path, params=query, headers=ALICE), 400)
            assert "limit" in message and "500" in message, message
        # Leading zeros don't make a number larger: 000…07 is seven.
        kept = await client.get("/conversations", params={"limit": zeros}, headers=ALICE)
        assert kept.status_code == 200, kept.text
        offset = await client.get(
            "/conversation", params={"id": "c1", "offset": cursor}, headers=ALICE
        )
        refused(offset, 400)
        body = await client.post(
            "/turn", headers=ALICE, content=b'{"text": ' + huge.encode() + b"}"
        )
        refused(body, 400)


# ------------------------------------------------------ 8. grep inside one long line

SLOW_PATTERN = "a.{120}x"  # under the program-size cap, yet ~5 s over 1 MB of a/b text


def write_long_line(notes: Path, name: str = "long.md") -> None:
    notes.mkdir(parents=True, exist_ok=True)
    generator = random.Random(7)
    line = "".join(generator.choice("ab") for _ in range(1024 * 1024 - 16))
    (notes / name).write_text(line)


async def test_a_grep_inside_one_long_line_answers_within_its_budget(
    make_server: Callable[..., RunningServer],
) -> None:
    server = make_server()
    notes = server.services.settings.data_dir / ALICE_NOTES
    write_long_line(notes)
    budget = 2.0  # the server's default grep budget
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        # A pattern whose program is too large for a bounded search is refused at once.
        message = refused(
            await client.get("/wiki/grep", params={"pattern": "(?:.{0,100}){9}x"}, headers=ALICE),
            400,
        )
        assert "simpler" in message, message
        started = time.monotonic()
        answered = await client.get("/wiki/grep", params={"pattern": SLOW_PATTERN}, headers=ALICE)
        elapsed = time.monotonic() - started
        assert answered.status_code == 200, answered.text
        assert answered.json()["matches"] == []
        # One search of the whole line took ~5 s here (the review's pattern 17 s); the deadline
        # is now checked every window, whose work is a fraction of a second.
        assert elapsed < budget * 2, elapsed
        # A match deep inside the long line is still found.
        (notes / "tail.md").write_text("ab" * 100_000 + "needle-in-the-line" + "ab" * 100_000)
        found = await client.get("/wiki/grep", params={"pattern": "needle-in"}, headers=ALICE)
        assert [m["path"] for m in found.json()["matches"]] == ["personal/notes/tail.md"]


async def test_concurrent_greps_do_not_delay_another_persons_wiki_read(
    make_server: Callable[..., RunningServer],
) -> None:
    server = make_server()
    data_dir = server.services.settings.data_dir
    write_long_line(data_dir / ALICE_NOTES)
    bob_notes = data_dir / "wiki/users/static%3Abob/notes"
    bob_notes.mkdir(parents=True)
    (bob_notes / "mine.md").write_text("Bob's own note.\n")
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        # Warm: the first request pays for imports and the first thread.
        assert (
            await client.get("/wiki/read", params={"path": "personal/notes/mine.md"}, headers=BOB)
        ).status_code == 200
        grep_ends: list[float] = []

        async def grep() -> None:
            await client.get("/wiki/grep", params={"pattern": SLOW_PATTERN}, headers=ALICE)
            grep_ends.append(time.monotonic())

        started = time.monotonic()
        greps = [asyncio.create_task(grep()) for _ in range(6)]
        await asyncio.sleep(0.3)  # the greps are running
        read_started = time.monotonic()
        read = await client.get(
            "/wiki/read", params={"path": "personal/notes/mine.md"}, headers=BOB
        )
        read_ended = time.monotonic()
        await asyncio.gather(*greps)
    assert read.status_code == 200 and read.json()["content"] == "Bob's own note.\n"
    first_grep = min(grep_ends) - started
    # Order and ratio: Bob's read answers long before the first grep does.
    assert read_ended < min(grep_ends), (read_ended - started, first_grep)
    assert (read_ended - read_started) * 4 < first_grep, (read_ended - read_started, first_grep)


# ------------------------------------------------------ 11. the Authorization header


def raw_get(server: RunningServer, path: str, headers: list[tuple[bytes, bytes]]) -> Any:
    with httpx.Client(base_url=server.url, timeout=20) as client:
        return client.get(path, headers=headers)


def test_two_authorization_headers_are_refused_even_when_both_are_valid(
    server: RunningServer,
) -> None:
    alice, bob = ALICE["authorization"].encode(), BOB["authorization"].encode()
    for pair in [(alice, bob), (alice, alice), (b"Bearer nobody", alice)]:
        response = raw_get(
            server, "/me", [(b"authorization", pair[0]), (b"authorization", pair[1])]
        )
        message = refused(response, 400)
        assert "authorization" in message.lower(), message
    assert raw_get(server, "/me", [(b"authorization", alice)]).status_code == 200


def test_a_token_trailed_by_unicode_whitespace_is_not_accepted(server: RunningServer) -> None:
    token = ALICE["authorization"].encode()
    for tail in [b"\xa0", b"\x85", b"\xe2\x80\x83"]:
        response = raw_get(server, "/me", [(b"authorization", token + tail)])
        refused(response, 401)
    assert raw_get(server, "/me", [(b"authorization", token)]).status_code == 200
    # HTTP clients and servers trim a value's own spaces and tabs; the rule keeps them optional.
    for tail in [" ", "\t", "  \t "]:
        assert bearer_token({"authorization": "Bearer alice-token" + tail}) == "alice-token"
    for tail in ["\xa0", "\x85", "\u2003"]:
        assert bearer_token({"authorization": "Bearer alice-token" + tail}) != "alice-token"


# ------------------------------------------------------ 12. nosniff, duplicate keys


def test_the_login_page_forbids_content_sniffing(
    make_server: Callable[..., RunningServer],
) -> None:
    server = make_server(None, HTTP_SURFACE_PUBLIC_URL="https://chat.example/mercury")
    for query in [{"error": "<script>alert(1)</script>"}, {}, {"state": "s", "code": "c"}]:
        response = httpx.get(server.url + "/mercury/login/callback", params=query)
        assert response.status_code == 400, response.text
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["content-type"].startswith("text/plain")


def test_a_body_with_a_duplicate_key_is_a_400_naming_the_key(server: RunningServer) -> None:
    with httpx.Client(base_url=server.url, timeout=20, headers=ALICE) as client:
        for method, path, raw, key in [
            ("PATCH", "/me", b'{"timeZone": "UTC", "timeZone": "Europe/Rome"}', "timeZone"),
            ("POST", "/turn", b'{"text": "hi", "text": "bye"}', "text"),
            ("POST", "/confirm", b'{"token": "a", "conversationId": "c", "token": "b"}', "token"),
            ("POST", "/turn", b'{"text": "hi", "t\\u0065xt": "bye"}', "text"),
        ]:
            response = client.request(
                method, path, content=raw, headers={"content-type": "application/json"}
            )
            message = refused(response, 400)
            assert key in message and "once" in message, message
        assert client.get("/me").json()["timeZone"] != "Europe/Rome"
        same = client.patch("/me", content=json.dumps({"timeZone": "Europe/Rome"}).encode())
        assert same.status_code == 200, same.text
