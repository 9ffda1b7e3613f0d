"""The per-person MCP sign-in (core.tools.mcp.oauth) against a real authorization server.

Real peers only: the tests' OpenID provider (``tests/oidc``, in its MCP mode: dynamic
registration, client metadata documents, resource indicators, RFC 9207 ``iss``), and a
protected MCP endpoint of the tests' own (``tests/support/mcp_resource.py``) that takes only
the provider's JWTs issued for its own URL. Two :class:`Logins` on one database stand for two
instances; the test plays the person's browser.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

from core.clock import ManualClock
from core.state import Database
from core.tools.logins import Logins
from core.tools.mcp import McpSignIn, OAuthTarget, SignInUnavailable
from core.tools.mcp.discovery import parse_challenge
from core.tools.mcp.oauth import service_key
from core.tools.registry import LoginRequired
from tests.oidc.harness import LOGIN_CLIENT_ID, OidcProviderProcess, ensure_node_modules
from tests.support.mcp_resource import PRM_PATH, ProtectedMcp, serving
from tests.support.state import StateBackend, backend_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PUBLIC_URL = "https://mercury.example.test"
REDIRECT = PUBLIC_URL + "/login/callback"
SECRET = "mcp-sign-in-tests-secret-key-0123456789"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Peers:
    """The provider, the protected MCP endpoint, and where Mercury's metadata document is."""

    def __init__(self, idp: OidcProviderProcess, mcp: ProtectedMcp) -> None:
        self.idp = idp
        self.mcp = mcp
        self.document: dict[str, Any] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Mercury's public URL as the provider reaches it: its client metadata document."""
        body = httpx.Response(200, json=self.document).content
        status = 200 if self.document and scope["path"] == "/oauth/client-metadata.json" else 404
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def peers() -> Iterator[Peers]:
    ensure_node_modules()
    with OidcProviderProcess(mcp=True, login_redirect_uri=REDIRECT) as idp:
        mcp = ProtectedMcp(idp.issuer)
        found = Peers(idp, mcp)
        with serving(mcp) as origin, serving(found) as public:
            mcp.origin = origin
            idp.fetch_from(PUBLIC_URL, public)
            yield found


@pytest.fixture
def target(peers: Peers) -> OAuthTarget:
    peers.mcp.authorization_servers = [peers.idp.issuer]
    peers.mcp.metadata_path = PRM_PATH
    return OAuthTarget(
        server="tracker",
        title="Tracker",
        url=peers.mcp.url,
        allowed_hosts=(urlsplit(peers.idp.issuer).netloc,),
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


class Instance:
    def __init__(self, logins: Logins, sign_in: McpSignIn) -> None:
        self.logins = logins
        self.sign_in = sign_in


async def instance(
    db: Database, clock: ManualClock, peers: Peers, public_url: str = PUBLIC_URL
) -> Instance:
    logins = Logins(secret_key=SECRET, redirect_uri=public_url + "/login/callback", clock=clock)
    await logins.open(db)
    sign_in = McpSignIn(logins, public_url=public_url)
    peers.document = sign_in.client_metadata() or peers.document
    return Instance(logins, sign_in)


@pytest.fixture
async def two(
    state: StateBackend, clock: ManualClock, peers: Peers
) -> AsyncIterator[tuple[Instance, Instance]]:
    """Two instances on one database."""
    first = await instance(await state.open(), clock, peers)
    second = await instance(await state.open(), clock, peers)
    yield first, second


@pytest.fixture
async def state(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateBackend]:
    """PostgreSQL: two instances share a database only there (SQLite is one process's)."""
    backend = backend_for(request, "postgresql", tmp_path)
    yield backend
    await backend.close()


async def call(peers: Peers, authorization: str | None, name: str = "read") -> httpx.Response:
    headers = {} if authorization is None else {"authorization": authorization}
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(
            peers.mcp.url,
            headers=headers,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name}},
        )


async def login_url(node: Instance, peers: Peers, person: str, target: OAuthTarget) -> str:
    """What the MCP client does: call as the person, and on a 401 hand over the challenge."""
    with pytest.raises(LoginRequired) as raised:
        try:
            authorization = await node.sign_in.authorization(person, target)
        except LoginRequired:
            answer = await call(peers, None)
            assert answer.status_code == 401
            await node.sign_in.challenged(person, target, 401, answer.headers["www-authenticate"])
        else:
            answer = await call(peers, authorization)
            await node.sign_in.challenged(
                person, target, answer.status_code, answer.headers.get("www-authenticate")
            )
    assert raised.value.service == "tracker"
    return raised.value.url


def browse(peers: Peers, url: str, login: str, redirect: str = REDIRECT) -> dict[str, str]:
    """The person's browser: sign in at ``url``; the callback's query."""
    with httpx.Client(follow_redirects=False, timeout=10) as browser:
        back = peers.idp.approve(browser, url, login=login, redirect_uri=redirect)
    return dict(parse_qsl(urlsplit(back).query))


async def signed_in(
    start: Instance, finish: Instance, peers: Peers, person: str, target: OAuthTarget
) -> str:
    url = await login_url(start, peers, person, target)
    query = await asyncio.to_thread(browse, peers, url, person)
    outcome = await finish.logins.complete(query["state"], query["code"], query.get("iss"))
    assert outcome.status == "logged_in", outcome
    assert outcome.service == "Tracker"
    return await finish.sign_in.authorization(person, target)


async def test_a_login_started_on_one_instance_finishes_on_another_with_the_metadata_document(
    two: tuple[Instance, Instance], peers: Peers, target: OAuthTarget
) -> None:
    first, second = two
    url = await login_url(first, peers, "alice", target)
    query = dict(parse_qsl(urlsplit(url).query))
    assert url.startswith(peers.idp.issuer + "/auth?")
    assert query["client_id"] == PUBLIC_URL + "/oauth/client-metadata.json"
    assert query["resource"] == peers.mcp.url
    assert query["scope"] == "mcp:read"  # the challenge's
    assert query["code_challenge_method"] == "S256"
    assert query["redirect_uri"] == REDIRECT
    back = await asyncio.to_thread(browse, peers, url, "alice")
    assert back["iss"] == peers.idp.issuer
    outcome = await second.logins.complete(back["state"], back["code"], back["iss"])
    assert outcome.status == "logged_in"
    authorization = await first.sign_in.authorization("alice", target)
    answer = await call(peers, authorization)
    assert answer.status_code == 200
    assert answer.json()["result"]["content"][0]["text"] == "read as alice"
    claims = peers.mcp.claims(authorization.removeprefix("Bearer "))
    assert claims is not None and claims["aud"] == peers.mcp.url


async def test_metadata_found_only_through_the_challenge_is_found_before_the_first_call(
    two: tuple[Instance, Instance], peers: Peers, target: OAuthTarget
) -> None:
    first, _ = two
    peers.mcp.metadata_path = "/meta/resource.json"  # nothing at the well-known paths
    with pytest.raises(LoginRequired) as raised:
        await first.sign_in.authorization("alice", target)
    query = dict(parse_qsl(urlsplit(raised.value.url).query))
    assert query["resource"] == peers.mcp.url and query["scope"] == "mcp:read"


async def test_a_callback_from_another_issuer_is_refused_and_its_code_never_redeemed(
    two: tuple[Instance, Instance], peers: Peers, target: OAuthTarget
) -> None:
    first, second = two
    url = await login_url(first, peers, "alice", target)
    back = await asyncio.to_thread(browse, peers, url, "alice")
    outcome = await second.logins.complete(back["state"], back["code"], "https://evil.example")
    assert outcome.status == "refused"
    # Single use: the genuine callback, arriving after, finds the login gone.
    again = await second.logins.complete(back["state"], back["code"], back["iss"])
    assert again.status == "expired"
    with pytest.raises(LoginRequired):
        await first.sign_in.authorization("alice", target)


async def test_a_callback_without_iss_is_refused_where_the_server_always_sends_it(
    two: tuple[Instance, Instance], peers: Peers, target: OAuthTarget
) -> None:
    first, _ = two
    url = await login_url(first, peers, "alice", target)
    back = await asyncio.to_thread(browse, peers, url, "alice")
    assert await first.logins.check_issuer(back["state"], None) is False
    assert (await first.logins.complete(back["state"], back["code"], None)).status == "expired"


async def test_two_people_get_their_own_tokens_and_connections(
    two: tuple[Instance, Instance], peers: Peers, target: OAuthTarget
) -> None:
    first, second = two
    alice = await signed_in(first, second, peers, "alice", target)
    bob = await signed_in(second, first, peers, "bob", target)
    assert alice != bob
    assert (await call(peers, alice)).json()["result"]["content"][0]["text"] == "read as alice"
    assert (await call(peers, bob)).json()["result"]["content"][0]["text"] == "read as bob"
    [mine] = await first.sign_in.connections("alice")
    assert (mine.service, mine.title, mine.issuer) == ("tracker", "Tracker", peers.idp.issuer)
    assert mine.resource == peers.mcp.url and mine.scopes == ("mcp:read",)
    assert await first.sign_in.connections("carol") == []
    assert await second.sign_in.disconnect("alice", "tracker") is True
    assert await second.sign_in.disconnect("alice", "tracker") is False
    assert await first.sign_in.connections("alice") == []
    assert [c.service for c in await first.sign_in.connections("bob")] == ["tracker"]
    with pytest.raises(LoginRequired):
        await first.sign_in.authorization("alice", target)


async def test_a_refresh_due_on_two_instances_at_once_happens_once(
    two: tuple[Instance, Instance], peers: Peers, target: OAuthTarget, clock: ManualClock
) -> None:
    first, second = two
    before = await signed_in(first, second, peers, "alice", target)
    clock.advance(timedelta(hours=1))  # past the provider's 3600 s: both must refresh
    after = await asyncio.gather(
        first.sign_in.authorization("alice", target),
        second.sign_in.authorization("alice", target),
        first.sign_in.authorization("alice", target),
    )
    # One refresh: a rotating refresh token used twice would have revoked the grant.
    assert len(set(after)) == 1 and after[0] != before
    assert (await call(peers, after[0])).status_code == 200
    clock.advance(timedelta(hours=1))
    renewed = await second.sign_in.authorization("alice", target)
    assert renewed != after[0]
    assert (await call(peers, renewed)).status_code == 200


async def test_a_401_forgets_the_token_and_asks_the_person_to_sign_in_again(
    two: tuple[Instance, Instance], peers: Peers, target: OAuthTarget
) -> None:
    first, second = two
    await signed_in(first, second, peers, "alice", target)
    challenge = f'Bearer resource_metadata="{peers.mcp.metadata_url}", scope="mcp:read"'
    with pytest.raises(LoginRequired):
        await first.sign_in.challenged("alice", target, 401, challenge)
    assert await first.sign_in.connections("alice") == []


async def test_insufficient_scope_steps_up_to_the_granted_and_the_asked_scopes(
    two: tuple[Instance, Instance], peers: Peers, target: OAuthTarget
) -> None:
    first, second = two
    authorization = await signed_in(first, second, peers, "alice", target)
    answer = await call(peers, authorization, "write")
    assert answer.status_code == 403
    with pytest.raises(LoginRequired) as raised:
        await first.sign_in.challenged("alice", target, 403, answer.headers["www-authenticate"])
    query = dict(parse_qsl(urlsplit(raised.value.url).query))
    assert query["scope"] == "mcp:read mcp:write"
    # The current token keeps working meanwhile.
    assert await first.sign_in.authorization("alice", target) == authorization
    back = await asyncio.to_thread(browse, peers, raised.value.url, "alice")
    assert (await second.logins.complete(back["state"], back["code"], back["iss"])).status == (
        "logged_in"
    )
    wider = await first.sign_in.authorization("alice", target)
    answer = await call(peers, wider, "write")
    assert answer.json()["result"]["content"][0]["text"] == "write as alice"


async def test_without_a_https_public_url_mercury_registers_itself_once_per_issuer(
    state: StateBackend, clock: ManualClock, peers: Peers, target: OAuthTarget
) -> None:
    plain = "http://mercury.example.test"
    first = await instance(await state.open(), clock, peers, plain)
    second = await instance(await state.open(), clock, peers, plain)
    assert first.sign_in.client_metadata_url is None
    url = await login_url(first, peers, "alice", target)
    client_id = dict(parse_qsl(urlsplit(url).query))["client_id"]
    assert not client_id.startswith("http")
    other = await login_url(second, peers, "bob", target)
    assert dict(parse_qsl(urlsplit(other).query))["client_id"] == client_id
    back = await asyncio.to_thread(browse, peers, other, "bob", plain + "/login/callback")
    assert (await first.logins.complete(back["state"], back["code"], back["iss"])).status == (
        "logged_in"
    )
    answer = await call(peers, await second.sign_in.authorization("bob", target))
    assert answer.json()["result"]["content"][0]["text"] == "read as bob"


async def test_a_pre_registered_client_is_used_as_configured(
    two: tuple[Instance, Instance], peers: Peers, target: OAuthTarget
) -> None:
    first, second = two
    configured = OAuthTarget(
        server=target.server,
        title=target.title,
        url=target.url,
        allowed_hosts=target.allowed_hosts,
        client_id=LOGIN_CLIENT_ID,
    )
    authorization = await signed_in(first, second, peers, "alice", configured)
    claims = peers.mcp.claims(authorization.removeprefix("Bearer "))
    assert claims is not None and claims["client_id"] == LOGIN_CLIENT_ID


async def test_an_authorization_server_outside_the_allowed_hosts_is_never_contacted(
    two: tuple[Instance, Instance], peers: Peers, target: OAuthTarget
) -> None:
    first, _ = two
    bare = OAuthTarget(server="tracker", title="Tracker", url=peers.mcp.url)
    with pytest.raises(SignInUnavailable, match="allowed_hosts"):
        await first.sign_in.authorization("alice", bare)
    with pytest.raises(SignInUnavailable, match="metadata\\.example"):
        await first.sign_in.challenged(
            "alice",
            target,
            401,
            'Bearer resource_metadata="https://metadata.example/.well-known/x"',
        )
    peers.mcp.authorization_servers = ["http://169.254.169.254"]
    with pytest.raises(SignInUnavailable, match=r"169\.254\.169\.254"):
        await first.sign_in.challenged("alice", target, 401, None)


def test_a_bearer_challenge_is_read_with_its_quoted_and_bare_parameters() -> None:
    found = parse_challenge(
        'Basic realm="x", Bearer error=insufficient_scope, scope="a b", '
        'resource_metadata="https://h/.well-known/oauth-protected-resource"'
    )
    assert found.error == "insufficient_scope"
    assert found.scopes == ("a", "b")
    assert found.resource_metadata == "https://h/.well-known/oauth-protected-resource"
    assert parse_challenge(None).scopes == ()


def test_the_tokens_are_kept_under_the_server_name_apart_from_rest_services() -> None:
    assert service_key("tracker") == "mcp:tracker"


async def test_a_sign_in_that_cant_be_found_isnt_looked_for_again_at_every_turn(
    two: tuple[Instance, Instance], peers: Peers, target: OAuthTarget
) -> None:
    first, _ = two
    peers.mcp.authorization_servers = ["https://elsewhere.example"]
    before = peers.mcp.metadata_reads
    for _ in range(3):
        with pytest.raises(SignInUnavailable, match="elsewhere"):
            await first.sign_in.authorization("alice", target)
    assert peers.mcp.metadata_reads == before + 1
    # The server's own challenge is always followed.
    with pytest.raises(SignInUnavailable, match="elsewhere"):
        await first.sign_in.challenged("alice", target, 401, None)
    assert peers.mcp.metadata_reads == before + 2
