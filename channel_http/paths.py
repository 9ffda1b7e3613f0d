"""The one form of a request's path that every layer reads, and the route that serves it.

Litestar's router matches ``normalize_path(path)``: no trailing slash, runs of slashes
collapsed, so ``/turn/`` and ``//turn`` reach the ``/turn`` handler. The layers in front of
it (the CORS preflight, the bare login pages) compared the raw path, so a preflight for a
variant the router serves was answered 401. Rewriting the path once, outermost, makes the
preflight, the CORS headers, the middleware and the route agree on every variant.

:class:`RouteTemplates` tells those layers which route serves a canonical path, as the
route's template (``/spaces/{space}/mutes``): the preflight answers every path a route
serves, parameterized or not, and the request log, the metrics and the traces label a
request with the template, never with the caller's text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from litestar.enums import ScopeType
from litestar.utils import normalize_path

if TYPE_CHECKING:
    from litestar.types import ASGIApp, Receive, Scope, Send

__all__ = ["UNMATCHED", "CanonicalPaths", "RouteTemplates"]

#: The route label of a path no route serves (its text is the caller's, so never a label).
UNMATCHED: Final = "unmatched"
#: A path parameter of a route: ``{name:type}``; a ``path`` parameter spans slashes.
_PARAMETER: Final = re.compile(r"\{([^}:]+):([^}]+)\}")


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


class RouteTemplates:
    """The routes of an application, matched by their templates.

    ``templates`` are Litestar's route paths (``/spaces/{space:str}/mutes``); a path is
    matched by a route without parameters first, then by the parameterized ones, those
    with more fixed segments first. A ``str`` parameter is one segment (never empty, never
    a slash), a ``path`` parameter the rest of the path.
    """

    def __init__(self, templates: Iterable[str]) -> None:
        self._fixed: dict[str, str] = {}
        patterns: list[tuple[int, str, re.Pattern[str]]] = []
        for template in templates:
            label = _PARAMETER.sub(r"{\1}", template)
            if label == template:
                self._fixed[template] = template
                continue
            fixed = sum(1 for part in template.split("/") if part and "{" not in part)
            patterns.append((fixed, label, re.compile(_pattern(template))))
        patterns.sort(key=lambda found: -found[0])
        self._patterns = tuple((label, pattern) for _, label, pattern in patterns)

    def template(self, path: str) -> str | None:
        """The template of the route serving the canonical ``path``; None when none does."""
        fixed = self._fixed.get(path)
        if fixed is not None:
            return fixed
        for label, pattern in self._patterns:
            if pattern.fullmatch(path):
                return label
        return None

    def label(self, path: str) -> str:
        """:meth:`template`, or :data:`UNMATCHED`: what logs, metrics and traces name."""
        return self.template(path) or UNMATCHED


def _pattern(template: str) -> str:
    """The regular expression of one route template."""
    parts: list[str] = []
    at = 0
    for found in _PARAMETER.finditer(template):
        parts.append(re.escape(template[at : found.start()]))
        if found[2] == "path":
            # Litestar's path parameter takes the rest of the path, its slashes included.
            if parts[-1].endswith("/"):
                parts[-1] = parts[-1][:-1]
                parts.append("(?:/.*)?")
            else:
                parts.append(".*")
        else:
            parts.append("[^/]+")
        at = found.end()
    parts.append(re.escape(template[at:]))
    return "".join(parts)
