"""``/me/connections``: the MCP servers the caller has signed in to, and signing out of one.

``GET /me/connections`` lists the caller's own connections (never a token, never another
person's): the server's name and title, the authorization server that issued the tokens, the
scopes granted, when the access token lapses (it is renewed before) and when the tokens were
last stored. ``DELETE /me/connections/{server}`` forgets the caller's tokens for that server
on every instance (the next call to one of its tools asks them to sign in again), and
revokes them at the authorization server where it offers revocation (RFC 7009, best-effort,
bounded); a server they aren't signed in to answers 404.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from litestar import Response, delete, get
from litestar.params import FromPath

from channel_http.errors import NotFound
from channel_http.routes.handling import AnyRequest, caller_of, ok, services_of
from core.people.messages import CONNECTION_UNKNOWN

if TYPE_CHECKING:
    from channel_http.middleware import Caller
    from core.tools.logins import Connection
    from core.tools.mcp import McpSignIn

__all__ = ["connection_routes"]

_NO_STORE: Final = {"cache-control": "no-store"}


def _sign_in(request: AnyRequest) -> tuple[Caller, McpSignIn]:
    caller = caller_of(request)
    sign_in = services_of(request).mcp_sign_in
    assert sign_in is not None  # noqa: S101 - the app builds it with the logins
    return caller, sign_in


def _connection(found: Connection) -> dict[str, Any]:
    return {
        "server": found.service,
        "title": found.title or found.service,
        "issuer": found.issuer,
        "scopes": list(found.scopes),
        "expiresAt": None if found.expires_at is None else found.expires_at.isoformat(),
        "updatedAt": found.updated_at,
    }


@get("/me/connections")
async def connections_list(request: AnyRequest) -> Response[Any]:
    caller, sign_in = _sign_in(request)
    found = await sign_in.connections(caller.person.key)
    return ok({"connections": [_connection(one) for one in found]}, headers=_NO_STORE)


@delete("/me/connections/{server:str}", status_code=200)
async def connections_remove(request: AnyRequest, server: FromPath[str]) -> Response[Any]:
    caller, sign_in = _sign_in(request)
    if not await sign_in.disconnect(caller.person.key, server):
        raise NotFound(caller.translator.gettext(CONNECTION_UNKNOWN) % {"server": server[:80]})
    return ok({"server": server}, headers=_NO_STORE)


connection_routes: Final = (connections_list, connections_remove)
