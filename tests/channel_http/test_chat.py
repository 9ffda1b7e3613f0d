"""``POST /chat`` end to end over HTTP: files in and out, limits, confirmations, bridges,
cancellation and the time limit, against a real server and the Ollama stand-in."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.tools.registry import Plugin, Tool, ToolCallContext
from tests.conftest import ALICE, BOB
from tests.support.contract import check_response
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer

pytestmark = [pytest.mark.timeout(60)]

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def call(tool: str, /, **arguments: Any) -> ChatScript:
    return ChatScript(tool_calls=[{"name": tool, "arguments": arguments}])


def steps(*scripts: Callable[[dict[str, Any]], ChatScript] | ChatScript) -> Any:
    """A responder: each step in turn (a script, or a function of the request), then "Done."."""
    pending = list(scripts)

    def respond(request: dict[str, Any]) -> ChatScript:
        if not pending:
            return ChatScript.words("Done.")
        step = pending.pop(0)
        return step(request) if callable(step) else step

    return respond


def sent_paths(request: dict[str, Any]) -> list[str]:
    """The inbox paths the attachments note of the last user message names."""
    user = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
    return re.findall(r"^- (inbox/.+)$", user, re.MULTILINE)


def tool_result(message: dict[str, Any]) -> str:
    """A tool message's content without the ``[toolCallId: …]`` line the engine puts first."""
    content: str = message["content"]
    return re.sub(r"\A\[toolCallId: [^\]]*\]\n", "", content)


def post(server: RunningServer, body: Any, headers: Mapping[str, str] = ALICE, **kw: Any) -> Any:
    """POST /chat; every answer is held to openapi.yaml (status documented, body fits)."""
    response = httpx.post(server.url + "/chat", json=body, headers=dict(headers), timeout=30, **kw)
    check_response(response)
    return response


def private_area(server: RunningServer, person_key: str) -> Path:
    from urllib.parse import quote

    return Path(server.services.settings.wiki.vault_path) / "users" / quote(person_key, safe="")


# ------------------------------------------------------------------------------ files


def test_a_file_goes_in_and_a_file_comes_out_with_equal_bytes(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    produced = bytes(range(256)) * 3
    ollama.responder = steps(
        lambda request: call("inbox_read", path=sent_paths(request)[0]),
        call("outbox_write", filename="result.bin", content=b64(produced), encoding="base64"),
        ChatScript.words("Here is your file."),
    )
    answer = post(
        server,
        {
            "text": "Turn this into numbers",
            "conversationId": "files-1",
            "files": [{"name": "notes.txt", "data": b64(b"line one\nline two\n")}],
        },
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["ok"] is True
    assert body["reply"] == "Here is your file."
    assert [f["filename"] for f in body["files"]] == ["result.bin"]
    out = body["files"][0]
    assert base64.b64decode(out["data"]) == produced
    assert out["sizeBytes"] == len(produced)
    assert out["mimeType"] == "application/octet-stream"
    first = ollama.requests[0]["messages"]
    paths = sent_paths(ollama.requests[0])
    assert len(paths) == 1 and paths[0].endswith("-notes.txt")
    assert "Turn this into numbers" in first[-1]["content"]
    read_back = ollama.requests[1]["messages"][-1]
    assert read_back["role"] == "tool" and tool_result(read_back) == "line one\nline two\n"
    area = private_area(server, "static:alice")
    assert (area / paths[0]).read_bytes() == b"line one\nline two\n"
    assert (area / "outbox" / "result.bin").read_bytes() == produced


def test_each_answer_carries_only_its_own_turns_files_not_a_parallel_turns(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    """#34: two conversations of one person share the outbox; neither answer carries the
    other's file, however their turns interleave."""

    def respond(request: dict[str, Any]) -> ChatScript:
        words = [m["content"] for m in request["messages"] if m["role"] == "user"][-1]
        mine = "a.txt" if "first" in words else "b.txt"
        if not any(m["role"] == "tool" for m in request["messages"]):
            return call("outbox_write", filename=mine, content=mine)
        return ChatScript(content=["done"], delay_s=1.5 if mine == "a.txt" else 0.0)

    ollama.responder = respond
    outbox = private_area(server, "static:alice") / "outbox"
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(post, server, {"text": "first", "conversationId": "one"})
        deadline = time.monotonic() + 20
        while not (outbox / "a.txt").exists():
            assert time.monotonic() < deadline, "the first turn wrote no a.txt"
            time.sleep(0.02)
        second = post(server, {"text": "second", "conversationId": "two"}).json()
        assert [f["filename"] for f in second["files"]] == ["b.txt"]
        assert [f["filename"] for f in first.result().json()["files"]] == ["a.txt"]


def test_older_outbox_files_are_kept_and_never_sent_again(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = steps(call("outbox_write", filename="a.csv", content="x,y\n1,2\n"))
    first = post(server, {"text": "make a", "conversationId": "keep"}).json()
    assert [(f["filename"], f["mimeType"]) for f in first["files"]] == [("a.csv", "text/csv")]
    ollama.responder = steps(call("outbox_write", filename="b.md", content="# B\n"))
    second = post(server, {"text": "make b", "conversationId": "keep"}).json()
    assert [f["filename"] for f in second["files"]] == ["b.md"]
    ollama.responder = steps(call("outbox_write", filename="a.csv", content="x,y\n3,4\n"))
    third = post(server, {"text": "redo a", "conversationId": "keep"}).json()
    assert [f["filename"] for f in third["files"]] == ["a.csv"]
    assert base64.b64decode(third["files"][0]["data"]) == b"x,y\n3,4\n"
    outbox = private_area(server, "static:alice") / "outbox"
    assert sorted(p.name for p in outbox.iterdir()) == ["a.csv", "b.md"]


def test_the_type_is_read_from_the_bytes_not_the_name(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = steps(call("inbox_list"))
    answer = post(
        server,
        {
            "text": "what did I send?",
            "files": [
                {"name": "photo.txt", "data": b64(PNG)},
                {"name": "table.png", "data": b64(b"a,b\n1,2\n")},
            ],
        },
    )
    assert answer.status_code == 200, answer.text
    listed = json.loads(tool_result(ollama.requests[1]["messages"][-1]))["files"]
    types = {entry["path"].split("-", 1)[1]: entry["type"] for entry in listed}
    assert types == {"photo.txt": "image/png", "table.png": "text/plain"}


def test_an_image_reaches_a_model_that_sees_images_through_the_images_field(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.vision = True
    ollama.responder = steps(
        lambda request: call("inbox_read", path=sent_paths(request)[0]),
        ChatScript.words("A single pixel."),
    )
    answer = post(server, {"text": "what is it?", "files": [{"name": "p.png", "data": b64(PNG)}]})
    assert answer.json()["reply"] == "A single pixel."
    told = ollama.requests[1]["messages"][-1]
    assert told["role"] == "tool" and told["images"] == [b64(PNG)]


def test_a_model_without_vision_is_told_it_cannot_see_the_image(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = steps(
        lambda request: call("inbox_read", path=sent_paths(request)[0]),
        ChatScript.words("I can't see it."),
    )
    post(server, {"text": "what is it?", "files": [{"name": "p.png", "data": b64(PNG)}]})
    told = ollama.requests[1]["messages"][-1]
    assert "images" not in told
    assert "can't see images" in told["content"]


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("../escape.txt", "is a path"),
        ("folder/inner.txt", "is a path"),
        ("..", "is a path"),
        (".bashrc", "hidden file"),
        ("bell\x07.txt", "control or invisible"),
        ("right\u202eto-left.txt", "control or invisible"),
        ("", "has no name"),
        ("x" * 300, "too long"),
    ],
)
def test_bad_names_are_refused_with_400_and_nothing_is_saved(
    server: RunningServer, ollama: OllamaStandIn, name: str, words: str
) -> None:
    answer = post(server, {"text": "hi", "files": [{"name": name, "data": b64(b"x")}]})
    assert answer.status_code == 400
    assert answer.json()["ok"] is False
    assert words in answer.json()["error"]
    assert ollama.requests == []
    assert not (private_area(server, "static:alice") / "inbox").exists()


def test_limits_per_file_and_per_turn_are_refused_with_413_naming_the_limit(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server(CHAT_MAX_FILE_BYTES="2048", CHAT_MAX_TURN_BYTES="3072")
    one = post(server, {"text": "hi", "files": [{"name": "big.bin", "data": b64(b"x" * 2049)}]})
    assert one.status_code == 413
    assert one.json()["error"] == ('The file "big.bin" is larger than the limit of 2 KiB per file.')
    two = post(
        server,
        {
            "text": "hi",
            "files": [
                {"name": "a.bin", "data": b64(b"x" * 2000)},
                {"name": "b.bin", "data": b64(b"x" * 2000)},
            ],
        },
    )
    assert two.status_code == 413
    assert two.json()["error"] == (
        "The files are larger together than the limit of 3 KiB per turn."
    )
    huge = httpx.post(
        server.url + "/chat",
        content=b'{"text":"hi","files":[{"name":"h","data":"' + b"A" * 2_000_000 + b'"}]}',
        headers={**ALICE, "content-type": "application/json"},
        timeout=30,
    )
    assert huge.status_code == 413
    assert "3 KiB" in huge.json()["error"]
    assert ollama.requests == []
    ok = post(server, {"text": "hi", "files": [{"name": "fits.bin", "data": b64(b"x" * 2048)}]})
    assert ok.status_code == 200


def test_bodies_that_break_the_shape_are_refused_with_a_sentence(server: RunningServer) -> None:
    cases: list[tuple[Any, str]] = [
        ({"text": "hi", "files": [{"name": "a", "data": "not base64!"}]}, "base64"),
        ({"text": "hi", "files": [{"data": "aGk="}]}, "files[0].name"),
        ({"text": "hi", "files": {}}, '"files"'),
        ({"text": "hi", "extra": 1}, '"extra" is not allowed'),
        ({"text": "   "}, "missing or blank"),
        ({"text": "hi", "conversationId": "a b"}, "conversationId"),
        (
            {"text": "hi", "files": [{"name": f"{n}.txt", "data": "eA=="} for n in range(21)]},
            "at most 20 files",
        ),
    ]
    for body, words in cases:
        answer = post(server, body)
        assert answer.status_code == 400, body
        assert words in answer.json()["error"], (body, answer.json())


def test_files_alone_make_a_turn(server: RunningServer, ollama: OllamaStandIn) -> None:
    answer = post(server, {"files": [{"name": "n.txt", "data": b64(b"hello")}]})
    assert answer.status_code == 200
    assert len(sent_paths(ollama.requests[0])) == 1


# ---------------------------------------------------------------------- confirmations


class Counter:
    def __init__(self) -> None:
        self.runs: list[str] = []

    async def bump(self, context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        self.runs.append(context.person.key)
        return "bumped"

    def plugin(self) -> Plugin:
        schema = {"type": "object", "properties": {"by": {"type": "integer"}}, "required": ["by"]}
        return Plugin(
            name="counter",
            api_version=4,
            tools=(
                Tool(
                    name="bump",
                    description="Add to the counter.",
                    parameters=schema,
                    run=self.bump,
                    confirm=True,
                    summary=lambda context, arguments: f"Add {arguments['by']}",
                ),
            ),
        )


def test_a_staging_is_answered_pending_and_confirmed_by_its_token_without_the_model(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    counter = Counter()
    server = make_server({"plugins": [counter.plugin()]})
    ollama.responder = steps(call("bump", by=2), ChatScript.words(""))
    staged = post(server, {"text": "bump it", "conversationId": "conf"}).json()
    pending = staged["pending"]
    assert pending["command"] == "Add 2"
    assert pending["choices"] == [{"token": pending["token"], "label": ""}]
    assert staged["reply"] == "Action pending, waiting for confirmation."
    assert counter.runs == []
    asked = len(ollama.requests)
    wrong = post(server, {"text": pending["token"], "conversationId": "conf"}, BOB).json()
    assert "no pending confirmation" in wrong["reply"]
    done = post(server, {"text": pending["token"], "conversationId": "conf"}).json()
    assert done == {"ok": True, "reply": "Confirmed and done.", "files": []}
    assert counter.runs == ["static:alice"]
    assert len(ollama.requests) == asked


# ---------------------------------------------------------------------------- bridges

PEOPLE = [
    {"id": "alice", "roles": ["mercury.bridge"], "identities": ["static:alice"]},
    {"id": "bob", "identities": ["static:bob"]},
    {"id": "carol", "displayName": "Carol", "identities": ["discord:42"]},
]


def test_a_bridge_acts_for_another_caller_and_others_are_refused(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server(DIRECTORY_STATIC_PEOPLE=json.dumps(PEOPLE))
    ollama.responder = steps(call("outbox_write", filename="for-carol.txt", content="hi Carol"))
    body = {
        "text": "hello",
        "callerId": "discord:42",
        "authorName": "Carol D.",
        "spaceId": "general",
        "files": [{"name": "from-carol.txt", "data": b64(b"carol's")}],
    }
    acted = post(server, body)
    assert acted.status_code == 200, acted.text
    assert [f["filename"] for f in acted.json()["files"]] == ["for-carol.txt"]
    carol = private_area(server, "people:carol")
    assert [p.name.split("-", 1)[1] for p in (carol / "inbox").iterdir()] == ["from-carol.txt"]
    assert not private_area(server, "people:alice").exists()
    # The conversation is Carol's, named by the space.
    assert server.call(server.services.manager.confirmations.pending("people:carol")) == []
    assert "people:carol:general" in server.services.manager.sessions

    refused = post(server, body, BOB)
    assert refused.status_code == 403
    assert "mercury.bridge" in refused.json()["error"]
    assert post(server, {"text": "hi", "spaceId": "x"}, BOB).status_code == 403
    as_local = post(server, {"text": "hi", "callerId": "static:bob"})
    assert as_local.status_code == 403
    unknown = post(server, {"text": "hi", "callerId": "discord:999"})
    assert unknown.status_code == 403 and unknown.json()["reason"] == "unknown"
    assert post(server, {"text": "hi", "callerId": "no colon"}).status_code == 400
    assert not (carol / "outbox" / "x").exists()


# ------------------------------------------------------------- failure, time, leaving


def test_a_model_failure_is_a_502_with_the_error_events_sentence(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(status=500, error="out of memory"))
    answer = post(server, {"text": "hi"})
    assert answer.status_code == 502
    assert answer.json() == {
        "ok": False,
        "error": f"The model llama3.2 at {ollama.url} answered with an error: out of memory",
    }


def test_a_turn_past_the_time_limit_is_refused_with_504_and_its_model_request_closed(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server(CHAT_TIMEOUT_S="1")
    ollama.enqueue(ChatScript(content=["slow"] * 100, delay_s=0.2))
    started = time.monotonic()
    answer = post(server, {"text": "take your time"})
    assert answer.status_code == 504
    assert "longer than 1 second" in answer.json()["error"]
    assert time.monotonic() - started < 15
    ollama.wait_for_closed(1, timeout=10)
    assert ollama.completed == 0


def test_a_client_that_leaves_cancels_the_turn(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=["slow"] * 200, delay_s=0.1))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/chat", json={"text": "go"}, headers=ALICE, timeout=1.0)
    ollama.wait_for_closed(1, timeout=10)
    assert ollama.completed == 0
    deadline = time.monotonic() + 10
    while server.services.manager.open_turns and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.services.manager.open_turns == 0


# ---------------------------------------------------------------------------- isolation


def test_inbox_and_outbox_never_cross_people(server: RunningServer, ollama: OllamaStandIn) -> None:
    ollama.responder = steps(call("outbox_write", filename="secret.txt", content="alice only"))
    sent = post(
        server, {"text": "keep this", "files": [{"name": "mine.txt", "data": b64(b"A-secret")}]}
    )
    alice_path = sent_paths(ollama.requests[0])[0]
    ollama.reset()
    ollama.responder = steps(
        call("inbox_list"),
        call("inbox_read", path=alice_path),
        call("outbox_write", filename="secret.txt", content="bob's own"),
    )
    bob = post(server, {"text": "show me files"}, BOB).json()
    listed = json.loads(tool_result(ollama.requests[1]["messages"][-1]))
    assert listed == {"files": []}
    read = tool_result(ollama.requests[2]["messages"][-1])
    assert read.startswith("Error:") and "A-secret" not in read
    assert [base64.b64decode(f["data"]) for f in bob["files"]] == [b"bob's own"]
    alice_outbox = private_area(server, "static:alice") / "outbox" / "secret.txt"
    assert alice_outbox.read_bytes() == b"alice only"
    assert sent.status_code == 200


# ------------------------------------------------------------------ in a space (#40)

SPACE_PEOPLE = [
    *PEOPLE,
    {"id": "dan", "displayName": "Dan", "identities": ["slack:UDAN"]},
    {"id": "erin", "displayName": "Erin", "identities": ["slack:UERIN"]},
]
SPACE_CONFIG = """
spaces:
  "slack:C1":
    admins: [static:alice]
    rate_limit: 2
"""


@pytest.fixture
def in_space(
    make_server: Callable[..., RunningServer], tmp_path: Path
) -> Callable[..., RunningServer]:
    """A server whose directory knows Dan and Erin on Slack, with slack:C1's own settings."""
    config = tmp_path / "mercury.yaml"
    config.write_text(SPACE_CONFIG, encoding="utf-8")

    def start(build: dict[str, Any] | None = None) -> RunningServer:
        return make_server(
            build,
            DIRECTORY_STATIC_PEOPLE=json.dumps(SPACE_PEOPLE),
            MERCURY_CONFIG_FILE=str(config),
        )

    return start


def said_in(space: str, text: str, caller: str = "slack:UDAN") -> dict[str, Any]:
    return {"text": text, "callerId": caller, "authorName": "Dan D.", "spaceId": space}


def test_in_a_space_a_muted_person_is_refused_with_a_sentence_and_nothing_runs(
    in_space: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    from datetime import timedelta

    server = in_space()
    stores = server.services.space_stores
    assert stores is not None
    server.call(
        stores.mutes.mute("slack:C1", "slack:UDAN", timedelta(hours=1), reason=None, by="x:y")
    )
    refused = post(server, said_in("slack:C1", "hello?"))
    assert refused.status_code == 403
    assert refused.json()["reason"] == "muted"
    assert "muted in this space" in refused.json()["error"]
    german = post(server, said_in("slack:C1", "hallo?"), {**ALICE, "accept-language": "de"})
    assert german.status_code == 403 and "stummgeschaltet" in german.json()["error"]
    assert ollama.requests == []
    # Another space, and another person in this one, are not muted.
    assert post(server, said_in("slack:C2", "hello?")).status_code == 200
    assert post(server, said_in("slack:C1", "hi", caller="slack:UERIN")).status_code == 200


def test_in_a_space_its_own_rate_limit_applies(
    in_space: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = in_space()
    answers = [post(server, said_in("slack:C1", f"question {n}")) for n in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert int(answers[2].headers["retry-after"]) >= 1
    assert len(ollama.requests) == 2
    # The limit is the person's in that space: another space still answers.
    assert post(server, said_in("slack:C2", "question 4")).status_code == 200


def test_in_a_space_an_admins_preference_and_the_space_tools_reach_the_turn(
    in_space: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = in_space()
    url = server.url + "/spaces/slack:C1/prefs/report.format"
    saved = httpx.put(url, json={"value": "tables"}, headers=ALICE, timeout=10)
    assert saved.status_code == 200, saved.text
    ollama.responder = steps(call("prefs_list"))
    answer = post(server, said_in("slack:C1", "the report?"))
    assert answer.status_code == 200, answer.text
    first, second = ollama.requests
    system = first["messages"][0]["content"]
    assert "group chat (slack:C1)" in system
    assert '<pref key="report.format">tables</pref>' in system
    assert '<caller id="slack:UDAN" name="Dan D." role="member"' in first["messages"][-1]["content"]
    [listed] = [m for m in second["messages"] if m["role"] == "tool"]
    assert "report.format" in tool_result(listed)


def test_ambient_talk_a_bridge_kept_reaches_a_chat_turn_in_that_space(
    in_space: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    from tests.support.recording_bridge import RecordingBridge

    bridge = RecordingBridge()
    server = in_space({"bridges": [bridge]})
    kept = bridge.post(server, bridge.message("C1", "UERIN", "the launch is at five", name="Erin"))
    assert kept.status_code == 200
    bridging = server.services.bridging
    assert bridging is not None
    deadline = time.monotonic() + 20
    while bridging.pipeline.handling and time.monotonic() < deadline:
        time.sleep(0.05)  # until the pipeline has kept the message
    answer = post(server, said_in("slack:C1", "when is the launch?"))
    assert answer.status_code == 200, answer.text
    words = ollama.requests[0]["messages"][-1]["content"]
    assert "<ambient" in words and "the launch is at five" in words
    assert words.endswith("when is the launch?</caller>")


def test_only_a_bridge_may_name_a_space(
    in_space: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = in_space()
    refused = post(server, {"text": "hi", "spaceId": "slack:C1"}, BOB)
    assert refused.status_code == 403 and "mercury.bridge" in refused.json()["error"]
    assert ollama.requests == []


def test_in_a_space_stop_and_compact_are_answered_at_once_without_the_model(
    in_space: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = in_space()
    stopped = post(server, said_in("slack:C1", "stop"))
    assert stopped.status_code == 200, stopped.text
    assert stopped.json() == {"ok": True, "reply": "Nothing is running here.", "files": []}
    compacted = post(server, said_in("slack:C1", "/compact"), {**ALICE, "accept-language": "de"})
    assert compacted.status_code == 200, compacted.text
    assert compacted.json()["reply"] == (
        "Erledigt: Dieses Gespräch beginnt neu mit einer Zusammenfassung."
    )
    assert ollama.requests == []


def test_in_a_space_a_stop_reaches_a_turn_chat_started_there(
    in_space: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    """A /chat turn in a space is its conversation's running turn, as a bridge's is: a
    ``stop`` from its author reaches it (not "Nothing is running here")."""
    server = in_space()
    ollama.enqueue(ChatScript(content=["Working "], hang=True))
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(post, server, said_in("slack:C1", "write a long essay"))
        ollama.wait_until(lambda: ollama.open_streams >= 1, timeout=20, what="the turn")
        stopped = post(server, said_in("slack:C1", "@Mercury stop"))
        assert stopped.json() == {"ok": True, "reply": "Stopped.", "files": []}
        answered = running.result(timeout=30)
    assert answered.status_code == 200, answered.text
    assert answered.json() == {"ok": True, "reply": "Stopped.", "files": []}
    ollama.wait_for_closed(1, timeout=20)
