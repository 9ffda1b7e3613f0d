"""``/ui-stream`` as the AI SDK's own client reads it: ``ai`` 6's ``Chat``, what ``useChat`` drives.

The real packages (installed in tests/ui_protocols by scripts/test from its lockfile) run
headless in Node (chat.mjs) against ``mercury-http serve --dev --dev-model``: the scripted
model answers each ``/demo`` keyword with the events a UI must handle, and the server runs its
turns into logs (``HTTP_SURFACE_REJOIN_S``) so a chat can be resumed. The route's refusals and
the translation itself are checked here in Python.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import msgspec
import pytest

from channel_http.protocols import ai_sdk
from channel_http.protocols.ai_sdk import DONE, UiMessageStream
from core.engine import events
from core.people.i18n import Catalogs
from tests.conftest import ALICE, BOB
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.ui_protocols.conftest import Server

pytestmark = [pytest.mark.timeout(120)]

EN = Catalogs.load().translator("en")


def parts(message: dict[str, Any]) -> list[str]:
    """A message's parts as ``type`` or ``type:state``, in order."""
    return [p["type"] + (f":{p['state']}" if "state" in p else "") for p in message["parts"]]


# ---------------------------------------------------------------- the real client


def test_a_message_streams_its_reasoning_and_answer_as_parts(server: Server) -> None:
    report = server.chat("send", "reasoning1", "/demo reasoning")
    assert report["status"] == "ready" and report["error"] is None
    user, answer = report["messages"]
    assert user["role"] == "user" and answer["role"] == "assistant"
    assert parts(answer) == ["step-start", "reasoning:done", "text:done"]
    assert "long reasoning" in answer["parts"][1]["text"]
    assert answer["parts"][2]["text"].startswith("After all that thinking")
    # The finish chunk's metadata names the turn, which is also the message's id.
    assert answer["metadata"]["turnId"] == answer["id"]


def test_a_tool_call_is_a_tool_part_with_its_output(server: Server) -> None:
    answer = server.chat("send", "tool1", "/demo tool")["messages"][-1]
    tool = next(p for p in answer["parts"] if p["type"] == "tool-wiki_list")
    assert tool["state"] == "output-available"
    assert tool["output"] == {"outcome": "success"}
    assert tool["title"]  # the tool event's label
    texts = [p["text"] for p in answer["parts"] if p["type"] == "text"]
    # The scripted model's sentence after the tool's result, never its instructions.
    assert texts and "wiki" in texts[-1] and not texts[-1].startswith("The tool answered")


def test_an_approved_confirmation_continues_the_same_message_and_tool_call(server: Server) -> None:
    report = server.chat("approve", "approve1", "/demo confirm")
    requested = report["requested"][-1]
    asked = next(p for p in requested["parts"] if p["type"] == "tool-demo_archive")
    assert asked["state"] == "approval-requested"
    assert report["status"] == "ready" and report["error"] is None
    assert len(report["messages"]) == 2  # the re-post continued the message, added none
    answer = report["messages"][-1]
    assert answer["id"] == requested["id"]
    done = next(p for p in answer["parts"] if p["type"] == "tool-demo_archive")
    assert done["toolCallId"] == asked["toolCallId"]
    assert done["state"] == "output-available"
    assert done["output"]["outcome"] == "confirmed"
    # The answer after the output: the confirmation's reply, in a step of its own.
    assert parts(answer)[-2:] == ["step-start", "text:done"]
    assert answer["parts"][-1]["text"] == "Confirmed and done."


def test_a_denied_confirmation_ends_the_tool_call_denied_and_runs_nothing(server: Server) -> None:
    report = server.chat("deny", "deny1", "/demo confirm")
    answer = report["messages"][-1]
    assert len(report["messages"]) == 2
    done = next(p for p in answer["parts"] if p["type"] == "tool-demo_archive")
    assert done["state"] == "output-denied"
    assert answer["parts"][-1]["text"] == "Not confirmed: nothing was done."
    confirmations = httpx.get(f"{server.base}/tool-log", headers=server.headers, timeout=10)
    assert not [
        e
        for e in confirmations.json()["entries"]
        if e["conversationId"] == "deny1"
        and e["toolName"] == "demo_archive"
        and e["outcome"] == "success"
    ]


def test_a_failing_turn_ends_with_an_error_the_chat_shows(server: Server) -> None:
    report = server.chat("send", "error1", "/demo error")
    assert report["status"] == "error"
    assert "asked to fail" in report["error"]
    answer = report["messages"][-1]
    assert parts(answer)[-1] == "text:done"  # what streamed before, closed


def test_reconnecting_gives_null_when_nothing_runs(server: Server) -> None:
    assert server.chat("reconnect-idle", "idle1") == {"stream": None}


def test_reconnecting_while_a_turn_runs_replays_it_from_its_start(server: Server) -> None:
    report = server.chat("reconnect-running", "slow1", "/demo slow")
    answer, replayed = report["messages"][-1], report["replayed"]
    assert replayed["id"] == answer["id"]
    assert parts(replayed) == parts(answer)
    assert replayed["parts"][-1]["text"] == answer["parts"][-1]["text"]
    assert answer["parts"][-1]["text"].endswith("word40.")


# ---------------------------------------------------------------- the route's refusals


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"", "must be JSON"),
        (b'{"messages": []}', '"id" is required'),
        (b'{"id": "a b", "messages": []}', "conversationId may contain only"),
        (b'{"id": "c1", "messages": []}', "The last message must be"),
        (
            b'{"id": "c1", "messages": [{"role": "user", "parts": '
            b'[{"type": "text", "text": " "}]}]}',
            "The last message must be",
        ),
        (
            b'{"id": "c1", "trigger": "regenerate-message", "messages": '
            b'[{"role": "user", "parts": [{"type": "text", "text": "hi"}]}]}',
            "Only a new message",
        ),
        (b'{"id": "c1", "messages": [{"role": "user", "parts": "no"}]}', '"messages'),
    ],
)
def test_refusals_are_the_envelope_with_a_sentence(server: Server, body: bytes, says: str) -> None:
    answer = httpx.post(
        f"{server.base}/ui-stream",
        content=body,
        headers={**server.headers, "content-type": "application/json"},
        timeout=10,
    )
    assert answer.status_code == 400
    assert answer.json()["ok"] is False
    assert says in answer.json()["error"]


def test_the_routes_need_a_token(server: Server) -> None:
    sent = httpx.post(f"{server.base}/ui-stream", json={"id": "c1", "messages": []}, timeout=10)
    resumed = httpx.get(f"{server.base}/ui-stream/c1/stream", timeout=10)
    assert sent.status_code == resumed.status_code == 401
    assert sent.json()["ok"] is False


def test_a_chat_whose_turn_has_ended_is_not_resumed(server: Server) -> None:
    server.chat("send", "ended1", "hello")
    answer = httpx.get(f"{server.base}/ui-stream/ended1/stream", headers=server.headers, timeout=10)
    assert answer.status_code == 204
    assert answer.content == b""


def test_a_running_chat_is_resumed_only_by_its_owner(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    """Alice's chat id asked by Bob is 204 (his own chats only); Alice gets the replay."""
    server = make_server(HTTP_SURFACE_REJOIN_S="10")
    ollama.enqueue(ChatScript.words(" ".join(f"w{n}" for n in range(30)), delay_s=0.1))
    body = {
        "id": "shared1",
        "messages": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}],
    }
    with httpx.stream(
        "POST", f"{server.url}/ui-stream", json=body, headers=ALICE, timeout=30
    ) as running:
        lines = running.iter_lines()
        assert json.loads(next(lines).removeprefix("data: "))["type"] == "start"
        stranger = httpx.get(f"{server.url}/ui-stream/shared1/stream", headers=BOB, timeout=10)
        assert stranger.status_code == 204
        with httpx.stream(
            "GET", f"{server.url}/ui-stream/shared1/stream", headers=ALICE, timeout=30
        ) as replay:
            assert replay.status_code == 200
            assert replay.headers["x-vercel-ai-ui-message-stream"] == "v1"
            replayed = [line for line in replay.iter_lines() if line.startswith("data: ")]
        streamed = [line for line in lines if line.startswith("data: ")]
    assert replayed[-1] == "data: [DONE]" and streamed[-1] == "data: [DONE]"
    text = "".join(
        json.loads(line.removeprefix("data: ")).get("delta", "")
        for line in replayed[:-1]
        if '"text-delta"' in line
    )
    assert text == " ".join(f"w{n}" for n in range(30))


def test_a_client_that_leaves_cancels_the_turn(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    """As on ``/turn``: closing the connection stops the turn and its model request."""
    server = make_server()
    ollama.enqueue(ChatScript(content=["slow "] * 200, delay_s=0.1))
    body = {
        "id": "left1",
        "messages": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}],
    }
    with httpx.stream(
        "POST", f"{server.url}/ui-stream", json=body, headers=ALICE, timeout=30
    ) as running:
        for line in running.iter_lines():
            if '"text-delta"' in line:
                break  # the answer streams: leave
    ollama.wait_for_closed(1, timeout=10)
    assert ollama.completed == 0
    deadline = time.monotonic() + 10
    while server.services.manager.open_turns and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.services.manager.open_turns == 0


# ---------------------------------------------------------------- the translation


def chunks(data: bytes) -> list[Any]:
    assert data.endswith(b"\n\n")
    return [
        line.removeprefix(b"data: ").decode()
        if line == b"data: [DONE]"
        else json.loads(line.removeprefix(b"data: "))
        for line in data.strip().split(b"\n\n")
    ]


def translate(*batch: events.Event | events.TurnStarted) -> list[Any]:
    return chunks(UiMessageStream(EN)(batch))


def test_text_parts_close_before_a_tool_and_reopen_after_it_with_a_new_id() -> None:
    out = translate(
        events.TurnStarted(turn_id="t1"),
        events.Text(chunk="Looking "),
        events.Text(chunk="it up."),
        events.Tool(label="Reading", detail="x", tool_call_id="c1", tool_name="wiki_list"),
        events.ToolFinish(tool_call_id="c1", outcome="failed"),
        events.Text(chunk=" Done."),
        events.Final(text="Looking it up. Done."),
    )
    kinds = [c["type"] if isinstance(c, dict) else c for c in out]
    assert kinds == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
        "tool-input-available",
        "tool-output-error",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
        "[DONE]",
    ]
    assert out[0] == {"type": "start", "messageId": "t1", "messageMetadata": {"turnId": "t1"}}
    assert out[2]["id"] == out[3]["id"] == out[5]["id"] != out[8]["id"] == out[10]["id"]
    assert out[6]["toolName"] == "wiki_list" and out[6]["input"] == {"detail": "x"}
    assert out[12] == {
        "type": "finish",
        "finishReason": "stop",
        "messageMetadata": {"turnId": "t1"},
    }


def test_final_adds_what_was_not_streamed_and_carries_the_pending_note() -> None:
    out = translate(
        events.TurnStarted(turn_id="t1"),
        events.Final(
            text="Action pending, waiting for confirmation.",
            pending_note="Action pending, waiting for confirmation.",
        ),
    )
    assert out[3]["delta"] == "Action pending, waiting for confirmation."
    assert out[-2]["messageMetadata"]["pendingNote"] == "Action pending, waiting for confirmation."


def test_a_plain_pending_is_an_approval_request_and_labelled_choices_a_data_part() -> None:
    plain = translate(
        events.Pending(
            command="Archive?",
            token="tok1",
            choices=(events.Choice("tok1", ""),),
            tool_call_id="c1",
        )
    )
    assert plain == [{"type": "tool-approval-request", "approvalId": "tok1", "toolCallId": "c1"}]
    labelled = translate(
        events.Pending(
            command="Write the note",
            token="a1",
            choices=(events.Choice("a1", "Replace"), events.Choice("a2", "Append")),
            tool_call_id="c2",
            expires_at=datetime(2026, 12, 7, 13, 5, tzinfo=UTC),
        )
    )
    assert labelled[0] == {
        "type": "data-pending",
        "data": {
            "token": "a1",
            "command": "Write the note",
            "choices": [{"label": "Replace", "token": "a1"}, {"label": "Append", "token": "a2"}],
            "toolCallId": "c2",
            "expiresAt": "2026-12-07T13:05:00Z",
        },
    }
    assert "Replace: a1; Append: a2" in labelled[2]["delta"]


def test_a_confirm_and_a_cancel_choice_are_one_approval_request_naming_both_tokens() -> None:
    out = translate(
        events.Pending(
            command="Tracker: Delete an issue — TRK-1",
            token="yes1",
            choices=(
                events.Choice("yes1", "Conferma", "confirm"),
                events.Choice("no01", "Annulla", "cancel"),
            ),
            tool_call_id="c3",
        )
    )
    assert out == [{"type": "tool-approval-request", "approvalId": "yes1.no01", "toolCallId": "c3"}]
    assert ai_sdk.approval_tokens("yes1.no01") == ("yes1", "no01")
    assert ai_sdk.approval_tokens("tok1") == ("tok1", None)


def test_a_login_is_a_data_part_and_a_markdown_link() -> None:
    out = translate(events.Login(service="Calendar", url="https://example.com/a"))
    assert out[0] == {
        "type": "data-login",
        "data": {"service": "Calendar", "url": "https://example.com/a"},
    }
    assert "[https://example.com/a](https://example.com/a)" in out[2]["delta"]


def test_nothing_follows_the_end_of_the_message() -> None:
    """Memory capture's tool calls come after ``final``: not part of the answer."""
    stream = UiMessageStream(EN)
    stream([events.TurnStarted(turn_id="t1"), events.Final(text="")])
    assert stream([events.Tool(label="Saving", detail="", tool_call_id="m1")]) == b""


def test_an_error_closes_what_is_open_and_ends_without_finish() -> None:
    out = translate(
        events.TurnStarted(turn_id="t1"),
        events.Reasoning(chunk="Hm", id="r1"),
        events.Error(message="It broke."),
    )
    kinds = [c["type"] if isinstance(c, dict) else c for c in out]
    assert kinds == [
        "start",
        "start-step",
        "reasoning-start",
        "reasoning-delta",
        "reasoning-end",
        "error",
        "[DONE]",
    ]
    assert out[5] == {"type": "error", "errorText": "It broke."}


def test_a_continued_message_keeps_its_id_and_leads_with_the_calls_output() -> None:
    lead = b'data: {"type":"tool-output-denied","toolCallId":"c1"}\n\n'
    stream = UiMessageStream(EN, message_id="m1", lead=lead)
    out = chunks(stream.settled("Not confirmed: nothing was done."))
    assert out[0] == {"type": "start", "messageId": "m1"}
    assert out[1] == {"type": "tool-output-denied", "toolCallId": "c1"}
    assert out[2] == {"type": "start-step"}
    assert out[-1] == DONE.decode().removeprefix("data: ").strip()


class _Usage(msgspec.Struct, frozen=True, omit_defaults=True):
    input: int
    output: int
    cached: int | None = None


class _FinalWithUsage(events.Final, frozen=True):
    """``final`` as the engine sends it where it reports the turn's token usage."""

    usage: _Usage | None = None


def test_the_turns_usage_is_in_the_finish_metadata() -> None:
    """``final.usage`` (where the engine reports it) goes into ``finish``'s metadata as is."""
    final = _FinalWithUsage(text="", usage=_Usage(input=12, output=5, cached=4))
    out = translate(events.TurnStarted(turn_id="t1"), final)
    assert out[-2]["messageMetadata"] == {
        "turnId": "t1",
        "usage": {"input": 12, "output": 5, "cached": 4},
    }
