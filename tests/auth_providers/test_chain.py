"""Several providers in order, and loading them from the environment."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping

import anyio
import pytest

from auth_providers import (
    AuthChain,
    AuthProvider,
    OidcProvider,
    StaticTokenProvider,
    load_providers,
)
from core.people.principal import Principal
from tests.oidc.harness import CLIENT_ID, OidcProviderProcess, ensure_node_modules

pytestmark = pytest.mark.timeout(120)  # the module fixture starts node: slow on a loaded machine

AUDIENCE = "mercury-http"
ALICE = "tok-chain-alice-4c1d"
TOKENS = json.dumps({ALICE: {"id": "alice", "displayName": "Alice"}})
LOG = logging.getLogger("tests.auth_providers.chain")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def idp() -> Iterator[OidcProviderProcess]:
    ensure_node_modules()
    with OidcProviderProcess(audience=AUDIENCE) as process:
        yield process


class Fixed:
    """A provider that recognizes one token as one principal, and records that it was asked."""

    def __init__(self, name: str, token: str, principal_id: str, asked: list[str]) -> None:
        self.name = name
        self._token = token
        self._principal = Principal(id=principal_id, provider=name)
        self._asked = asked

    async def authenticate(self, headers: Mapping[str, str]) -> Principal | None:
        self._asked.append(self.name)
        return self._principal if headers.get("authorization") == f"Bearer {self._token}" else None


class Broken:
    """A provider that fails with an error quoting what it was given."""

    name = "broken"

    async def authenticate(self, headers: Mapping[str, str]) -> Principal | None:
        raise RuntimeError(f"cannot handle {headers.get('authorization')}")


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def authenticate(provider: AuthProvider, token: str) -> Principal | None:
    with anyio.fail_after(10):
        return await provider.authenticate(bearer(token))


@pytest.mark.anyio
async def test_providers_are_asked_in_order_and_the_first_that_recognizes_wins() -> None:
    asked: list[str] = []
    chain = AuthChain(
        [
            Fixed("first", "one", "from-first", asked),
            Fixed("second", "two", "from-second", asked),
            Fixed("third", "two", "from-third", asked),
        ]
    )
    assert isinstance(chain, AuthProvider)
    principal = await authenticate(chain, "two")
    assert principal is not None and principal.id == "from-second"
    assert asked == ["first", "second"]
    asked.clear()
    principal = await authenticate(chain, "one")
    assert principal is not None and principal.id == "from-first"
    assert asked == ["first"]


@pytest.mark.anyio
async def test_nobody_recognizing_the_token_means_none() -> None:
    asked: list[str] = []
    chain = AuthChain([Fixed("a", "x", "a", asked), Fixed("b", "y", "b", asked)])
    assert await authenticate(chain, "z") is None
    assert asked == ["a", "b"]


@pytest.mark.anyio
async def test_a_provider_that_raises_is_logged_without_the_token_and_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    asked: list[str] = []
    chain = AuthChain([Broken(), Fixed("after", "tok-secret-77", "later", asked)], log=LOG)
    principal = await authenticate(chain, "tok-secret-77")
    assert principal is not None and principal.id == "later"
    assert 'auth provider "broken" failed while authenticating (RuntimeError)' in caplog.text
    assert "tok-secret-77" not in caplog.text


@pytest.mark.anyio
async def test_static_and_oidc_compose_in_one_chain(idp: OidcProviderProcess) -> None:
    chain, failures = load_providers(
        ["static", "oidc"],
        static_tokens=TOKENS,
        oidc_issuer=idp.issuer,
        oidc_allow_http=True,
        oidc_audience=AUDIENCE,
        oidc_algorithms=None,
        oidc_leeway_s=None,
        log=LOG,
    )
    assert failures == []
    assert chain is not None
    assert [type(provider) for provider in chain.providers] == [StaticTokenProvider, OidcProvider]
    alice = await authenticate(chain, ALICE)
    client = await authenticate(chain, idp.client_credentials_token())
    assert alice is not None and alice.user_key == "static:alice"
    assert client is not None and client.user_key == f"oidc:{CLIENT_ID}"
    assert await authenticate(chain, "tok-nobody") is None


@pytest.mark.anyio
async def test_a_provider_that_fails_to_load_is_logged_and_skipped(
    idp: OidcProviderProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    chain, failures = load_providers(
        ["static", "oidc"],
        static_tokens='{"tok-broken-1": {"id": "x", "roles": ["admin"]}}',
        oidc_issuer=idp.issuer,
        oidc_allow_http=True,
        oidc_audience=AUDIENCE,
        oidc_algorithms="RS256",
        oidc_leeway_s="10",
        log=LOG,
    )
    assert chain is not None
    assert [provider.name for provider in chain.providers] == ["oidc"]
    assert len(failures) == 1
    assert failures[0].startswith('auth provider "static" failed to load: AUTH_STATIC_TOKENS')
    assert "DIRECTORY_STATIC_PEOPLE" in failures[0]
    assert failures[0] in caplog.text
    assert "tok-broken-1" not in caplog.text
    assert await authenticate(chain, idp.client_credentials_token()) is not None


def test_none_loaded_means_no_chain_and_every_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    chain, failures = load_providers(
        ["static", "oidc", "kerberos"],
        static_tokens=None,
        oidc_issuer=None,
        oidc_audience=AUDIENCE,
        oidc_algorithms=None,
        oidc_leeway_s=None,
        log=LOG,
    )
    assert chain is None
    assert failures == [
        'auth provider "static" failed to load: AUTH_STATIC_TOKENS is missing; set it to a '
        'JSON object from token to user, such as {"<token>": {"id": "alice"}}.',
        'auth provider "oidc" failed to load: OIDC_ISSUER is missing; set it to the issuer URL '
        'your tokens carry in "iss".',
        'auth provider "kerberos" failed to load: there is no auth provider called "kerberos"; '
        "choose among oidc, static.",
    ]
    assert [record.getMessage() for record in caplog.records] == failures


def test_no_names_means_no_chain() -> None:
    chain, failures = load_providers(
        [],
        static_tokens=TOKENS,
        oidc_issuer=None,
        oidc_audience=None,
        oidc_algorithms=None,
        oidc_leeway_s=None,
        log=LOG,
    )
    assert (chain, failures) == (None, [])
