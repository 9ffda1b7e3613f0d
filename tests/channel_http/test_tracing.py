"""OpenTelemetry: one span per request, children for the model, tools and stores."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from channel_http.serving.logs import JsonFormatter, with_trace_id
from tests.conftest import ALICE
from tests.support.mcp_tracker import Tracker, mcp_server
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.support.sse import turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The SDK's in-memory exporter behind the process's tracer provider (set once)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


async def test_a_turn_is_one_request_span_with_model_tool_and_store_children(
    spans: InMemorySpanExporter, make_server: object, ollama: OllamaStandIn
) -> None:
    server: RunningServer = make_server()  # type: ignore[operator]
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "no_such_tool", "arguments": {}}]),
        ChatScript.words("done"),
    )
    records = io.StringIO()
    handler = logging.StreamHandler(records)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(with_trace_id)
    requests_log = logging.getLogger("mercury.http.requests")
    level = requests_log.level
    requests_log.addHandler(handler)
    requests_log.setLevel(logging.INFO)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
            with anyio.fail_after(30):
                got = await turn(client, {"text": "hi", "conversationId": "secret-conv"}, ALICE)
                assert got.final["text"] == "done"
                await client.get("/conversation?id=secret-conv", headers=ALICE)
                # A request's line is written once its response has ended, on the server.
                while '"route":"/turn"' not in records.getvalue():
                    await anyio.sleep(0.02)
    finally:
        requests_log.removeHandler(handler)
        requests_log.setLevel(level)
    finished = spans.get_finished_spans()
    (request,) = named(finished, "POST /turn")
    assert request.kind == trace.SpanKind.SERVER
    trace_id = request.context.trace_id
    in_turn = [span for span in finished if span.context.trace_id == trace_id]
    # The GenAI conventions: the turn is an agent invocation, a child of the request; the
    # model calls and the tool are its children, with the request and response models,
    # the token counts the model reported, and why each answer ended.
    (agent,) = named(in_turn, "invoke_agent Mercury")
    assert agent.parent is not None and agent.parent.span_id == request.context.span_id
    assert agent.attributes is not None
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    conversation = agent.attributes["gen_ai.conversation.id"]
    assert isinstance(conversation, str) and len(conversation) == 32
    calls = named(in_turn, "chat llama3.2")
    assert len(calls) == 2
    for call in calls:
        assert call.parent is not None and call.parent.span_id == agent.context.span_id
        attributes = dict(call.attributes or {})
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.model"] == "llama3.2"
        assert attributes["gen_ai.response.model"] == "llama3.2"
        assert isinstance(attributes["gen_ai.usage.input_tokens"], int)
        assert isinstance(attributes["gen_ai.usage.output_tokens"], int)
        assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    (tool,) = named(in_turn, "execute_tool unknown")
    assert tool.parent is not None and tool.parent.span_id == agent.context.span_id
    assert dict(tool.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "unknown",
        "gen_ai.tool.call.id": dict(tool.attributes or {})["gen_ai.tool.call.id"],
        "mercury.tool": "unknown",
    }
    assert any(span.name.startswith("state.") for span in in_turn)
    ids = {span.context.span_id for span in in_turn}
    assert all(
        span.parent is not None and span.parent.span_id in ids
        for span in in_turn
        if span is not request
    )
    # No span per sent frame, and nothing of the query in any attribute.
    assert len(in_turn) < 40
    for span in finished:
        assert "secret-conv" not in json.dumps(dict(span.attributes or {}))
        assert "secret-conv" not in span.name
    lines = [json.loads(line) for line in records.getvalue().splitlines()]
    turn_line = next(line for line in lines if line["route"] == "/turn")
    assert turn_line["traceId"] == format(trace_id, "032x")


async def test_the_messages_go_on_a_model_calls_span_only_when_the_setting_opts_in(
    spans: InMemorySpanExporter, make_server: object, ollama: OllamaStandIn
) -> None:
    quiet: RunningServer = make_server()  # type: ignore[operator]
    told: RunningServer = make_server(  # type: ignore[operator]
        OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true"
    )
    ollama.enqueue(ChatScript.words("first answer"), ChatScript.words("second answer"))
    for server in (quiet, told):
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
            with anyio.fail_after(30):
                await turn(client, {"text": "the words", "conversationId": "c"}, ALICE)
    quiet_call, told_call = named(spans.get_finished_spans(), "chat llama3.2")
    assert "gen_ai.input.messages" not in dict(quiet_call.attributes or {})
    attributes = dict(told_call.attributes or {})
    sent = json.loads(str(attributes["gen_ai.input.messages"]))
    assert sent[-1]["role"] == "user" and "the words" in sent[-1]["parts"][0]["content"]
    answer = json.loads(str(attributes["gen_ai.output.messages"]))
    assert answer == [
        {"role": "assistant", "parts": [{"type": "text", "content": "second answer"}]}
    ]


async def test_an_mcp_call_is_a_span_under_the_turns_tool_span_without_its_arguments(
    spans: InMemorySpanExporter, make_server: object, ollama: OllamaStandIn, tmp_path: Path
) -> None:
    tracker = Tracker()
    config = tmp_path / "mercury.yaml"
    config.write_text("mcp:\n  servers:\n    trk: {command: in-process, trusted: true}\n")
    server: RunningServer = make_server(  # type: ignore[operator]
        {"mcp_targets": {"trk": mcp_server(tracker)}}, MERCURY_CONFIG_FILE=str(config)
    )
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "trk_get_issue", "arguments": {"key": "SECRET-1"}}]),
        ChatScript.words("Here."),
    )
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        await turn(client, {"text": "show it", "conversationId": "c1"}, ALICE)
    assert tracker.calls == [("get_issue", {"key": "SECRET-1"})]
    finished = spans.get_finished_spans()
    (mcp,) = named(finished, "mcp.tools.call")
    (tool,) = named(finished, "execute_tool trk_get_issue")
    assert mcp.parent is not None and mcp.parent.span_id == tool.context.span_id
    assert dict(mcp.attributes or {}) == {
        "mcp.method.name": "tools/call",
        "mcp.server": "trk",
        "gen_ai.tool.name": "get_issue",
        "gen_ai.operation.name": "execute_tool",
    }
    for span in finished:
        assert "SECRET-1" not in json.dumps(dict(span.attributes or {}))
