"""Each person's OAuth sign-in to the MCP servers configured with ``auth: oauth``.

The MCP client asks :meth:`McpSignIn.authorization` for the ``Authorization`` header to send
as the person; when the server answers 401 or 403 it calls :meth:`McpSignIn.challenged`,
which forgets the stale token, discovers how to sign in (RFC 9728 protected resource
metadata, RFC 8414 / OIDC authorization server metadata), registers Mercury as a client
when need be, and raises :class:`~core.tools.registry.LoginRequired` with the URL the
person signs in at. The sign-in itself runs through :class:`~core.tools.logins.Logins`:
one login mechanism, its state in the shared database, its tokens sealed at rest.

Exceptions::

    ToolError (core.tools.registry)
    └── LoginRequired                  the person must sign in (again); carries the URL
"""

from __future__ import annotations

from typing import NoReturn

import msgspec

from core.tools.registry import LoginRequired

__all__ = ["McpSignIn", "OAuthTarget"]


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


class McpSignIn:
    """The per-person sign-in to MCP servers, on top of :class:`~core.tools.logins.Logins`."""

    async def authorization(self, person_key: str, target: OAuthTarget) -> str:
        """``"Bearer …"`` for ``person_key`` at ``target``, refreshed when it is about to lapse.

        Raises :class:`LoginRequired` (service ``target.server``) when the person must sign in.
        """
        raise LoginRequired(target.server, target.url)

    async def challenged(
        self,
        person_key: str,
        target: OAuthTarget,
        status: int,
        www_authenticate: str | None,
    ) -> NoReturn:
        """After a 401/403 from ``target``: forget the token sent, discover, raise LoginRequired.

        A 403 with ``error="insufficient_scope"`` asks for the scopes the challenge names
        on top of those already granted (step-up).
        """
        raise LoginRequired(target.server, target.url)
