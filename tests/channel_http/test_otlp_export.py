"""Traces leave the server over OTLP/HTTP, as a collector receives them.

No OpenTelemetry Collector runs here (it is not on PyPI), so the receiver is an OTLP/HTTP
endpoint written with the official ``opentelemetry-proto`` messages: it decodes the SDK
exporter's protobuf exactly as a collector's receiver does. The server is a child process
configured only by the standard ``OTEL_*`` variables.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.conftest import ALICE
from tests.reliability.support import ChildServer, child_env
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.sse import turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1: every span it was sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.content_types: list[str] = []
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with lock:
                    receiver.content_types.append(self.headers.get("content-type", ""))
                    for resource_spans in request.resource_spans:
                        service = {
                            a.key: a.value.string_value for a in resource_spans.resource.attributes
                        }.get("service.name")
                        for scope_spans in resource_spans.scope_spans:
                            for span in scope_spans.spans:
                                receiver.spans.append(_decoded(span, service))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _decoded(span: Any, service: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            attributes[attribute.key] = [
                getattr(v, v.WhichOneof("value")) for v in value.array_value.values
            ]
        else:
            attributes[attribute.key] = getattr(value, kind)
    return {
        "name": span.name,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent": span.parent_span_id.hex() or None,
        "attributes": attributes,
        "service": service,
    }


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


async def test_a_turns_spans_reach_an_otlp_receiver_in_the_genai_conventions(
    receiver: Receiver, ollama: OllamaStandIn, tmp_path: Path
) -> None:
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "no_such_tool", "arguments": {}}]),
        ChatScript.words("All done."),
    )
    env = child_env(
        tmp_path / "data",
        ollama.url,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
        OTEL_SERVICE_NAME="mercury-under-test",
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    with ChildServer(env, tmp_path / "server.log") as child:
        async with httpx.AsyncClient(base_url=child.url, timeout=20) as client:
            with anyio.fail_after(30):
                got = await turn(client, {"text": "hi", "conversationId": "private"}, ALICE)
        assert got.final["text"] == "All done."
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            names = {span["name"] for span in receiver.spans}
            if {"POST /turn", "invoke_agent Mercury", "execute_tool unknown"} <= names:
                break
            await anyio.sleep(0.1)
    assert all(kind == "application/x-protobuf" for kind in receiver.content_types)
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in receiver.spans:
        by_name.setdefault(span["name"], []).append(span)
    (request,) = by_name["POST /turn"]
    (agent,) = by_name["invoke_agent Mercury"]
    calls = by_name["chat llama3.2"]
    (tool,) = by_name["execute_tool unknown"]
    assert request["service"] == "mercury-under-test"
    assert agent["parent"] == request["span_id"]
    assert {call["parent"] for call in calls} == {agent["span_id"]}
    assert tool["parent"] == agent["span_id"]
    assert len({s["trace_id"] for s in (request, agent, tool, *calls)}) == 1
    assert len(calls) == 2
    for call in calls:
        assert call["attributes"]["gen_ai.request.model"] == "llama3.2"
        assert call["attributes"]["gen_ai.usage.output_tokens"] >= 1
        assert call["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
    assert tool["attributes"]["gen_ai.tool.name"] == "unknown"
    # No message content and no conversation id in clear, anywhere.
    for span in receiver.spans:
        flat = repr(span["attributes"])
        assert "private" not in flat and "All done" not in flat and "hi'" not in flat
