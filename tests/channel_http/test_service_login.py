"""The service-login dialogue end to end: `login` event, the provider, the callback, the tool.

Real peers only: the OpenID provider (``tests/oidc``) with its authorization-code + PKCE
client ``mercury-login``; a protected REST API of the tests' own (``TrackerApi``, on uvicorn)
that accepts only the provider's JWTs and answers as their ``sub``; the Ollama stand-in as
the model; Mercury on uvicorn. The test plays the person's browser.

The public URL has a path (``https://mercury.example.test/chat``), as behind a reverse
proxy: the provider sends the browser to ``…/chat/login/callback``, and the test delivers that
request to the server it runs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urljoin, urlsplit

import anyio
import httpx
import jwt
import msgspec
import pytest
import uvicorn
import yaml

from core.clock import ManualClock
from core.config.settings import Settings
from core.tools.logins import Logins
from core.tools.rest_plugin import RESULT_MAX_CHARS
from tests.conftest import ALICE, BOB
from tests.oidc.harness import LOGIN_CLIENT_ID, OidcProviderProcess, ensure_node_modules
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer, serve
from tests.support.sse import Received, turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(150)]  # the module fixture starts node

PUBLIC_URL = "https://mercury.example.test/chat"
CALLBACK = "/chat/login/callback"
SECRET_KEY = "service-login-tests-secret-key-0123456789"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- the protected REST API ----------------------------------------------------------------


@dataclass
class Seen:
    method: str
    path: str
    query: str
    user: str | None
    body: Any = None


class TrackerApi:
    """A Jira-like API: it accepts only the provider's access tokens, and answers as their sub."""

    def __init__(self, issuer: str, jwks: dict[str, Any]) -> None:
        self.issuer = issuer
        self.keys = jwt.PyJWKSet.from_dict(jwks)
        self.seen: list[Seen] = []
        self.refuse_tokens = False
        self.url = ""

    def _user(self, headers: Mapping[bytes, bytes]) -> str | None:
        value = headers.get(b"authorization", b"").decode()
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token or self.refuse_tokens:
            return None
        try:
            kid = jwt.get_unverified_header(token)["kid"]
            key = next(k for k in self.keys.keys if k.key_id == kid)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=["RS256"],
                audience="mercury-http",
                issuer=self.issuer,
            )
        except (jwt.PyJWTError, StopIteration, KeyError):
            return None
        sub: str = claims["sub"]
        return sub

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = dict(scope["headers"])
        user = self._user(headers)
        path = scope["raw_path"].decode()
        body = msgspec.json.decode(raw) if raw else None
        self.seen.append(Seen(scope["method"], path, scope["query_string"].decode(), user, body))
        status: int
        answer: Any
        if user is None:
            status, answer = 401, {"error": "unauthorized"}
        elif scope["method"] == "GET" and path == "/issues":
            status, answer = 200, {"issues": [{"key": "TRK-1", "summary": "Fix it"}], "user": user}
        elif scope["method"] == "GET" and path == "/big":
            status, answer = 200, {"filler": "x" * (2 * RESULT_MAX_CHARS)}
        elif scope["method"] == "GET" and path.startswith("/issues/"):
            status, answer = 200, {"path": path, "user": user}
        elif scope["method"] == "POST" and path == "/issues":
            status, answer = 201, {"created": body, "user": user}
        else:
            status, answer = 404, {"error": "no such thing"}
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": msgspec.json.encode(answer)})


class _Server(uvicorn.Server):
    loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: Any = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().startup(sockets)


@contextmanager
def running(app: Any, *, lifespan: Literal["on", "off"] = "off") -> Iterator[_Server]:
    server = _Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            lifespan=lifespan,
            log_level="warning",
            timeout_graceful_shutdown=5,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server didn't start")
        time.sleep(0.01)
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(15)


def url_of(server: uvicorn.Server) -> str:
    return f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"


@pytest.fixture(scope="module")
def idp() -> Iterator[OidcProviderProcess]:
    ensure_node_modules()
    with OidcProviderProcess(login_redirect_uri=PUBLIC_URL + "/login/callback") as provider:
        yield provider


@pytest.fixture(scope="module")
def tracker_running(idp: OidcProviderProcess) -> Iterator[TrackerApi]:
    jwks = httpx.get(f"{idp.issuer}/jwks", timeout=10).json()
    api = TrackerApi(idp.issuer, jwks)
    with running(api) as server:
        api.url = url_of(server)
        yield api


@pytest.fixture
def tracker(tracker_running: TrackerApi) -> TrackerApi:
    tracker_running.seen.clear()
    tracker_running.refuse_tokens = False
    return tracker_running


# --- Mercury, wired as channel_http/app.py will be --------------------------------------------


@dataclass
class Mercury:
    server: RunningServer
    logins: Logins
    clock: ManualClock

    @property
    def url(self) -> str:
        return self.server.url


@contextmanager
def serve_wired(settings: Settings, clock: ManualClock) -> Iterator[Mercury]:
    """The real application: build_app builds the REST plugins and mounts the callback."""
    with serve(settings, clock=clock) as server:
        yield Mercury(server, server.services.logins, clock)


def tracker_config(api: TrackerApi, idp: OidcProviderProcess) -> dict[str, Any]:
    return {
        "services": [
            {
                "name": "tracker",
                "base_url": api.url,
                "authorize_url": f"{idp.issuer}/auth",
                "token_url": f"{idp.issuer}/token",
                "client_id": LOGIN_CLIENT_ID,
                "scopes": ["openid", "profile", "email"],
                "operations": [
                    {
                        "name": "search_issues",
                        "description": "Search the person's issues.",
                        "method": "GET",
                        "path": "/issues",
                        "parameters": {
                            "type": "object",
                            "properties": {"jql": {"type": "string"}},
                        },
                    },
                    {
                        "name": "get_issue",
                        "description": "Read one issue.",
                        "method": "GET",
                        "path": "/issues/{key}",
                        "parameters": {
                            "type": "object",
                            "properties": {"key": {"type": "string"}},
                        },
                    },
                    {
                        "name": "create_issue",
                        "description": "Create an issue.",
                        "method": "POST",
                        "path": "/issues",
                        "confirm": True,
                        "parameters": {
                            "type": "object",
                            "properties": {"summary": {"type": "string"}},
                            "required": ["summary"],
                        },
                    },
                    {
                        "name": "big",
                        "description": "Read a lot.",
                        "method": "GET",
                        "path": "/big",
                    },
                ],
            }
        ]
    }


@pytest.fixture
def mercury(
    make_settings: Callable[..., Settings],
    tmp_path: Path,
    tracker: TrackerApi,
    idp: OidcProviderProcess,
) -> Iterator[Mercury]:
    config = tmp_path / "mercury.yaml"
    config.write_text(yaml.safe_dump(tracker_config(tracker, idp)))
    settings = make_settings(
        MERCURY_CONFIG_FILE=str(config),
        HTTP_SURFACE_PUBLIC_URL=PUBLIC_URL,
        MERCURY_SECRET_KEY=SECRET_KEY,
    )
    with serve_wired(settings, ManualClock()) as running_mercury:
        yield running_mercury


# --- the person's side -----------------------------------------------------------------------


def call(name: str, **arguments: Any) -> ChatScript:
    return ChatScript(tool_calls=[{"name": name, "arguments": arguments}])


def script(ollama: OllamaStandIn, *calls: ChatScript, answer: str = "Done.") -> None:
    pending = list(calls)

    def respond(request: dict[str, Any]) -> ChatScript:
        return pending.pop(0) if pending else ChatScript.words(answer)

    ollama.responder = respond


async def post_turn(mercury: Mercury, text: str, headers: dict[str, str]) -> Received:
    async with httpx.AsyncClient(base_url=mercury.url) as client:
        with anyio.fail_after(30):
            return await turn(client, {"text": text, "conversationId": "c1"}, headers)


def _browse(idp: OidcProviderProcess, url: str, login: str) -> str:
    """Log in at the provider as ``login`` from ``url``; where it sends the browser back to."""
    with httpx.Client(follow_redirects=False, timeout=10) as browser:
        response = browser.get(url)
        for _ in range(10):
            location: str | None = response.headers.get("location")
            if location is None:
                raise AssertionError(f"the login stopped at HTTP {response.status_code}")
            target = urljoin(str(response.url), location)
            if target.startswith(PUBLIC_URL):
                return target
            if urlsplit(target).path.startswith("/interaction/"):
                page = browser.get(target)
                prompt = "login" if 'name="login"' in page.text else "consent"
                form = {"prompt": prompt}
                if prompt == "login":
                    form |= {"login": login, "password": "any"}
                response = browser.post(target, data=form)
            else:
                response = browser.get(target)
    raise AssertionError("the login went through too many redirects")


async def browse(idp: OidcProviderProcess, url: str, login: str) -> str:
    back: str = await anyio.to_thread.run_sync(_browse, idp, url, login)
    return back


async def open_callback(
    mercury: Mercury, query: str, *, language: str | None = None
) -> httpx.Response:
    headers = {"accept-language": language} if language else {}
    async with httpx.AsyncClient(base_url=mercury.url) as client:
        return await client.get(f"{CALLBACK}?{query}", headers=headers)


async def log_in(
    mercury: Mercury, idp: OidcProviderProcess, ollama: OllamaStandIn, who: dict[str, str], as_: str
) -> None:
    script(ollama, call("tracker_search_issues"), answer="Log in first.")
    got = await post_turn(mercury, "my issues?", who)
    url = got.of("login")[0]["url"]
    back = await browse(idp, url, as_)
    response = await open_callback(mercury, urlsplit(back).query)
    assert response.status_code == 200, response.text


def tool_results(ollama: OllamaStandIn) -> list[str]:
    """The tool results the model read last, without the toolCallId line each starts with."""
    last = ollama.requests[-1]["messages"]
    return [m["content"].split("\n", 1)[-1] for m in last if m["role"] == "tool"]


# --- the dialogue ----------------------------------------------------------------------------


async def test_the_whole_login_dialogue_ends_with_the_tool_running_as_the_person(
    mercury: Mercury, idp: OidcProviderProcess, ollama: OllamaStandIn, tracker: TrackerApi
) -> None:
    script(ollama, call("tracker_search_issues", jql="assignee = me"), answer="Log in first.")
    got = await post_turn(mercury, "what are my issues?", ALICE)
    assert got.names()[:3] == ["tool", "tool_finish", "login"]
    assert got.of("tool_finish")[0]["outcome"] == "failed"
    login = got.of("login")[0]
    assert login["service"] == "tracker"
    url = login["url"]
    query = dict(parse_qsl(urlsplit(url).query))
    assert url.startswith(f"{idp.issuer}/auth?")
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
    assert query["state"] and query["redirect_uri"] == PUBLIC_URL + "/login/callback"
    told = msgspec.json.encode(ollama.requests).decode()
    assert url not in told and query["state"] not in told
    assert "must log in to tracker" in tool_results(ollama)[0]
    assert tracker.seen == []  # nothing went out without a token

    back = await browse(idp, url, "alice-at-tracker")
    page = await open_callback(mercury, urlsplit(back).query, language="it")
    assert page.status_code == 200
    assert page.text == (
        "Hai effettuato l'accesso a tracker. Torna alla conversazione e chiedi di nuovo.\n"
    )
    assert page.headers["content-type"] == "text/plain; charset=utf-8"
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["content-language"] == "it"
    assert "access-control-allow-origin" not in page.headers

    script(ollama, call("tracker_search_issues", jql="assignee = me"), answer="One issue.")
    got = await post_turn(mercury, "what are my issues?", ALICE)
    assert "login" not in got.names()
    assert got.of("tool_finish")[0]["outcome"] == "success"
    assert [(s.method, s.path, s.query, s.user) for s in tracker.seen] == [
        ("GET", "/issues", "jql=assignee+%3D+me", "alice-at-tracker")
    ]
    result = tool_results(ollama)[-1]
    assert result.startswith("HTTP 200\n")
    assert msgspec.json.decode(result.partition("\n")[2])["user"] == "alice-at-tracker"

    again = await open_callback(mercury, urlsplit(back).query)
    assert again.status_code == 400
    assert again.text == (
        "This login link has expired or was already used: ask the assistant again for a new one.\n"
    )


async def test_a_person_not_logged_in_still_gets_a_login_when_another_person_is(
    mercury: Mercury, idp: OidcProviderProcess, ollama: OllamaStandIn, tracker: TrackerApi
) -> None:
    await log_in(mercury, idp, ollama, ALICE, "alice-at-tracker")
    script(ollama, call("tracker_search_issues"), answer="Log in first.")
    got = await post_turn(mercury, "and mine?", BOB)
    assert got.of("login")[0]["service"] == "tracker"
    assert tracker.seen == []


async def test_a_login_link_older_than_ten_minutes_has_expired(
    mercury: Mercury, idp: OidcProviderProcess, ollama: OllamaStandIn
) -> None:
    script(ollama, call("tracker_search_issues"), answer="Log in first.")
    got = await post_turn(mercury, "my issues?", ALICE)
    back = await browse(idp, got.of("login")[0]["url"], "alice")
    mercury.clock.advance(timedelta(minutes=10))
    page = await open_callback(mercury, urlsplit(back).query, language="de")
    assert page.status_code == 400
    assert page.headers["content-language"] == "de"
    logged_in = mercury.logins.is_logged_in("alice", "tracker")
    assert not await anyio.to_thread.run_sync(mercury.server.call, logged_in)


async def test_a_refused_login_names_the_sanitized_reason(mercury: Mercury) -> None:
    page = await open_callback(
        mercury, "error=access_denied%3Cscript%3Ealert(1)%3C/script%3E&state=whatever"
    )
    assert page.status_code == 400
    assert page.text == (
        "The login didn't happen (access_deniedscriptalert1script). "
        "Ask the assistant again for a new link.\n"
    )
    long = await open_callback(mercury, "error=" + "a" * 200)
    assert "(" + "a" * 64 + ")" in long.text
    assert page.headers["cache-control"] == "no-store"
    assert "access-control-allow-origin" not in page.headers


async def test_a_callback_without_a_code_or_a_state_says_so(mercury: Mercury) -> None:
    for query in ("state=abc", "code=abc", "", "code=&state="):
        page = await open_callback(mercury, query, language="en")
        assert page.status_code == 400
        assert page.text == (
            "The login link came back without a code or a state. "
            "Ask the assistant again for a new link.\n"
        )


async def test_a_failed_exchange_reads_in_the_language_of_who_started_the_login(
    mercury: Mercury, idp: OidcProviderProcess, ollama: OllamaStandIn
) -> None:
    script(ollama, call("tracker_search_issues"), answer="Log in first.")
    got = await post_turn(mercury, "my issues?", {**ALICE, "accept-language": "de"})
    back = await browse(idp, got.of("login")[0]["url"], "alice")
    state = dict(parse_qsl(urlsplit(back).query))["state"]
    page = await open_callback(mercury, f"code=forged&state={state}", language="fr")
    assert page.status_code == 400
    assert page.headers["content-language"] == "de"
    assert page.text == (
        "Die Anmeldung bei tracker hat nicht geklappt. "
        "Frag den Assistenten nach einem neuen Link.\n"
    )


async def test_an_expired_access_token_is_refreshed_at_the_provider_and_the_call_runs(
    mercury: Mercury, idp: OidcProviderProcess, ollama: OllamaStandIn, tracker: TrackerApi
) -> None:
    await log_in(mercury, idp, ollama, ALICE, "alice")
    mercury.clock.advance(timedelta(hours=2))
    script(ollama, call("tracker_search_issues"), answer="One issue.")
    got = await post_turn(mercury, "my issues?", ALICE)
    assert "login" not in got.names()
    assert got.of("tool_finish")[0]["outcome"] == "success"
    assert [(s.path, s.user) for s in tracker.seen] == [("/issues", "alice")]


async def test_a_grant_the_provider_no_longer_knows_leads_back_to_a_login(
    mercury: Mercury, idp: OidcProviderProcess, ollama: OllamaStandIn, tracker: TrackerApi
) -> None:
    await log_in(mercury, idp, ollama, ALICE, "alice")
    mercury.clock.advance(timedelta(hours=2))
    script(ollama, call("tracker_search_issues"), answer="One issue.")
    assert "login" not in (await post_turn(mercury, "my issues?", ALICE)).names()
    tracker.seen.clear()
    # The provider keeps grants in memory: a restart revokes every refresh token it issued.
    await anyio.to_thread.run_sync(idp.stop)
    await anyio.to_thread.run_sync(idp.start)
    mercury.clock.advance(timedelta(hours=2))
    script(ollama, call("tracker_search_issues"), answer="Log in again.")
    got = await post_turn(mercury, "my issues?", ALICE)
    assert got.of("login")[0]["service"] == "tracker"
    assert tracker.seen == []


async def test_a_token_the_service_refuses_leads_back_to_a_login(
    mercury: Mercury, idp: OidcProviderProcess, ollama: OllamaStandIn, tracker: TrackerApi
) -> None:
    await log_in(mercury, idp, ollama, ALICE, "alice")
    tracker.refuse_tokens = True  # revoked on the service's side
    script(ollama, call("tracker_search_issues"), answer="Log in again.")
    got = await post_turn(mercury, "my issues?", ALICE)
    assert got.of("login")[0]["service"] == "tracker"
    # Refused once, and once more after a refresh when the provider gave a refresh token.
    assert 1 <= len(tracker.seen) <= 2
    assert all((s.path, s.user) == ("/issues", None) for s in tracker.seen)


async def test_path_arguments_stay_inside_the_path_the_operator_wrote(
    mercury: Mercury, idp: OidcProviderProcess, ollama: OllamaStandIn, tracker: TrackerApi
) -> None:
    await log_in(mercury, idp, ollama, ALICE, "alice")
    script(
        ollama,
        call("tracker_get_issue", key="../../admin?x=1"),
        call("tracker_get_issue", key=".."),
        call("tracker_get_issue", key="TRK 1/ü"),
    )
    await post_turn(mercury, "read them", ALICE)
    assert [s.path for s in tracker.seen] == [
        "/issues/..%2F..%2Fadmin%3Fx%3D1",
        "/issues/TRK%201%2F%C3%BC",
    ]
    results = tool_results(ollama)
    assert "can't be '..'" in results[-2]


async def test_a_confirm_required_operation_asks_for_the_login_before_the_confirmation(
    mercury: Mercury, idp: OidcProviderProcess, ollama: OllamaStandIn, tracker: TrackerApi
) -> None:
    script(ollama, call("tracker_create_issue", summary="Broken"), answer="Log in first.")
    got = await post_turn(mercury, "file a bug", BOB)
    assert "pending" not in got.names()
    assert got.of("login")[0]["service"] == "tracker"
    await log_in(mercury, idp, ollama, ALICE, "alice")
    script(ollama, call("tracker_create_issue", summary="Broken"), answer="Confirm it.")
    got = await post_turn(mercury, "file a bug", ALICE)
    pending = got.of("pending")[0]
    assert "Create an issue." in msgspec.json.encode(pending).decode()
    assert tracker.seen == []


async def test_a_long_answer_reaches_the_model_cut(
    mercury: Mercury, idp: OidcProviderProcess, ollama: OllamaStandIn
) -> None:
    await log_in(mercury, idp, ollama, ALICE, "alice")
    script(ollama, call("tracker_big"))
    await post_turn(mercury, "read a lot", ALICE)
    result = tool_results(ollama)[-1]
    assert result.startswith("HTTP 200\n")
    assert len(result.partition("\n")[2]) == RESULT_MAX_CHARS + 1
