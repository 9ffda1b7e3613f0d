"""openapi.yaml is the contract: its routes are the app's, and real traffic fits its schemas."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
from openapi_spec_validator import validate

from channel_http.app import build_app
from core.config.settings import Settings
from tests.conftest import ALICE
from tests.support.contract import check_event, check_response, document
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.support.sse import turn

pytestmark = [pytest.mark.timeout(60)]


def test_the_document_is_valid_openapi_3_1() -> None:
    assert document()["openapi"] == "3.1.0"
    validate(document())


def documented_routes(settings: Settings) -> set[tuple[str, str]]:
    pairs = set()
    for path, operations in document()["paths"].items():
        if path == "/login/callback" and settings.http.public_url is None:
            continue
        public = settings.http.public_url or ""
        if path == "/oauth/client-metadata.json" and not public.startswith("https://"):
            continue
        if path == "/metrics" and (not settings.metrics.enabled or settings.metrics.port):
            continue
        for method in operations:
            if method in {"get", "post", "patch", "put", "delete"}:
                pairs.add((method.upper(), path))
    return pairs


def app_routes(settings: Settings) -> set[tuple[str, str]]:
    app = build_app(settings)
    return {
        (method, re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path))
        for route in app.routes
        for method in getattr(route, "methods", ())
        if method not in {"OPTIONS", "HEAD"}
    }


def test_the_documented_routes_are_exactly_the_apps_routes(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings()
    assert app_routes(settings) == documented_routes(settings)


def test_with_a_public_url_the_login_callback_is_documented_and_mounted(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings(
        HTTP_SURFACE_PUBLIC_URL="https://mercury.example.test/", MERCURY_SECRET_KEY="k" * 32
    )
    assert ("GET", "/login/callback") in app_routes(settings)
    assert ("GET", "/oauth/client-metadata.json") in app_routes(settings)
    assert app_routes(settings) == documented_routes(settings)


def test_every_documented_response_carries_the_envelope_or_a_schema() -> None:
    for path, operations in document()["paths"].items():
        for method, operation in operations.items():
            assert operation.get("operationId"), (method, path)
            for status in operation["responses"]:
                assert status.isdigit(), (method, path, status)


def test_real_responses_of_every_read_route_fit_the_schemas(server: RunningServer) -> None:
    url = server.url
    for path, params in [
        ("/version", {}),
        ("/me", {}),
        ("/health", {}),
        ("/manifest", {}),
        ("/confirmations", {}),
        ("/tool-log", {}),
        ("/wiki/list", {}),
        ("/wiki/read", {"path": "curated/missing.md"}),
        ("/wiki/read", {}),
        ("/wiki/grep", {"pattern": "x"}),
        ("/wiki/grep", {"pattern": "("}),
        ("/conversation", {"id": "c1"}),
        ("/conversation", {}),
        ("/conversations", {"limit": "5"}),
        ("/conversations", {"limit": "0"}),
        ("/memory/scroll", {"collection": "semantic_facts"}),
        ("/memory/scroll", {"collection": "nope"}),
    ]:
        check_response(httpx.get(url + path, headers=ALICE, params=params, timeout=10))
        check_response(httpx.get(url + path, params=params))
    check_response(httpx.get(url + "/openapi.yaml"))
    for method, path, body in [
        ("POST", "/confirm", {"token": "abcd-efgh", "conversationId": "c1"}),
        ("POST", "/confirm", {}),
        ("PATCH", "/me", {"timeZone": "Europe/Rome"}),
        ("PATCH", "/me", {"timeZone": "+02:00"}),
        ("POST", "/link", None),
        ("POST", "/turn", {}),
    ]:
        check_response(httpx.request(method, url + path, headers=ALICE, json=body))


@pytest.mark.anyio
async def test_the_events_of_real_turns_fit_their_schemas(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server()
    steps = [
        ChatScript(thinking=["hmm"], tool_calls=[{"name": "wiki_list", "arguments": {}}]),
        ChatScript(
            tool_calls=[{"name": "promote_note", "arguments": {"path": "personal/notes/a.md"}}]
        ),
    ]
    ollama.responder = lambda request: steps.pop(0) if steps else ChatScript(content=[""])
    seen: set[str] = set()
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            for body in ({"text": "go", "conversationId": "c1"}, {"text": "again"}):
                got = await turn(client, body, ALICE)
                for name, data in got.events:
                    check_event(name, data)
                    seen.add(name)
            ollama.responder = None
            ollama.enqueue(ChatScript(content=["a"], error_after=1))
            failed = await turn(client, {"text": "x"}, ALICE)
            for name, data in failed.events:
                check_event(name, data)
                seen.add(name)
    assert seen >= {
        "reasoning",
        "reasoning_end",
        "tool",
        "tool_finish",
        "pending",
        "final",
        "text",
        "error",
    }


def test_every_event_the_core_can_emit_is_documented() -> None:
    from core.engine.events import EVENT_TYPES, TurnStarted

    documented: dict[str, Any] = document()["paths"]["/turn"]["post"]["responses"]["200"][
        "content"
    ]["text/event-stream"]["x-events"]
    emitted = {event.name.decode() for event in (*EVENT_TYPES, TurnStarted)}
    assert emitted == set(documented)
