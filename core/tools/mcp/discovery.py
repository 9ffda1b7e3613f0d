"""How to sign in to an MCP server: its challenge, its resource and authorization servers.

- :func:`parse_challenge` reads a ``WWW-Authenticate: Bearer …`` header: the protected
  resource metadata's URL, the scope the server asks for, the error (``insufficient_scope``);
  :func:`probe_challenge` asks the server for one (a request without a token).
- :func:`discover` fetches the server's protected resource metadata (RFC 9728: the URL the
  challenge names, else the well-known path for the server's URL, then the one at its
  root), checks that it is about this server, then its first authorization server's metadata
  (RFC 8414, then OpenID Connect Discovery, in the order the MCP specification gives), and
  checks that it names itself and offers PKCE S256. A revocation endpoint (RFC 7009) on a
  host it may not send Mercury to is left out (removing a connection then revokes nothing).

Every URL fetched or taken from metadata must pass :func:`core.tools.mcp.hosts.admits`;
redirects are not followed. Answers are bounded in size.

Exceptions::

    ToolError (core.tools.registry)
    └── SignInUnavailable              the server's sign-in can't be found or isn't usable
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Final, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import msgspec

from core.tools.mcp.hosts import admits
from core.tools.registry import ToolError

__all__ = [
    "AuthorizationServer",
    "Challenge",
    "ProtectedResource",
    "SignInUnavailable",
    "discover",
    "parse_challenge",
    "probe_challenge",
]

#: Metadata documents larger than this are refused.
METADATA_MAX_BYTES: Final = 64 * 1024
_PARAM: Final = re.compile(r'([A-Za-z0-9_\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,"]+))')

T = TypeVar("T")


class SignInUnavailable(ToolError):
    """The MCP server's sign-in can't be found, or asks Mercury to go where it may not."""

    def __init__(self, title: str, reason: str) -> None:
        super().__init__(
            f"Signing in to {title} isn't possible: {reason} Tell the person; the operator "
            "can fix it in the server's configuration."
        )
        self.title = title
        self.reason = reason


class Challenge(msgspec.Struct, frozen=True, kw_only=True):
    """What a server's ``WWW-Authenticate: Bearer`` challenge says."""

    resource_metadata: str | None = None
    scopes: tuple[str, ...] = ()
    error: str | None = None


class ProtectedResource(msgspec.Struct, frozen=True, kw_only=True):
    """RFC 9728 protected resource metadata (the fields Mercury uses)."""

    resource: str
    authorization_servers: tuple[str, ...] = ()
    scopes_supported: tuple[str, ...] = ()


class AuthorizationServer(msgspec.Struct, frozen=True, kw_only=True):
    """RFC 8414 / OpenID Connect authorization server metadata (the fields Mercury uses)."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None = None
    #: Where tokens are revoked (RFC 7009), when the server says.
    revocation_endpoint: str | None = None
    scopes_supported: tuple[str, ...] = ()
    code_challenge_methods_supported: tuple[str, ...] = ()
    token_endpoint_auth_methods_supported: tuple[str, ...] = ("client_secret_basic",)
    client_id_metadata_document_supported: bool = False
    authorization_response_iss_parameter_supported: bool = False


def parse_challenge(header: str | None) -> Challenge:
    """The Bearer challenge of a ``WWW-Authenticate`` header (empty when there is none)."""
    if not header:
        return Challenge()
    start = header.lower().find("bearer")
    if start < 0:
        return Challenge()
    params: dict[str, str] = {}
    for match in _PARAM.finditer(header[start + len("bearer") :]):
        name = match.group(1).lower()
        quoted = match.group(2)
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else match.group(3)
        params.setdefault(name, value)
    return Challenge(
        resource_metadata=params.get("resource_metadata") or None,
        scopes=tuple(params.get("scope", "").split()),
        error=params.get("error") or None,
    )


async def probe_challenge(client: httpx.AsyncClient, server_url: str) -> Challenge:
    """The challenge the server answers a request without a token with (empty: none)."""
    ping = {"jsonrpc": "2.0", "id": 0, "method": "ping"}
    headers = {"accept": "application/json, text/event-stream"}
    try:
        async with client.stream("POST", server_url, json=ping, headers=headers) as answer:
            if answer.status_code != httpx.codes.UNAUTHORIZED:
                return Challenge()
            return parse_challenge(answer.headers.get("www-authenticate"))
    except asyncio.CancelledError:
        raise
    except httpx.HTTPError:
        return Challenge()


async def discover(
    client: httpx.AsyncClient,
    *,
    title: str,
    server_url: str,
    allowed_hosts: Sequence[str],
    challenge: Challenge,
) -> tuple[ProtectedResource, AuthorizationServer]:
    """The server's resource metadata and its authorization server's; raises SignInUnavailable."""

    def checked(url: str, what: str) -> str:
        if not admits(url, server_url=server_url, allowed_hosts=allowed_hosts):
            host = urlsplit(url).netloc or url
            raise SignInUnavailable(
                title,
                f"its {what} is on {host}, which isn't the server's own host nor in its "
                "allowed_hosts.",
            )
        return url

    if challenge.resource_metadata is not None:
        candidates = [checked(challenge.resource_metadata, "resource metadata")]
    else:
        candidates = _resource_metadata_urls(server_url)
    resource = await _first(client, candidates, ProtectedResource, title, "resource metadata")
    if not _covers(resource.resource, server_url):
        raise SignInUnavailable(
            title, f"its resource metadata is about {resource.resource}, not {server_url}."
        )
    if not resource.authorization_servers:
        raise SignInUnavailable(title, "its resource metadata names no authorization server.")
    issuer = checked(resource.authorization_servers[0], "authorization server")
    server = await _first(
        client, _authorization_server_urls(issuer), AuthorizationServer, title, "sign-in server"
    )
    if server.issuer.rstrip("/") != issuer.rstrip("/"):
        raise SignInUnavailable(
            title, f"the authorization server {issuer} calls itself {server.issuer}."
        )
    checked(server.authorization_endpoint, "authorization endpoint")
    checked(server.token_endpoint, "token endpoint")
    if server.registration_endpoint is not None:
        checked(server.registration_endpoint, "registration endpoint")
    revocation = server.revocation_endpoint
    if revocation is not None and not admits(
        revocation, server_url=server_url, allowed_hosts=allowed_hosts
    ):
        # Optional: tokens are then only forgotten on removal, never sent elsewhere.
        server = msgspec.structs.replace(server, revocation_endpoint=None)
    if "S256" not in server.code_challenge_methods_supported:
        raise SignInUnavailable(title, f"its authorization server {issuer} doesn't offer PKCE.")
    return resource, server


def _covers(resource: str, server_url: str) -> bool:
    """Whether the metadata's ``resource`` is the server's URL, or a prefix of it by path."""
    a, b = urlsplit(resource), urlsplit(server_url)
    if (a.scheme.lower(), a.netloc.lower()) != (b.scheme.lower(), b.netloc.lower()):
        return False
    prefix, path = a.path.rstrip("/"), b.path.rstrip("/")
    return path == prefix or path.startswith(prefix + "/")


def _resource_metadata_urls(server_url: str) -> list[str]:
    """RFC 9728 §3.1: the well-known URL with the server's path, then the one at its root."""
    parts = urlsplit(server_url)
    root = urlunsplit((parts.scheme, parts.netloc, "/.well-known/oauth-protected-resource", "", ""))
    path = parts.path.rstrip("/")
    return [root + path, root] if path else [root]


def _authorization_server_urls(issuer: str) -> list[str]:
    """The MCP specification's order: RFC 8414 then OIDC, path inserted, then OIDC appended."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")

    def at(well_known: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, well_known, "", ""))

    if not path:
        return [
            at("/.well-known/oauth-authorization-server"),
            at("/.well-known/openid-configuration"),
        ]
    return [
        at("/.well-known/oauth-authorization-server" + path),
        at("/.well-known/openid-configuration" + path),
        at(path + "/.well-known/openid-configuration"),
    ]


async def _first(
    client: httpx.AsyncClient, urls: Sequence[str], kind: type[T], title: str, what: str
) -> T:
    """The first of ``urls`` that answers a document of ``kind``."""
    for url in urls:
        try:
            async with client.stream("GET", url, headers={"accept": "application/json"}) as answer:
                if answer.status_code != httpx.codes.OK:
                    continue
                body = b""
                async for chunk in answer.aiter_bytes():
                    body += chunk
                    if len(body) > METADATA_MAX_BYTES:
                        raise SignInUnavailable(title, f"its {what} at {url} is too large.")
        except asyncio.CancelledError:
            raise
        except httpx.HTTPError:
            continue
        try:
            return msgspec.json.decode(body, type=kind)
        except msgspec.DecodeError:
            continue
    raise SignInUnavailable(title, f"its {what} couldn't be read (tried {', '.join(urls)}).")
