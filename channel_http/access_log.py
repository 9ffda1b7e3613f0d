"""The outermost layer: one log line per request, the request counter and ``Server-Timing``.

A request line carries the method, the route template (``/webhooks/{platform}``, never the
raw path or query, which may hold the login callback's code and state), the status, the
duration, the body bytes sent, the turn's outcome on ``/turn`` and the person key, never a
token. Nothing of the body is read, so link codes and confirmation tokens sent as ``/turn``
text never reach the log.

``Server-Timing`` goes on every response with what was measured before its first byte: the
layers inside record ``auth``, ``admission``, ``settings``, ``body`` and, on ``/turn``,
``rate`` and ``queue`` with :func:`mark`; ``app`` is the whole time from the request's
arrival to its first byte.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Final

from litestar.enums import ScopeType

from channel_http.paths import UNMATCHED

if TYPE_CHECKING:
    from litestar.types import ASGIApp, Message, Receive, Scope, Send

    from channel_http.paths import RouteTemplates
    from core.observe.metrics import Metrics

log = logging.getLogger("mercury.http.requests")

__all__ = ["UNMATCHED", "BodySink", "RequestLog", "body_sink", "mark", "server_timing"]

_TIMING: Final = "timing"


_SINK: Final = "body_sink"


class BodySink:
    """The send beneath the inner layers, for a streamed body's frames, and what went through it.

    Every layer between the request log and the route (CORS, Litestar's exception handler)
    acts on a response's start only; a stream sends its frames here, past their wrappers,
    and counts their bytes itself for the log line. Its start and its end still cross every
    layer.
    """

    __slots__ = ("send", "sent")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.sent = 0


def body_sink(scope: Scope | Any) -> BodySink | None:
    """The request log's :class:`BodySink`, or ``None`` where no request log runs."""
    state = scope.get("state")
    return None if state is None else state.get(_SINK)


def mark(scope: Scope | Any, name: str, seconds: float, description: str = "") -> None:
    """Record one step of the request for its ``Server-Timing`` header."""
    state: dict[str, Any] = scope.setdefault("state", {})
    state.setdefault(_TIMING, []).append((name, seconds, description))


def server_timing(steps: list[tuple[str, float, str]]) -> bytes:
    """``auth;dur=0.412, queue;dur=50.003;desc="waiting"``: milliseconds, as browsers read."""
    return ", ".join(
        f"{name};dur={seconds * 1000:.3f}" + (f';desc="{description}"' if description else "")
        for name, seconds, description in steps
    ).encode()


class RequestLog:
    """Logs and counts every request once it has ended, and adds ``Server-Timing``."""

    def __init__(self, app: ASGIApp, routes: RouteTemplates, metrics: Metrics | None) -> None:
        self.app = app
        self.routes = routes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        state: dict[str, Any] = scope.setdefault("state", {})  # type: ignore[typeddict-item]
        status = 0
        sent = 0
        sink = state[_SINK] = BodySink(send)

        async def send_logged(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
                steps = [*state.get(_TIMING, ()), ("app", time.perf_counter() - started, "")]
                message["headers"] = [
                    *message.get("headers", ()),
                    (b"server-timing", server_timing(steps)),
                ]
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_logged)
        finally:
            # The sink holds the server's send, whose request cycle holds this scope: left
            # in the scope, each request's objects would wait for the collector's slow pass.
            state.pop(_SINK, None)
            self._record(scope, state, status, sent + sink.sent, time.perf_counter() - started)

    def _record(
        self, scope: Scope, state: dict[str, Any], status: int, sent: int, seconds: float
    ) -> None:
        path = scope["path"]
        method: str = scope["method"]  # type: ignore[typeddict-item]
        route = self.routes.label(path)
        caller = state.get("caller")
        turn = state.get("turn")
        fields: dict[str, Any] = {
            "method": method,
            "route": route,
            "status": status,
            "durationMs": round(seconds * 1000, 1),
            "bytes": sent,
        }
        if turn is not None:
            fields["outcome"] = turn.outcome or "cancelled"
            if turn.events.model is not None:
                fields["model"] = turn.events.model
        if caller is not None:
            fields["person"] = caller.person.key
        if self.metrics is not None:
            self.metrics.requests.labels(method, route, str(status)).inc()
        if log.isEnabledFor(logging.INFO):
            extras = "".join(
                f" {key}={fields[key]}" for key in ("outcome", "model", "person") if key in fields
            )
            log.info(
                "%s %s %d %.1fms %dB%s",
                method,
                route,
                status,
                fields["durationMs"],
                sent,
                extras,
                extra={"request": fields},
            )
