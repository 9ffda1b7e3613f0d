"""The MCP sign-in over HTTP: the client metadata document, the callback, ``/me/connections``.

Real peers only: the tests' OpenID provider in its MCP mode (it fetches Mercury's client
metadata document from the running server, as through DNS and a TLS proxy), the protected
MCP endpoint of ``tests/support/mcp_resource.py``, and Mercury on uvicorn with the public
URL ``https://mercury.example.test``. The test plays the person's browser and delivers the
callback to the server it runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import jwt
import msgspec
import pytest
import yaml
from mcp.server.mcpserver import MCPServer
from mcp_types import ListToolsResult, ToolAnnotations

from core.config.settings import Settings
from core.tools.mcp import McpSignIn, OAuthTarget
from core.tools.registry import LoginRequired
from tests.conftest import ALICE, BOB
from tests.oidc.harness import OidcProviderProcess, ensure_node_modules
from tests.support.contract import check_response
from tests.support.mcp_resource import ProtectedMcp, serving
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer, serve
from tests.support.sse import turn

pytestmark = [pytest.mark.timeout(120)]

PUBLIC_URL = "https://mercury.example.test"
REDIRECT = PUBLIC_URL + "/login/callback"
ALICE_KEY = "static:alice"
ROOT = Path(__file__).resolve().parents[2]
Completed = subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def idp() -> Iterator[OidcProviderProcess]:
    ensure_node_modules()
    with OidcProviderProcess(mcp=True, login_redirect_uri=REDIRECT) as provider:
        yield provider


@pytest.fixture(scope="module")
def mcp(idp: OidcProviderProcess) -> Iterator[ProtectedMcp]:
    resource = ProtectedMcp(idp.issuer)
    with serving(resource) as origin:
        resource.origin = origin
        yield resource


@pytest.fixture
def mercury(
    make_settings: Callable[..., Settings], idp: OidcProviderProcess
) -> Iterator[RunningServer]:
    settings = make_settings(
        HTTP_SURFACE_PUBLIC_URL=PUBLIC_URL + "/",
        MERCURY_SECRET_KEY="mcp-sign-in-routes-secret-key-0123456789",
    )
    with serve(settings) as server:
        idp.fetch_from(PUBLIC_URL, server.url)
        yield server


def target(idp: OidcProviderProcess, mcp: ProtectedMcp) -> OAuthTarget:
    return OAuthTarget(
        server="tracker",
        title="Tracker",
        url=mcp.url,
        allowed_hosts=(urlsplit(idp.issuer).netloc,),
    )


def login_url(mercury: RunningServer, person: str, where: OAuthTarget) -> str:
    sign_in: McpSignIn = mercury.services.mcp_sign_in
    with pytest.raises(LoginRequired) as raised:
        mercury.call(sign_in.authorization(person, where))
    return raised.value.url


def sign_in_as(
    mercury: RunningServer, idp: OidcProviderProcess, where: OAuthTarget, person: str
) -> httpx.Response:
    """The whole dialogue in the browser; the callback page Mercury answers."""
    url = login_url(mercury, person, where)
    with httpx.Client(follow_redirects=False, timeout=10) as browser:
        back = idp.approve(browser, url, login=person.split(":")[-1], redirect_uri=REDIRECT)
        return browser.get(mercury.url + "/login/callback?" + urlsplit(back).query)


def test_the_client_metadata_document_is_served_at_its_own_url_without_a_token(
    mercury: RunningServer,
) -> None:
    answer = httpx.get(mercury.url + "/oauth/client-metadata.json", timeout=10)
    assert answer.status_code == 200
    check_response(answer)
    document = answer.json()
    assert document["client_id"] == PUBLIC_URL + "/oauth/client-metadata.json"
    assert document["redirect_uris"] == [REDIRECT]
    assert document["token_endpoint_auth_method"] == "none"
    assert "access-control-allow-origin" not in answer.headers


def test_a_person_signs_in_sees_their_connection_and_removes_it(
    mercury: RunningServer, idp: OidcProviderProcess, mcp: ProtectedMcp
) -> None:
    where = target(idp, mcp)
    page = sign_in_as(mercury, idp, where, ALICE_KEY)
    assert page.status_code == 200, page.text
    assert "Tracker" in page.text
    listed = httpx.get(mercury.url + "/me/connections", headers=ALICE, timeout=10)
    assert listed.status_code == 200
    assert listed.headers["cache-control"] == "no-store"
    check_response(listed)
    [connection] = listed.json()["connections"]
    assert connection["server"] == "tracker"
    assert connection["title"] == "Tracker"
    assert connection["issuer"] == idp.issuer
    assert connection["scopes"] == ["mcp:read"]
    assert "token" not in str(connection).lower()
    # Bob sees nothing of Alice's, and can't remove it.
    theirs = httpx.get(mercury.url + "/me/connections", headers=BOB, timeout=10)
    assert theirs.json() == {"ok": True, "connections": []}
    refused = httpx.delete(mercury.url + "/me/connections/tracker", headers=BOB, timeout=10)
    assert refused.status_code == 404
    check_response(refused)
    assert refused.json()["ok"] is False and "tracker" in refused.json()["error"]
    removed = httpx.delete(mercury.url + "/me/connections/tracker", headers=ALICE, timeout=10)
    assert removed.json() == {"ok": True, "server": "tracker"}
    check_response(removed)
    after = httpx.get(mercury.url + "/me/connections", headers=ALICE, timeout=10)
    assert after.json()["connections"] == []
    assert httpx.get(mercury.url + "/me/connections", timeout=10).status_code == 401


def test_removing_a_connection_revokes_its_tokens_at_the_authorization_server(
    mercury: RunningServer, idp: OidcProviderProcess, mcp: ProtectedMcp
) -> None:
    """RFC 7009: the provider advertises a revocation endpoint, so the refresh token Mercury
    kept no longer works anywhere once the person removed the connection."""
    assert (
        "revocation_endpoint" in httpx.get(idp.issuer + "/.well-known/openid-configuration").json()
    )
    assert sign_in_as(mercury, idp, target(idp, mcp), ALICE_KEY).status_code == 200
    logins = mercury.services.logins
    kept = mercury.call(logins._load(ALICE_KEY, "mcp:tracker"))
    assert kept is not None and kept.refresh_token and kept.login is not None
    removed = httpx.delete(mercury.url + "/me/connections/tracker", headers=ALICE, timeout=30)
    assert removed.json() == {"ok": True, "server": "tracker"}
    refresh = httpx.post(
        kept.login.token_url,
        data={
            "grant_type": "refresh_token",
            "refresh_token": kept.refresh_token,
            "client_id": kept.login.client_id,
            "resource": mcp.url,
        },
        timeout=10,
    )
    assert refresh.status_code == 400, refresh.text
    assert refresh.json()["error"] == "invalid_grant"


@pytest.fixture(scope="module")
def silent() -> Iterator[str]:
    """A revocation endpoint that takes the connection and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/revoke"
    listener.close()
    for connection in held:
        connection.close()


@pytest.mark.parametrize("endpoint", ["refused", "silent"])
def test_a_revocation_that_fails_still_removes_the_connection_and_is_logged_once(
    mercury: RunningServer,
    idp: OidcProviderProcess,
    mcp: ProtectedMcp,
    silent: str,
    endpoint: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert sign_in_as(mercury, idp, target(idp, mcp), ALICE_KEY).status_code == 200
    logins = mercury.services.logins
    kept = mercury.call(logins._load(ALICE_KEY, "mcp:tracker"))
    assert kept is not None and kept.login is not None
    # The authorization server's revocation endpoint is gone (nothing listens on port 9), or
    # hangs: the removal waits on it for a bounded time (5 s), well within the client's 30 s.
    url = "http://127.0.0.1:9/revoke" if endpoint == "refused" else silent
    gone = msgspec.structs.replace(kept.login, revocation_url=url)
    mercury.call(logins._store(ALICE_KEY, "mcp:tracker", msgspec.structs.replace(kept, login=gone)))
    with caplog.at_level(logging.WARNING, logger="mercury.logins"):
        removed = httpx.delete(mercury.url + "/me/connections/tracker", headers=ALICE, timeout=30)
    assert removed.json() == {"ok": True, "server": "tracker"}
    assert httpx.get(mercury.url + "/me/connections", headers=ALICE).json()["connections"] == []
    failures = [r for r in caplog.records if "revoked" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    assert kept.refresh_token not in failures[0].getMessage()


def test_a_callback_from_another_issuer_is_refused_without_showing_its_error(
    mercury: RunningServer, idp: OidcProviderProcess, mcp: ProtectedMcp
) -> None:
    url = login_url(mercury, ALICE_KEY, target(idp, mcp))
    state = dict(parse_qsl(urlsplit(url).query))["state"]
    forged = {"state": state, "error": "access_denied_by_attacker", "iss": "https://evil.example"}
    page = httpx.get(mercury.url + "/login/callback?" + urlencode(forged), timeout=10)
    assert page.status_code == 400
    check_response(page)
    assert "attacker" not in page.text
    assert "wasn't sent to" in page.text
    # The login is spent: the genuine callback, after, finds nothing to finish.
    with httpx.Client(follow_redirects=False, timeout=10) as browser:
        back = idp.approve(browser, url, login="alice", redirect_uri=REDIRECT)
        late = browser.get(mercury.url + "/login/callback?" + urlsplit(back).query)
    assert late.status_code == 400
    assert "expired" in late.text


def cli(mercury: RunningServer, tmp_path: Path, token: str, *args: str) -> Completed:
    """``mercury-http ARGS`` as a script runs it, as ``token``'s owner."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "MERCURY_TOKEN": token,
        "MERCURY_SERVER": mercury.url,
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT)),
    }
    return subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "channel_http", *args],
        cwd=ROOT,
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_command_line_lists_and_removes_the_callers_connections(
    mercury: RunningServer, idp: OidcProviderProcess, mcp: ProtectedMcp, tmp_path: Path
) -> None:
    assert sign_in_as(mercury, idp, target(idp, mcp), ALICE_KEY).status_code == 200
    listed = cli(mercury, tmp_path, "alice-token", "connections", "--json")
    assert listed.returncode == 0, listed.stderr
    [connection] = json.loads(listed.stdout)["connections"]
    assert (connection["server"], connection["issuer"]) == ("tracker", idp.issuer)
    human = cli(mercury, tmp_path, "alice-token", "connections")
    assert human.stdout.startswith("tracker\tTracker\t" + idp.issuer + "\tmcp:read\tlapses ")
    nobody = cli(mercury, tmp_path, "bob-token", "connections", "list")
    assert nobody.stdout.strip() == "You aren't signed in to any MCP server."
    refused = cli(mercury, tmp_path, "bob-token", "connections", "remove", "tracker")
    assert refused.returncode == 2
    assert "aren't signed in to a server called tracker" in refused.stderr
    removed = cli(mercury, tmp_path, "alice-token", "connections", "remove", "tracker")
    assert (removed.returncode, removed.stdout.strip()) == (0, "Signed out of tracker."), (
        removed.stderr
    )
    assert json.loads(cli(mercury, tmp_path, "alice-token", "connections", "--json").stdout) == {
        "ok": True,
        "connections": [],
    }


# --- through a turn: the MCP plugin signs the person in ------------------------------------


def issue_server() -> MCPServer:
    server = MCPServer("issues")

    @server.tool(title="Read an issue", annotations=ToolAnnotations(read_only_hint=True))
    def get_issue(key: str) -> str:
        return f"{key}: Fix the login page"

    return server


@pytest.fixture(scope="module")
def gated(idp: OidcProviderProcess) -> Iterator[ProtectedMcp]:
    """The SDK's MCP server behind the bearer check, as an OAuth-protected server runs."""
    gate = ProtectedMcp(idp.issuer, issue_server().streamable_http_app())
    with serving(gate, lifespan=True) as origin:
        gate.origin = origin
        yield gate


@pytest.fixture
def mercury_with_mcp(
    make_settings: Callable[..., Settings],
    idp: OidcProviderProcess,
    gated: ProtectedMcp,
    tmp_path: Path,
) -> Iterator[RunningServer]:
    config = tmp_path / "mercury.yaml"
    server = {
        "url": gated.url,
        "title": "Issues",
        "auth": "oauth",
        "trusted": True,
        "allowed_hosts": [urlsplit(idp.issuer).netloc],
    }
    config.write_text(yaml.safe_dump({"mcp": {"servers": {"iss": server}}}))
    settings = make_settings(
        MERCURY_CONFIG_FILE=str(config),
        HTTP_SURFACE_PUBLIC_URL=PUBLIC_URL + "/",
        MERCURY_SECRET_KEY="mcp-sign-in-routes-secret-key-0123456789",
    )
    with serve(settings) as running:
        idp.fetch_from(PUBLIC_URL, running.url)
        yield running


@pytest.mark.anyio
async def test_a_turn_asks_the_person_to_sign_in_and_the_next_uses_the_tool_as_them(
    mercury_with_mcp: RunningServer,
    idp: OidcProviderProcess,
    gated: ProtectedMcp,
    ollama: OllamaStandIn,
) -> None:
    mercury = mercury_with_mcp
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "iss_sign_in", "arguments": {}}]),
        ChatScript.words("Sign in first."),
    )
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        asked = await turn(client, {"text": "show ISS-1", "conversationId": "c1"}, ALICE)
        [login] = asked.of("login")
        assert login["service"] == "iss"
        assert dict(parse_qsl(urlsplit(login["url"]).query))["resource"] == gated.url
        with httpx.Client(follow_redirects=False, timeout=10) as browser:
            back = idp.approve(browser, login["url"], login="alice", redirect_uri=REDIRECT)
        page = await client.get("/login/callback?" + urlsplit(back).query)
        assert page.status_code == 200, page.text
        assert "Issues" in page.text

        ollama.enqueue(
            ChatScript(tool_calls=[{"name": "iss_get_issue", "arguments": {"key": "ISS-1"}}]),
            ChatScript.words("Here it is."),
        )
        done = await turn(client, {"text": "show ISS-1", "conversationId": "c1"}, ALICE)
        assert [f["outcome"] for f in done.of("tool_finish")] == ["success"]
        heard = ollama.requests[-1]["messages"]
        assert any("ISS-1: Fix the login page" in (m.get("content") or "") for m in heard)
    assert "alice" in gated.subjects
    # Only the token issued for the MCP server reaches it, never the person's Mercury token.
    assert gated.bearers and ALICE["authorization"] not in gated.bearers


class PerPersonServer(MCPServer):
    """An SDK server whose tool list depends on who asks (the token's subject) and says so:
    ``cacheScope: private``, as a server that scopes its list to the person does."""

    def __init__(self) -> None:
        super().__init__("notes")
        self.listed: list[str] = []

        @self.tool(title="Alice's notes", annotations=ToolAnnotations(read_only_hint=True))
        def alice_notes() -> str:
            return "Alice's notes"

        @self.tool(title="Bob's notes", annotations=ToolAnnotations(read_only_hint=True))
        def bob_notes() -> str:
            return "Bob's notes"

    async def _handle_list_tools(self, ctx: Any, params: Any) -> ListToolsResult:
        header = ctx.request.headers.get("authorization", "") if ctx.request else ""
        # The gate in front checked the token; here only whose it is matters.
        subject = jwt.decode(header.removeprefix("Bearer "), options={"verify_signature": False})
        self.listed.append(subject["sub"])
        tools = [t for t in await self.list_tools() if t.name.startswith(subject["sub"])]
        return ListToolsResult(tools=tools, ttl_ms=60_000, cache_scope="private")


@pytest.fixture(scope="module")
def private_lists(idp: OidcProviderProcess) -> Iterator[tuple[ProtectedMcp, PerPersonServer]]:
    server = PerPersonServer()
    gate = ProtectedMcp(idp.issuer, server.streamable_http_app())
    with serving(gate, lifespan=True) as origin:
        gate.origin = origin
        yield gate, server


@pytest.mark.anyio
async def test_two_people_on_a_server_with_private_lists_never_see_each_others_tools(
    make_settings: Callable[..., Settings],
    idp: OidcProviderProcess,
    private_lists: tuple[ProtectedMcp, PerPersonServer],
    ollama: OllamaStandIn,
    tmp_path: Path,
) -> None:
    gate, server = private_lists
    config = tmp_path / "mercury.yaml"
    entry = {
        "url": gate.url,
        "title": "Notes",
        "auth": "oauth",
        "trusted": True,
        "allowed_hosts": [urlsplit(idp.issuer).netloc],
    }
    config.write_text(yaml.safe_dump({"mcp": {"servers": {"notes": entry}}}))
    settings = make_settings(
        MERCURY_CONFIG_FILE=str(config),
        HTTP_SURFACE_PUBLIC_URL=PUBLIC_URL + "/",
        MERCURY_SECRET_KEY="mcp-sign-in-routes-secret-key-0123456789",
    )
    with serve(settings) as mercury:
        idp.fetch_from(PUBLIC_URL, mercury.url)
        where = OAuthTarget(
            server="notes",
            title="Notes",
            url=gate.url,
            allowed_hosts=(urlsplit(idp.issuer).netloc,),
        )
        for person in (ALICE_KEY, "static:bob"):
            assert sign_in_as(mercury, idp, where, person).status_code == 200
        mcp = mercury.services.mcp

        def offered() -> set[str]:
            tools = ollama.requests[-1].get("tools") or []
            return {t["function"]["name"] for t in tools if t["function"]["name"][:6] == "notes_"}

        async def hello(client: httpx.AsyncClient, headers: dict[str, str]) -> set[str]:
            ollama.enqueue(ChatScript.words("Hi."))
            await turn(client, {"text": "hello", "conversationId": "c1"}, headers)
            return offered()

        async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
            assert await hello(client, ALICE) == {"notes_alice_notes"}
            assert await hello(client, BOB) == {"notes_bob_notes"}
            assert sorted(server.listed) == ["alice", "bob"]
            # Warm: neither person's turn lists again, and each keeps their own list.
            assert await hello(client, ALICE) == {"notes_alice_notes"}
            assert await hello(client, BOB) == {"notes_bob_notes"}
            assert sorted(server.listed) == ["alice", "bob"]
            assert sum(c.list_calls for c in mcp._personal.values()) == 2

            # Bounded: past people_max, the least recently used person's connection and
            # list go; their next turn reads their own list again, never another's.
            mcp.people_max = 1
            assert await hello(client, BOB) == {"notes_bob_notes"}
            assert list(mcp._personal) == [("notes", "static:bob")]
            assert await hello(client, ALICE) == {"notes_alice_notes"}
            assert list(mcp._personal) == [("notes", "static:alice")]
            assert sorted(server.listed) == ["alice", "alice", "bob"]
