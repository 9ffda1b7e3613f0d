"""What every route handler reads of its request: the services, the caller; the ok envelope."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import Request, Response, Router

from channel_http.middleware import Caller, CallerMiddleware

if TYPE_CHECKING:
    from channel_http.services import Services

AnyRequest = Request[Any, Any, Any]


def services_of(request: AnyRequest) -> Services:
    services: Services = request.app.state.services
    return services


def caller_of(request: AnyRequest) -> Caller:
    caller: Caller = request.scope["state"]["caller"]
    return caller


def ok(content: dict[str, Any], *, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response({"ok": True, **content}, headers=headers)


def authenticated_router(routes: list[Any]) -> Router:
    return Router(path="/", route_handlers=routes, middleware=[CallerMiddleware()])
