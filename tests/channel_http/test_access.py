"""Who gets in and what they are offered: a failing directory, role-gated plugins, OIDC."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from core.people.directory import DirectoryPerson, DirectoryUnavailable
from tests.conftest import ALICE, BOB, TOKENS
from tests.oidc.harness import OidcProviderProcess, ensure_node_modules
from tests.support.server import RunningServer
from tests.support.sse import turn

pytestmark = [pytest.mark.timeout(150)]  # the module fixture starts node


class BrokenDirectory:
    """A directory whose backend is down: every lookup fails."""

    name = "people"

    def __init__(self) -> None:
        self.calls = 0

    async def resolve(self, user_key: str) -> DirectoryPerson | None:
        self.calls += 1
        raise DirectoryUnavailable("the directory backend does not answer")


def test_a_failing_directory_is_503_on_every_route_even_on_an_open_instance(
    make_server: Callable[..., RunningServer],
) -> None:
    directory = BrokenDirectory()
    server = make_server({"directory": directory}, MERCURY_ACCESS_UNKNOWN="allow")
    for method, path in [
        ("GET", "/me"),
        ("POST", "/turn"),
        ("GET", "/wiki/list"),
        ("POST", "/link"),
    ]:
        response = httpx.request(
            method, server.url + path, headers={**ALICE, "accept-language": "it"}, content=b"{bad"
        )
        assert response.status_code == 503
        assert response.json()["reason"] == "unavailable"
        assert response.headers["content-language"] == "it"
    before = directory.calls
    httpx.get(server.url + "/me", headers=ALICE)
    assert directory.calls == before + 1  # failures are not cached


def test_plugins_gated_by_roles_are_offered_only_to_people_holding_them(
    make_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    people = [
        {"id": "alice", "roles": ["admin"], "identities": ["static:alice"]},
        {"id": "bob", "identities": ["static:bob"]},
    ]
    config = tmp_path / "mercury.yaml"
    config.write_text("access:\n  plugins:\n    wiki:\n      roles: [admin]\n")
    server = make_server(
        MERCURY_CONFIG_FILE=str(config), DIRECTORY_STATIC_PEOPLE=json.dumps(people)
    )
    alice = httpx.get(server.url + "/manifest", headers=ALICE).json()["manifest"]
    bob = httpx.get(server.url + "/manifest", headers=BOB).json()["manifest"]
    assert "wiki" in [p["name"] for p in alice["plugins"]]
    assert "wiki" not in [p["name"] for p in bob["plugins"]]
    assert "wiki" not in bob["skills"]


@pytest.fixture(scope="module")
def oidc() -> Iterator[OidcProviderProcess]:
    ensure_node_modules()
    with OidcProviderProcess(audience="mercury-http") as provider:
        yield provider


@pytest.mark.anyio
async def test_oidc_and_static_tokens_chain_and_never_share_a_session(
    make_server: Callable[..., RunningServer], oidc: OidcProviderProcess
) -> None:
    tokens = {**TOKENS, "client-token": {"id": "mercury-tests"}}
    server = make_server(
        MERCURY_AUTH="oidc,static",
        OIDC_ISSUER=oidc.issuer,
        OIDC_ALLOW_HTTP_ISSUER="true",
        OIDC_AUDIENCE="mercury-http",
        AUTH_STATIC_TOKENS=json.dumps(tokens),
    )
    access_token = oidc.client_credentials_token(resource="mercury-http")
    as_oidc = {"authorization": f"Bearer {access_token}"}
    assert httpx.get(server.url + "/me", headers=as_oidc, timeout=10).status_code == 200
    assert httpx.get(server.url + "/me", headers=ALICE).status_code == 200
    wrong_audience = oidc.client_credentials_token(resource="someone-else")
    refused = httpx.get(server.url + "/me", headers={"authorization": f"Bearer {wrong_audience}"})
    assert refused.status_code == 401
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(30):
            await turn(client, {"text": "hi", "conversationId": "same"}, as_oidc)
            await turn(
                client,
                {"text": "hi", "conversationId": "same"},
                {"authorization": "Bearer client-token"},
            )
    assert {"oidc:mercury-tests:same", "static:mercury-tests:same"} <= set(
        server.services.manager.sessions
    )
