"""Tool calls, staged confirmations, resume and rate limits, end to end over HTTP."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import anyio
import httpx
import pytest

from core.clock import ManualClock
from core.tools.registry import Plugin, Tool, ToolCallContext, ToolError
from tests.conftest import ALICE, BOB
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.support.sse import Received, turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def call(name: str, **arguments: Any) -> ChatScript:
    return ChatScript(tool_calls=[{"name": name, "arguments": arguments}])


def tool_loop(*calls: ChatScript, answer: str = "Done.") -> Callable[[dict[str, Any]], ChatScript]:
    """A responder: the scripted tool calls, one per step, then a plain answer."""
    pending = list(calls)

    def respond(request: dict[str, Any]) -> ChatScript:
        if pending:
            return pending.pop(0)
        return ChatScript.words(answer)

    return respond


class Counter:
    """A plugin of the tests' own: a confirm-required action that hands back its result."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    async def bump(self, context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        self.runs.append({"person": context.person.key, **arguments})
        if arguments.get("by") == 13:
            raise ToolError("13 is unlucky")
        return f"counter is now {len(self.runs)}"

    def plugin(self) -> Plugin:
        schema = {
            "type": "object",
            "properties": {"by": {"type": "integer"}},
            "required": ["by"],
            "additionalProperties": False,
        }
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
                    summary=lambda context, arguments: f"Add {arguments['by']} to the counter",
                ),
                Tool(
                    name="bump_and_tell",
                    description="Add to the counter and read the result.",
                    parameters=schema,
                    run=self.bump,
                    confirm=True,
                    hands_back=True,
                ),
                Tool(
                    name="peek",
                    description="Read the counter.",
                    parameters={"type": "object", "properties": {}},
                    run=self._peek,
                ),
            ),
        )

    async def _peek(self, context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        return f"{len(self.runs)}"


@pytest.fixture
def counter() -> Counter:
    return Counter()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def engine(
    make_server: Callable[..., RunningServer], counter: Counter, clock: ManualClock
) -> RunningServer:
    return make_server({"plugins": [counter.plugin()], "clock": clock})


async def post_turn(
    server: RunningServer, body: dict[str, Any], headers: dict[str, str]
) -> Received:
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            return await turn(client, body, headers)


async def test_a_tool_turn_emits_tool_then_tool_finish_then_the_answer(
    engine: RunningServer, ollama: OllamaStandIn, tmp_path: Any
) -> None:
    ollama.responder = tool_loop(call("wiki_list"), answer="You have no notes.")
    got = await post_turn(engine, {"text": "list my notes", "conversationId": "c1"}, ALICE)
    assert got.names() == ["tool", "tool_finish", "text", "text", "text", "text", "final"]
    tool, finish = got.of("tool")[0], got.of("tool_finish")[0]
    assert tool["name"] == "wiki_list"
    assert tool["label"] == "Reading the wiki…"
    assert tool["toolCallId"] == finish["toolCallId"]
    assert finish["outcome"] == "success"
    assert got.final == {"text": "You have no notes."}
    second = ollama.requests[1]["messages"]
    assert second[-1]["role"] == "tool"
    assert second[-1]["tool_name"] == "wiki_list"
    assert second[-2]["tool_calls"][0]["function"]["name"] == "wiki_list"
    assert {t["function"]["name"] for t in ollama.requests[0]["tools"]} >= {
        "wiki_list",
        "wiki_read",
        "wiki_grep",
        "wiki_write",
        "promote_note",
        "set_name",
        "bump",
    }
    log = httpx.get(engine.url + "/tool-log", headers=ALICE).json()
    assert log["entries"][0]["toolName"] == "wiki_list"
    assert log["entries"][0]["conversationId"] == "c1"
    assert log["entries"][0]["outcome"] == "success"
    assert httpx.get(engine.url + "/tool-log", headers=BOB).json()["entries"] == []


async def test_a_failing_tool_is_failed_and_the_model_is_told_why(
    engine: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = tool_loop(call("wiki_read", path="../etc/passwd.md"), answer="Sorry.")
    got = await post_turn(engine, {"text": "read it"}, ALICE)
    assert got.of("tool_finish")[0]["outcome"] == "failed"
    assert got.of("tool")[0]["detail"] == "../etc/passwd.md"
    told = ollama.requests[1]["messages"][-1]
    assert told["role"] == "tool"
    call_line, result = told["content"].split("\n", 1)
    assert call_line == f"[toolCallId: {got.of('tool')[0]['toolCallId']}]"
    assert result.startswith("Error:")


async def test_arguments_that_break_the_schema_fail_without_running(
    engine: RunningServer, ollama: OllamaStandIn, counter: Counter
) -> None:
    ollama.responder = tool_loop(call("peek", extra=1), call("nope"), answer="ok")
    got = await post_turn(engine, {"text": "go"}, ALICE)
    assert [f["outcome"] for f in got.of("tool_finish")] == ["success", "failed"]
    assert "no tool named nope" in ollama.requests[2]["messages"][-1]["content"]


async def test_a_runaway_tool_loop_stops_at_the_step_cap_with_a_clear_text(
    make_server: Callable[..., RunningServer], counter: Counter, ollama: OllamaStandIn
) -> None:
    server = make_server({"plugins": [counter.plugin()]}, MERCURY_MAX_STEPS="3")
    ollama.responder = lambda request: call("peek")
    got = await post_turn(server, {"text": "loop"}, ALICE)
    assert len(got.of("tool")) == 3
    assert got.final["text"] == "The assistant stopped after 3 steps without finishing."
    assert len(ollama.requests) == 3


async def test_a_plain_staging_emits_pending_with_one_unlabelled_choice_and_a_pending_note(
    engine: RunningServer, ollama: OllamaStandIn, counter: Counter
) -> None:
    ollama.responder = tool_loop(call("bump", by=2), answer="")
    got = await post_turn(engine, {"text": "bump it", "conversationId": "c1"}, ALICE)
    assert got.names() == ["tool", "tool_finish", "pending", "final"]
    assert got.of("tool_finish")[0]["outcome"] == "pending"
    pending = got.of("pending")[0]
    assert pending["command"] == "Add 2 to the counter"
    assert pending["choices"] == [{"token": pending["token"], "label": ""}]
    note = "Action pending, waiting for confirmation."
    assert got.final == {"text": note, "pendingNote": note}
    assert counter.runs == []
    listed = httpx.get(engine.url + "/confirmations", headers=ALICE).json()["pending"]
    assert [item["summary"] for item in listed] == ["Add 2 to the counter"]
    assert listed[0]["sessionKey"] == "static:alice:c1"
    assert listed[0]["conversationId"] == "c1"  # the extension a UI maps to its conversation
    assert pending["token"] not in str(listed)
    assert httpx.get(engine.url + "/confirmations", headers=BOB).json()["pending"] == []


async def test_a_staged_confirmations_pending_carries_the_tool_call_id_of_its_tool_call(
    engine: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = tool_loop(call("peek"), call("bump", by=2), answer="")
    got = await post_turn(engine, {"text": "peek, then bump", "conversationId": "c1"}, ALICE)
    peek, bump = got.of("tool")
    [pending] = got.of("pending")
    assert pending["toolCallId"] == bump["toolCallId"] != peek["toolCallId"]
    finishes = {f["toolCallId"]: f["outcome"] for f in got.of("tool_finish")}
    assert finishes[pending["toolCallId"]] == "pending"


async def test_a_staging_in_a_one_off_turn_is_listed_without_a_conversation_id(
    engine: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = tool_loop(call("bump", by=1), answer="")
    await post_turn(engine, {"text": "bump it"}, ALICE)
    [listed] = httpx.get(engine.url + "/confirmations", headers=ALICE).json()["pending"]
    assert listed["conversationId"] is None
    assert listed["sessionKey"].startswith("static:alice:.once-")


async def stage(
    server: RunningServer,
    ollama: OllamaStandIn,
    script: ChatScript,
    *,
    conversation: str = "c1",
    headers: dict[str, str] = ALICE,
) -> dict[str, Any]:
    ollama.responder = tool_loop(script, answer="Please confirm.")
    got = await post_turn(server, {"text": "do it", "conversationId": conversation}, headers)
    return got.of("pending")[0]


async def test_a_token_sent_as_turn_text_confirms_without_the_model(
    engine: RunningServer, ollama: OllamaStandIn, counter: Counter
) -> None:
    token = (await stage(engine, ollama, call("bump", by=2)))["token"]
    before = len(ollama.requests)
    got = await post_turn(engine, {"text": f"  {token}\n", "conversationId": "c1"}, ALICE)
    assert got.names() == ["final"]
    assert got.final == {"text": "Confirmed and done."}
    assert len(ollama.requests) == before
    assert counter.runs == [{"person": "static:alice", "by": 2}]
    again = await post_turn(engine, {"text": token, "conversationId": "c1"}, ALICE)
    assert again.final["text"].startswith("There is no pending confirmation for this token")


async def test_a_confirmed_action_that_fails_says_so(
    engine: RunningServer, ollama: OllamaStandIn
) -> None:
    token = (await stage(engine, ollama, call("bump", by=13)))["token"]
    got = await post_turn(engine, {"text": token, "conversationId": "c1"}, ALICE)
    assert got.final == {"text": "Confirmed, but it failed: 13 is unlucky"}


async def test_alices_token_confirmed_by_bob_is_refused_and_stays_pending_for_alice(
    engine: RunningServer, ollama: OllamaStandIn, counter: Counter
) -> None:
    token = (await stage(engine, ollama, call("bump", by=1)))["token"]
    by_bob = await post_turn(engine, {"text": token, "conversationId": "c1"}, BOB)
    assert by_bob.final["text"].startswith("There is no pending confirmation")
    refused = httpx.post(
        engine.url + "/confirm", headers=BOB, json={"token": token, "conversationId": "c1"}
    )
    assert refused.json() == {"ok": True, "resolved": False}
    other_session = httpx.post(
        engine.url + "/confirm", headers=ALICE, json={"token": token, "conversationId": "c2"}
    )
    assert other_session.json() == {"ok": True, "resolved": False}
    assert counter.runs == []
    assert len(httpx.get(engine.url + "/confirmations", headers=ALICE).json()["pending"]) == 1
    mine = httpx.post(
        engine.url + "/confirm", headers=ALICE, json={"token": token, "conversationId": "c1"}
    )
    assert mine.json() == {"ok": True, "resolved": True, "text": "Confirmed and done."}
    assert mine.headers["content-language"] == "en"
    assert counter.runs == [{"person": "static:alice", "by": 1}]


async def test_confirm_refuses_bad_bodies(engine: RunningServer) -> None:
    url = engine.url + "/confirm"
    for body, status in [
        ({"token": "abcd-efgh"}, 400),
        ({"conversationId": "c1"}, 400),
        ({"token": " ", "conversationId": "c1"}, 400),
        ({"token": "abcd-efgh", "conversationId": "a/b"}, 400),
        ({"token": "not a token", "conversationId": "c1"}, 200),
    ]:
        response = httpx.post(url, headers=ALICE, json=body)
        assert response.status_code == status, body
    assert httpx.post(url, headers=ALICE, content=b"null").status_code == 400


async def test_a_multi_choice_staging_runs_the_chosen_one_and_kills_the_others(
    engine: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = tool_loop(
        call("wiki_write", path="personal/notes/plan.md", content="first"), answer="Written."
    )
    await post_turn(engine, {"text": "write", "conversationId": "c1"}, ALICE)
    pending = await stage(
        engine, ollama, call("wiki_write", path="personal/notes/plan.md", content="second")
    )
    assert pending["command"] == "Overwrite the note personal/notes/plan.md"
    labels = [choice["label"] for choice in pending["choices"]]
    assert labels == ["Replace the note", "Append to the note"]
    assert pending["token"] == pending["choices"][0]["token"]
    append, replace = pending["choices"][1]["token"], pending["choices"][0]["token"]
    done = httpx.post(
        engine.url + "/confirm", headers=ALICE, json={"token": append, "conversationId": "c1"}
    )
    assert done.json()["text"] == "Confirmed and done."
    dead = httpx.post(
        engine.url + "/confirm", headers=ALICE, json={"token": replace, "conversationId": "c1"}
    )
    assert dead.json() == {"ok": True, "resolved": False}
    note = httpx.get(
        engine.url + "/wiki/read", headers=ALICE, params={"path": "personal/notes/plan.md"}
    )
    assert note.json()["content"] == "first\nsecond"


async def test_a_token_expires_after_five_minutes(
    engine: RunningServer, ollama: OllamaStandIn, clock: ManualClock, counter: Counter
) -> None:
    token = (await stage(engine, ollama, call("bump", by=1)))["token"]
    clock.advance(timedelta(minutes=5, seconds=1))
    assert httpx.get(engine.url + "/confirmations", headers=ALICE).json()["pending"] == []
    late = httpx.post(
        engine.url + "/confirm", headers=ALICE, json={"token": token, "conversationId": "c1"}
    )
    assert late.json() == {"ok": True, "resolved": False}
    assert counter.runs == []


async def test_an_action_that_hands_back_streams_the_models_answer_on_the_same_turn(
    engine: RunningServer, ollama: OllamaStandIn
) -> None:
    token = (await stage(engine, ollama, call("bump_and_tell", by=1)))["token"]
    ollama.responder = lambda request: ChatScript.words("The counter is one.")
    got = await post_turn(engine, {"text": token, "conversationId": "c1"}, ALICE)
    assert got.final == {"text": "The counter is one."}
    assert got.text == "The counter is one."
    handed = ollama.requests[-1]["messages"][-1]
    assert handed["role"] == "tool" and "counter is now 1" in handed["content"]


async def test_confirm_then_resume_hears_the_answer_once(
    engine: RunningServer, ollama: OllamaStandIn, clock: ManualClock
) -> None:
    token = (await stage(engine, ollama, call("bump_and_tell", by=1)))["token"]
    confirmed = httpx.post(
        engine.url + "/confirm", headers=ALICE, json={"token": token, "conversationId": "c1"}
    )
    assert confirmed.json() == {"ok": True, "resolved": True, "resume": True}
    ollama.responder = lambda request: ChatScript.words("It is one now.")
    by_bob = await post_turn(engine, {"resume": True, "conversationId": "c1"}, BOB)
    assert by_bob.final["text"] == "The answer to this confirmation is no longer available."
    heard = await post_turn(engine, {"resume": True, "conversationId": "c1"}, ALICE)
    assert heard.final == {"text": "It is one now."}
    twice = await post_turn(engine, {"resume": True, "conversationId": "c1"}, ALICE)
    assert twice.names() == ["final"]
    assert twice.final["text"] == "The answer to this confirmation is no longer available."


async def test_resume_after_the_window_is_no_longer_available(
    engine: RunningServer, ollama: OllamaStandIn, clock: ManualClock
) -> None:
    token = (await stage(engine, ollama, call("bump_and_tell", by=1)))["token"]
    httpx.post(
        engine.url + "/confirm", headers=ALICE, json={"token": token, "conversationId": "c1"}
    )
    clock.advance(timedelta(minutes=5, seconds=1))
    late = await post_turn(engine, {"resume": True, "conversationId": "c1"}, ALICE)
    assert late.final["text"] == "The answer to this confirmation is no longer available."


async def test_a_pending_confirmation_survives_a_restart(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, counter: Counter
) -> None:
    first = make_server({"plugins": [counter.plugin()]})
    token = (await stage(first, ollama, call("bump", by=4)))["token"]
    first.server.should_exit = True
    first.thread.join(10)
    second = make_server({"plugins": [counter.plugin()]})
    assert len(httpx.get(second.url + "/confirmations", headers=ALICE).json()["pending"]) == 1
    done = httpx.post(
        second.url + "/confirm", headers=ALICE, json={"token": token, "conversationId": "c1"}
    )
    assert done.json()["resolved"] is True
    assert counter.runs == [{"person": "static:alice", "by": 4}]


async def test_over_the_rate_limit_a_turn_is_429_with_retry_after_and_tokens_are_not_counted(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server(MERCURY_RATE_LIMIT_PER_USER="2", MERCURY_RATE_LIMIT_WINDOW_MS="60000")
    for _ in range(2):
        assert (await post_turn(server, {"text": "hi"}, ALICE)).status == 200
    refused = await post_turn(server, {"text": "hi"}, ALICE)
    assert refused.status == 429
    assert refused.body is not None and refused.body["ok"] is False
    # The window opened with the first turn: on a slow machine a second or two has passed.
    seconds = int(refused.headers["retry-after"])
    assert 50 <= seconds <= 60
    assert f"wait {seconds} seconds" in refused.body["error"]
    token_turn = await post_turn(server, {"text": "abcd-efgh"}, ALICE)
    assert token_turn.status == 200
    assert (await post_turn(server, {"text": "hi"}, BOB)).status == 200


async def test_the_rate_limiter_forgets_people_whose_window_has_passed_on_its_own(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, clock: ManualClock
) -> None:
    server = make_server(
        {"clock": clock},
        MERCURY_RATE_LIMIT_WINDOW_MS="60000",
        SESSION_IDLE_CHECK_INTERVAL_MS="100",
    )
    limiter = server.services.manager.rate_limiter
    for headers in (ALICE, BOB):
        assert (await post_turn(server, {"text": "hi"}, headers)).status == 200
    assert server.call(limiter.bucket_count()) == 2
    await anyio.sleep(0.5)  # several beats of the sweep: both windows are still open
    assert server.call(limiter.bucket_count()) == 2
    clock.advance(timedelta(seconds=61))
    with anyio.fail_after(10):
        while server.call(limiter.bucket_count()):
            await anyio.sleep(0.05)
    assert (await post_turn(server, {"text": "hi again"}, ALICE)).status == 200
    assert server.call(limiter.bucket_count()) == 1


async def test_two_stagings_in_one_step_each_get_their_pending_event(
    engine: RunningServer, ollama: OllamaStandIn, counter: Counter
) -> None:
    both = ChatScript(
        tool_calls=[
            {"name": "bump", "arguments": {"by": 1}},
            {"name": "bump", "arguments": {"by": 2}},
        ]
    )
    ollama.responder = tool_loop(both, answer="")
    got = await post_turn(engine, {"text": "bump twice", "conversationId": "c1"}, ALICE)
    assert got.names() == [
        "tool",
        "tool_finish",
        "tool",
        "tool_finish",
        "pending",
        "pending",
        "final",
    ]
    commands = [p["command"] for p in got.of("pending")]
    assert commands == ["Add 1 to the counter", "Add 2 to the counter"]
    staged = [p["toolCallId"] for p in got.of("pending")]
    assert staged == [t["toolCallId"] for t in got.of("tool")]
    for pending in got.of("pending"):
        confirm = {"token": pending["token"], "conversationId": "c1"}
        done = httpx.post(engine.url + "/confirm", headers=ALICE, json=confirm)
        assert done.json()["resolved"] is True
    assert [run["by"] for run in counter.runs] == [1, 2]


async def test_opening_turns_count_against_the_rate_limit_while_the_name_is_unsaved(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    # Adversarial review: an opening turn asks the model each time the name is unsaved and
    # was never counted, an unbounded model-cost path per person.
    server = make_server(MERCURY_RATE_LIMIT_PER_USER="3", MERCURY_RATE_LIMIT_WINDOW_MS="60000")
    opening = {"opening": True, "conversationId": "hello"}
    for _ in range(3):
        assert (await post_turn(server, opening, ALICE)).status == 200
    asked = len(ollama.requests)
    assert asked == 3
    refused = await post_turn(server, opening, ALICE)
    assert refused.status == 429
    assert refused.body is not None and refused.body["ok"] is False
    assert "Too many messages: wait" in refused.body["error"]
    assert 0 < int(refused.headers["retry-after"]) <= 60
    # One budget for both kinds of turn: a written turn is refused too.
    assert (await post_turn(server, {"text": "hi"}, ALICE)).status == 429
    assert len(ollama.requests) == asked
    assert (await post_turn(server, opening, BOB)).status == 200
