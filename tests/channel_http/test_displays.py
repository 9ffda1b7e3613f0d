"""``present`` over HTTP: what the model shows, the person sees and the transcript keeps."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from core.memory.edge import EdgeStore
from core.tools.registry import Plugin, Tool, ToolCallContext
from tests.conftest import ALICE, BOB
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.support.sse import Received, turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

ISSUES = "\n".join(f"- MER-{n}: fix the thing number {n}" for n in range(1, 41))
NOTE = "Action pending, waiting for confirmation."


async def _issues(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
    return ISSUES


async def _tidy(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
    return "tidied"


def _plugin() -> Plugin:
    no_arguments = {"type": "object", "properties": {}, "additionalProperties": False}
    return Plugin(
        name="tracker",
        api_version=4,
        tools=(
            Tool(name="issues", description="My issues.", parameters=no_arguments, run=_issues),
            Tool(
                name="tidy",
                description="Tidy up.",
                parameters=no_arguments,
                run=_tidy,
                confirm=True,
            ),
        ),
    )


def call(name: str, **arguments: Any) -> ChatScript:
    return ChatScript(tool_calls=[{"name": name, "arguments": arguments}])


def steps(*scripts: ChatScript | Callable[[dict[str, Any]], ChatScript]) -> Any:
    """A responder for turns: the given steps in order (a callable reads the request)."""
    pending = list(scripts)

    def respond(request: dict[str, Any]) -> ChatScript:
        if request.get("stream") is False:  # a memory capture
            return ChatScript(content=[json.dumps({"summary": "Issues were shown.", "facts": []})])
        if not pending:
            return ChatScript.words("ok")
        step = pending.pop(0)
        return step(request) if callable(step) else step

    return respond


def last_call_id(request: dict[str, Any], tool: str) -> str:
    """The toolCallId the model read at the start of ``tool``'s latest result."""
    results = [m for m in request["messages"] if m["role"] == "tool" and m["tool_name"] == tool]
    match = re.match(r"\[toolCallId: (call_[0-9a-f]+)\]\n", results[-1]["content"])
    assert match is not None, results[-1]
    return match.group(1)


def outcomes(got: Received) -> list[str]:
    """The outcomes of the model's tool calls (not of memory capture's nameless one)."""
    named = {tool["toolCallId"] for tool in got.of("tool") if "name" in tool}
    return [f["outcome"] for f in got.of("tool_finish") if f["toolCallId"] in named]


@pytest.fixture
def server(make_server: Callable[..., RunningServer], tmp_path: Path) -> RunningServer:
    return make_server(
        {"plugins": [_plugin()], "memory": EdgeStore(tmp_path / "edge")},
        SESSION_CAPTURE_MESSAGE_THRESHOLD="2",
    )


async def post_turn(server: RunningServer, body: dict[str, Any]) -> Received:
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(30):
            return await turn(client, body, ALICE)


async def transcript(server: RunningServer, conversation: str, count: int) -> list[Any]:
    deadline = time.monotonic() + 20
    while True:
        page = httpx.get(server.url + "/conversation", headers=ALICE, params={"id": conversation})
        messages = page.json()["messages"]
        if len(messages) >= count:
            return [(m["role"], m["content"]) for m in messages]
        assert time.monotonic() < deadline, messages
        await asyncio.sleep(0.05)


async def test_a_presented_list_follows_the_answer_in_final_and_in_the_transcript(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    shopping = "- bread\n- milk\n- eggs"
    ollama.responder = steps(
        call("present", title="Shopping", content=shopping),
        ChatScript(content=["Here ", "it is."]),
    )
    got = await post_turn(server, {"text": "my list?", "conversationId": "c1"})
    expected = "Here it is.\n\nShopping\n" + shopping
    assert got.final == {"text": expected}
    tool = got.of("tool")[0]
    assert (tool["name"], tool["label"], tool["detail"]) == ("present", "Showing…", "Shopping")
    assert outcomes(got) == ["success"]
    # On the stream: the model's deltas, then the display as one more delta, then final.
    assert got.text == expected
    names = got.names()
    assert names[names.index("final") - 1] == "text"
    assert got.of("text")[-1]["chunk"] == "\n\nShopping\n" + shopping
    assert await transcript(server, "c1", 2) == [("user", "my list?"), ("assistant", expected)]
    # The model wrote the list once, as the tool's argument, and never read it back as text.
    told = ollama.requests[1]["messages"]
    assert told[-1]["role"] == "tool" and "Shown to the person" in told[-1]["content"]
    assert shopping not in json.dumps(told[-1])
    assert httpx.get(server.url + "/conversations", headers=BOB).json()["conversations"] == []


async def test_a_turn_that_only_staged_shows_its_displays_after_the_pending_note(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = steps(
        ChatScript(
            tool_calls=[
                {"name": "tidy", "arguments": {}},
                {"name": "present", "arguments": {"content": "1. the desk\n2. the shelf"}},
            ]
        ),
        ChatScript(content=[]),
    )
    got = await post_turn(server, {"text": "tidy up", "conversationId": "c2"})
    assert "pending" in got.names()
    assert got.final == {"text": NOTE + "\n\n1. the desk\n2. the shelf", "pendingNote": NOTE}
    assert got.text == "1. the desk\n2. the shelf"  # the note is the final's, not a delta
    assert await transcript(server, "c2", 2) == [
        ("user", "tidy up"),
        ("assistant", NOTE + "\n\n1. the desk\n2. the shelf"),
    ]


async def test_a_tool_result_presented_by_reference_never_passes_through_the_models_output(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = steps(
        call("issues"),
        lambda request: call("present", toolCallId=last_call_id(request, "issues")),
        ChatScript(content=["You have 40 issues."]),
    )
    got = await post_turn(server, {"text": "my issues?", "conversationId": "c3"})
    assert got.final == {"text": "You have 40 issues.\n\n" + ISSUES}
    issues_call = got.of("tool")[0]["toolCallId"]
    assert got.of("tool")[1]["detail"] == issues_call
    # Everything the model produced in this turn (its text and its calls): no list in it.
    last_step = [r for r in ollama.requests if r.get("stream") is not False][-1]
    produced = [m for m in last_step["messages"] if m["role"] == "assistant"]
    assert len(produced) == 2 and "MER-1" not in json.dumps(produced)
    assert produced[1]["tool_calls"][0]["function"]["arguments"] == {"toolCallId": issues_call}
    assert await transcript(server, "c3", 2) == [
        ("user", "my issues?"),
        ("assistant", "You have 40 issues.\n\n" + ISSUES),
    ]
    # A later turn of the same conversation can show it again; an unknown id shows nothing.
    ollama.responder = steps(
        call("present", toolCallId=issues_call),
        call("present", toolCallId="call_0000000000000000"),
        ChatScript(content=["Again."]),
    )
    again = await post_turn(server, {"text": "again", "conversationId": "c3"})
    assert outcomes(again) == ["success", "failed"]
    assert again.final == {"text": "Again.\n\n" + ISSUES}
    told = [r for r in ollama.requests if r.get("stream") is not False][-1]["messages"]
    assert "no tool result with toolCallId" in told[-1]["content"]


async def test_a_result_of_another_conversation_can_not_be_presented(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = steps(call("issues"), ChatScript(content=["ok"]))
    first = await post_turn(server, {"text": "issues", "conversationId": "mine"})
    issues_call = first.of("tool")[0]["toolCallId"]
    ollama.responder = steps(call("present", toolCallId=issues_call), ChatScript(content=["?"]))
    other = await post_turn(server, {"text": "show", "conversationId": "other"})
    assert outcomes(other) == ["failed"]
    assert other.final == {"text": "?"}


async def test_blank_displays_are_dropped_and_several_are_separated_by_a_blank_line(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = steps(
        ChatScript(
            tool_calls=[
                {"name": "present", "arguments": {"content": "first"}},
                {"name": "present", "arguments": {"content": "  \n "}},
                {"name": "present", "arguments": {"content": "second"}},
            ]
        ),
        ChatScript(content=[]),
    )
    got = await post_turn(server, {"text": "show", "conversationId": "c4"})
    assert outcomes(got) == ["success", "failed", "success"]
    assert got.final == {"text": "first\n\nsecond"}
    assert got.text == "first\n\nsecond"


async def test_displays_are_left_out_of_what_memory_capture_summarizes(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = steps(
        call("issues"),
        lambda request: call("present", toolCallId=last_call_id(request, "issues")),
        ChatScript(content=["Here are your issues."]),
    )
    got = await post_turn(server, {"text": "list my issues", "conversationId": "c5"})
    assert outcomes(got) == ["success", "success"]
    assert got.of("tool_finish")[-1]["outcome"] == "success"  # the capture ran
    captures = [r for r in ollama.requests if r.get("stream") is False]
    assert len(captures) == 1
    summarized = captures[0]["messages"][-1]["content"]
    assert "Here are your issues." in summarized and "list my issues" in summarized
    assert "MER-1" not in summarized
    kept = await transcript(server, "c5", 2)
    assert "MER-1" in kept[1][1]
