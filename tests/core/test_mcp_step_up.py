"""A server that keeps answering 403 ``insufficient_scope``: Mercury stops asking the person.

A real MCP server written with the ``mcp`` SDK (its own bearer check, ``required_scopes``
``mcp:read mcp:admin``) behind the tests' OpenID provider (``tests/oidc``), which grants
``mcp:read`` and never ``mcp:admin``: every call with a token answers 403 ``insufficient_scope``.
Mercury's client (:class:`~core.tools.mcp.servers.McpServers`, the path a turn takes) asks the
person to sign in again for the scopes twice (:data:`~core.tools.mcp.step_up.STEP_UP_LIMIT`),
then answers :class:`~core.tools.mcp.ScopeRefused`; the test plays the person's browser.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import httpx
import jwt
import pytest
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

from core.clock import ManualClock
from core.config.mcp import McpServerConfig
from core.state.sqlite import SqliteDatabase
from core.tools.logins import Logins
from core.tools.mcp import McpSignIn, ScopeRefused
from core.tools.mcp.servers import McpServers
from core.tools.mcp.step_up import STEP_UP_LIMIT, STEP_UP_WINDOW, StepUps
from core.tools.registry import LoginRequired
from tests.oidc.harness import OidcProviderProcess, ensure_node_modules
from tests.support.mcp_resource import serving
from tests.support.state import StateBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PUBLIC_URL = "http://mercury.example.test"
REDIRECT = PUBLIC_URL + "/login/callback"
SECRET = "mcp-step-up-tests-secret-key-0123456789"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class ProviderTokens:
    """The SDK server's token verifier: the provider's JWTs issued for this server's URL."""

    def __init__(self, issuer: str, resource: str) -> None:
        self.issuer = issuer
        self.resource = resource
        self.keys = jwt.PyJWKSet.from_dict(httpx.get(f"{issuer}/jwks", timeout=10).json())

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            kid = jwt.get_unverified_header(token)["kid"]
            key = next(k for k in self.keys.keys if k.key_id == kid)
            claims = jwt.decode(
                token, key.key, algorithms=["RS256"], audience=self.resource, issuer=self.issuer
            )
        except (jwt.PyJWTError, StopIteration, KeyError):
            return None
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", "")),
            scopes=str(claims.get("scope", "")).split(),
            resource=self.resource,
            subject=str(claims["sub"]),
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Peers:
    def __init__(self, idp: OidcProviderProcess, url: str) -> None:
        self.idp = idp
        self.url = url


@pytest.fixture(scope="module")
def peers() -> Iterator[Peers]:
    ensure_node_modules()
    with OidcProviderProcess(mcp=True, login_redirect_uri=REDIRECT) as idp:
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        server = MCPServer(
            "admin",
            token_verifier=ProviderTokens(idp.issuer, url),
            auth=AuthSettings(
                issuer_url=idp.issuer,
                resource_server_url=url,
                required_scopes=["mcp:read", "mcp:admin"],
                validate_token_resource=False,
            ),
        )

        @server.tool()
        def purge() -> str:
            return "purged"

        with serving(server.streamable_http_app(), lifespan=True, port=port):
            yield Peers(idp, url)


@pytest.fixture
async def servers(peers: Peers, tmp_path: Path) -> AsyncIterator[tuple[McpServers, Logins]]:
    db = await SqliteDatabase.open(tmp_path / "state.db")
    logins = Logins(secret_key=SECRET, redirect_uri=REDIRECT)
    await logins.open(db)
    config = McpServerConfig(
        name="admin",
        title="Admin",
        url=peers.url,
        auth="oauth",
        allowed_hosts=(urlsplit(peers.idp.issuer).netloc,),
        trusted=True,
    )
    found = McpServers({"admin": config}, sign_in=McpSignIn(logins, public_url=PUBLIC_URL))
    yield found, logins
    await found.close()
    await db.close()


async def asked(servers: McpServers, person: str) -> str:
    """List the person's tools; the login URL Mercury answers with instead."""
    with pytest.raises(LoginRequired) as raised:
        await servers.connection("admin", person).tools()
    return raised.value.url


async def sign_in(peers: Peers, logins: Logins, url: str, person: str) -> str:
    """The person's browser, then ``/login/callback``; the scopes asked for."""

    def browse() -> str:
        with httpx.Client(follow_redirects=False, timeout=10) as browser:
            return peers.idp.approve(browser, url, login=person, redirect_uri=REDIRECT)

    back = dict(parse_qsl(urlsplit(await asyncio.to_thread(browse)).query))
    outcome = await logins.complete(back["state"], back["code"], back.get("iss"))
    assert outcome.status == "logged_in", outcome
    return dict(parse_qsl(urlsplit(url).query))["scope"]


async def test_a_scope_the_server_never_gets_is_asked_for_twice_then_the_tool_says_why(
    peers: Peers, servers: tuple[McpServers, Logins]
) -> None:
    found, logins = servers
    first = await asked(found, "alice")
    await sign_in(peers, logins, first, "alice")
    scopes = []
    for _ in range(STEP_UP_LIMIT):
        url = await asked(found, "alice")
        # Asking again before the person used the link shows the same link: not an attempt.
        assert await asked(found, "alice") == url
        scopes.append(await sign_in(peers, logins, url, "alice"))
    assert all("mcp:admin" in scope.split() for scope in scopes)
    with pytest.raises(ScopeRefused) as refused:
        await found.connection("admin", "alice").tools()
    assert "Admin keeps refusing access" in str(refused.value)
    assert "administrator of Admin" in str(refused.value)
    # And it stays refused for the window, on every turn.
    with pytest.raises(ScopeRefused):
        await found.connection("admin", "alice").tools()
    # Another person isn't refused for alice's attempts: bob is asked to sign in.
    assert await asked(found, "bob")


async def test_the_attempts_are_counted_again_once_the_window_has_passed(
    state: StateBackend,
) -> None:
    clock = ManualClock()
    logins = Logins(secret_key=SECRET, redirect_uri=REDIRECT, clock=clock)
    await logins.open(await state.open())
    step_ups = StepUps(logins, clock=clock)
    # Another instance on the same store sees the same count (PostgreSQL is shared).
    other_logins = Logins(secret_key=SECRET, redirect_uri=REDIRECT, clock=clock)
    await other_logins.open(await state.open())
    other = StepUps(other_logins, clock=clock)
    for n in range(STEP_UP_LIMIT):
        await step_ups.check("alice", "admin", "Admin", ("mcp:admin",), "mcp:admin")
        await step_ups.record("alice", "admin", ("mcp:admin",), f"https://as/{n}")
        # The same link shown again (the person hasn't used it yet) isn't another attempt.
        await step_ups.record("alice", "admin", ("mcp:admin",), f"https://as/{n}")
    with pytest.raises(ScopeRefused):
        await other.check("alice", "admin", "Admin", ("mcp:admin",), "mcp:admin")
    # Other scopes, another server: counted apart.
    await step_ups.check("alice", "admin", "Admin", ("mcp:write",), "mcp:admin")
    await step_ups.check("alice", "other", "Other", ("mcp:admin",), "mcp:other")
    clock.advance(STEP_UP_WINDOW + timedelta(seconds=1))
    await step_ups.check("alice", "admin", "Admin", ("mcp:admin",), "mcp:admin")
    await step_ups.record("alice", "admin", ("mcp:admin",), "https://as/again")
    await step_ups.check("alice", "admin", "Admin", ("mcp:admin",), "mcp:admin")
