"""Service logins: the pending login, the code exchange, sealed tokens, refresh and revocation.

The token endpoint is a real OAuth 2.0 peer of the tests' own (``TokenServer``, on uvicorn):
it checks the PKCE verifier against the challenge of the URL the person was sent to, issues
expiring access tokens and rotating refresh tokens, and can revoke a person's grant.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlsplit

import msgspec
import pytest
import uvicorn

from core.clock import ManualClock
from core.config.settings import ConfigurationError, RestOperation, RestService
from core.people.i18n import Catalogs
from core.people.principal import Person, Principal
from core.state import Database
from core.tools.logins import (
    LOGIN_TTL,
    Logins,
    LoginServiceUnreachable,
    LoginUnavailable,
    ServiceLogin,
)
from core.tools.registry import LoginRequired, ToolCallContext
from core.tools.rest_plugin import rest_plugin
from tests.support.state import StateBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

REDIRECT = "https://mercury.example.test/login/callback"
SECRET = "a-test-secret-key-that-is-long-enough"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class TokenServer:
    """An OAuth 2.0 authorization server's token endpoint (RFC 6749 §4.1.3, §6; RFC 7636)."""

    def __init__(self) -> None:
        self.codes: dict[str, dict[str, str]] = {}
        self.refresh_tokens: dict[str, str] = {}  # refresh token -> sub
        self.requests: list[dict[str, str]] = []
        self.expires_in = 3600
        self.rotate = True
        self.issue_refresh = True
        self.down = False
        self.issued = 0
        self.url = ""

    def approve(self, url: str, sub: str) -> tuple[str, str]:
        """The browser's part: the person logs in as ``sub``; the state and code sent back."""
        query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
        assert query["response_type"] == "code"
        assert query["code_challenge_method"] == "S256"
        code = secrets.token_urlsafe(16)
        self.codes[code] = {
            "challenge": query["code_challenge"],
            "client_id": query["client_id"],
            "redirect_uri": query["redirect_uri"],
            "sub": sub,
        }
        return query["state"], code

    def revoke(self, sub: str) -> None:
        self.refresh_tokens = {t: s for t, s in self.refresh_tokens.items() if s != sub}

    def _issue(self, sub: str) -> dict[str, Any]:
        self.issued += 1
        answer: dict[str, Any] = {
            "access_token": f"at-{sub}-{self.issued}",
            "token_type": "Bearer",
            "expires_in": self.expires_in,
        }
        if self.issue_refresh:
            answer["refresh_token"] = refresh = f"rt-{secrets.token_urlsafe(8)}"
            self.refresh_tokens[refresh] = sub
        return answer

    def _answer(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if self.down:
            return 503, {"error": "temporarily_unavailable"}
        grant = form.get("grant_type")
        if grant == "authorization_code":
            entry = self.codes.pop(form.get("code", ""), None)
            if entry is None:
                return 400, {"error": "invalid_grant"}
            verifier = form.get("code_verifier", "")
            challenge = (
                base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
                .rstrip(b"=")
                .decode()
            )
            if (
                challenge != entry["challenge"]
                or form.get("client_id") != entry["client_id"]
                or form.get("redirect_uri") != entry["redirect_uri"]
            ):
                return 400, {"error": "invalid_grant"}
            return 200, self._issue(entry["sub"])
        if grant == "refresh_token":
            token = form.get("refresh_token", "")
            sub = self.refresh_tokens.get(token)
            if sub is None:
                return 400, {"error": "invalid_grant"}
            answer = self._issue(sub)
            if self.rotate:
                del self.refresh_tokens[token]
            else:
                del self.refresh_tokens[answer.pop("refresh_token")]
            return 200, answer
        return 400, {"error": "unsupported_grant_type"}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        form = dict(parse_qsl(body.decode()))
        for name, value in scope["headers"]:
            if name == b"authorization" and value.startswith(b"Basic "):
                client_id, _, secret = base64.b64decode(value[6:]).decode().partition(":")
                form |= {"client_id": client_id, "basic_secret": secret}
        self.requests.append(form)
        status, answer = self._answer(form) if scope["path"] == "/token" else (404, {})
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": msgspec.json.encode(answer)})


def serve_in_thread(app: Any) -> Iterator[str]:
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server didn't start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def token_server_running() -> Iterator[TokenServer]:
    token_server = TokenServer()
    for url in serve_in_thread(token_server):
        token_server.url = url
        yield token_server


@pytest.fixture
def token_server(token_server_running: TokenServer) -> TokenServer:
    url = token_server_running.url
    token_server_running.__init__()  # type: ignore[misc]  # a fresh state, the same socket
    token_server_running.url = url
    return token_server_running


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def declaration(token_server: TokenServer, *, secret: str | None = None) -> ServiceLogin:
    return ServiceLogin(
        service="tracker",
        authorize_url="https://tracker.example.test/authorize?audience=api",
        token_url=f"{token_server.url}/token",
        client_id="mercury",
        client_secret=secret,
        scopes=("read", "write"),
    )


@pytest.fixture
async def db(state: StateBackend) -> Database:
    return await state.open()


@pytest.fixture
async def logins(db: Database, token_server: TokenServer, clock: ManualClock) -> Logins:
    service = Logins(secret_key=SECRET, redirect_uri=REDIRECT, clock=clock)
    service.declare(declaration(token_server))
    await service.open(db)
    return service


def query_of(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query))


async def logged_in(logins: Logins, token_server: TokenServer, person: str, sub: str) -> None:
    url = await logins.begin(person, "tracker", "it")
    state, code = token_server.approve(url, sub)
    outcome = await logins.complete(state, code)
    assert outcome.status == "logged_in"


async def test_a_login_url_carries_a_state_and_an_s256_challenge_and_the_declared_parameters(
    logins: Logins,
) -> None:
    url = await logins.begin("alice", "tracker", "it")
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == (
        "https",
        "tracker.example.test",
        "/authorize",
    )
    query = query_of(url)
    assert query["audience"] == "api"
    assert query["response_type"] == "code"
    assert query["client_id"] == "mercury"
    assert query["redirect_uri"] == REDIRECT
    assert query["scope"] == "read write"
    assert query["code_challenge_method"] == "S256"
    assert len(query["code_challenge"]) == 43
    assert len(query["state"]) >= 43


async def test_asking_again_gives_the_same_pending_login_and_another_person_gets_their_own(
    logins: Logins,
) -> None:
    first = await logins.begin("alice", "tracker")
    assert await logins.begin("alice", "tracker") == first
    other = await logins.begin("bob", "tracker")
    assert query_of(other)["state"] != query_of(first)["state"]
    assert query_of(other)["code_challenge"] != query_of(first)["code_challenge"]


async def test_a_completed_login_gives_the_person_their_token_and_nobody_else(
    logins: Logins, token_server: TokenServer
) -> None:
    url = await logins.begin("alice", "tracker", "it")
    state, code = token_server.approve(url, "alice-at-tracker")
    outcome = await logins.complete(state, code)
    assert (outcome.status, outcome.service, outcome.language) == ("logged_in", "tracker", "it")
    exchange = token_server.requests[-1]
    assert exchange["grant_type"] == "authorization_code"
    assert exchange["redirect_uri"] == REDIRECT
    assert "client_secret" not in exchange  # a public client proves itself with PKCE
    assert await logins.access_token("alice", "tracker") == "at-alice-at-tracker-1"
    with pytest.raises(LoginRequired) as raised:
        await logins.access_token("bob", "tracker")
    assert raised.value.service == "tracker"
    assert query_of(raised.value.url)["state"]


async def test_a_state_is_single_use_even_when_the_exchange_fails(
    logins: Logins, token_server: TokenServer
) -> None:
    url = await logins.begin("alice", "tracker", "de")
    state, _ = token_server.approve(url, "alice")
    failed = await logins.complete(state, "not-the-code")
    assert (failed.status, failed.service, failed.language) == ("failed", "tracker", "de")
    assert (await logins.complete(state, "not-the-code")).status == "expired"
    assert await logins.begin("alice", "tracker") != url  # the used login gave way


async def test_a_state_unknown_or_older_than_ten_minutes_has_expired(
    logins: Logins, token_server: TokenServer, clock: ManualClock
) -> None:
    assert (await logins.complete("never-issued", "code")).status == "expired"
    url = await logins.begin("alice", "tracker")
    state, code = token_server.approve(url, "alice")
    clock.advance(LOGIN_TTL)
    assert (await logins.complete(state, code)).status == "expired"
    assert not await logins.is_logged_in("alice", "tracker")


async def test_an_expired_pending_login_gives_way_to_a_new_url(
    logins: Logins, clock: ManualClock
) -> None:
    first = await logins.begin("alice", "tracker")
    clock.advance(LOGIN_TTL - timedelta(seconds=1))
    assert await logins.begin("alice", "tracker") == first
    clock.advance(timedelta(seconds=1))
    assert await logins.begin("alice", "tracker") != first


async def test_an_expired_access_token_is_refreshed_and_the_rotated_refresh_token_kept(
    logins: Logins, token_server: TokenServer, clock: ManualClock
) -> None:
    await logged_in(logins, token_server, "alice", "alice")
    clock.advance(timedelta(minutes=59))
    assert await logins.access_token("alice", "tracker") == "at-alice-1"
    clock.advance(timedelta(minutes=1))  # inside the leeway before the expiry
    assert await logins.access_token("alice", "tracker") == "at-alice-2"
    assert token_server.requests[-1]["grant_type"] == "refresh_token"
    clock.advance(timedelta(hours=1))
    assert await logins.access_token("alice", "tracker") == "at-alice-3"
    assert len(token_server.requests) == 3


async def test_an_expired_access_token_without_a_refresh_token_leads_back_to_a_login(
    logins: Logins, token_server: TokenServer, clock: ManualClock
) -> None:
    token_server.issue_refresh = False
    await logged_in(logins, token_server, "alice", "alice")
    clock.advance(timedelta(hours=1))
    with pytest.raises(LoginRequired):
        await logins.access_token("alice", "tracker")
    assert not await logins.is_logged_in("alice", "tracker")
    assert len(token_server.requests) == 1  # no refresh was tried


async def test_a_refresh_that_keeps_the_refresh_token_keeps_working(
    logins: Logins, token_server: TokenServer, clock: ManualClock
) -> None:
    token_server.rotate = False
    await logged_in(logins, token_server, "alice", "alice")
    for expected in ("at-alice-2", "at-alice-3"):
        clock.advance(timedelta(hours=1))
        assert await logins.access_token("alice", "tracker") == expected


async def test_a_revoked_refresh_token_forgets_the_tokens_and_leads_back_to_a_login(
    logins: Logins, token_server: TokenServer, clock: ManualClock
) -> None:
    await logged_in(logins, token_server, "alice", "alice")
    token_server.revoke("alice")
    clock.advance(timedelta(hours=1))
    with pytest.raises(LoginRequired) as raised:
        await logins.access_token("alice", "tracker", language="fr")
    assert not await logins.is_logged_in("alice", "tracker")
    state, code = token_server.approve(raised.value.url, "alice")
    outcome = await logins.complete(state, code)
    assert (outcome.status, outcome.language) == ("logged_in", "fr")
    assert await logins.access_token("alice", "tracker") == "at-alice-2"


async def test_a_token_the_service_refused_is_refreshed_once_unless_already_replaced(
    logins: Logins, token_server: TokenServer
) -> None:
    await logged_in(logins, token_server, "alice", "alice")
    renewed = await logins.access_token("alice", "tracker", stale="at-alice-1")
    assert renewed == "at-alice-2"
    # A second call that saw the same old token refused gets the new one, no second refresh.
    assert await logins.access_token("alice", "tracker", stale="at-alice-1") == renewed
    assert token_server.issued == 2


async def test_a_token_endpoint_that_is_down_keeps_the_tokens_for_later(
    logins: Logins, token_server: TokenServer, clock: ManualClock
) -> None:
    await logged_in(logins, token_server, "alice", "alice")
    token_server.down = True
    clock.advance(timedelta(hours=1))
    with pytest.raises(LoginServiceUnreachable):
        await logins.access_token("alice", "tracker")
    token_server.down = False
    assert await logins.access_token("alice", "tracker") == "at-alice-2"


async def test_more_refreshes_at_once_than_the_pool_has_connections_all_complete(
    state: StateBackend, token_server: TokenServer, clock: ManualClock
) -> None:
    # Each refresh holds its lock's connection; were its reads and writes to borrow another
    # from the pool, two refreshes on a pool of two would wait on each other for good.
    logins = Logins(secret_key=SECRET, redirect_uri=REDIRECT, clock=clock)
    logins.declare(declaration(token_server))
    await logins.open(await state.open(pool_size=2))
    people = ["alice", "bob", "carol", "dave", "erin"]
    for person in people:
        await logged_in(logins, token_server, person, person)
    first = [await logins.access_token(p, "tracker") for p in people]
    clock.advance(timedelta(hours=1))
    async with asyncio.timeout(20):
        tokens = await asyncio.gather(*(logins.access_token(p, "tracker") for p in people))
    for person, old, new in zip(people, first, tokens, strict=True):
        assert new.startswith(f"at-{person}-") and new != old
    grants = [r["grant_type"] for r in token_server.requests]
    assert grants.count("refresh_token") == len(people)  # one refresh each
    # An unexpired token comes back without a refresh (and without the lock).
    assert await logins.access_token("alice", "tracker") == tokens[0]
    assert len(token_server.requests) == len(grants)


async def test_a_confidential_client_authenticates_with_its_secret(
    db: Database, token_server: TokenServer, clock: ManualClock
) -> None:
    logins = Logins(secret_key=SECRET, redirect_uri=REDIRECT, clock=clock)
    logins.declare(declaration(token_server, secret="s3cret"))
    await logins.open(db)
    await logged_in(logins, token_server, "alice", "alice")
    assert token_server.requests[-1]["basic_secret"] == "s3cret"
    assert await logins.access_token("alice", "tracker") == "at-alice-1"


async def test_tokens_are_sealed_at_rest_and_bound_to_their_person(
    logins: Logins, token_server: TokenServer, db: Database, clock: ManualClock
) -> None:
    await logged_in(logins, token_server, "alice", "alice")
    rows = await db.fetch_all("SELECT person_key, sealed FROM service_tokens")
    assert [row["person_key"] for row in rows] == ["alice"]
    sealed = bytes(rows[0]["sealed"])
    assert b"at-alice" not in sealed and b"rt-" not in sealed
    # The same row under another person's name doesn't open.
    await db.execute(
        "INSERT INTO service_tokens VALUES ('bob', 'tracker', ?, '2026-01-01')", (sealed,)
    )
    with pytest.raises(LoginRequired):
        await logins.access_token("bob", "tracker")
    # Nor does it under another key: the person is asked to log in again.
    other = Logins(secret_key=SECRET + "-rotated", redirect_uri=REDIRECT, clock=clock)
    other.declare(declaration(token_server))
    await other.open(db)
    with pytest.raises(LoginRequired):
        await other.access_token("alice", "tracker")
    assert not await logins.is_logged_in("alice", "tracker")


async def test_without_a_public_address_nobody_can_log_in(
    db: Database, token_server: TokenServer
) -> None:
    logins = Logins(secret_key=SECRET, redirect_uri=None)
    logins.declare(declaration(token_server))
    await logins.open(db)
    with pytest.raises(LoginUnavailable, match="HTTP_SURFACE_PUBLIC_URL"):
        await logins.access_token("alice", "tracker")


def test_a_login_without_a_secret_key_refuses_to_load(token_server: TokenServer) -> None:
    with pytest.raises(ConfigurationError, match="MERCURY_SECRET_KEY, which isn't set"):
        Logins(secret_key=None, redirect_uri=REDIRECT).declare(declaration(token_server))
    with pytest.raises(ConfigurationError, match="shorter than 16"):
        Logins(secret_key="short", redirect_uri=REDIRECT).declare(declaration(token_server))


def test_a_declaration_never_shows_its_client_secret(token_server: TokenServer) -> None:
    shown = repr(declaration(token_server, secret="s3cret"))
    assert "s3cret" not in shown and "client_secret=set" in shown


# --- the REST plugin's side of it ------------------------------------------------------------


class Api:
    """A protected API that takes the access tokens it is told are valid, nothing else."""

    def __init__(self) -> None:
        self.valid: set[str] = set()
        self.seen: list[str] = []
        self.url = ""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        token = dict(scope["headers"]).get(b"authorization", b"").decode().removeprefix("Bearer ")
        self.seen.append(token)
        status = 200 if token in self.valid else 401
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"ok": true}'})


@pytest.fixture(scope="module")
def api_running() -> Iterator[Api]:
    api = Api()
    for url in serve_in_thread(api):
        api.url = url
        yield api


@pytest.fixture
def api(api_running: Api) -> Api:
    api_running.valid.clear()
    api_running.seen.clear()
    return api_running


def tracker(api: Api, token_server: TokenServer) -> RestService:
    return RestService(
        name="tracker",
        base_url=api.url,
        authorize_url="https://tracker.example.test/authorize",
        token_url=f"{token_server.url}/token",
        client_id="mercury",
        scopes=(),
        operations=(
            RestOperation(
                name="ping",
                description="Ping.",
                method="GET",
                path="/ping",
                parameters={"type": "object", "properties": {}},
                confirm=False,
            ),
        ),
        client_secret=None,
    )


def context_of(person: str) -> ToolCallContext:
    return ToolCallContext(
        principal=Principal(id=person, provider="static"),
        person=Person(key=person),
        session_key=f"{person}:c1",
        conversation_id="c1",
        translator=Catalogs.load().translator("en"),
    )


async def test_a_token_the_api_refuses_is_refreshed_once_and_the_call_retried(
    db: Database, token_server: TokenServer, api: Api, clock: ManualClock
) -> None:
    logins = Logins(secret_key=SECRET, redirect_uri=REDIRECT, clock=clock)
    ping = rest_plugin(tracker(api, token_server), logins).tools[0]
    await logins.open(db)
    await logged_in(logins, token_server, "alice", "alice")
    api.valid = {"at-alice-2"}  # the first access token was revoked at the API
    assert await ping.run(context_of("alice"), {}) == 'HTTP 200\n{"ok":true}'
    assert api.seen == ["at-alice-1", "at-alice-2"]


async def test_a_refreshed_token_the_api_still_refuses_leads_back_to_a_login(
    db: Database, token_server: TokenServer, api: Api, clock: ManualClock
) -> None:
    logins = Logins(secret_key=SECRET, redirect_uri=REDIRECT, clock=clock)
    ping = rest_plugin(tracker(api, token_server), logins).tools[0]
    await logins.open(db)
    await logged_in(logins, token_server, "alice", "alice")
    with pytest.raises(LoginRequired):
        await ping.run(context_of("alice"), {})
    assert api.seen == ["at-alice-1", "at-alice-2"]
    assert not await logins.is_logged_in("alice", "tracker")


def test_a_path_naming_an_undeclared_parameter_refuses_to_load(
    token_server: TokenServer, api: Api
) -> None:
    service = tracker(api, token_server)
    broken = msgspec.structs.replace(
        service,
        operations=(msgspec.structs.replace(service.operations[0], path="/issues/{key}"),),
    )
    with pytest.raises(ConfigurationError, match=r"names \{key\}"):
        rest_plugin(broken, Logins(secret_key=SECRET, redirect_uri=REDIRECT))


async def test_a_login_begun_through_one_instance_is_completed_once_through_another(
    state: StateBackend, token_server: TokenServer, clock: ManualClock
) -> None:
    first, second = (
        Logins(secret_key=SECRET, redirect_uri=REDIRECT, clock=clock) for _ in range(2)
    )
    for instance in (first, second):
        instance.declare(declaration(token_server))
        await instance.open(await state.open())
    url = await first.begin("alice", "tracker", "it")
    # The pending login is shared: asking through the other instance shows the same link.
    assert await second.begin("alice", "tracker", "it") == url
    login_state, code = token_server.approve(url, "alice-sub")
    outcomes = await asyncio.gather(
        second.complete(login_state, code), first.complete(login_state, code)
    )
    assert sorted(outcome.status for outcome in outcomes) == ["expired", "logged_in"]
    assert await first.is_logged_in("alice", "tracker")
    assert await second.is_logged_in("alice", "tracker")


async def test_no_login_state_or_verifier_is_stored_in_clear(logins: Logins, db: Database) -> None:
    url = await logins.begin("alice", "tracker", "it")
    stored = repr([list(row) for row in await db.fetch_all("SELECT * FROM login_states")])
    assert query_of(url)["state"] not in stored
    assert "tracker.example.test" not in stored
    assert "alice" in stored
