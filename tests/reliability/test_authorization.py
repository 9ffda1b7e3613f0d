"""Object-level authorization: Bob against everything Alice owns, route by route.

Alice jots through a tool (the tool log), stages two actions (one pending, one confirmed and
waiting to be resumed), keeps a private wiki note, saves a time zone, asks for a link code,
talks in two conversations (the archive) and sends a file over ``POST /chat`` that the model
reads, answering with a file of its own (her inbox and outbox). Bob, a second static-token
caller, then tries every per-person route, action, tool and file: he never sees, confirms,
resumes or redeems any of it, and Alice still can afterwards.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conftest import ALICE, BOB
from tests.reliability.support import Ledger, eventually, read_turn, tool_then_answer
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

SECRET_ENTRY = "alice-entry-5f1c"
SECRET_NOTE = "alice-note-a9e2"
SECRET_TALK = "alice-talk-77d0"
SECRET_FILE = b"alice-file-3c81"
SECRET_OUT = "alice-out-e402"


@dataclass
class AliceWorld:
    server: RunningServer
    ledger: Ledger
    pending_token: str
    link_code: str
    inbox_path: str


def call(server: RunningServer, method: str, path: str, headers: dict[str, str], **kw: Any) -> Any:
    response = httpx.request(method, server.url + path, headers=headers, timeout=15, **kw)
    assert response.status_code < 500, response.text
    return response


async def alice_builds_her_world(server: RunningServer, ollama: OllamaStandIn) -> AliceWorld:
    ledger: Ledger = server.ledger  # type: ignore[attr-defined]
    async with httpx.AsyncClient(base_url=server.url) as client:
        ollama.responder = tool_then_answer("jot", entry=SECRET_ENTRY)
        jotted = await read_turn(client, {"text": "jot", "conversationId": "c1"}, ALICE)
        assert jotted.names()[-1] == "final", jotted.events
        ollama.responder = tool_then_answer("book", entry="pending-one")
        staged = await read_turn(client, {"text": "book", "conversationId": "c1"}, ALICE)
        pending_token = next(data for name, data in staged.events if name == "pending")["token"]
        ollama.responder = tool_then_answer("book_and_tell", entry="handed-back")
        told = await read_turn(client, {"text": "book+tell", "conversationId": "c2"}, ALICE)
        tell_token = next(data for name, data in told.events if name == "pending")["token"]
        ollama.responder = None
        confirmed = call(
            server, "POST", "/confirm", ALICE, json={"token": tell_token, "conversationId": "c2"}
        ).json()
        assert confirmed == {"ok": True, "resolved": True, "resume": True}
        talk = await read_turn(client, {"text": SECRET_TALK, "conversationId": "c3"}, ALICE)
        assert talk.names()[-1] == "final"
    server.call(
        server.services.vault.write_note("static:alice", "personal/notes/private.md", SECRET_NOTE)
    )
    assert call(server, "PATCH", "/me", ALICE, json={"timeZone": "Europe/Rome"}).status_code == 200
    code = call(server, "POST", "/link", ALICE).json()["code"]
    ollama.responder = tool_then_answer("outbox_write", filename="answer.txt", content=SECRET_OUT)
    body = {
        "text": "file this",
        "conversationId": "c4",
        "files": [{"name": "secret.txt", "data": base64.b64encode(SECRET_FILE).decode()}],
    }
    filed = call(server, "POST", "/chat", ALICE, json=body).json()
    assert [base64.b64decode(f["data"]) for f in filed["files"]] == [SECRET_OUT.encode()]
    inbox_path = re.findall(r"^- (inbox/.+)$", ollama.requests[-2]["messages"][-1]["content"], re.M)
    ollama.responder = None
    assert [run["entry"] for run in ledger.runs] == [SECRET_ENTRY, "handed-back"]
    return AliceWorld(server, ledger, pending_token, code, inbox_path[0])


@pytest.fixture
async def world(make_server: Callable[..., RunningServer], ollama: OllamaStandIn) -> AliceWorld:
    ledger = Ledger()
    server = make_server(
        {"plugins": [ledger.plugin()]},
        MERCURY_RATE_LIMIT_PER_USER="1000",
        MERCURY_MEMORY_STORE="edge",
    )
    server.ledger = ledger  # type: ignore[attr-defined]
    return await alice_builds_her_world(server, ollama)


def bobs_reads(server: RunningServer) -> dict[str, Any]:
    reads = {
        "/confirmations": call(server, "GET", "/confirmations", BOB).json(),
        "/tool-log": call(server, "GET", "/tool-log", BOB).json(),
        "/wiki/list": call(server, "GET", "/wiki/list", BOB).json(),
        "/wiki/read": call(
            server, "GET", "/wiki/read", BOB, params={"path": "personal/notes/private.md"}
        ).json(),
        "/wiki/grep": call(server, "GET", "/wiki/grep", BOB, params={"pattern": "alice"}).json(),
        "/me": call(server, "GET", "/me", BOB).json(),
    }
    return reads


async def test_bob_reads_nothing_of_alices_on_any_per_person_route(
    world: AliceWorld, ollama: OllamaStandIn
) -> None:
    server = world.server
    reads = bobs_reads(server)
    assert reads["/confirmations"] == {"ok": True, "pending": []}
    assert reads["/tool-log"] == {"ok": True, "entries": []}
    assert not any("personal/notes/private.md" == f for f in reads["/wiki/list"]["files"])
    assert reads["/wiki/read"]["ok"] is False
    assert reads["/wiki/grep"] == {"ok": True, "matches": []}
    assert reads["/me"]["timeZone"] is None
    everything = json.dumps(reads)
    for secret in (SECRET_ENTRY, SECRET_NOTE, world.pending_token, world.link_code, "Europe/Rome"):
        assert secret not in everything
    # …while Alice still reads all of it.
    assert len(call(server, "GET", "/confirmations", ALICE).json()["pending"]) == 1
    assert SECRET_ENTRY in json.dumps(call(server, "GET", "/tool-log", ALICE).json())
    grep = call(server, "GET", "/wiki/grep", ALICE, params={"pattern": SECRET_NOTE}).json()
    assert [m["path"] for m in grep["matches"]] == ["personal/notes/private.md"]
    assert call(server, "GET", "/me", ALICE).json()["timeZone"] == "Europe/Rome"


async def test_bob_confirms_nothing_of_alices_by_route_or_by_bare_token(
    world: AliceWorld, ollama: OllamaStandIn
) -> None:
    server, token = world.server, world.pending_token
    for conversation in ("c1", "c2", "bob"):
        refused = call(
            server, "POST", "/confirm", BOB, json={"token": token, "conversationId": conversation}
        ).json()
        assert refused == {"ok": True, "resolved": False}
    async with httpx.AsyncClient(base_url=server.url) as client:
        for body in ({"text": token, "conversationId": "c1"}, {"text": token}):
            bare = await read_turn(client, body, BOB)
            assert bare.names() == ["final"]
            assert bare.events[0][1]["text"].startswith("There is no pending confirmation")
    assert [run["entry"] for run in world.ledger.runs] == [SECRET_ENTRY, "handed-back"]
    assert len(call(server, "GET", "/confirmations", ALICE).json()["pending"]) == 1
    mine = call(
        server, "POST", "/confirm", ALICE, json={"token": token, "conversationId": "c1"}
    ).json()
    assert mine["resolved"] is True
    assert world.ledger.runs[-1] == {"person": "static:alice", "entry": "pending-one"}


async def test_bob_resumes_nothing_of_alices(world: AliceWorld, ollama: OllamaStandIn) -> None:
    server = world.server
    ollama.responder = lambda request: ChatScript.words("It was booked.")
    async with httpx.AsyncClient(base_url=server.url) as client:
        by_bob = await read_turn(client, {"resume": True, "conversationId": "c2"}, BOB)
        assert by_bob.names() == ["final"]
        assert by_bob.events[0][1]["text"] == (
            "The answer to this confirmation is no longer available."
        )
        assert "handed-back" not in json.dumps(ollama.requests[-1:])  # Bob reached no model
        heard = await read_turn(client, {"resume": True, "conversationId": "c2"}, ALICE)
        assert heard.names()[-1] == "final"
        assert heard.events[-1][1]["text"] == "It was booked."


async def test_bob_can_neither_reuse_nor_replace_alices_link_code(
    world: AliceWorld, ollama: OllamaStandIn
) -> None:
    server = world.server
    bobs = call(server, "POST", "/link", BOB).json()["code"]
    assert bobs != world.link_code
    async with httpx.AsyncClient(base_url=server.url) as client:
        # Alice's own account can't redeem her code, and Bob's code doesn't open Alice's area.
        own = await read_turn(client, {"text": world.link_code}, ALICE)
        assert own.events[0][1]["text"] == "That code is for linking another account to this one."
        guessed = await read_turn(client, {"text": "Aaaa-Bbbb-Cccc"}, BOB)
        assert "isn't valid" in guessed.events[0][1]["text"]
    # Bob asking for his own code left Alice's usable: a single send from another account
    # only announces the link (it takes the second to link), and nothing of Alice's showed.
    reads = json.dumps(bobs_reads(server))
    assert SECRET_NOTE not in reads and SECRET_ENTRY not in reads


async def test_bob_reaches_nothing_of_alices_inbox_or_outbox(
    world: AliceWorld, ollama: OllamaStandIn
) -> None:
    server = world.server
    script = [
        ChatScript(tool_calls=[{"name": "inbox_list", "arguments": {}}]),
        ChatScript(tool_calls=[{"name": "inbox_read", "arguments": {"path": world.inbox_path}}]),
        ChatScript(
            tool_calls=[
                {"name": "outbox_write", "arguments": {"filename": "x.txt", "content": "b"}}
            ]
        ),
    ]
    ollama.responder = lambda request: script.pop(0) if script else ChatScript.words("ok")
    asked = len(ollama.requests)
    answer = call(server, "POST", "/chat", BOB, json={"text": "my files?", "conversationId": "c4"})
    told = [
        re.sub(r"\A\[toolCallId: [^\]]*\]\n", "", r["messages"][-1]["content"])
        for r in ollama.requests[asked + 1 :]
    ]
    assert json.loads(told[0]) == {"files": []}
    assert told[1].startswith("Error: There is no file")
    # Bob gets his own file back, never Alice's, and hers stays as it was.
    assert [f["filename"] for f in answer.json()["files"]] == ["x.txt"]
    everything = answer.text + json.dumps(told)
    for secret in (SECRET_FILE.decode(), SECRET_OUT, base64.b64encode(SECRET_FILE).decode()):
        assert secret not in everything
    alice = server.call(server.services.files.read("static:alice", world.inbox_path))
    assert alice[1] == SECRET_FILE
    hers = server.call(server.services.files.read("static:alice", "answer.txt", "outbox"))
    assert hers[1] == SECRET_OUT.encode()
    # Nothing Bob does with names reaches another area.
    for name in ("../static%3Aalice/inbox/x", "..", "/etc/passwd"):
        refused = call(
            server,
            "POST",
            "/chat",
            BOB,
            json={"text": "x", "files": [{"name": name, "data": "eA=="}]},
        )
        assert refused.status_code == 400


async def test_bob_sees_nothing_of_alices_archive(world: AliceWorld) -> None:
    server = world.server
    probe = httpx.get(server.url + "/conversation", headers=ALICE, params={"id": "c3"})
    assert probe.status_code == 200, (probe.status_code, probe.text)
    await eventually(
        lambda: (
            SECRET_TALK
            in json.dumps(call(server, "GET", "/conversation", ALICE, params={"id": "c3"}).json())
        ),
        what="Alice's message reaching the archive",
    )
    for conversation in ("c1", "c2", "c3"):
        page = call(server, "GET", "/conversation", BOB, params={"id": conversation}).json()
        assert page["messages"] == [], conversation
    assert call(server, "GET", "/conversations", BOB).json()["conversations"] == []
    names = server.services.collection_names
    for collection in (names.verbatim, names.episodic, names.semantic):
        scrolled = call(server, "GET", "/memory/scroll", BOB, params={"collection": collection})
        assert scrolled.status_code == 200, scrolled.text
        assert SECRET_TALK not in scrolled.text and "static:alice" not in scrolled.text
