"""The one form of a request's path that every layer reads: :class:`CanonicalPaths`.

Litestar's router matches ``normalize_path(path)``: no trailing slash, runs of slashes
collapsed, so ``/turn/`` and ``//turn`` reach the ``/turn`` handler. The layers in front of
it (the CORS preflight, the bare login pages) compared the raw path, so a preflight for a
variant the router serves was answered 401. Rewriting the path once, outermost, makes the
preflight, the CORS headers, the middleware and the route agree on every variant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from litestar.enums import ScopeType
from litestar.utils import normalize_path

if TYPE_CHECKING:
    from litestar.types import ASGIApp, Receive, Scope, Send


class CanonicalPaths:
    """Hands ``app`` every HTTP request with its path as the router will match it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP:
            path = scope["path"]
            canonical = normalize_path(path)
            if canonical != path:
                scope = {**scope, "path": canonical}  # type: ignore[assignment]
        await self.app(scope, receive, send)
