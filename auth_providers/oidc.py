"""Bearer access tokens issued by an OpenID provider, verified as RFC 8725 asks.

The provider discovers the issuer lazily (on the first token it sees), keeps the key
set for a while, refetches it when a token names a key it doesn't know (rotation),
at most once per cooldown so forged key ids can't hammer the issuer, and remembers
verified tokens until they expire so a repeat call costs a dictionary lookup. A failed
discovery or key-set fetch is retried once per cooldown too, not on every token: while
the issuer is down, forged tokens can't turn into one outbound request each.

The issuer must be https: keys fetched over plain http could be swapped on the way.
``OIDC_ALLOW_HTTP_ISSUER`` lifts that for development against a local issuer.

Exceptions::

    AuthError
    └── AuthConfigurationError   OIDC_ISSUER, OIDC_AUDIENCE, OIDC_ALGORITHMS or
                                 OIDC_LEEWAY_S is missing or invalid

A refused token is not an exception: ``authenticate`` returns ``None``. Invalid
tokens are refused silently; only an unreachable issuer is logged, once per cause.
No token ever reaches a log line.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import jwt
import msgspec

from auth_providers.provider import AuthConfigurationError, bearer_token
from core.clock import Clock, system_clock
from core.people.principal import Principal

__all__ = [
    "DEFAULT_ALGORITHMS",
    "SUPPORTED_ALGORITHMS",
    "OidcProvider",
    "OidcSettings",
]

SUPPORTED_ALGORITHMS: Final = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
"""Every algorithm ``OIDC_ALGORITHMS`` may list: asymmetric ones only."""

DEFAULT_ALGORITHMS: Final = ("RS256", "PS256", "ES256", "EdDSA")
"""What tokens may be signed with when ``OIDC_ALGORITHMS`` is unset."""

MAX_LEEWAY_S: Final = 60.0
_TYPES: Final = frozenset({"at+jwt", "application/at+jwt", "jwt"})
_KEY_TYPES: Final = {
    "RS": ("RSA", None),
    "PS": ("RSA", None),
    "ES256": ("EC", "P-256"),
    "ES384": ("EC", "P-384"),
    "ES512": ("EC", "P-521"),
    "EdDSA": ("OKP", None),
}
_DECODE_OPTIONS: Final[Any] = {
    "require": ["exp", "iss", "aud"],
    # Time claims are checked against the injected clock below, not pyjwt's.
    "verify_exp": False,
    "verify_nbf": False,
    "verify_iat": False,
}

HttpClientFactory = Callable[[], httpx.AsyncClient]


class OidcSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What the OIDC provider checks tokens against; built once from the environment."""

    issuer: str
    audience: str
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    leeway_s: float = 30.0
    discovery_timeout_s: float = 5.0
    jwks_ttl_s: float = 600.0
    refetch_cooldown_s: float = 30.0
    cache_size: int = 10_000
    allow_http: bool = False

    @property
    def discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


class _KeySet(msgspec.Struct, frozen=True, kw_only=True):
    by_kid: dict[str, dict[str, Any]]
    unnamed: tuple[dict[str, Any], ...]
    fetched_at: float


class _Verified(msgspec.Struct, frozen=True, kw_only=True):
    expires_at: float
    principal: Principal


class _FetchError(Exception):
    """A discovery or key-set request didn't give a usable answer; the text says why."""


def _parse_algorithms(raw: str | Sequence[str] | None) -> tuple[str, ...]:
    if raw is None:
        return DEFAULT_ALGORITHMS
    names = raw.replace(",", " ").split() if isinstance(raw, str) else [*raw]
    if not names:
        return DEFAULT_ALGORITHMS
    for name in names:
        if name.lower() == "none" or name.upper().startswith("HS"):
            raise AuthConfigurationError(
                f'OIDC_ALGORITHMS allows "{name}", which would let anyone who knows the '
                "public key (or nobody at all) sign tokens; list only asymmetric algorithms "
                f"such as {', '.join(DEFAULT_ALGORITHMS)}."
            )
        if name not in SUPPORTED_ALGORITHMS:
            raise AuthConfigurationError(
                f'OIDC_ALGORITHMS lists "{name}", which isn\'t supported; '
                f"choose among {', '.join(SUPPORTED_ALGORITHMS)}."
            )
    return tuple(dict.fromkeys(names))


def _parse_leeway(raw: float | str | None) -> float:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return 30.0
    try:
        leeway = float(raw)
    except ValueError:
        raise AuthConfigurationError(
            "OIDC_LEEWAY_S isn't a number; set it to the clock tolerance in seconds (0 to 60)."
        ) from None
    if not 0.0 <= leeway <= MAX_LEEWAY_S:
        raise AuthConfigurationError(
            f"OIDC_LEEWAY_S is {leeway:g}, outside 0 to {MAX_LEEWAY_S:g} seconds; "
            "a larger tolerance keeps expired tokens alive, so pick at most a minute."
        )
    return leeway


def _key_fits(jwk_data: Mapping[str, Any], alg: str) -> bool:
    """Whether a published key may verify a token whose header names ``alg``."""
    if jwk_data.get("use", "sig") != "sig":
        return False
    if "alg" in jwk_data and jwk_data["alg"] != alg:
        return False
    kty, crv = _KEY_TYPES.get(alg, _KEY_TYPES.get(alg[:2], (None, None)))
    if jwk_data.get("kty") != kty:
        return False
    if alg == "EdDSA":
        return jwk_data.get("crv") in ("Ed25519", "Ed448")
    return crv is None or jwk_data.get("crv") == crv


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _display_name(claims: Mapping[str, Any]) -> str | None:
    for claim in ("name", "preferred_username", "email"):
        value = claims.get(claim)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _default_http_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(follow_redirects=False)


class OidcProvider:
    """Recognizes access tokens (JWTs) signed by the configured OpenID issuer."""

    name: str = "oidc"

    def __init__(
        self,
        settings: OidcSettings,
        *,
        http_client_factory: HttpClientFactory | None = None,
        clock: Clock = system_clock,
        log: logging.Logger | None = None,
    ) -> None:
        self.settings = settings
        self._http_client_factory = http_client_factory or _default_http_client
        self._clock = clock
        self._log = log or logging.getLogger(__name__)
        self._jwks_uri: str | None = None
        self._keys: _KeySet | None = None
        self._last_key_fetch: float | None = None
        self._last_discovery: float | None = None
        self._discovery: asyncio.Future[str | None] | None = None
        self._key_fetch: asyncio.Future[_KeySet | None] | None = None
        self._reported: dict[str, str] = {}
        self._verified: OrderedDict[bytes, _Verified] = OrderedDict()
        self._pyjwks: dict[tuple[str, str], jwt.PyJWK] = {}

    @classmethod
    def from_env(
        cls,
        issuer: str | None,
        audience: str | None,
        algorithms: str | Sequence[str] | None = None,
        leeway_s: float | str | None = None,
        *,
        http_client_factory: HttpClientFactory | None = None,
        clock: Clock = system_clock,
        log: logging.Logger | None = None,
        jwks_ttl_s: float = 600.0,
        refetch_cooldown_s: float = 30.0,
        discovery_timeout_s: float = 5.0,
        allow_http: bool = False,
    ) -> OidcProvider:
        """Build the provider from ``OIDC_ISSUER``, ``OIDC_AUDIENCE``, ``OIDC_ALGORITHMS``,
        ``OIDC_LEEWAY_S`` and ``OIDC_ALLOW_HTTP_ISSUER``; nothing is fetched until the first
        token arrives."""
        if issuer is None or not issuer.strip():
            raise AuthConfigurationError(
                'OIDC_ISSUER is missing; set it to the issuer URL your tokens carry in "iss".'
            )
        parts = urlsplit(issuer)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AuthConfigurationError(
                "OIDC_ISSUER isn't an http(s) URL; set it to the exact issuer URL your tokens "
                'carry in "iss", such as https://login.example.com/realms/team.'
            )
        if parts.scheme == "http" and not allow_http:
            raise AuthConfigurationError(
                f"OIDC_ISSUER is {issuer}, plain http: the keys that verify tokens would "
                "travel unprotected and could be swapped on the way; use the issuer's https "
                "URL, or set OIDC_ALLOW_HTTP_ISSUER=true for development against a local issuer."
            )
        if audience is None or not audience.strip():
            raise AuthConfigurationError(
                "OIDC_AUDIENCE is missing; set it to the audience (client id) your tokens "
                'carry in "aud".'
            )
        settings = OidcSettings(
            issuer=issuer,
            audience=audience,
            algorithms=_parse_algorithms(algorithms),
            leeway_s=_parse_leeway(leeway_s),
            discovery_timeout_s=discovery_timeout_s,
            jwks_ttl_s=jwks_ttl_s,
            refetch_cooldown_s=refetch_cooldown_s,
            allow_http=allow_http,
        )
        return cls(settings, http_client_factory=http_client_factory, clock=clock, log=log)

    # --- the port -------------------------------------------------------------------------

    async def authenticate(self, headers: Mapping[str, str]) -> Principal | None:
        """The caller whose valid access token ``headers`` carry, or ``None``."""
        token = bearer_token(headers)
        if token is None:
            return None
        now = self._now()
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        remembered = self._verified.get(digest)
        if remembered is not None:
            if remembered.expires_at > now:
                return remembered.principal
            del self._verified[digest]
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None
        alg, kid, typ = header.get("alg"), header.get("kid"), header.get("typ")
        if not isinstance(alg, str) or alg not in self.settings.algorithms:
            return None
        if typ is not None and (not isinstance(typ, str) or typ.lower() not in _TYPES):
            return None
        if kid is not None and not isinstance(kid, str):
            return None
        if "crit" in header:
            # Access tokens have no critical extensions we understand (RFC 7515 §4.1.11).
            return None
        candidates = await self._candidate_keys(kid, alg)
        if not candidates:
            return None
        claims = self._verify(token, alg, candidates)
        if claims is None:
            return None
        return self._admit(digest, claims)

    # --- verification ---------------------------------------------------------------------

    def _verify(
        self, token: str, alg: str, candidates: Sequence[jwt.PyJWK]
    ) -> dict[str, Any] | None:
        settings = self.settings
        for key in candidates:
            try:
                claims = jwt.decode(
                    token,
                    key,
                    algorithms=[alg],
                    audience=settings.audience,
                    issuer=settings.issuer,
                    options=_DECODE_OPTIONS,
                )
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError:
                return None
            return claims if self._is_current(claims) else None
        return None

    def _is_current(self, claims: Mapping[str, Any]) -> bool:
        now, leeway = self._now(), self.settings.leeway_s
        exp = _number(claims.get("exp"))
        if exp is None or exp <= now - leeway:
            return False
        for claim in ("nbf", "iat"):
            if claim in claims:
                moment = _number(claims[claim])
                if moment is None or moment > now + leeway:
                    return False
        subject = claims.get("sub")
        return isinstance(subject, str) and bool(subject.strip())

    def _admit(self, digest: bytes, claims: dict[str, Any]) -> Principal:
        principal = Principal(
            id=claims["sub"],
            provider="oidc",
            display_name=_display_name(claims),
            claims=claims,
        )
        expires_at = float(claims["exp"])
        cache = self._verified
        if len(cache) >= self.settings.cache_size:
            now = self._now()
            for stale in [key for key, entry in cache.items() if entry.expires_at <= now]:
                del cache[stale]
            while len(cache) >= self.settings.cache_size:
                cache.popitem(last=False)
        cache[digest] = _Verified(expires_at=expires_at, principal=principal)
        return principal

    # --- keys -----------------------------------------------------------------------------

    async def _candidate_keys(self, kid: str | None, alg: str) -> list[jwt.PyJWK]:
        jwks_uri = await self._shared_discovery()
        if jwks_uri is None:
            return []
        now = self._now()
        keys = self._keys
        if keys is None or now - keys.fetched_at >= self.settings.jwks_ttl_s:
            keys = await self._shared_key_fetch(jwks_uri, now) or keys
        if keys is None:
            return []
        found = self._lookup(keys, kid, alg)
        if not found and kid is not None and kid not in keys.by_kid:
            # An unknown key id: the issuer may have rotated its keys.
            keys = await self._shared_key_fetch(jwks_uri, now) or keys
            found = self._lookup(keys, kid, alg)
        return found

    def _may_refetch(self, now: float) -> bool:
        return self._cooled_down(self._last_key_fetch, now)

    def _cooled_down(self, last: float | None, now: float) -> bool:
        return last is None or now - last >= self.settings.refetch_cooldown_s

    def _lookup(self, keys: _KeySet, kid: str | None, alg: str) -> list[jwt.PyJWK]:
        if kid is not None:
            named = keys.by_kid.get(kid)
            published: list[tuple[str, dict[str, Any]]] = [] if named is None else [(kid, named)]
        else:
            published = [(f"#{i}", data) for i, data in enumerate(keys.unnamed)]
            published += list(keys.by_kid.items())
        found = []
        for name, data in published:
            if not _key_fits(data, alg):
                continue
            cached = self._pyjwks.get((name, alg))
            if cached is None:
                try:
                    cached = jwt.PyJWK(data, algorithm=alg)
                except jwt.PyJWTError:
                    continue
                self._pyjwks[(name, alg)] = cached
            found.append(cached)
        return found

    # --- fetching -------------------------------------------------------------------------

    async def _shared_discovery(self) -> str | None:
        if self._jwks_uri is not None:
            return self._jwks_uri
        if self._discovery is None or self._discovery.done():
            now = self._now()
            if not self._cooled_down(self._last_discovery, now):
                return None  # it failed a moment ago: tokens wait out the cooldown
            self._last_discovery = now
            self._discovery = asyncio.ensure_future(self._discover())
        return await asyncio.shield(self._discovery)

    async def _shared_key_fetch(self, jwks_uri: str, now: float) -> _KeySet | None:
        """The key set from the fetch under way, or a new one; None within the cooldown.

        The cooldown follows every fetch, failed ones too: while no keys are cached, a
        flood of tokens must not turn into a flood of requests to a failing issuer.
        """
        if self._key_fetch is None or self._key_fetch.done():
            if not self._may_refetch(now):
                return None
            self._last_key_fetch = now
            self._key_fetch = asyncio.ensure_future(self._fetch_keys(jwks_uri))
        return await asyncio.shield(self._key_fetch)

    async def _discover(self) -> str | None:
        issuer = self.settings.issuer
        try:
            document = await self._get_json(self.settings.discovery_url)
            if document.get("issuer") != issuer:
                raise _FetchError(
                    f"the document names the issuer {document.get('issuer')!r} instead; "
                    "set OIDC_ISSUER to the issuer exactly as the provider spells it"
                )
            jwks_uri = document.get("jwks_uri")
            if not isinstance(jwks_uri, str) or not jwks_uri:
                raise _FetchError("the document has no jwks_uri string")
        except _FetchError as failure:
            self._report("discovery", f"oidc: discovery at {issuer} failed: {failure}")
            return None
        self._reported.pop("discovery", None)
        self._jwks_uri = jwks_uri
        return jwks_uri

    async def _fetch_keys(self, jwks_uri: str) -> _KeySet | None:
        try:
            document = await self._get_json(jwks_uri)
            published = document.get("keys")
            if not isinstance(published, list):
                raise _FetchError('the key set has no "keys" list')
        except _FetchError as failure:
            self._report(
                "keys",
                f"oidc: verifying a token against {self.settings.issuer} failed: "
                f"the key set at {jwks_uri} couldn't be fetched: {failure}",
            )
            return None
        self._reported.pop("keys", None)
        by_kid: dict[str, dict[str, Any]] = {}
        unnamed: list[dict[str, Any]] = []
        for data in published:
            if not isinstance(data, dict):
                continue
            kid = data.get("kid")
            if isinstance(kid, str):
                by_kid[kid] = data
            else:
                unnamed.append(data)
        self._pyjwks.clear()
        self._keys = _KeySet(by_kid=by_kid, unnamed=tuple(unnamed), fetched_at=self._now())
        return self._keys

    async def _get_json(self, url: str) -> dict[str, Any]:
        timeout = self.settings.discovery_timeout_s
        try:
            async with asyncio.timeout(timeout), self._http_client_factory() as client:
                response = await client.get(
                    url, timeout=timeout, headers={"accept": "application/json"}
                )
        except TimeoutError:
            raise _FetchError(f"no answer within {timeout:g} s") from None
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as error:
            raise _FetchError(f"{type(error).__name__}: {error}") from None
        if response.status_code != httpx.codes.OK:
            raise _FetchError(f"HTTP status {response.status_code}")
        try:
            document = response.json()
        except ValueError:
            raise _FetchError("the answer isn't JSON") from None
        if not isinstance(document, dict):
            raise _FetchError("the answer isn't a JSON object")
        return document

    def _report(self, topic: str, line: str) -> None:
        """Log ``line`` unless the same cause was the last one logged for ``topic``."""
        if self._reported.get(topic) != line:
            self._reported[topic] = line
            self._log.warning("%s", line)

    def _now(self) -> float:
        return self._clock().timestamp()
