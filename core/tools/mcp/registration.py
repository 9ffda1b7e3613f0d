"""Mercury's client at each authorization server: pre-registered, a metadata document, or
registered dynamically.

:func:`client_metadata` is the Client ID Metadata Document Mercury serves at
``<public URL>/oauth/client-metadata.json``: its URL is Mercury's ``client_id`` at every
authorization server that advertises ``client_id_metadata_document_supported``. Elsewhere
Mercury registers itself (RFC 7591, ``application_type: web``) and keeps the registration
per issuer and callback in the state store (:class:`Registrations`), its secret sealed as
the tokens are, so that every instance uses the same client.

Exceptions: :class:`~core.tools.mcp.discovery.SignInUnavailable` when registration fails.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final, Literal

import httpx
import msgspec

from core.state import Migration, Schema
from core.tools.mcp.discovery import AuthorizationServer, SignInUnavailable

if TYPE_CHECKING:
    from core.tools.logins import Logins

__all__ = ["CLIENT_METADATA_PATH", "Registration", "Registrations", "client_metadata"]

#: Where the Client ID Metadata Document is served, below the public URL.
CLIENT_METADATA_PATH: Final = "/oauth/client-metadata.json"

_SCHEMA: Final = Schema(
    "mcp_oauth_clients",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS mcp_oauth_clients (
    issuer       TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    sealed       {blob} NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (issuer, redirect_uri)
);
""",
        ),
    ),
)


class Registration(msgspec.Struct, frozen=True, kw_only=True):
    """Mercury's client at one authorization server."""

    client_id: str
    client_secret: str | None = None
    client_auth: Literal["none", "client_secret_basic", "client_secret_post"] = "none"


_DECODER: Final = msgspec.json.Decoder(Registration)
_ENCODER: Final = msgspec.json.Encoder()


def client_metadata(client_id: str, redirect_uri: str, client_name: str) -> dict[str, Any]:
    """The Client ID Metadata Document whose URL is ``client_id``."""
    return {
        "client_id": client_id,
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "web",
    }


class Registrations:
    """Dynamic registrations, per issuer and callback, shared by every instance."""

    def __init__(self, logins: Logins, *, client_name: str) -> None:
        self._logins = logins
        self._client_name = client_name
        self._opened = False

    async def _open(self) -> None:
        if not self._opened:
            await self._logins.database.migrate(_SCHEMA)
            self._opened = True

    async def registration(
        self,
        client: httpx.AsyncClient,
        server: AuthorizationServer,
        redirect_uri: str,
        *,
        title: str,
    ) -> Registration:
        """Mercury's registration at ``server``: the one kept, else a new one (RFC 7591)."""
        await self._open()
        db = self._logins.database
        row = await db.fetch_one(
            "SELECT sealed FROM mcp_oauth_clients WHERE issuer = ? AND redirect_uri = ?",
            (server.issuer, redirect_uri),
        )
        if row is not None:
            try:
                plain = self._logins.unseal(server.issuer, redirect_uri, bytes(row["sealed"]))
                return _DECODER.decode(plain)
            except (ValueError, msgspec.DecodeError):
                pass  # sealed under another key: register again
        registered = await self._register(client, server, redirect_uri, title=title)
        sealed = self._logins.seal(server.issuer, redirect_uri, _ENCODER.encode(registered))
        await db.execute(
            "INSERT INTO mcp_oauth_clients (issuer, redirect_uri, sealed, created_at) "
            "VALUES (?, ?, ?, CURRENT_TIMESTAMP) ON CONFLICT (issuer, redirect_uri) "
            "DO UPDATE SET sealed = excluded.sealed, created_at = excluded.created_at",
            (server.issuer, redirect_uri, sealed),
        )
        return registered

    async def _register(
        self,
        client: httpx.AsyncClient,
        server: AuthorizationServer,
        redirect_uri: str,
        *,
        title: str,
    ) -> Registration:
        if server.registration_endpoint is None:
            raise SignInUnavailable(
                title,
                f"its authorization server {server.issuer} neither accepts Mercury's client "
                "metadata document nor registers clients; configure a client_id for it.",
            )
        methods = server.token_endpoint_auth_methods_supported
        method = "client_secret_basic" if "client_secret_basic" in methods else "none"
        asked = {
            "client_name": self._client_name,
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": method,
            "application_type": "web",
        }
        try:
            answer = await client.post(server.registration_endpoint, json=asked)
        except asyncio.CancelledError:
            raise
        except httpx.HTTPError:
            raise SignInUnavailable(
                title, f"its authorization server {server.issuer} couldn't be reached."
            ) from None
        if answer.status_code not in (httpx.codes.OK, httpx.codes.CREATED):
            raise SignInUnavailable(
                title,
                f"its authorization server {server.issuer} refused to register Mercury "
                f"(HTTP {answer.status_code}).",
            )
        try:
            body = msgspec.json.decode(answer.content[:65536], type=dict[str, Any])
            client_id = body["client_id"]
        except (msgspec.DecodeError, KeyError):
            raise SignInUnavailable(
                title, f"its authorization server {server.issuer} answered no client_id."
            ) from None
        secret = body.get("client_secret")
        given = body.get("token_endpoint_auth_method", method)
        auth: Literal["none", "client_secret_basic", "client_secret_post"] = (
            given if given in ("client_secret_basic", "client_secret_post") else "none"
        )
        if not isinstance(secret, str) or not secret:
            secret, auth = None, "none"
        return Registration(client_id=str(client_id), client_secret=secret, client_auth=auth)
