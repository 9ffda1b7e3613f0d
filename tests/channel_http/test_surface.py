"""The surface's cross-cutting rules: auth before the body, one error envelope, CORS."""

from __future__ import annotations

import logging
import socket
from importlib import metadata
from pathlib import Path

import httpx
import pytest

from channel_http.app import CHANNEL_API_VERSION, HttpChannel
from core.channels import admits
from core.config.settings import ConfigurationError
from core.people.messages import TOKEN_EMPTY, TOKEN_MISSING, TOKEN_REFUSED
from core.version import CHANNEL_API_VERSION as CORE_CHANNEL_API_VERSION
from core.version import __version__
from tests.conftest import ALICE
from tests.support.server import RunningServer

pytestmark = [pytest.mark.timeout(60)]

AUTHENTICATED = [
    ("POST", "/turn"),
    ("POST", "/confirm"),
    ("GET", "/me"),
    ("PATCH", "/me"),
    ("POST", "/link"),
    ("GET", "/health"),
    ("GET", "/manifest"),
    ("GET", "/confirmations"),
    ("POST", "/confirmations/0123456789abcdef0123456789abcdef"),
    ("GET", "/tool-log"),
    ("GET", "/wiki/list"),
    ("GET", "/wiki/read"),
    ("GET", "/wiki/grep"),
]


@pytest.mark.parametrize(("method", "path"), AUTHENTICATED)
def test_every_authenticated_route_answers_401_before_reading_the_body(
    server: RunningServer, method: str, path: str
) -> None:
    response = httpx.request(method, server.url + path, content=b"not json {")
    assert response.status_code == 401
    assert response.json() == {"ok": False, "error": TOKEN_MISSING}
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.headers["access-control-allow-origin"] == "*"


@pytest.mark.parametrize(
    "authorization",
    ["Bearer wrong", "Basic YWxpY2U6eA==", "Bearer", "Bearer alice-token extra", "alice-token"],
)
def test_a_refused_token_is_401_with_invalid_token(
    server: RunningServer, authorization: str
) -> None:
    response = httpx.get(server.url + "/me", headers={"authorization": authorization})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'


def test_the_bearer_scheme_is_case_insensitive(server: RunningServer) -> None:
    response = httpx.get(server.url + "/me", headers={"authorization": "bEaReR   alice-token"})
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "The request body must be JSON."),
        (b"{not json", "The request body must be JSON."),
        (b"null", "The request body must be a JSON object."),
        (b"[1, 2]", "The request body must be a JSON object."),
        (b"42", "The request body must be a JSON object."),
        (b'"text"', "The request body must be a JSON object."),
        (b'{"text": 5}', 'The field "text" must be a string.'),
        (b'{"text": "hi", "conversationId": 7}', 'The field "conversationId" must be a string.'),
        (b'{"text": "hi", "opening": "yes"}', 'The field "opening" must be true or false.'),
        (
            b'{"text": "hi", "conversationID": "c"}',
            'The field "conversationID" is not allowed here.',
        ),
        (
            b'{"text": "hi", "text": "again"}',
            'The field "text" appears more than once; send it once.',
        ),
        (
            b'{"text": "hi", "te\\u0078t": "again"}',
            'The field "text" appears more than once; send it once.',
        ),
        (b"{}", 'Write some text: "text" is missing or blank.'),
        (b'{"text": "   \\n "}', 'Write some text: "text" is missing or blank.'),
        (b'{"opening": true}', "An opening turn needs a conversationId."),
        (b'{"resume": true, "conversationId": "  "}', "A resumed turn needs a conversationId."),
    ],
)
def test_bad_turn_bodies_get_a_400_naming_the_problem(
    server: RunningServer, body: bytes, message: str
) -> None:
    response = httpx.post(server.url + "/turn", headers=ALICE, content=body)
    assert response.status_code == 400
    assert response.json() == {"ok": False, "error": message}
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["content-language"] == "en"


@pytest.mark.parametrize(
    "conversation_id",
    ["..", ".", "a/b", "a b", "a\nb", "x" * 129, "alice:c", "c\u00e9"],
)
def test_conversation_ids_outside_the_rule_are_refused(
    server: RunningServer, conversation_id: str
) -> None:
    response = httpx.post(
        server.url + "/turn",
        headers={**ALICE, "content-type": "application/json"},
        content=f'{{"text": "hi", "conversationId": {_json_string(conversation_id)}}}'.encode(),
    )
    assert response.status_code == 400
    assert "conversationId" in response.json()["error"]


def test_refusals_before_the_caller_is_known_speak_the_requested_language(
    server: RunningServer,
) -> None:
    italian = {"accept-language": "it-CH, en;q=0.5"}
    unauthorized = httpx.get(server.url + "/me", headers=italian)
    assert unauthorized.status_code == 401
    assert unauthorized.json() == {
        "ok": False,
        "error": "Accedi prima: questa richiesta non porta alcun token "
        "(un'intestazione Authorization: Bearer).",
    }
    assert unauthorized.headers["content-language"] == "it"
    assert unauthorized.headers["www-authenticate"] == "Bearer"
    # A token sent and refused: a sentence in the asked language too, and RFC 6750's challenge.
    refused = httpx.get(
        server.url + "/me", headers={**italian, "authorization": "Bearer not-a-token"}
    )
    assert refused.status_code == 401
    assert refused.json()["error"] == (
        "Il server non riconosce questo token; controllalo, o chiedine uno a chi gestisce il "
        "server."
    )
    assert refused.headers["content-language"] == "it"
    assert refused.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    missing = httpx.get(server.url + "/nope", headers={"accept-language": "de"})
    assert missing.status_code == 404
    assert missing.headers["content-language"] == "de"
    assert missing.json()["error"] != "Not found."
    wrong = httpx.delete(server.url + "/version", headers={"accept-language": "fr"})
    assert wrong.status_code == 405
    assert wrong.headers["content-language"] == "fr"
    assert "DELETE" in wrong.json()["error"] and wrong.json()["error"] != (
        "This route does not accept the DELETE method."
    )
    plain = httpx.get(server.url + "/me")
    assert plain.json() == {"ok": False, "error": TOKEN_MISSING}
    assert plain.headers["content-language"] == "en"


def test_an_empty_bearer_is_told_it_carries_no_token_not_that_it_is_unknown(
    server: RunningServer,
) -> None:
    # What a pasted `-H "authorization: Bearer $TOKEN"` sends while $TOKEN is unset.
    empty = httpx.get(server.url + "/me", headers={"authorization": "Bearer"})
    assert empty.status_code == 401
    assert empty.json() == {"ok": False, "error": TOKEN_EMPTY}
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:  # httpx won't send it
        raw.sendall(
            b"GET /me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \r\nConnection: close\r\n\r\n"
        )
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401") and TOKEN_EMPTY.encode() in answer
    wrong = httpx.get(server.url + "/me", headers={"authorization": "Bearer nope"})
    assert wrong.json() == {"ok": False, "error": TOKEN_REFUSED}
    italian = httpx.get(
        server.url + "/me", headers={"authorization": "Bearer", "accept-language": "it"}
    )
    assert italian.json()["error"].startswith("Questa richiesta non porta alcun token")


def test_a_lone_surrogate_is_a_400_not_a_crash(server: RunningServer) -> None:
    body = b'{"text": "hi", "conversationId": "\\ud800"}'
    response = httpx.post(server.url + "/turn", headers=ALICE, content=body)
    assert response.status_code == 400
    assert response.json()["ok"] is False


def test_a_trimmed_uuid_and_128_characters_are_accepted(server: RunningServer) -> None:
    for conversation_id in ("  abc\n", "123e4567-e89b-12d3-a456-426614174000", "x" * 128):
        response = httpx.post(
            server.url + "/confirm",
            headers=ALICE,
            json={"token": "abcd-efgh", "conversationId": conversation_id},
        )
        assert response.json() == {"ok": True, "resolved": False}


def _json_string(value: str) -> str:
    import json

    return json.dumps(value)


def test_a_body_over_one_mebibyte_is_413(server: RunningServer) -> None:
    response = httpx.post(server.url + "/turn", headers=ALICE, content=b" " * (1024 * 1024 + 10))
    assert response.status_code == 413
    assert response.json() == {"ok": False, "error": "The request body is larger than 1 MiB."}


def test_unknown_routes_and_methods_use_the_envelope_with_cors(server: RunningServer) -> None:
    missing = httpx.get(server.url + "/nope", headers=ALICE)
    assert missing.status_code == 404
    assert missing.json() == {"ok": False, "error": "Not found."}
    assert missing.headers["access-control-allow-origin"] == "*"
    wrong = httpx.delete(server.url + "/turn", headers=ALICE)
    assert wrong.status_code == 405
    assert wrong.json() == {"ok": False, "error": "This route does not accept the DELETE method."}


@pytest.mark.parametrize(
    "path", [path for _, path in AUTHENTICATED] + ["/version", "/openapi.yaml"]
)
def test_every_route_answers_a_preflight_with_204_without_auth(
    server: RunningServer, path: str
) -> None:
    response = httpx.options(
        server.url + path,
        headers={"origin": "https://ui.example", "access-control-request-method": "POST"},
    )
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == "*"
    assert "authorization" in response.headers["access-control-allow-headers"]
    assert "POST" in response.headers["access-control-allow-methods"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/spaces/slack:C1/prefs"),
        ("PUT", "/spaces/slack:C1/prefs/tone"),
        ("DELETE", "/spaces/slack:C1/prefs/tone"),
        ("POST", "/spaces/telegram:-100123/mutes"),
        ("DELETE", "/spaces/telegram:-100123/mutes/slack:U1"),
        ("DELETE", "/spaces/discord:1:2"),
        ("GET", "/spaces/slack:C1"),
        ("GET", "/spaces/slack:C1/settings"),
        ("PUT", "/spaces/slack:C1/settings/rate_limit"),
        ("DELETE", "/spaces/slack:C1/settings/trigger.match"),
    ],
)
def test_a_preflight_to_a_parameterized_route_is_answered_with_its_method(
    server: RunningServer, method: str, path: str
) -> None:
    # Adversarial review (#34): the preflight matched literal paths only, so every
    # /spaces/{space}/... route answered 401, and PUT and DELETE were not allowed.
    response = httpx.options(
        server.url + path,
        headers={"origin": "https://ui.example", "access-control-request-method": method},
    )
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == "*"
    allowed = {m.strip() for m in response.headers["access-control-allow-methods"].split(",")}
    assert method in allowed


def test_a_preflight_to_a_path_no_route_serves_is_not_answered(server: RunningServer) -> None:
    for path in ("/spaces/slack:C1/nothing", "/no-such-route", "/spaces/a/prefs/b/c"):
        response = httpx.options(
            server.url + path,
            headers={"origin": "https://ui.example", "access-control-request-method": "GET"},
        )
        assert response.status_code != 204, path


@pytest.mark.parametrize("path", ["/turn/", "//turn", "/turn//", "//me/"])
def test_a_path_variant_the_routes_serve_gets_the_same_preflight_and_answer(
    server: RunningServer, path: str
) -> None:
    # Adversarial review: the router serves "/turn/" and "//turn" as "/turn", but the
    # preflight matched exact paths only and answered them 401.
    preflight = httpx.options(
        server.url + path,
        headers={"origin": "https://ui.example", "access-control-request-method": "POST"},
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "*"
    canonical = "/" + path.strip("/")
    if canonical == "/turn":
        answered = httpx.post(server.url + path, headers=ALICE, json={"text": "hi"}, timeout=30)
        assert answered.status_code == 200
        assert "event: final" in answered.text
    else:
        answered = httpx.get(server.url + path, headers=ALICE)
        assert answered.status_code == 200, answered.text
        assert answered.json()["ok"] is True
    assert answered.headers["access-control-allow-origin"] == "*"
    refused = httpx.get(server.url + path)
    assert refused.status_code in (401, 405)
    assert refused.json()["ok"] is False


def test_a_configured_origin_is_sent_on_every_response(make_server: object) -> None:
    server = make_server(HTTP_SURFACE_CORS_ORIGIN="https://ui.example")  # type: ignore[operator]
    origin = {"origin": "https://ui.example"}
    for response in (
        httpx.get(server.url + "/version", headers=origin),
        httpx.get(server.url + "/me", headers=origin),
        httpx.get(server.url + "/me", headers={**ALICE, **origin}),
        httpx.options(server.url + "/turn", headers=origin),
    ):
        assert response.headers["access-control-allow-origin"] == "https://ui.example"
        assert response.headers["vary"].lower() == "origin"


def test_each_listed_origin_is_answered_with_itself_and_others_with_none(
    make_server: object,
) -> None:
    server = make_server(  # type: ignore[operator]
        HTTP_SURFACE_CORS_ORIGIN=" https://ui.example , HTTP://Admin.Example:8443"
    )
    for origin in ("https://ui.example", "http://admin.example:8443"):
        for response in (
            httpx.get(server.url + "/me", headers={**ALICE, "origin": origin}),
            httpx.options(server.url + "/turn", headers={"origin": origin}),
        ):
            assert response.headers["access-control-allow-origin"] == origin
            assert response.headers["vary"].lower() == "origin"
    for stranger in ("https://evil.example", "https://ui.example.evil", "null", None):
        headers = {**ALICE, "origin": stranger} if stranger else ALICE
        for response in (
            httpx.get(server.url + "/me", headers=headers),
            httpx.options(server.url + "/turn", headers=headers),
        ):
            assert "access-control-allow-origin" not in response.headers, stranger
            assert response.headers["vary"].lower() == "origin"


def test_a_ui_can_read_every_header_it_needs_and_keeps_the_preflight(
    server: RunningServer,
) -> None:
    preflight = httpx.options(
        server.url + "/turn",
        headers={"origin": "https://ui.example", "access-control-request-method": "POST"},
    )
    assert int(preflight.headers["access-control-max-age"]) >= 600
    refused = httpx.get(server.url + "/me", headers={"origin": "https://ui.example"})
    exposed = {
        name.strip().lower() for name in refused.headers["access-control-expose-headers"].split(",")
    }
    assert {
        "www-authenticate",
        "retry-after",
        "content-language",
        "server-timing",
        "date",
    } <= exposed
    assert refused.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "value",
    [
        "https://ui.example/",
        "https://ui.example/app",
        "ui.example",
        "ftp://ui.example",
        "https://ui.example?x=1",
        "https://user@ui.example",
        "*, https://ui.example",
        "https://ui.example,,https://b.example",
        "https://ui.example, https://UI.example",
    ],
)
def test_an_origin_list_that_is_not_exact_origins_stops_start_up(
    make_settings: object, value: str
) -> None:
    with pytest.raises(ConfigurationError, match="HTTP_SURFACE_CORS_ORIGIN"):
        make_settings(HTTP_SURFACE_CORS_ORIGIN=value)  # type: ignore[operator]


def test_version_and_the_openapi_document_are_public(server: RunningServer) -> None:
    version = httpx.get(server.url + "/version")
    assert version.status_code == 200
    assert version.json()["ok"] is True
    assert version.json()["version"].count(".") == 2
    document = httpx.get(server.url + "/openapi.yaml")
    assert document.status_code == 200
    assert document.headers.get_list("content-type") == ["text/yaml; charset=utf-8"]
    assert b"title: Mercury HTTP" in document.content


def test_the_version_is_written_once_and_read_the_same_from_a_checkout_or_installed(
    server: RunningServer,
) -> None:
    answered = httpx.get(server.url + "/version").json()["version"]
    assert answered == __version__
    assert answered != "0.0.0"
    # pyproject.toml reads it from core/version.py, so the installed metadata agrees.
    assert metadata.version("mercury-http") == __version__
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "\nversion =" not in pyproject


def test_health_reports_ollama_reachable_and_qdrant_not_configured(server: RunningServer) -> None:
    health = httpx.get(server.url + "/health", headers=ALICE, timeout=10).json()
    assert health["ok"] is True
    assert health["ollamaReachable"] is True
    assert health["qdrantReachable"] is False
    assert health["memory"]["rss"] > 0
    assert health["uptimeSeconds"] >= 0


def test_health_is_bounded_when_ollama_is_gone(make_server: object) -> None:
    server = make_server(OLLAMA_HOST="http://127.0.0.1:9")  # type: ignore[operator]
    response = httpx.get(server.url + "/health", headers=ALICE, timeout=10)
    assert response.json()["ollamaReachable"] is False
    assert response.elapsed.total_seconds() < 3


def test_health_is_bounded_when_ollama_is_a_black_hole(make_server: object) -> None:
    """A host that accepts the connection and never answers: /health still answers soon."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(16)  # the kernel completes handshakes; nobody ever reads or writes
        host = f"http://127.0.0.1:{hole.getsockname()[1]}"
        server = make_server(OLLAMA_HOST=host)  # type: ignore[operator]
        response = httpx.get(server.url + "/health", headers=ALICE, timeout=15)
    assert response.status_code == 200
    assert response.json()["ollamaReachable"] is False
    assert response.elapsed.total_seconds() < 5


def test_the_channel_declares_contract_6_as_a_literal_and_the_core_admits_it() -> None:
    assert CHANNEL_API_VERSION == 6
    assert admits(HttpChannel()) is True
    assert CORE_CHANNEL_API_VERSION == 6


def test_the_core_refuses_a_channel_written_for_another_contract(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="mercury.channels"):
        assert admits(HttpChannel(api_version=5)) is False
    assert "channel contract 5" in caplog.text
    assert "implements contract 6" in caplog.text
