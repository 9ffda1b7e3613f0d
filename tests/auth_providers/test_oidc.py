"""The OIDC provider against a real OpenID provider, and against crafted tokens.

Tokens from ``tests/oidc/provider.mjs`` (panva/oidc-provider) cover the real flows: a valid
token, audience, issuer, rotation, an issuer going down and coming back. Tokens the real
provider would never issue (expired, unsigned, HS256, no ``exp``…) are signed with a key of
our own and served by :class:`LocalIssuer`, a small discovery + JWKS server in a thread.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import httpx
import jwt
import msgspec
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from auth_providers import (
    DEFAULT_ALGORITHMS,
    AuthConfigurationError,
    AuthProvider,
    OidcProvider,
)
from core.clock import ManualClock
from core.people.principal import Principal
from tests.oidc.harness import CLIENT_ID, CLIENT_NAME, OidcProviderProcess, ensure_node_modules

pytestmark = pytest.mark.timeout(120)  # the module fixture starts node: slow on a loaded machine

AUDIENCE = "mercury-http"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- a real provider -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def idp() -> Iterator[OidcProviderProcess]:
    ensure_node_modules()
    with OidcProviderProcess(audience=AUDIENCE) as process:
        yield process


@pytest.fixture
def own_idp() -> Iterator[OidcProviderProcess]:
    """A provider of the test's own, for tests that stop it or rotate its keys."""
    ensure_node_modules()
    with OidcProviderProcess(audience=AUDIENCE) as process:
        yield process


class Counter:
    """Counts the requests an httpx client sends, by path."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def hook(self, request: httpx.Request) -> None:
        self.paths.append(request.url.path)

    def factory(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(event_hooks={"request": [self.hook]})

    def hits(self, suffix: str) -> int:
        return sum(path.endswith(suffix) for path in self.paths)


def now_clock() -> ManualClock:
    return ManualClock(datetime.now(UTC))


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def authenticate(provider: AuthProvider, token: str) -> Principal | None:
    with anyio.fail_after(10):
        return await provider.authenticate(bearer(token))


# --- a local issuer for crafted tokens -------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: dict[str, Any], claims: dict[str, Any]) -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"


class Keys:
    """Signing keys generated once for the module: RSA generation is slow on a shared core."""

    def __init__(self) -> None:
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)


KEYS = Keys()


class LocalIssuer:
    """Discovery and a JWKS on 127.0.0.1:0, with switches to break them, and a signing key."""

    def __init__(self) -> None:
        self.key = KEYS.rsa
        self.kid = "local-rsa-1"
        self.ec_key = KEYS.ec
        self.ec_kid = "local-ec-1"
        self.discovery_hits = 0
        self.jwks_hits = 0
        self.jwks_down = False
        self.discovery_down = False
        self.discovery_delay_s = 0.0
        self.advertised_issuer: str | None = None
        self.advertised_jwks_uri: str | None = None
        self.extra_keys: list[dict[str, Any]] = []
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    issuer.discovery_hits += 1
                    time.sleep(issuer.discovery_delay_s)
                    if issuer.discovery_down:
                        self.answer(503, {"error": "down"})
                        return
                    self.answer(
                        200,
                        {
                            "issuer": issuer.advertised_issuer or issuer.issuer,
                            "jwks_uri": issuer.advertised_jwks_uri or f"{issuer.issuer}/jwks",
                        },
                    )
                elif self.path == "/jwks":
                    issuer.jwks_hits += 1
                    if issuer.jwks_down:
                        self.answer(503, {"error": "down"})
                        return
                    self.answer(200, issuer.jwks())
                else:
                    self.answer(404, {})

            def answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def jwks(self) -> dict[str, Any]:
        rsa_jwk = jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        ec_jwk = jwt.algorithms.ECAlgorithm.to_jwk(self.ec_key.public_key(), as_dict=True)
        return {
            "keys": [
                {**rsa_jwk, "kid": self.kid, "alg": "RS256", "use": "sig"},
                {**ec_jwk, "kid": self.ec_kid, "alg": "ES256", "use": "sig"},
                *self.extra_keys,
            ]
        }

    def public_pem(self) -> bytes:
        return self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def claims(self, clock: ManualClock, **overrides: Any) -> dict[str, Any]:
        now = int(clock().timestamp())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": AUDIENCE,
            "sub": "carol",
            "name": "Carol",
            "iat": now,
            "exp": now + 600,
            "jti": uuid.uuid4().hex,
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def token(
        self,
        clock: ManualClock,
        *,
        header: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        headers = {"kid": self.kid, "typ": "at+jwt", **(header or {})}
        headers = {name: value for name, value in headers.items() if value is not None}
        return jwt.encode(
            self.claims(clock, **claims), self.key, algorithm="RS256", headers=headers
        )

    def provider(self, clock: ManualClock, **options: Any) -> OidcProvider:
        return OidcProvider.from_env(self.issuer, AUDIENCE, allow_http=True, clock=clock, **options)


@pytest.fixture
def local() -> Iterator[LocalIssuer]:
    issuer = LocalIssuer()
    yield issuer
    issuer.close()


# --- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("issuer", "audience", "algorithms", "leeway", "message"),
    [
        (None, AUDIENCE, None, None, "OIDC_ISSUER is missing"),
        ("  ", AUDIENCE, None, None, "OIDC_ISSUER is missing"),
        ("login.example.com", AUDIENCE, None, None, "OIDC_ISSUER isn't an http(s) URL"),
        ("ftp://login.example.com", AUDIENCE, None, None, "OIDC_ISSUER isn't an http(s) URL"),
        ("https://", AUDIENCE, None, None, "OIDC_ISSUER isn't an http(s) URL"),
        ("https://login.example.com", None, None, None, "OIDC_AUDIENCE is missing"),
        ("https://login.example.com", "", None, None, "OIDC_AUDIENCE is missing"),
        ("https://login.example.com", AUDIENCE, "RS256,HS256", None, 'allows "HS256"'),
        ("https://login.example.com", AUDIENCE, "hs512", None, 'allows "hs512"'),
        ("https://login.example.com", AUDIENCE, "none", None, 'allows "none"'),
        ("https://login.example.com", AUDIENCE, "RS999", None, 'lists "RS999"'),
        ("https://login.example.com", AUDIENCE, None, "61", "OIDC_LEEWAY_S is 61"),
        ("https://login.example.com", AUDIENCE, None, -1, "OIDC_LEEWAY_S is -1"),
        ("https://login.example.com", AUDIENCE, None, "soon", "OIDC_LEEWAY_S isn't a number"),
    ],
)
def test_a_missing_or_invalid_environment_is_refused_with_a_sentence(
    issuer: str | None,
    audience: str | None,
    algorithms: str | None,
    leeway: str | float | None,
    message: str,
) -> None:
    with pytest.raises(AuthConfigurationError) as raised:
        OidcProvider.from_env(issuer, audience, algorithms, leeway)
    assert message in str(raised.value)
    assert str(raised.value).endswith(".")


def test_the_defaults_are_asymmetric_algorithms_and_thirty_seconds_of_leeway() -> None:
    provider = OidcProvider.from_env("https://login.example.com", AUDIENCE)
    assert isinstance(provider, AuthProvider)
    assert provider.name == "oidc"
    assert (
        provider.settings.algorithms == DEFAULT_ALGORITHMS == ("RS256", "PS256", "ES256", "EdDSA")
    )
    assert provider.settings.leeway_s == 30.0
    assert provider.settings.discovery_timeout_s == 5.0
    configured = OidcProvider.from_env(
        "https://login.example.com/", AUDIENCE, "RS384 ES512, PS512", "60"
    )
    assert configured.settings.algorithms == ("RS384", "ES512", "PS512")
    assert configured.settings.leeway_s == 60.0
    assert configured.settings.discovery_url == (
        "https://login.example.com/.well-known/openid-configuration"
    )


# --- against the real provider -------------------------------------------------------------


@pytest.mark.anyio
async def test_a_valid_token_is_admitted_with_its_subject_name_and_claims(
    idp: OidcProviderProcess,
) -> None:
    provider = OidcProvider.from_env(idp.issuer, AUDIENCE, allow_http=True)
    principal = await authenticate(provider, idp.client_credentials_token())
    assert principal is not None
    assert principal.id == CLIENT_ID
    assert principal.provider == "oidc"
    assert principal.user_key == f"oidc:{CLIENT_ID}"
    assert principal.display_name == CLIENT_NAME
    assert principal.claims is not None
    assert principal.claims["aud"] == AUDIENCE
    assert principal.claims["iss"] == idp.issuer
    assert principal.claims["client_id"] == CLIENT_ID


@pytest.mark.anyio
async def test_a_person_who_logged_in_is_admitted_as_themselves(idp: OidcProviderProcess) -> None:
    provider = OidcProvider.from_env(idp.issuer, AUDIENCE, allow_http=True)
    tokens = idp.login("dora")
    principal = await authenticate(provider, tokens["access_token"])
    assert principal is not None
    assert (principal.id, principal.display_name) == ("dora", "dora")
    assert principal.claims is not None and principal.claims["email"] == "dora@example.test"


@pytest.mark.anyio
async def test_a_token_for_another_audience_is_refused(idp: OidcProviderProcess) -> None:
    provider = OidcProvider.from_env(idp.issuer, AUDIENCE, allow_http=True)
    assert await authenticate(provider, idp.client_credentials_token("other-api")) is None
    assert await authenticate(provider, idp.client_credentials_token()) is not None


@pytest.mark.anyio
async def test_a_token_from_another_issuer_with_the_same_keys_is_refused(
    idp: OidcProviderProcess,
) -> None:
    with OidcProviderProcess(audience=AUDIENCE, jwks_file=idp.jwks_file) as other:
        assert other.issuer != idp.issuer
        assert other.kids == idp.kids
        token = other.client_credentials_token()
        assert (
            await authenticate(OidcProvider.from_env(idp.issuer, AUDIENCE, allow_http=True), token)
            is None
        )
        assert (
            await authenticate(
                OidcProvider.from_env(other.issuer, AUDIENCE, allow_http=True), token
            )
            is not None
        )


@pytest.mark.anyio
async def test_garbage_a_basic_scheme_and_no_header_are_refused(
    idp: OidcProviderProcess,
) -> None:
    provider = OidcProvider.from_env(idp.issuer, AUDIENCE, allow_http=True)
    token = idp.client_credentials_token()
    with anyio.fail_after(10):
        assert await provider.authenticate({}) is None
        assert await provider.authenticate({"authorization": f"Basic {token}"}) is None
        assert await provider.authenticate({"authorization": f"Bearer {token} x"}) is None
        assert await provider.authenticate({"authorization": "Bearer not.a.jwt"}) is None
        assert await provider.authenticate({"authorization": "Bearer garbage"}) is None


@pytest.mark.anyio
async def test_a_tampered_token_is_refused(idp: OidcProviderProcess) -> None:
    provider = OidcProvider.from_env(idp.issuer, AUDIENCE, allow_http=True)
    head, body, signature = idp.client_credentials_token().split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    forged_body = b64(json.dumps({**claims, "sub": "admin"}).encode())
    assert await authenticate(provider, f"{head}.{forged_body}.{signature}") is None
    flipped = signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB")
    assert await authenticate(provider, f"{head}.{body}.{flipped}") is None
    assert await authenticate(provider, f"{head}.{body}.{signature}") is not None


@pytest.mark.anyio
async def test_a_key_rotation_is_picked_up_without_a_restart(
    own_idp: OidcProviderProcess,
) -> None:
    clock, counter = now_clock(), Counter()
    provider = OidcProvider.from_env(
        own_idp.issuer, AUDIENCE, allow_http=True, clock=clock, http_client_factory=counter.factory
    )
    assert await authenticate(provider, own_idp.client_credentials_token()) is not None
    own_idp.rotate_keys()
    rotated = own_idp.client_credentials_token()
    # Within the cooldown the unknown key id doesn't make the provider fetch the keys again.
    assert await authenticate(provider, rotated) is None
    assert counter.hits("/jwks") == 1
    clock.advance(timedelta(seconds=31))
    principal = await authenticate(provider, rotated)
    assert principal is not None and principal.id == CLIENT_ID
    assert counter.hits("/jwks") == 2
    assert counter.hits("/openid-configuration") == 1


@pytest.mark.anyio
async def test_an_issuer_down_refuses_logs_once_and_is_retried_when_back(
    own_idp: OidcProviderProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    token = own_idp.client_credentials_token()
    clock, counter = now_clock(), Counter()
    provider = OidcProvider.from_env(
        own_idp.issuer, AUDIENCE, allow_http=True, clock=clock, http_client_factory=counter.factory
    )
    own_idp.stop()
    assert await authenticate(provider, token) is None
    clock.advance(timedelta(seconds=31))
    assert await authenticate(provider, token) is None
    failures = [r.getMessage() for r in caplog.records if "discovery at" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].startswith(f"oidc: discovery at {own_idp.issuer} failed")
    own_idp.start()
    clock.advance(timedelta(seconds=31))
    principal = await authenticate(provider, token)
    assert principal is not None and principal.id == CLIENT_ID
    assert counter.hits("/openid-configuration") == 3
    assert token not in caplog.text


@pytest.mark.anyio
async def test_cached_keys_keep_verifying_while_the_issuer_is_down(
    own_idp: OidcProviderProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    clock = now_clock()
    first, second = own_idp.client_credentials_token(), own_idp.client_credentials_token()
    provider = OidcProvider.from_env(own_idp.issuer, AUDIENCE, allow_http=True, clock=clock)
    assert await authenticate(provider, first) is not None
    own_idp.stop()
    clock.advance(timedelta(minutes=11))  # past the key set's ten minutes
    principal = await authenticate(provider, second)
    assert principal is not None and principal.id == CLIENT_ID
    assert "the key set at" in caplog.text
    assert second not in caplog.text


@pytest.mark.anyio
async def test_concurrent_first_requests_share_one_discovery_and_one_key_fetch(
    idp: OidcProviderProcess,
) -> None:
    counter = Counter()
    provider = OidcProvider.from_env(
        idp.issuer, AUDIENCE, allow_http=True, http_client_factory=counter.factory
    )
    tokens = [idp.client_credentials_token() for _ in range(8)]
    results: list[Principal | None] = []

    async def one(token: str) -> None:
        results.append(await authenticate(provider, token))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            for token in tokens:
                group.start_soon(one, token)
    assert len(results) == 8 and all(result is not None for result in results)
    assert counter.hits("/openid-configuration") == 1
    assert counter.hits("/jwks") == 1


# --- crafted tokens --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_crafted_token_signed_by_the_published_key_is_admitted(local: LocalIssuer) -> None:
    clock = now_clock()
    provider = local.provider(clock)
    principal = await authenticate(provider, local.token(clock))
    assert principal is not None and (principal.id, principal.display_name) == ("carol", "Carol")
    es256 = jwt.encode(
        local.claims(clock), local.ec_key, algorithm="ES256", headers={"kid": local.ec_kid}
    )
    assert await authenticate(provider, es256) is not None


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        ({"name": None, "preferred_username": "cee", "email": "c@example.test"}, "cee"),
        ({"name": "  ", "preferred_username": "", "email": "c@example.test"}, "c@example.test"),
        ({"name": 7, "preferred_username": None}, None),
    ],
)
async def test_the_display_name_falls_back_to_the_username_then_the_email(
    local: LocalIssuer, claims: dict[str, Any], expected: str | None
) -> None:
    clock = now_clock()
    principal = await authenticate(local.provider(clock), local.token(clock, **claims))
    assert principal is not None and principal.display_name == expected


@pytest.mark.anyio
async def test_expired_and_not_yet_valid_tokens_are_refused_beyond_the_leeway(
    local: LocalIssuer,
) -> None:
    clock = now_clock()
    provider = local.provider(clock)
    now = int(clock().timestamp())
    assert await authenticate(provider, local.token(clock, iat=now - 900, exp=now - 120)) is None
    assert await authenticate(provider, local.token(clock, iat=now - 900, exp=now - 10)) is not None
    assert await authenticate(provider, local.token(clock, nbf=now + 120)) is None
    assert await authenticate(provider, local.token(clock, nbf=now + 10)) is not None
    assert await authenticate(provider, local.token(clock, iat=now + 120)) is None
    assert await authenticate(provider, local.token(clock, iat="yesterday")) is None


@pytest.mark.anyio
async def test_a_token_stops_being_admitted_when_the_clock_passes_its_expiry(
    local: LocalIssuer,
) -> None:
    clock = now_clock()
    provider = local.provider(clock)
    token = local.token(clock)
    assert await authenticate(provider, token) is not None
    clock.advance(timedelta(seconds=600 + 31))
    assert await authenticate(provider, token) is None


@pytest.mark.anyio
@pytest.mark.parametrize(
    "claims",
    [
        {"exp": None},
        {"exp": "tomorrow"},
        {"exp": True},
        {"sub": None},
        {"sub": ""},
        {"sub": "   "},
        {"sub": 42},
        {"aud": None},
        {"aud": ["other-api"]},
        {"iss": None},
        {"iss": "http://127.0.0.1:1"},
    ],
)
async def test_tokens_missing_or_misstating_required_claims_are_refused(
    local: LocalIssuer, claims: dict[str, Any]
) -> None:
    clock = now_clock()
    assert await authenticate(local.provider(clock), local.token(clock, **claims)) is None


@pytest.mark.anyio
async def test_an_audience_list_containing_ours_is_admitted(local: LocalIssuer) -> None:
    clock = now_clock()
    token = local.token(clock, aud=["other-api", AUDIENCE])
    assert await authenticate(local.provider(clock), token) is not None


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("typ", "admitted"),
    [
        (None, True),
        ("at+jwt", True),
        ("AT+JWT", True),
        ("application/at+jwt", True),
        ("JWT", True),
        ("jwt", True),
        ("secevent+jwt", False),
        ("id_token", False),
        ("JOSE", False),
    ],
)
async def test_the_type_header_is_absent_or_names_an_access_token(
    local: LocalIssuer, typ: str | None, admitted: bool
) -> None:
    clock = now_clock()
    token = local.token(clock, header={"typ": typ})
    assert (await authenticate(local.provider(clock), token) is not None) is admitted


@pytest.mark.anyio
async def test_a_token_with_critical_header_extensions_is_refused(local: LocalIssuer) -> None:
    clock = now_clock()
    token = local.token(clock, header={"crit": ["exp"], "exp": 1})
    assert await authenticate(local.provider(clock), token) is None


@pytest.mark.anyio
@pytest.mark.parametrize("jwks_uri", ["not a url", "ftp://127.0.0.1/jwks", "http://127.0.0.1:1/"])
async def test_an_unusable_jwks_uri_refuses_and_is_logged(
    local: LocalIssuer, caplog: pytest.LogCaptureFixture, jwks_uri: str
) -> None:
    caplog.set_level(logging.WARNING)
    clock = now_clock()
    local.advertised_jwks_uri = jwks_uri
    assert await authenticate(local.provider(clock), local.token(clock)) is None
    assert f"the key set at {jwks_uri} couldn't be fetched" in caplog.text


@pytest.mark.anyio
async def test_an_unsigned_token_is_refused(local: LocalIssuer) -> None:
    clock = now_clock()
    for alg in ("none", "None", "NONE"):
        token = unsigned({"alg": alg, "kid": local.kid}, local.claims(clock)) + "."
        assert await authenticate(local.provider(clock), token) is None


@pytest.mark.anyio
async def test_hs256_signed_with_the_public_key_is_refused(local: LocalIssuer) -> None:
    clock = now_clock()
    signing_input = unsigned({"alg": "HS256", "kid": local.kid, "typ": "JWT"}, local.claims(clock))
    signature = hmac.new(local.public_pem(), signing_input.encode(), hashlib.sha256).digest()
    token = f"{signing_input}.{b64(signature)}"
    # Even an allowlist naming RS256 only can't be tricked into using the key as a secret.
    assert await authenticate(local.provider(clock), token) is None
    assert await authenticate(local.provider(clock, algorithms="RS256"), token) is None


@pytest.mark.anyio
async def test_a_token_whose_algorithm_the_allowlist_or_the_key_does_not_allow_is_refused(
    local: LocalIssuer,
) -> None:
    clock = now_clock()
    rs384 = jwt.encode(
        local.claims(clock), local.key, algorithm="RS384", headers={"kid": local.kid}
    )
    assert await authenticate(local.provider(clock), rs384) is None  # not in the default list
    # The RSA key is published for RS256 only, so even an allowlist with RS384 refuses it.
    assert await authenticate(local.provider(clock, algorithms="RS256 RS384"), rs384) is None
    # An RS256 token naming the EC key (kty mismatch) is refused.
    mismatched = jwt.encode(
        local.claims(clock), local.key, algorithm="RS256", headers={"kid": local.ec_kid}
    )
    assert await authenticate(local.provider(clock), mismatched) is None
    # Restricting the allowlist to ES256 refuses RS256 tokens.
    assert await authenticate(local.provider(clock, algorithms="ES256"), local.token(clock)) is None


@pytest.mark.anyio
async def test_a_token_signed_by_another_key_under_a_known_kid_is_refused(
    local: LocalIssuer,
) -> None:
    clock = now_clock()
    token = jwt.encode(
        local.claims(clock), KEYS.stranger, algorithm="RS256", headers={"kid": local.kid}
    )
    assert await authenticate(local.provider(clock), token) is None


@pytest.mark.anyio
async def test_forged_key_ids_refetch_the_key_set_at_most_once_per_cooldown(
    local: LocalIssuer,
) -> None:
    clock = now_clock()
    provider = local.provider(clock)
    assert await authenticate(provider, local.token(clock)) is not None
    assert local.jwks_hits == 1
    for _ in range(25):
        forged = local.token(clock, header={"kid": uuid.uuid4().hex})
        assert await authenticate(provider, forged) is None
    assert local.jwks_hits == 1
    clock.advance(timedelta(seconds=31))
    for _ in range(25):
        forged = local.token(clock, header={"kid": uuid.uuid4().hex})
        assert await authenticate(provider, forged) is None
    assert local.jwks_hits == 2
    assert local.discovery_hits == 1


@pytest.mark.anyio
async def test_an_unknown_kid_published_later_is_found_by_one_refetch(local: LocalIssuer) -> None:
    clock = now_clock()
    provider = local.provider(clock)
    assert await authenticate(provider, local.token(clock)) is not None
    newcomer = KEYS.stranger
    public = jwt.algorithms.RSAAlgorithm.to_jwk(newcomer.public_key(), as_dict=True)
    local.extra_keys.append({**public, "kid": "local-rsa-2", "alg": "RS256"})
    token = jwt.encode(
        local.claims(clock), newcomer, algorithm="RS256", headers={"kid": "local-rsa-2"}
    )
    clock.advance(timedelta(seconds=31))
    assert await authenticate(provider, token) is not None
    assert local.jwks_hits == 2


@pytest.mark.anyio
async def test_a_key_set_that_cannot_be_reached_refuses_and_is_logged(
    local: LocalIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    clock = now_clock()
    local.jwks_down = True
    token = local.token(clock)
    assert await authenticate(local.provider(clock), token) is None
    assert f"oidc: verifying a token against {local.issuer} failed" in caplog.text
    assert token not in caplog.text


@pytest.mark.anyio
async def test_a_discovery_document_naming_another_issuer_is_refused_and_logged(
    local: LocalIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    clock = now_clock()
    local.advertised_issuer = "https://impostor.example"
    assert await authenticate(local.provider(clock), local.token(clock)) is None
    assert f"oidc: discovery at {local.issuer} failed" in caplog.text
    assert "https://impostor.example" in caplog.text
    assert local.jwks_hits == 0


@pytest.mark.anyio
async def test_a_hanging_discovery_times_out_and_is_retried(
    local: LocalIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    clock = now_clock()
    # A timeout with room for a loaded machine's real discovery, a hang far beyond it.
    provider = local.provider(clock, discovery_timeout_s=1.5)
    token = local.token(clock)
    local.discovery_delay_s = 8.0
    started = time.monotonic()
    assert await authenticate(provider, token) is None
    assert time.monotonic() - started < 6.0  # given up well before the hang would end
    assert "no answer within 1.5 s" in caplog.text
    local.discovery_delay_s = 0.0
    clock.advance(timedelta(seconds=31))  # past the cooldown a failure waits out
    assert await authenticate(provider, token) is not None
    assert local.discovery_hits == 2


@pytest.mark.anyio
async def test_discovery_that_failed_is_retried_and_logged_once_per_cause(
    local: LocalIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    clock = now_clock()
    provider = local.provider(clock)
    token = local.token(clock)
    local.discovery_down = True
    for _ in range(3):
        assert await authenticate(provider, token) is None
        clock.advance(timedelta(seconds=31))  # past the cooldown a failure waits out
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"oidc: discovery at {local.issuer} failed: HTTP status 503"]
    local.discovery_down = False
    assert await authenticate(provider, token) is not None
    assert local.discovery_hits == 4
    assert await authenticate(provider, local.token(clock)) is not None
    assert local.discovery_hits == 4  # kept for the process lifetime once it worked


@pytest.mark.anyio
async def test_invalid_tokens_are_refused_without_a_log(
    local: LocalIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="auth_providers")
    clock = now_clock()
    provider = local.provider(clock)
    now = int(clock().timestamp())
    for token in (
        local.token(clock, exp=now - 600),
        local.token(clock, sub=None),
        local.token(clock, aud="other"),
        "garbage",
    ):
        assert await authenticate(provider, token) is None
    assert caplog.records == []


@pytest.mark.anyio
async def test_a_verified_token_is_remembered_so_a_repeat_costs_far_less(
    local: LocalIssuer,
) -> None:
    clock = now_clock()
    provider = local.provider(clock)
    assert await authenticate(provider, local.token(clock)) is not None  # keys fetched
    tokens = [local.token(clock) for _ in range(30)]

    async def timed(token: str) -> float:
        started = time.perf_counter()
        assert await provider.authenticate(bearer(token)) is not None
        return time.perf_counter() - started

    with anyio.fail_after(10):
        fresh = sorted([await timed(token) for token in tokens])
        cached = sorted([await timed(token) for token in tokens])
    assert cached[len(cached) // 2] * 5 < fresh[len(fresh) // 2]


@pytest.mark.anyio
async def test_the_verified_cache_stays_bounded_and_drops_expired_tokens_first(
    local: LocalIssuer,
) -> None:
    clock = now_clock()
    provider = OidcProvider(
        msgspec.structs.replace(local.provider(clock).settings, cache_size=3), clock=clock
    )
    now = int(clock().timestamp())
    short = local.token(clock, exp=now + 5)
    longs = [local.token(clock, exp=now + 3600) for _ in range(3)]
    assert await authenticate(provider, short) is not None
    assert await authenticate(provider, longs[0]) is not None
    assert await authenticate(provider, longs[1]) is not None
    clock.advance(timedelta(seconds=6))
    assert await authenticate(provider, longs[2]) is not None
    remembered = provider._verified  # the cache's size is what this test is about
    assert len(remembered) == 3
    assert hashlib.sha256(short.encode()).digest() not in remembered


@pytest.mark.anyio
async def test_no_token_ever_reaches_the_log(
    own_idp: OidcProviderProcess, local: LocalIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = now_clock()
    real = own_idp.client_credentials_token()
    crafted = local.token(clock)
    seen = [real, crafted]
    provider = OidcProvider.from_env(own_idp.issuer, AUDIENCE, allow_http=True, clock=clock)
    assert await authenticate(provider, real) is not None
    own_idp.stop()
    stranger = OidcProvider.from_env(own_idp.issuer, AUDIENCE, allow_http=True, clock=clock)
    assert await authenticate(stranger, real) is None
    local.jwks_down = True
    assert await authenticate(local.provider(clock), crafted) is None
    assert caplog.records, "the failures above are expected to be logged"
    for token in seen:
        for part in token.split("."):
            assert part not in caplog.text


# --- failures are cooled down too (adversarial review) --------------------------------------


def forged(clock: ManualClock, issuer: str, n: int) -> list[str]:
    """``n`` tokens claiming ``issuer``, each signed by a key it never published."""
    now = int(clock().timestamp())
    return [
        jwt.encode(
            {"iss": issuer, "aud": AUDIENCE, "sub": "mallory", "iat": now, "exp": now + 600},
            KEYS.stranger,
            algorithm="RS256",
            headers={"kid": f"forged-{i}", "typ": "at+jwt"},
        )
        for i in range(n)
    ]


@pytest.mark.anyio
async def test_an_unreachable_issuer_is_asked_once_per_cooldown_not_once_per_token(
    own_idp: OidcProviderProcess,
) -> None:
    # The review: 30 forged tokens while the issuer was down made 30 discovery requests.
    clock, counter = now_clock(), Counter()
    provider = OidcProvider.from_env(
        own_idp.issuer, AUDIENCE, allow_http=True, clock=clock, http_client_factory=counter.factory
    )
    real = own_idp.client_credentials_token()
    own_idp.stop()  # its port now refuses connections
    for token in forged(clock, own_idp.issuer, 30):
        assert await authenticate(provider, token) is None
    assert counter.hits("/openid-configuration") == 1
    own_idp.start()
    assert await authenticate(provider, real) is None  # still within the cooldown
    clock.advance(timedelta(seconds=31))
    principal = await authenticate(provider, real)
    assert principal is not None and principal.id == CLIENT_ID
    assert counter.hits("/openid-configuration") == 2


@pytest.mark.anyio
async def test_a_key_set_that_failed_is_fetched_once_per_cooldown_not_once_per_token(
    local: LocalIssuer,
) -> None:
    # The unknown-kid cooldown was skipped while no keys were cached.
    clock = now_clock()
    provider = local.provider(clock)
    local.jwks_down = True
    for token in forged(clock, local.issuer, 30):
        assert await authenticate(provider, token) is None
    assert local.jwks_hits == 1
    assert local.discovery_hits == 1
    local.jwks_down = False
    clock.advance(timedelta(seconds=31))
    assert await authenticate(provider, local.token(clock)) is not None
    assert local.jwks_hits == 2


@pytest.mark.anyio
async def test_an_http_issuer_is_refused_unless_allowed_for_development(
    idp: OidcProviderProcess,
) -> None:
    with pytest.raises(AuthConfigurationError) as raised:
        OidcProvider.from_env("http://login.example.com", AUDIENCE)
    assert "OIDC_ALLOW_HTTP_ISSUER" in str(raised.value)
    assert str(raised.value).endswith(".")
    # The tests' provider runs on plain http on loopback: allowed by the setting.
    provider = OidcProvider.from_env(idp.issuer, AUDIENCE, allow_http=True)
    assert await authenticate(provider, idp.client_credentials_token()) is not None
