"""``POST /ag-ui``: AG-UI 1.0 over SSE, driven by the real ``@ag-ui/client`` and checked frame
by frame with the ``ag-ui-protocol`` models.

One server for the module, on the scripted model (``dev_model``) with its demo services, so
``/demo confirm`` stages a confirmation and ``/demo login`` asks for a sign-in. The Node
client comes from ``tests/ag_ui`` (``npm ci``, run by ``scripts/test``).
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from ag_ui.core import Event, RunAgentInput
from pydantic import TypeAdapter

from channel_http.protocols.ag_ui import AgUiRun
from core.clock import ManualClock
from core.config.settings import load_settings
from core.engine import events
from core.memory.edge import EdgeStore
from core.tools.registry import Plugin, Tool, ToolCallContext
from dev_model.demo import DevModel, services_yaml
from tests.conftest import ALICE, BOB, server_env
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer, serve

pytestmark = pytest.mark.timeout(120)

CLIENT = Path(__file__).resolve().parents[1] / "ag_ui"
EVENT: TypeAdapter[Any] = TypeAdapter(Event)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("ag-ui")
    with DevModel() as model:
        config = folder / "services.yaml"
        config.write_text(services_yaml(model.url), encoding="utf-8")
        env = {
            **server_env(folder, model.url),
            "MERCURY_CONFIG_FILE": str(config),
            "HTTP_SURFACE_PUBLIC_URL": "http://127.0.0.1:4100",
            "MERCURY_SECRET_KEY": secrets.token_urlsafe(32),
            "HTTP_SURFACE_HEARTBEAT_S": "0.2",
            "MERCURY_RATE_LIMIT_PER_USER": "1000",
        }
        with serve(load_settings(env, cwd=folder)) as running:
            yield running


# ------------------------------------------------------------------ the translation alone


def rendered(run: AgUiRun, *stream: events.Event) -> list[dict[str, Any]]:
    """The events ``stream`` becomes, after RUN_STARTED, each validated by the models."""
    raw = run.started() + run.render_batch(list(stream)) + run.ended()
    frames = [f for f in raw.split(b"\n\n") if f]
    decoded = []
    for one in frames:
        assert one.startswith(b"data: ") and b"\n" not in one
        data = json.loads(one[6:])
        model = EVENT.validate_python(data)
        assert model.model_dump(mode="json", by_alias=True, exclude_none=True) == data
        decoded.append(data)
    return decoded


def a_run() -> AgUiRun:
    return AgUiRun(
        "thread",
        "run-1",
        link=lambda service, url: f"Sign in to {service}: {url}",
        expires_in=timedelta(minutes=5),
    )


def test_final_text_beyond_the_deltas_is_streamed_before_run_finished() -> None:
    got = rendered(
        a_run(),
        events.Text(chunk="Here is "),
        events.Text(chunk="a table."),
        events.Final(text="Here is a table.\n\n| a |"),
    )
    deltas = [e["delta"] for e in got if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert deltas == ["Here is ", "a table.", "\n\n| a |"]
    assert len({e["messageId"] for e in got if e["type"].startswith("TEXT_MESSAGE")}) == 1
    assert types(got)[-2:] == ["TEXT_MESSAGE_END", "RUN_FINISHED"]


def test_a_pending_note_without_deltas_becomes_the_message_and_the_result() -> None:
    note = "Action pending, waiting for confirmation."
    pending = events.Pending(
        command="Add 2",
        token="abcd-efgh",
        choices=(events.Choice("abcd-efgh", ""),),
        tool_call_id="call_1",
    )
    got = rendered(
        a_run(),
        events.Tool(label="Bump…", detail="2", tool_call_id="call_1", tool_name="bump"),
        events.ToolFinish(tool_call_id="call_1", outcome="pending"),
        pending,
        events.Final(text=note, pending_note=note),
    )
    assert [e["delta"] for e in got if e["type"] == "TEXT_MESSAGE_CONTENT"] == [note]
    finished = got[-1]
    assert finished["result"] == {"text": note, "pendingNote": note}
    [interrupt] = finished["outcome"]["interrupts"]
    assert interrupt["toolCallId"] == "call_1" and interrupt["id"] == "abcd-efgh"
    assert interrupt["responseSchema"]["properties"]["choice"]["oneOf"] == [
        {"const": "abcd-efgh", "title": "Add 2"}
    ]


def test_text_closes_before_a_tool_and_a_new_message_opens_after() -> None:
    got = rendered(
        a_run(),
        events.Reasoning(chunk="hm", id="r1"),
        events.Text(chunk="Let me look."),
        events.Tool(label="Saving…", detail="x", tool_call_id="call_2"),
        events.ToolFinish(tool_call_id="call_2", outcome="failed"),
        events.Text(chunk="Done."),
        events.Final(text="Let me look.Done."),
    )
    assert types(got) == [
        "RUN_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "RUN_FINISHED",
    ]
    starts = [e["messageId"] for e in got if e["type"] == "TEXT_MESSAGE_START"]
    assert len(set(starts)) == 2
    start = got[types(got).index("TOOL_CALL_START")]
    assert start["toolCallName"] == "memory"  # a tool event without a name: Mercury saving
    assert json.loads(got[types(got).index("TOOL_CALL_RESULT")]["content"]) == {"outcome": "failed"}


def test_an_interrupt_expires_when_its_staging_does_by_the_servers_clock() -> None:
    run = AgUiRun(
        "thread",
        "run-1",
        link=lambda service, url: url,
        expires_in=timedelta(minutes=5),
        clock=ManualClock(datetime(2026, 12, 7, 13, 0, tzinfo=UTC)),
    )
    pending = events.Pending(
        command="x", token="abcd-efgh", choices=(events.Choice("abcd-efgh", ""),)
    )
    got = rendered(run, pending, events.Final(text=""))
    [interrupt] = got[-1]["outcome"]["interrupts"]
    assert interrupt["expiresAt"] == "2026-12-07T13:05:00.000Z"
    assert "toolCallId" not in interrupt  # a pending from before toolCallId: none to name
    carried = events.Pending(
        command="x",
        token="abcd-efgh",
        choices=(events.Choice("abcd-efgh", ""),),
        expires_at=datetime(2026, 12, 7, 13, 4, 59, 250_000, tzinfo=UTC),
    )
    later = AgUiRun("thread", "run-2", link=lambda s, u: u, expires_in=timedelta(minutes=5))
    [interrupt] = rendered(later, carried, events.Final(text=""))[-1]["outcome"]["interrupts"]
    assert interrupt["expiresAt"] == "2026-12-07T13:04:59.250Z"  # the staging's own


def test_usage_on_final_goes_into_run_finished() -> None:
    class Usage(msgspec.Struct, rename="camel"):
        input: int
        output: int
        cached: int | None = None

    class FinalWithUsage(events.Final, frozen=True):
        usage: Usage | None = None

    got = rendered(a_run(), FinalWithUsage(text="", usage=Usage(input=12, output=3, cached=4)))
    assert got[-1]["usage"] == [{"inputTokens": 12, "outputTokens": 3, "cachedInputTokens": 4}]
    assert "usage" not in rendered(a_run(), events.Final(text=""))[-1]


# ------------------------------------------------------------------ the wire, frame by frame


def run_input(thread: str, text: str | None = None, **extra: Any) -> dict[str, Any]:
    messages = [] if text is None else [{"id": "u1", "role": "user", "content": text}]
    body = {
        "threadId": thread,
        "runId": f"run-{secrets.token_hex(4)}",
        "state": {},
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {},
        **extra,
    }
    RunAgentInput.model_validate(body)  # what an AG-UI client sends
    return body


def post(server: RunningServer, body: dict[str, Any], headers: dict[str, str] = ALICE) -> Any:
    """POST ``/ag-ui``; each ``data:`` line validated as an AG-UI event. Returns (response,
    events, raw lines)."""
    with httpx.Client(base_url=server.url, timeout=60) as client:
        with client.stream(
            "POST", "/ag-ui", json=body, headers={**headers, "accept": "text/event-stream"}
        ) as response:
            lines = [line for line in response.iter_lines()]
    if response.status_code != 200:
        return response, [], lines
    decoded = []
    for line in lines:
        if not line.startswith("data: "):
            assert line == "" or line.startswith(":"), line  # frames, blank lines, comments
            continue
        data = json.loads(line[6:])
        model = EVENT.validate_python(data)
        # Nothing the models don't know: dumped again, the event is the same JSON.
        assert model.model_dump(mode="json", by_alias=True, exclude_none=True) == data
        decoded.append(data)
    return response, decoded, lines


def types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def test_a_plain_message_streams_reasoning_then_one_text_message_in_agui_order(
    server: RunningServer,
) -> None:
    body = run_input("plain", "hello there")
    response, events, _ = post(server, body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["content-language"] == "en"
    started, finished = events[0], events[-1]
    assert started == {
        "type": "RUN_STARTED",
        "threadId": "plain",
        "runId": body["runId"],
        "protocolVersion": "1.0",
    }
    seen = types(events)
    assert seen[1:4] == ["REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT"]
    end = seen.index("REASONING_END")
    assert seen[end - 1] == "REASONING_MESSAGE_END"
    assert seen[end + 1] == "TEXT_MESSAGE_START"
    assert seen[-2:] == ["TEXT_MESSAGE_END", "RUN_FINISHED"]
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "You said: hello there" in text  # after the greeting of a first turn
    assert finished["outcome"] == {"type": "success"}
    assert finished["result"] == {"text": text} and finished["runId"] == body["runId"]
    ids = {e["messageId"] for e in events if e["type"].startswith("TEXT_MESSAGE")}
    assert len(ids) == 1


def test_a_tool_call_is_started_argued_ended_then_its_result(server: RunningServer) -> None:
    _, events, _ = post(server, run_input("tool", "/demo tool"))
    [start] = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallName"] == "wiki_list"
    assert start["metadata"] == {"label": "Reading the wiki…"}
    call = start["toolCallId"]
    at = types(events).index("TOOL_CALL_START")
    assert types(events)[at : at + 4] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]
    args, _, result = events[at + 1 : at + 4]
    assert json.loads(args["delta"]) == {"detail": ""} or "detail" in json.loads(args["delta"])
    assert result["toolCallId"] == call and json.loads(result["content"]) == {"outcome": "success"}
    assert types(events)[-1] == "RUN_FINISHED"


def test_a_staged_confirmation_ends_the_run_with_an_interrupt_for_its_tool_call(
    server: RunningServer,
) -> None:
    _, events, _ = post(server, run_input("interrupt", "/demo confirm"))
    [start] = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert "TOOL_CALL_RESULT" not in types(events)  # the call waits for its answer
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED"
    [interrupt] = finished["outcome"]["interrupts"]
    assert finished["outcome"]["type"] == "interrupt"
    assert interrupt["reason"] == "confirmation"
    assert interrupt["toolCallId"] == start["toolCallId"]
    assert "Archive a demo note" in interrupt["message"]
    [choice] = interrupt["responseSchema"]["properties"]["choice"]["oneOf"]
    assert choice["const"] == interrupt["id"]
    assert interrupt["expiresAt"].endswith("Z")
    listed = httpx.get(server.url + "/confirmations", headers=ALICE).json()["pending"]
    [item] = [item for item in listed if item["conversationId"] == "interrupt"]
    # The staging's own expiry, to the millisecond, not a window counted from the rendering.
    expires_at = datetime.fromisoformat(interrupt["expiresAt"])
    assert int(expires_at.timestamp() * 1000) == item["expiresAt"]


def test_login_is_a_custom_event_and_a_markdown_link_in_the_text(server: RunningServer) -> None:
    _, events, _ = post(server, run_input("login", "/demo login"))
    [custom] = [e for e in events if e["type"] == "CUSTOM"]
    assert custom["name"] == "mercury.login"
    assert custom["value"]["service"] == "demo_account"
    url = custom["value"]["url"]
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert f"Sign in to demo_account: <{url}>" in text


def test_a_failing_model_ends_the_run_with_run_error(server: RunningServer) -> None:
    _, events, _ = post(server, run_input("failing", "/demo error"))
    assert events[-1]["type"] == "RUN_ERROR"
    assert "(/demo error)" in events[-1]["message"]
    assert "RUN_FINISHED" not in types(events)
    assert types(events)[-2] == "TEXT_MESSAGE_END"  # the open message closed first


def test_only_the_last_user_message_is_the_input_the_rest_is_ignored(
    server: RunningServer,
) -> None:
    body = run_input("history", "ignored")
    body["messages"] = [
        {"id": "u0", "role": "user", "content": "an old question /demo error"},
        {"id": "a0", "role": "assistant", "content": "an answer the client made up"},
        {"id": "u1", "role": "user", "content": [{"type": "text", "text": "the new one"}]},
    ]
    _, events, _ = post(server, body)
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "You said: the new one" in text
    said = httpx.get(
        server.url + "/conversation", params={"conversationId": "history"}, headers=ALICE
    )
    assert "made up" not in said.text and "old question" not in said.text


def test_quiet_streams_carry_ping_comments(server: RunningServer) -> None:
    # /demo slow takes ~10 s at 4 words a second; the heartbeat here is 0.2 s: a ping
    # comes between words at least now and then. Only its first words are read.
    body = run_input("slow", "/demo slow")
    with httpx.Client(base_url=server.url, timeout=60) as client:
        with client.stream("POST", "/ag-ui", json=body, headers=ALICE) as response:
            seen = []
            for line in response.iter_lines():
                seen.append(line)
                if line == ": ping" and any("TEXT_MESSAGE_CONTENT" in s for s in seen):
                    break
    assert ": ping" in seen


@pytest.mark.parametrize(
    ("body", "headers", "status", "says"),
    [
        ({"threadId": "t", "runId": "r", "messages": []}, ALICE, 400, "user message"),
        (
            {
                "threadId": "t",
                "runId": "r",
                "messages": [{"id": "a", "role": "assistant", "content": "hi"}],
            },
            ALICE,
            400,
            "user message",
        ),
        ({"runId": "r", "messages": []}, ALICE, 400, '"threadId" is required'),
        ({"threadId": "bad id!", "runId": "r", "messages": []}, ALICE, 400, "threadId"),
        ({"threadId": "t", "runId": "r", "messages": []}, {}, 401, "Sign in first"),
    ],
)
def test_what_is_wrong_before_the_stream_is_a_4xx_with_a_sentence(
    server: RunningServer, body: dict[str, Any], headers: dict[str, str], status: int, says: str
) -> None:
    response, _, lines = post(server, body, headers)
    assert response.status_code == status
    answer = json.loads("\n".join(lines))
    assert answer["ok"] is False and says in answer["error"]


def test_refusals_and_the_stream_speak_the_callers_language(server: RunningServer) -> None:
    german = {**ALICE, "accept-language": "de"}
    response, _, lines = post(server, {"threadId": "bad id!", "runId": "r"}, german)
    assert response.status_code == 400 and response.headers["content-language"] == "de"
    assert json.loads("\n".join(lines))["error"].startswith("Die threadId benennt das Gespräch")
    response, _, _ = post(server, run_input("deutsch", "hallo"), german)
    assert response.headers["content-language"] == "de"


def test_a_browser_may_call_it_from_another_origin(server: RunningServer) -> None:
    preflight = httpx.options(
        server.url + "/ag-ui",
        headers={
            "origin": "http://ui.example",
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type",
        },
    )
    assert preflight.status_code in (200, 204)
    assert preflight.headers["access-control-allow-origin"] in ("*", "http://ui.example")
    assert "authorization" in preflight.headers["access-control-allow-headers"]


def test_over_the_rate_limit_a_run_is_429_before_any_stream(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    limited = make_server(MERCURY_RATE_LIMIT_PER_USER="1")
    first, events, _ = post(limited, run_input("limited", "one"))
    assert first.status_code == 200 and events[-1]["type"] == "RUN_FINISHED"
    second, _, lines = post(limited, run_input("limited", "two"))
    assert second.status_code == 429 and int(second.headers["retry-after"]) >= 1
    answer = json.loads("\n".join(lines))
    assert answer["ok"] is False and "Too many messages" in answer["error"]


def test_another_person_cannot_answer_an_interrupt(server: RunningServer) -> None:
    _, events, _ = post(server, run_input("isolated", "/demo confirm"))
    [interrupt] = events[-1]["outcome"]["interrupts"]
    resume = [{"interruptId": interrupt["id"], "status": "resolved"}]
    _, by_bob, _ = post(server, run_input("isolated", None, resume=resume), BOB)
    [result] = [e for e in by_bob if e["type"] == "TOOL_CALL_RESULT"] or [None]
    assert result is None or json.loads(result["content"])["outcome"] == "expired"
    listed = httpx.get(server.url + "/confirmations", headers=ALICE).json()["pending"]
    assert any(item["conversationId"] == "isolated" for item in listed)


# ------------------------------------------------------------------ the real client


def node(scenario: str, server: RunningServer) -> dict[str, Any]:
    assert (CLIENT / "node_modules" / "@ag-ui" / "client").exists(), (
        "@ag-ui/client is missing: run `cd tests/ag_ui && npm ci` (scripts/test does)"
    )
    executable = shutil.which("node")
    assert executable, "node is needed for the AG-UI client tests"
    done = subprocess.run(  # noqa: S603 - our own script
        [executable, "run.mjs", scenario, f"{server.url}/ag-ui", "alice-token"],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_httpagent_accepts_every_demos_stream(server: RunningServer) -> None:
    runs = node("demos", server)
    for demo in ("reasoning", "tool", "login", "markdown"):
        got = runs[demo]
        assert got["error"] is None, (demo, got["error"])
        assert got["seen"][0] == "RUN_STARTED" and got["seen"][-1] == "RUN_FINISHED", demo
    assert "REASONING_MESSAGE_CONTENT" in runs["reasoning"]["seen"]
    # The model thinks before the call and before its answer: a reasoning message each.
    assert [m["role"] for m in runs["tool"]["messages"]] == [
        "user",
        "reasoning",
        "assistant",
        "tool",
        "reasoning",
        "assistant",
    ]
    assert "CUSTOM" in runs["login"]["seen"]
    error = runs["error"]
    assert error["seen"][-1] == "RUN_ERROR"
    assert "(/demo error)" in json.dumps(error["events"][-1])


def test_httpagent_interrupt_refuses_a_run_without_resume_then_resumes_with_the_result(
    server: RunningServer,
) -> None:
    got = node("confirm", server)
    first, refused, resumed = got["first"], got["refused"], got["resumed"]
    assert first["error"] is None and first["seen"][-1] == "RUN_FINISHED"
    [interrupt] = first["interrupts"]
    start = next(e for e in first["events"] if e["type"] == "TOOL_CALL_START")
    assert interrupt["toolCallId"] == start["toolCallId"]
    assert refused["seen"] == []
    assert f"not addressed by resume: {interrupt['id']}" in refused["error"]
    assert resumed["error"] is None and resumed["interrupts"] == []
    assert resumed["seen"][0] == "RUN_STARTED" and resumed["seen"][-1] == "RUN_FINISHED"
    [result] = [e for e in resumed["events"] if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == start["toolCallId"]
    assert json.loads(result["content"]) == {"outcome": "confirmed", "reply": "Confirmed and done."}
    shown = [m for m in got["messages"] if m["role"] != "reasoning"]
    # The staging call, its result once answered (placed after the call), the model's words
    # about the staging, then the confirmation's reply.
    assert [m["role"] for m in shown] == ["user", "assistant", "tool", "assistant", "assistant"]
    assert shown[1]["toolCalls"] == [{"id": start["toolCallId"], "name": "demo_archive"}]
    assert shown[2]["toolCallId"] == start["toolCallId"]
    assert shown[-1]["content"] == "Confirmed and done."


def test_httpagent_picks_a_labelled_choice(server: RunningServer) -> None:
    got = node("choices", server)
    [interrupt] = got["first"]["interrupts"]
    titles = [c["title"] for c in interrupt["responseSchema"]["properties"]["choice"]["oneOf"]]
    assert titles == ["Replace the note", "Append to the note"]
    assert got["resumed"]["error"] is None
    [result] = [e for e in got["resumed"]["events"] if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == interrupt["toolCallId"]
    assert json.loads(result["content"])["outcome"] == "confirmed"
    read = httpx.get(
        server.url + "/wiki/read",
        params={"path": "personal/notes/dev-model-demo.md"},
        headers=ALICE,
    ).json()
    assert "First version." in read["content"] and "Second version." in read["content"]


def test_httpagent_cancels_an_interrupt_and_the_thread_goes_on(server: RunningServer) -> None:
    got = node("cancel", server)
    cancelled, after = got["cancelled"], got["after"]
    assert cancelled["error"] is None and cancelled["interrupts"] == []
    [result] = [e for e in cancelled["events"] if e["type"] == "TOOL_CALL_RESULT"]
    assert json.loads(result["content"]) == {"outcome": "cancelled"}
    assert after["error"] is None and after["seen"][-1] == "RUN_FINISHED"


def test_a_client_that_leaves_cancels_the_turn(server: RunningServer) -> None:
    body = run_input("leaving", "/demo cancel")  # a stream that never ends by itself
    with httpx.Client(base_url=server.url, timeout=30) as client:
        with client.stream("POST", "/ag-ui", json=body, headers=ALICE) as response:
            for line in response.iter_lines():
                if "TEXT_MESSAGE_CONTENT" in line:
                    break
    # The conversation is free again: the next run isn't queued behind the left one.
    _, events, _ = post(server, run_input("leaving", "are you there?"))
    assert events[-1]["type"] == "RUN_FINISHED"


# ------------------------------------------------------------------ a confirmation that hands back


async def _bump(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
    return f"counter is now {arguments['by']}"


def test_an_answer_that_hands_back_streams_the_models_resumed_turn_in_the_run(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    tool = Tool(
        name="bump_and_tell",
        description="Add to the counter and read the result.",
        parameters={"type": "object", "properties": {"by": {"type": "integer"}}},
        run=_bump,
        confirm=True,
        hands_back=True,
    )
    server = make_server({"plugins": [Plugin(name="counter", api_version=4, tools=(tool,))]})
    steps = [
        ChatScript(tool_calls=[{"name": "bump_and_tell", "arguments": {"by": 3}}]),
        ChatScript.words("Please confirm."),
    ]
    ollama.responder = lambda request: steps.pop(0) if steps else ChatScript.words("It is 3 now.")
    _, first, _ = post(server, run_input("handing", "bump it"))
    [interrupt] = first[-1]["outcome"]["interrupts"]
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {}}]
    _, resumed, _ = post(server, run_input("handing", None, resume=resume))
    assert types(resumed)[:2] == ["RUN_STARTED", "TOOL_CALL_RESULT"]
    assert resumed[1]["toolCallId"] == interrupt["toolCallId"]
    assert json.loads(resumed[1]["content"]) == {"outcome": "confirmed"}
    text = "".join(e["delta"] for e in resumed if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "It is 3 now."
    assert resumed[-1]["outcome"] == {"type": "success"}
    heard = ollama.requests[-1]["messages"][-1]
    assert heard["role"] == "tool" and "counter is now 3" in heard["content"]


def test_a_memory_capture_after_final_stays_inside_the_run(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, tmp_path: Path
) -> None:
    server = make_server(
        {"memory": EdgeStore(tmp_path / "edge")}, SESSION_CAPTURE_MESSAGE_THRESHOLD="4"
    )

    def respond(request: dict[str, Any]) -> ChatScript:
        if request.get("stream") is False:  # the capture's summary
            return ChatScript(content=[json.dumps({"summary": "A trip.", "facts": []})])
        return ChatScript.words("Noted.")

    ollama.responder = respond
    post(server, run_input("remembered", "I plan a trip"))
    _, events, _ = post(server, run_input("remembered", "to Lisbon in May"))
    # AG-UI allows nothing after RUN_FINISHED: the capture's call comes before it.
    assert types(events)[-5:] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "RUN_FINISHED",
    ]
    assert events[-5]["toolCallName"] == "memory"
    assert events[-1]["result"] == {"text": "Noted."}
