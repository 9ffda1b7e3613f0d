"""Person logins to the services plugins act on as the person (OAuth 2.0 authorization code).

A plugin acting as the person declares a :class:`ServiceLogin`. :class:`Logins` is the one
service behind every such login:

- :meth:`Logins.begin` opens a pending login for a person and a service and gives the
  authorization URL to show them (never the model). The URL carries a ``state`` (random,
  single use, valid ten minutes, bound to that person and service) and a PKCE S256
  challenge. There is one pending login per person and service: asking again, while it is
  valid, gives the same URL.
- :meth:`Logins.complete` takes the ``state`` and ``code`` the service sent the browser back
  with. The state is consumed before anything else, so it is single use even when the
  exchange fails. The code is exchanged (with the PKCE verifier) by authlib's async client.
- :meth:`Logins.access_token` gives a tool the person's access token, refreshing it with the
  refresh token shortly before it expires (a moment chosen with jitter, so that instances
  don't all refresh at once; one refresh at a time per person and service across every
  instance, under a database lock, since a rotating refresh token used twice revokes the
  grant); when there is none, or the service refuses the refresh (revoked), the tokens are
  forgotten and :class:`~core.tools.registry.LoginRequired` is raised with a new login URL.
- :meth:`Logins.revoke` is a person removing a login: the tokens are forgotten, and revoked
  at the service where its login names a revocation endpoint (RFC 7009), best-effort and
  bounded by :data:`REVOCATION_TIMEOUT_S`.

A login may also be given at :meth:`Logins.begin` rather than declared (an MCP server's,
discovered when its server first asks for one): the pending login and then the tokens keep it,
so the callback, and every refresh, works on any instance. Such a login may name the
``resource`` it is for (RFC 8707: sent in the authorization and the token requests) and the
``issuer`` expected on the callback (RFC 9207: a callback whose ``iss`` differs is refused
before its code or its error is looked at).

Pending logins and tokens live in the state store (:mod:`core.state`), so a login begun
through one instance calls back through any other. Both are sealed with AES-256-GCM under a
key derived (HKDF-SHA256) from ``MERCURY_SECRET_KEY``; the person and the service are the
associated data, so a sealed row moved to another person does not open. A pending login is
keyed by the SHA-256 of its state, and its verifier and URL are sealed, so no state is at
rest in clear. Codes, states and tokens are never logged.

Exceptions::

    ConfigurationError (core.config.settings)  a login declared without MERCURY_SECRET_KEY, or twice
    ToolError (core.tools.registry)
    ├── LoginRequired                  the person must log in (again); carries the URL
    ├── LoginUnavailable               nobody can log in here: the instance has no callback
    └── LoginServiceUnreachable        the token endpoint couldn't be reached for a refresh
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import random
import secrets
import warnings
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import authlib.deprecate
import httpx
import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from core.clock import Clock, system_clock
from core.codes import from_micros, to_micros
from core.config.settings import ConfigurationError
from core.state import Migration, Schema, Statements
from core.tools.registry import LoginRequired, ToolError

# authlib 1.9 warns once, at import, that it runs on httpx rather than httpx2; httpx is the
# client this project is built on, so the warning says nothing we can act on. (authlib's own
# "always" filter, installed when authlib.deprecate is imported above, must come first so that
# ours, added after it, wins inside the block.)
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=authlib.deprecate.AuthlibDeprecationWarning)
    from authlib.integrations.httpx_client import AsyncOAuth2Client, OAuthError

# authlib's client runs on httpx2 where it is installed (the MCP SDK brings it), else on
# httpx: a transport failure is either's HTTPError. A token answer that can't be read is a
# ValueError, KeyError or TypeError.
try:
    import httpx2

    _FAILURES: tuple[type[Exception], ...] = (
        httpx.HTTPError,
        httpx2.HTTPError,
        ValueError,
        KeyError,
        TypeError,
    )
except ImportError:  # pragma: no cover - httpx2 comes with the mcp dependency
    _FAILURES = (httpx.HTTPError, ValueError, KeyError, TypeError)

#: What a revocation may meet besides the above: the service not answering in time.
_REVOCATION_FAILURES: tuple[type[Exception], ...] = (TimeoutError, *_FAILURES)

if TYPE_CHECKING:
    from core.config.settings import RestService
    from core.state import Database

__all__ = [
    "LOGIN_TTL",
    "REVOCATION_TIMEOUT_S",
    "Connection",
    "LoginOutcome",
    "LoginServiceUnreachable",
    "LoginUnavailable",
    "Logins",
    "ServiceLogin",
]

log = logging.getLogger("mercury.logins")

#: How long a login link stays valid.
LOGIN_TTL: Final = timedelta(minutes=10)
#: An access token this close to its expiry is refreshed before use.
EXPIRY_LEEWAY: Final = timedelta(seconds=30)
#: Up to this much earlier still, chosen at random per use, so instances spread their refreshes.
REFRESH_JITTER: Final = timedelta(seconds=30)
#: How long removing a login waits on the service's revocation endpoint, in all (seconds).
REVOCATION_TIMEOUT_S: Final = 5.0
MIN_SECRET_KEY_CHARS: Final = 16

_SCHEMA: Final = Schema(
    "service_logins",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS service_tokens (
    person_key TEXT NOT NULL,
    service TEXT NOT NULL,
    sealed {blob} NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (person_key, service)
);
""",
        ),
        # Pending logins, shared so that a login begun through one instance can call back
        # through another. Keyed by the state's hash; the verifier and the URL (which
        # carries the state) are sealed like the tokens.
        Migration(
            2,
            """
CREATE TABLE IF NOT EXISTS login_states (
    state_hash TEXT PRIMARY KEY,
    person_key TEXT NOT NULL,
    service    TEXT NOT NULL,
    sealed     {blob} NOT NULL,
    expires_at BIGINT NOT NULL,
    UNIQUE (person_key, service)
);
CREATE INDEX IF NOT EXISTS login_states_expiry ON login_states (expires_at);
""",
        ),
    ),
)
_SEAL_VERSION: Final = b"\x01"
_NONCE_BYTES: Final = 12


class LoginUnavailable(ToolError):
    """The person isn't logged in, and this instance has no address to take a login at."""

    def __init__(self, service: str) -> None:
        super().__init__(
            f"The person isn't logged in to {service}, and nothing on this instance can take "
            "a login until its operator sets HTTP_SURFACE_PUBLIC_URL. Tell the person."
        )
        self.service = service


class LoginServiceUnreachable(ToolError):
    """The service's token endpoint couldn't be reached to renew an access token."""

    def __init__(self, service: str) -> None:
        super().__init__(
            f"The {service} login service couldn't be reached to renew the person's access; "
            "try again in a moment."
        )
        self.service = service


class ServiceLogin(msgspec.Struct, frozen=True, kw_only=True):
    """How people log in to one service: its OAuth 2.0 endpoints and Mercury's client there."""

    service: str
    authorize_url: str
    token_url: str
    client_id: str
    #: None for a public client (PKCE only); from the environment, never the file.
    client_secret: str | None = None
    scopes: tuple[str, ...] = ()
    #: The name the person reads on the callback page (default: the service).
    title: str | None = None
    #: The resource the tokens are for (RFC 8707), sent in every authorization and token request.
    resource: str | None = None
    #: The authorization server's issuer; a callback's ``iss`` must equal it (RFC 9207).
    issuer: str | None = None
    #: Whether the server says it sends ``iss`` on every callback (then one without is refused).
    issuer_in_callback: bool = False
    #: How a client with a secret authenticates at the token endpoint.
    client_auth: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"
    #: Where tokens are revoked when the person removes the login (RFC 7009); None: nowhere.
    revocation_url: str | None = None

    def __repr__(self) -> str:
        secret = "set" if self.client_secret else "not set"
        return (
            f"ServiceLogin(service={self.service!r}, authorize_url={self.authorize_url!r}, "
            f"token_url={self.token_url!r}, client_id={self.client_id!r}, "
            f"client_secret={secret}, scopes={self.scopes!r}, resource={self.resource!r}, "
            f"issuer={self.issuer!r}, revocation_url={self.revocation_url!r})"
        )

    def admits_issuer(self, iss: str | None) -> bool:
        """Whether a callback carrying ``iss`` (None: none) may come from this login's server."""
        if iss is None:
            return not (self.issuer is not None and self.issuer_in_callback)
        return self.issuer is None or iss == self.issuer

    @classmethod
    def of(cls, service: RestService) -> ServiceLogin | None:
        """The login a declared REST service asks for, or None when it declares none."""
        if service.authorize_url is None or service.token_url is None:
            return None
        if service.client_id is None:
            return None
        return cls(
            service=service.name,
            authorize_url=service.authorize_url,
            token_url=service.token_url,
            client_id=service.client_id,
            client_secret=service.client_secret,
            scopes=service.scopes,
        )


class LoginOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """How a callback went. ``language`` is that of the person who started the login."""

    status: Literal["logged_in", "expired", "failed", "refused"]
    service: str | None = None
    language: str | None = None


class _Tokens(msgspec.Struct, frozen=True, kw_only=True):
    access_token: str
    refresh_token: str | None = None
    expires_at: datetime | None = None
    token_type: str = "Bearer"  # noqa: S105 - a token type, not a secret
    scope: str | None = None
    #: The login they came from, when it wasn't declared (refreshes go where it says).
    login: ServiceLogin | None = None

    def is_expired(self, now: datetime, jitter: timedelta = timedelta(0)) -> bool:
        return self.expires_at is not None and now + EXPIRY_LEEWAY + jitter >= self.expires_at


class Connection(msgspec.Struct, frozen=True, kw_only=True):
    """What a person may know of one of their logins (never a token)."""

    service: str
    title: str | None
    issuer: str | None
    resource: str | None
    scopes: tuple[str, ...]
    expires_at: datetime | None
    updated_at: str


class _Pending(msgspec.Struct, frozen=True, kw_only=True):
    """What a pending login keeps sealed: the PKCE verifier and the URL to show again."""

    verifier: str
    url: str
    language: str | None = None
    login: ServiceLogin | None = None


_TOKENS_ENCODER: Final = msgspec.json.Encoder()
_TOKENS_DECODER: Final = msgspec.json.Decoder(_Tokens)
_PENDING_DECODER: Final = msgspec.json.Decoder(_Pending)


class Logins:
    """Every person's logins to the services plugins act on as them."""

    def __init__(
        self,
        *,
        secret_key: str | None,
        redirect_uri: str | None,
        clock: Clock = system_clock,
        timeout_s: float = 10.0,
    ) -> None:
        """``redirect_uri`` is where services send the browser back (None: nobody can log in)."""
        self.redirect_uri = redirect_uri
        self._secret_key = secret_key
        self._clock = clock
        self._timeout_s = timeout_s
        self._declared: dict[str, ServiceLogin] = {}
        self._sealer: AESGCM | None = None
        self._db: Database | None = None

    # --- set-up ---------------------------------------------------------------------------

    def declare(self, login: ServiceLogin) -> None:
        """Accept logins to ``login.service``; refuses a missing secret key or a second one."""
        if login.service in self._declared:
            raise ConfigurationError(
                f"Two plugins declare a login to the service {login.service!r}; give each "
                "service one plugin, or rename one of them."
            )
        self.check_secret_key(login.service)
        self._declared[login.service] = login

    def check_secret_key(self, service: str) -> None:
        """Refuse a login to ``service`` (declared or given later) without a usable secret key."""
        if not self._secret_key:
            raise ConfigurationError(
                f"The service {service!r} declares a login, and people's tokens for it "
                "must be encrypted with MERCURY_SECRET_KEY, which isn't set; set it to a long "
                "random string (python -c 'import secrets; print(secrets.token_urlsafe(32))') "
                "or remove the service's login."
            )
        if len(self._secret_key) < MIN_SECRET_KEY_CHARS:
            raise ConfigurationError(
                f"MERCURY_SECRET_KEY is shorter than {MIN_SECRET_KEY_CHARS} characters, too "
                "short to encrypt people's service tokens with; set it to a long random string."
            )
        if self._sealer is None:
            self._sealer = AESGCM(_derive_key(self._secret_key))

    async def open(self, db: Database) -> None:
        """Use ``db`` for the tokens (creating the table); call once the database is open."""
        await db.migrate(_SCHEMA)
        self._db = db

    def declared(self, service: str) -> ServiceLogin:
        login = self._declared.get(service)
        if login is None:
            raise KeyError(f"No login is declared for the service {service!r}.")
        return login

    @property
    def database(self) -> Database:
        """The state store the logins live in (for stores kept beside them)."""
        return self._database()

    # --- the dialogue ---------------------------------------------------------------------

    async def begin(
        self,
        person_key: str,
        service: str,
        language: str | None = None,
        *,
        login: ServiceLogin | None = None,
    ) -> str:
        """The URL ``person_key`` logs in to ``service`` at; the pending one while it lasts.

        ``login`` is the login to use when ``service`` has none declared (an MCP server's,
        discovered); a pending login begun with another one (other scopes, another server)
        is replaced.
        """
        given = login
        login = given or self.declared(service)
        if self.redirect_uri is None:
            raise LoginUnavailable(service)
        now = self._clock()
        db = self._database()
        await db.execute("DELETE FROM login_states WHERE expires_at <= ?", (to_micros(now),))
        current = await self._pending(person_key, service)
        if current is not None and current.login == given:
            return current.url
        if current is not None:
            await db.execute(
                "DELETE FROM login_states WHERE person_key = ? AND service = ?",
                (person_key, service),
            )
        state = secrets.token_urlsafe(32)
        verifier = secrets.token_urlsafe(64)  # 86 characters, inside RFC 7636's 43..128
        url = _authorization_url(login, self.redirect_uri, state, _challenge(verifier))
        pending = _Pending(verifier=verifier, url=url, language=language, login=given)
        sealed = self._seal(person_key, service, _TOKENS_ENCODER.encode(pending))
        created = await db.execute(
            "INSERT INTO login_states (state_hash, person_key, service, sealed, expires_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (person_key, service) DO NOTHING",
            (_state_hash(state), person_key, service, sealed, to_micros(now + LOGIN_TTL)),
        )
        if created == 0:
            # Another instance began the same login a moment ago: show its link.
            current = await self._pending(person_key, service)
            if current is not None:
                return current.url
        return url

    async def pending_url(self, person_key: str, service: str) -> str | None:
        """The URL of ``person_key``'s login to ``service`` while it is pending, else None."""
        current = await self._pending(person_key, service)
        return None if current is None else current.url

    async def _pending(self, person_key: str, service: str) -> _Pending | None:
        row = await self._database().fetch_one(
            "SELECT sealed FROM login_states WHERE person_key = ? AND service = ? "
            "AND expires_at > ?",
            (person_key, service, to_micros(self._clock())),
        )
        if row is None:
            return None
        return self._open_pending(person_key, service, bytes(row["sealed"]))

    async def check_issuer(self, state: str, iss: str | None) -> bool:
        """Whether the callback for ``state`` may come from the issuer ``iss`` (RFC 9207).

        False only for a pending login whose server is another (or sends ``iss`` always
        and didn't): that login is then dropped, and nothing else the callback carries
        (its code, its error) may be used or shown.
        """
        row = await self._database().fetch_one(
            "SELECT person_key, service, sealed FROM login_states WHERE state_hash = ?",
            (_state_hash(state),),
        )
        if row is None:
            return True  # nothing to protect: the callback is answered as expired
        person_key, service = str(row["person_key"]), str(row["service"])
        pending = self._open_pending(person_key, service, bytes(row["sealed"]))
        login = None if pending is None else pending.login or self._declared.get(service)
        if login is None or login.admits_issuer(iss):
            return True
        await self._database().execute(
            "DELETE FROM login_states WHERE state_hash = ?", (_state_hash(state),)
        )
        log.warning("A %s callback came from another issuer; the login is refused", service)
        return False

    async def complete(self, state: str, code: str, iss: str | None = None) -> LoginOutcome:
        """Finish the login ``state`` names with the service's ``code``; never raises.

        ``iss`` is the callback's issuer parameter (RFC 9207), checked against the login's
        issuer before the code is redeemed.
        """
        # Taken out first, by whichever instance the callback reaches: single use even when
        # the exchange below fails, and only one of two racing callbacks gets it.
        row = await self._database().fetch_one(
            "DELETE FROM login_states WHERE state_hash = ? "
            "RETURNING person_key, service, sealed, expires_at",
            (_state_hash(state),),
        )
        if row is None or from_micros(row["expires_at"]) <= self._clock():
            return LoginOutcome(status="expired")
        person_key, service = str(row["person_key"]), str(row["service"])
        pending = self._open_pending(person_key, service, bytes(row["sealed"]))
        if pending is None:
            return LoginOutcome(status="expired")
        login = pending.login or self._declared.get(service)
        if login is None:
            return LoginOutcome(status="expired")
        language = pending.language
        if not login.admits_issuer(iss):
            log.warning("A %s callback came from another issuer; the login is refused", service)
            return LoginOutcome(status="refused", language=language)
        title = login.title or service
        try:
            async with self._oauth_client(login) as client:
                token = await client.fetch_token(
                    login.token_url,
                    grant_type="authorization_code",
                    code=code,
                    code_verifier=pending.verifier,
                    **_resource(login),
                )
            tokens = self._tokens_from(token, previous=None, login=pending.login)
        except asyncio.CancelledError:
            raise
        except OAuthError as error:
            log.warning("The %s login was refused at the token endpoint: %s", service, error.error)
            return LoginOutcome(status="failed", service=title, language=language)
        except _FAILURES as error:
            log.warning("The %s login failed at the token endpoint: %r", service, type(error))
            return LoginOutcome(status="failed", service=title, language=language)
        await self._store(person_key, service, tokens)
        log.info("%s logged in to %s", person_key, service)
        return LoginOutcome(status="logged_in", service=title, language=language)

    # --- what tools ask -------------------------------------------------------------------

    async def access_token(
        self,
        person_key: str,
        service: str,
        *,
        language: str | None = None,
        stale: str | None = None,
    ) -> str:
        """The person's access token for ``service``, refreshed when it has expired.

        ``stale`` is a token the service just refused (401): unless it has been replaced
        meanwhile, it is refreshed now. Raises :class:`LoginRequired` (with a new login URL)
        when the person has no tokens, no refresh token, or the service refuses the refresh.
        """
        self.declared(service)
        token = await self.token(person_key, service, stale=stale)
        if token is None:
            raise LoginRequired(service, await self.begin(person_key, service, language))
        return token

    async def token(self, person_key: str, service: str, *, stale: str | None = None) -> str | None:
        """The person's access token for ``service`` as :meth:`access_token` gives it, or
        None (the tokens forgotten) where it would ask the person to log in."""
        if stale is None:
            tokens = await self._load(person_key, service)
            if tokens is None:
                return None
            jitter = REFRESH_JITTER * random.random()  # noqa: S311 - spreading, not a secret
            if not tokens.is_expired(self._clock(), jitter):
                return tokens.access_token  # the common case takes no lock
        # One refresh at a time per person and service, across every instance: a rotating
        # refresh token used twice would revoke the whole grant. Inside the lock every
        # statement runs on the lock's own connection: borrowing a second one from the pool
        # while holding the first would let a pool's worth of refreshes wait on each other.
        async with self._database().lock(f"service-login:{person_key}:{service}") as held:
            return await self._refresh(held, person_key, service, stale)

    async def _refresh(
        self,
        db: Statements,
        person_key: str,
        service: str,
        stale: str | None,
    ) -> str | None:
        """The access token, refreshed if need be; ``None`` when the person must log in."""
        tokens = await self._load(person_key, service, db)
        if tokens is None:
            return None
        if stale is None and not tokens.is_expired(self._clock()):
            return tokens.access_token  # refreshed by another call while this one waited
        if stale is not None and tokens.access_token != stale:
            return tokens.access_token  # another call refreshed it already
        login = tokens.login or self._declared.get(service)
        if tokens.refresh_token is None or login is None:
            await self.forget(person_key, service, db)
            return None
        try:
            async with self._oauth_client(login) as client:
                token = await client.refresh_token(
                    login.token_url, refresh_token=tokens.refresh_token, **_resource(login)
                )
            renewed = self._tokens_from(token, previous=tokens, login=tokens.login)
        except asyncio.CancelledError:
            raise
        except OAuthError as error:
            log.info("%s's %s refresh was refused: %s", person_key, service, error.error)
            await self.forget(person_key, service, db)
            return None
        except _FAILURES as error:
            log.warning("The %s token endpoint failed a refresh: %r", service, type(error))
            raise LoginServiceUnreachable(service) from None
        await self._store(person_key, service, renewed, db)
        return renewed.access_token

    async def is_logged_in(self, person_key: str, service: str) -> bool:
        return await self._load(person_key, service) is not None

    async def connections(self, person_key: str, prefix: str = "") -> list[Connection]:
        """The person's logins to the services whose names start with ``prefix``, by name."""
        rows = await self._database().fetch_all(
            "SELECT service, updated_at FROM service_tokens WHERE person_key = ? ORDER BY service",
            (person_key,),
        )
        found: list[Connection] = []
        for row in rows:
            service = str(row["service"])
            if not service.startswith(prefix):
                continue
            tokens = await self._load(person_key, service)
            if tokens is None:
                continue
            login = tokens.login or self._declared.get(service)
            found.append(
                Connection(
                    service=service,
                    title=None if login is None else login.title,
                    issuer=None if login is None else login.issuer,
                    resource=None if login is None else login.resource,
                    scopes=tuple((tokens.scope or "").split()),
                    expires_at=tokens.expires_at,
                    updated_at=str(row["updated_at"]),
                )
            )
        return found

    async def granted_scopes(self, person_key: str, service: str) -> tuple[str, ...]:
        """The scopes the person's current tokens for ``service`` were granted (none: ())."""
        tokens = await self._load(person_key, service)
        return () if tokens is None else tuple((tokens.scope or "").split())

    async def forget(self, person_key: str, service: str, db: Statements | None = None) -> bool:
        """Drop the person's tokens for ``service`` (a logout, or tokens that stopped working).

        True when there were some.
        """
        dropped = await (db or self._database()).execute(
            "DELETE FROM service_tokens WHERE person_key = ? AND service = ?",
            (person_key, service),
        )
        return dropped > 0

    async def revoke(self, person_key: str, service: str) -> bool:
        """The person removes their login to ``service``: forget the tokens here, then revoke
        them where the login names a revocation endpoint (RFC 7009), the refresh token first.

        Best-effort: the tokens are forgotten whatever the service answers, the revocation
        waits at most :data:`REVOCATION_TIMEOUT_S`, and a failure is logged once. True when
        there were tokens.
        """
        row = await self._database().fetch_one(
            "DELETE FROM service_tokens WHERE person_key = ? AND service = ? RETURNING sealed",
            (person_key, service),
        )
        if row is None:
            return False
        try:
            tokens = _TOKENS_DECODER.decode(
                self._open_seal(person_key, service, bytes(row["sealed"]))
            )
        except (InvalidTag, ValueError, msgspec.DecodeError):
            return True  # sealed under another key: nothing to send
        login = tokens.login or self._declared.get(service)
        if login is None or login.revocation_url is None:
            return True
        revocable = [(tokens.refresh_token, "refresh_token"), (tokens.access_token, "access_token")]
        try:
            async with asyncio.timeout(REVOCATION_TIMEOUT_S), self._oauth_client(login) as client:
                for token, hint in revocable:
                    if token is None:
                        continue
                    answer = await client.revoke_token(
                        login.revocation_url, token=token, token_type_hint=hint
                    )
                    if not _revoked(answer):
                        log.warning(
                            "%s's %s %s wasn't revoked: the service answered HTTP %s; it is "
                            "forgotten here",
                            person_key,
                            service,
                            hint.replace("_", " "),
                            answer.status_code,
                        )
                        break
        except asyncio.CancelledError:
            raise
        except _REVOCATION_FAILURES as error:
            log.warning(
                "%s's %s tokens couldn't be revoked at the service (%s); they are forgotten here",
                person_key,
                service,
                type(error).__name__,
            )
        return True

    def seal(self, first: str, second: str, plain: bytes) -> bytes:
        """``plain`` encrypted as the tokens are, bound to ``first`` and ``second``."""
        return self._seal(first, second, plain)

    def unseal(self, first: str, second: str, sealed: bytes) -> bytes:
        """What :meth:`seal` sealed; raises ValueError when it doesn't open."""
        try:
            return self._open_seal(first, second, sealed)
        except InvalidTag:
            raise ValueError("The sealed value doesn't open with this key.") from None

    # --- inside ---------------------------------------------------------------------------

    def _open_pending(self, person_key: str, service: str, sealed: bytes) -> _Pending | None:
        try:
            return _PENDING_DECODER.decode(self._open_seal(person_key, service, sealed))
        except (InvalidTag, ValueError, msgspec.DecodeError):
            log.warning(
                "A pending %s login of %s can't be decrypted (was MERCURY_SECRET_KEY "
                "changed?); it is ignored",
                service,
                person_key,
            )
            return None

    def _oauth_client(self, login: ServiceLogin) -> Any:
        method = login.client_auth if login.client_secret else "none"
        return AsyncOAuth2Client(
            client_id=login.client_id,
            client_secret=login.client_secret,
            token_endpoint_auth_method=method,
            revocation_endpoint_auth_method=method,
            redirect_uri=self.redirect_uri,
            timeout=self._timeout_s,
            follow_redirects=False,
        )

    def _tokens_from(
        self, token: Any, *, previous: _Tokens | None, login: ServiceLogin | None = None
    ) -> _Tokens:
        access = token["access_token"]
        if not isinstance(access, str) or not access:
            raise ValueError("The token response has no access token.")
        expires_in = token.get("expires_in")
        expires_at: datetime | None = None
        if isinstance(expires_in, str) and expires_in.isdigit():
            expires_in = int(expires_in)
        if isinstance(expires_in, int | float) and not isinstance(expires_in, bool):
            expires_at = self._clock() + timedelta(seconds=float(expires_in))
        refresh = token.get("refresh_token")
        if not isinstance(refresh, str) or not refresh:
            # A refresh that doesn't rotate the refresh token keeps the old one usable.
            refresh = previous.refresh_token if previous is not None else None
        scope = token.get("scope")
        if not isinstance(scope, str):
            # RFC 6749 §5.1: no scope in the answer means the scope asked for was granted.
            scope = previous.scope if previous is not None else None
            if scope is None and login is not None and login.scopes:
                scope = " ".join(login.scopes)
        return _Tokens(
            access_token=access,
            refresh_token=refresh,
            expires_at=expires_at,
            token_type=str(token.get("token_type") or "Bearer"),
            scope=scope,
            login=login,
        )

    def _database(self) -> Database:
        if self._db is None:
            raise RuntimeError("Logins.open(db) hasn't been called; open the logins first.")
        return self._db

    async def _store(
        self, person_key: str, service: str, tokens: _Tokens, db: Statements | None = None
    ) -> None:
        sealed = self._seal(person_key, service, _TOKENS_ENCODER.encode(tokens))
        await (db or self._database()).execute(
            "INSERT INTO service_tokens (person_key, service, sealed, updated_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (person_key, service) DO UPDATE SET "
            "sealed = excluded.sealed, updated_at = excluded.updated_at",
            (person_key, service, sealed, self._clock().isoformat()),
        )

    async def _load(
        self, person_key: str, service: str, db: Statements | None = None
    ) -> _Tokens | None:
        row = await (db or self._database()).fetch_one(
            "SELECT sealed FROM service_tokens WHERE person_key = ? AND service = ?",
            (person_key, service),
        )
        if row is None:
            return None
        try:
            return _TOKENS_DECODER.decode(
                self._open_seal(person_key, service, bytes(row["sealed"]))
            )
        except (InvalidTag, ValueError, msgspec.DecodeError):
            log.warning(
                "%s's %s tokens can't be decrypted (was MERCURY_SECRET_KEY changed?); "
                "they are dropped and the person will be asked to log in again",
                person_key,
                service,
            )
            await self.forget(person_key, service, db)
            return None

    def _seal(self, person_key: str, service: str, plain: bytes) -> bytes:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = self._aead().encrypt(nonce, plain, _associated(person_key, service))
        return _SEAL_VERSION + nonce + sealed

    def _open_seal(self, person_key: str, service: str, sealed: bytes) -> bytes:
        if sealed[:1] != _SEAL_VERSION:
            raise ValueError("unknown seal version")
        nonce, body = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        return self._aead().decrypt(nonce, body, _associated(person_key, service))

    def _aead(self) -> AESGCM:
        if self._sealer is None:
            if not self._secret_key or len(self._secret_key) < MIN_SECRET_KEY_CHARS:
                raise RuntimeError("No usable MERCURY_SECRET_KEY, so no key to seal tokens with.")
            self._sealer = AESGCM(_derive_key(self._secret_key))
        return self._sealer


def _derive_key(secret_key: str) -> bytes:
    return HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=b"mercury service logins",
        info=b"service tokens v1",
    ).derive(secret_key.encode())


def _revoked(answer: Any) -> bool:
    """Whether a revocation endpoint's answer leaves nothing to do: revoked (200), or a
    kind of token the service doesn't revoke (RFC 7009 §2.2.1, as for self-contained JWT
    access tokens, which lapse on their own)."""
    if answer.status_code == httpx.codes.OK:
        return True
    try:
        error = answer.json().get("error")
    except (ValueError, AttributeError):
        return False
    return bool(answer.status_code == httpx.codes.BAD_REQUEST) and error == "unsupported_token_type"


def _state_hash(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


def _associated(person_key: str, service: str) -> bytes:
    return person_key.encode() + b"\x00" + service.encode()


def _challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _authorization_url(login: ServiceLogin, redirect_uri: str, state: str, challenge: str) -> str:
    # The declared URL may carry parameters of its own (Atlassian wants audience and prompt);
    # ours are added after them and win on a clash.
    parts = urlsplit(login.authorize_url)
    ours = {
        "response_type": "code",
        "client_id": login.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    if login.scopes:
        ours["scope"] = " ".join(login.scopes)
    ours |= _resource(login)
    theirs = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in ours]
    query = urlencode([*theirs, *ours.items()])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


def _resource(login: ServiceLogin) -> dict[str, str]:
    """The RFC 8707 ``resource`` parameter of ``login``'s requests, if it names one."""
    return {} if login.resource is None else {"resource": login.resource}
