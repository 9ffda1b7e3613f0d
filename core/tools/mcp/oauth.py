"""Each person's OAuth sign-in to the MCP servers configured with ``auth: oauth``.

The MCP client asks :meth:`McpSignIn.authorization` for the ``Authorization`` header to send
as the person (never the person's Mercury token: only a token issued for that server); when
the server answers 401 or 403 it calls :meth:`McpSignIn.challenged`. Either raises
:class:`~core.tools.registry.LoginRequired` with the URL the person signs in at, after:

1. discovery (:mod:`core.tools.mcp.discovery`): RFC 9728 protected resource metadata, from
   the challenge's ``resource_metadata`` (asked of the server with a request without a token
   when the client hasn't one yet) else the well-known path, then RFC 8414 / OpenID
   Connect metadata of its authorization server; every URL within the server's own host and
   its ``allowed_hosts`` (:mod:`core.tools.mcp.hosts`);
2. Mercury's client there (:mod:`core.tools.mcp.registration`), in the specification's
   order: the configured ``client_id``; else the Client ID Metadata Document Mercury serves,
   where the server accepts one; else dynamic registration, kept per issuer;
3. the scopes: the challenge's, else the configured ones, else those the resource offers; on
   a 403 ``insufficient_scope`` those already granted as well (step-up), a bounded number
   of times per person, server and scope set (:mod:`core.tools.mcp.step_up`).

The sign-in itself is a :class:`~core.tools.logins.Logins` login given at ``begin`` (PKCE
S256, the RFC 8707 ``resource`` in the authorization and token requests, the issuer recorded
for the RFC 9207 ``iss`` check on the callback). Pending logins and tokens are in the shared
state store, so the callback lands on any instance; the tokens are kept per person and server
(the issuer recorded with them), sealed at rest, and refreshed before they lapse, once
across instances. A discovery is remembered for :data:`DISCOVERY_TTL` per server.

Exceptions::

    ToolError (core.tools.registry)
    ├── LoginRequired                  the person must sign in (again); carries the URL
    ├── LoginUnavailable               this instance has no public URL to take a sign-in at
    ├── SignInUnavailable              the server's sign-in can't be found or isn't usable
    ├── AccessRefused                  the server refused the person (403, not for want of scope)
    └── ScopeRefused                   the server keeps refusing the scopes it asks for
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final, NoReturn
from urllib.parse import urlsplit

import httpx
import msgspec

from core.tools.logins import Connection, LoginUnavailable, ServiceLogin
from core.tools.mcp.discovery import (
    AuthorizationServer,
    Challenge,
    ProtectedResource,
    SignInUnavailable,
    discover,
    parse_challenge,
    probe_challenge,
)
from core.tools.mcp.registration import (
    CLIENT_METADATA_PATH,
    Registration,
    Registrations,
    client_metadata,
)
from core.tools.mcp.step_up import ScopeRefused, StepUps
from core.tools.registry import LoginRequired, ToolError

if TYPE_CHECKING:
    from core.tools.logins import Logins

__all__ = [
    "DISCOVERY_RETRY_S",
    "DISCOVERY_TTL_S",
    "SERVICE_PREFIX",
    "AccessRefused",
    "McpSignIn",
    "OAuthTarget",
    "ScopeRefused",
    "service_key",
]

#: The prefix of an MCP server's name among the services people have logged in to.
SERVICE_PREFIX: Final = "mcp:"
#: How long a server's discovered metadata is used before it is fetched again (seconds).
DISCOVERY_TTL_S: Final = 300.0
#: How long a sign-in that couldn't be found isn't looked for again for a person's call
#: (each turn asks for the person's tools: a server whose metadata is broken or out of reach
#: would otherwise cost every turn a discovery).
DISCOVERY_RETRY_S: Final = 30.0
CLIENT_NAME: Final = "Mercury"


class AccessRefused(ToolError):
    """The MCP server refused the person's access, and signing in again wouldn't change it."""

    def __init__(self, title: str) -> None:
        super().__init__(
            f"{title} refused the person's access (HTTP 403); signing in again won't change "
            "that. Tell the person."
        )
        self.title = title


class OAuthTarget(msgspec.Struct, frozen=True, kw_only=True):
    """One MCP server people sign in to: what the client knows of it from the configuration."""

    #: The configured server name: the tokens' key and the ``login`` event's service.
    server: str
    #: The name shown to the person.
    title: str
    #: The MCP endpoint, which is also the canonical resource URI (RFC 8707).
    url: str
    #: Hosts, besides the server's own, that its metadata may send Mercury to.
    allowed_hosts: tuple[str, ...] = ()
    #: A pre-registered client; None to use a client metadata document or registration.
    client_id: str | None = None
    client_secret: str | None = None
    scopes: tuple[str, ...] = ()


def service_key(server: str) -> str:
    """The name an MCP server's tokens are kept under among a person's logins."""
    return SERVICE_PREFIX + server


class McpSignIn:
    """The per-person sign-in to MCP servers, on top of :class:`~core.tools.logins.Logins`."""

    def __init__(
        self,
        logins: Logins,
        *,
        public_url: str | None,
        client_name: str = CLIENT_NAME,
        timeout_s: float = 10.0,
    ) -> None:
        """``public_url`` is where people's browsers reach Mercury (None: nobody can sign in)."""
        self._logins = logins
        self._public_url = public_url.rstrip("/") if public_url else None
        self._client_name = client_name
        self._timeout_s = timeout_s
        self._registrations = Registrations(logins, client_name=client_name)
        self._step_ups = StepUps(logins)
        self._discovered: dict[
            str, tuple[float, ProtectedResource, AuthorizationServer, Challenge]
        ] = {}
        self._failed: dict[str, tuple[float, SignInUnavailable]] = {}

    def check(self, server: str) -> None:
        """Refuse, at start-up, the ``auth: oauth`` server ``server`` where people's tokens
        can't be sealed (ConfigurationError: no usable ``MERCURY_SECRET_KEY``)."""
        self._logins.check_secret_key(server)

    # --- the client metadata document -----------------------------------------------------

    @property
    def client_metadata_url(self) -> str | None:
        """Mercury's ``client_id`` where servers take a metadata document: its URL.

        None without a public URL, or when it isn't HTTPS (a document's URL must be):
        Mercury then registers itself where the server lets it.
        """
        if self._public_url is None or self._logins.redirect_uri is None:
            return None
        if urlsplit(self._public_url).scheme != "https":
            return None
        return self._public_url + CLIENT_METADATA_PATH

    def client_metadata(self) -> dict[str, Any] | None:
        """The Client ID Metadata Document served at :attr:`client_metadata_url`."""
        url, redirect = self.client_metadata_url, self._logins.redirect_uri
        if url is None or redirect is None:
            return None
        return client_metadata(url, redirect, self._client_name)

    # --- what the MCP client asks ---------------------------------------------------------

    async def authorization(
        self, person_key: str, target: OAuthTarget, language: str | None = None
    ) -> str:
        """``"Bearer …"`` for ``person_key`` at ``target``, refreshed when it is about to lapse.

        Raises :class:`LoginRequired` (service ``target.server``) when the person must sign in.
        """
        token = await self._logins.token(person_key, service_key(target.server))
        if token is not None:
            return f"Bearer {token}"
        await self._sign_in(person_key, target, None, granted=(), language=language)

    async def challenged(
        self,
        person_key: str,
        target: OAuthTarget,
        status: int,
        www_authenticate: str | None,
        language: str | None = None,
    ) -> NoReturn:
        """After a 401/403 from ``target``: forget the token sent, discover, raise LoginRequired.

        A 403 with ``error="insufficient_scope"`` asks for the scopes the challenge names
        on top of those already granted (step-up), and keeps the current token meanwhile;
        past :data:`~core.tools.mcp.step_up.STEP_UP_LIMIT` step-ups for the same scopes
        (:mod:`core.tools.mcp.step_up`) it raises :class:`ScopeRefused` instead; any other
        403 raises :class:`AccessRefused`.
        """
        challenge = parse_challenge(www_authenticate)
        service = service_key(target.server)
        if status == httpx.codes.FORBIDDEN:
            if challenge.error != "insufficient_scope":
                raise AccessRefused(target.title)
            await self._step_ups.check(
                person_key, target.server, target.title, challenge.scopes, service
            )
            granted = await self._logins.granted_scopes(person_key, service)
            try:
                await self._sign_in(
                    person_key, target, challenge, granted=granted, language=language
                )
            except LoginRequired as login:
                await self._step_ups.record(person_key, target.server, challenge.scopes, login.url)
                raise
        await self._logins.forget(person_key, service)
        await self._sign_in(person_key, target, challenge, granted=(), language=language)

    async def connections(self, person_key: str) -> list[Connection]:
        """The MCP servers ``person_key`` is signed in to (their ``service`` is the server)."""
        found = await self._logins.connections(person_key, SERVICE_PREFIX)
        return [
            msgspec.structs.replace(found_one, service=found_one.service[len(SERVICE_PREFIX) :])
            for found_one in found
        ]

    async def disconnect(self, person_key: str, server: str) -> bool:
        """Forget the person's tokens for ``server`` and revoke them at its authorization
        server where it offers revocation (best-effort, bounded); False when they had none."""
        return await self._logins.revoke(person_key, service_key(server))

    # --- inside ---------------------------------------------------------------------------

    async def _sign_in(
        self,
        person_key: str,
        target: OAuthTarget,
        challenge: Challenge | None,
        *,
        granted: tuple[str, ...],
        language: str | None,
    ) -> NoReturn:
        """``challenge`` None: the server hasn't been asked yet; it is (once per discovery)."""
        service = service_key(target.server)
        redirect = self._logins.redirect_uri
        if redirect is None:
            raise LoginUnavailable(target.title)
        failed = self._failed.get(target.server)
        if challenge is None and failed is not None:
            if time.monotonic() - failed[0] < DISCOVERY_RETRY_S:
                raise SignInUnavailable(failed[1].title, failed[1].reason)
        try:
            async with httpx.AsyncClient(timeout=self._timeout_s, follow_redirects=False) as client:
                if challenge is None:
                    kept = self._kept(target.server)
                    challenge = (
                        kept[2] if kept is not None else await probe_challenge(client, target.url)
                    )
                resource, server = await self._discover(client, target, challenge)
                registration = await self._client(client, target, server, redirect)
        except SignInUnavailable as error:
            self._failed[target.server] = (time.monotonic(), error)
            raise
        self._failed.pop(target.server, None)
        asked = challenge.scopes or target.scopes or resource.scopes_supported
        scopes = tuple(dict.fromkeys((*granted, *asked)))
        login = ServiceLogin(
            service=service,
            title=target.title,
            authorize_url=server.authorization_endpoint,
            token_url=server.token_endpoint,
            client_id=registration.client_id,
            client_secret=registration.client_secret,
            client_auth=(
                "client_secret_post"
                if registration.client_auth == "client_secret_post"
                else "client_secret_basic"
            ),
            scopes=scopes,
            resource=resource.resource,
            issuer=server.issuer,
            issuer_in_callback=server.authorization_response_iss_parameter_supported,
            revocation_url=server.revocation_endpoint,
        )
        url = await self._logins.begin(person_key, service, language, login=login)
        raise LoginRequired(target.server, url)

    async def _discover(
        self, client: httpx.AsyncClient, target: OAuthTarget, challenge: Challenge
    ) -> tuple[ProtectedResource, AuthorizationServer]:
        kept = self._kept(target.server)
        if kept is not None and challenge in (Challenge(), kept[2]):
            return kept[0], kept[1]
        resource, server = await discover(
            client,
            title=target.title,
            server_url=target.url,
            allowed_hosts=target.allowed_hosts,
            challenge=challenge,
        )
        self._discovered[target.server] = (time.monotonic(), resource, server, challenge)
        return resource, server

    def _kept(self, server: str) -> tuple[ProtectedResource, AuthorizationServer, Challenge] | None:
        """The server's discovery while it is fresh: its metadata and the challenge it read."""
        kept = self._discovered.get(server)
        if kept is None or time.monotonic() - kept[0] >= DISCOVERY_TTL_S:
            return None
        return kept[1], kept[2], kept[3]

    async def _client(
        self,
        client: httpx.AsyncClient,
        target: OAuthTarget,
        server: AuthorizationServer,
        redirect_uri: str,
    ) -> Registration:
        """Mercury's client at ``server``, in the MCP specification's order."""
        if target.client_id is not None:
            return Registration(
                client_id=target.client_id,
                client_secret=target.client_secret,
                client_auth="client_secret_basic" if target.client_secret else "none",
            )
        document = self.client_metadata_url
        if document is not None and server.client_id_metadata_document_supported:
            return Registration(client_id=document)
        return await self._registrations.registration(
            client, server, redirect_uri, title=target.title
        )
