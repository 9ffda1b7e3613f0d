"""What a connection may cost before a request reaches the application, and uvicorn's setup.

uvicorn's httptools protocol buffers a request head of any size, gives it any time, and
takes any number of connections (the adversarial review: a 50 MB header accepted, 100
half-sent heads held open for minutes). :class:`LimitedHttpToolsProtocol` adds, per
connection:

- **head size**: a head still unfinished after ``max_head_bytes`` is refused with 431 and
  the connection closed (the check runs after each read, so at most one read, 256 KiB,
  lies beyond the bound);
- **head time**: a head must arrive whole within ``head_timeout_s`` of the connection
  opening or of the previous answer ending; a partial head past it gets 408, an idle
  connection is closed (``timeout_keep_alive`` usually closes it earlier);
- **how many at once**: past ``max_connections`` open connections (or as many running
  requests) a request is answered 503 with ``retry-after``, in the envelope, and its
  connection closed. uvicorn's own ``limit_concurrency`` would answer a plain-text 503.

The refusals are the surface's envelope (statuses in :mod:`channel_http.errors`), in the
language the request asks for where its head is whole, else the default language.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from channel_http.errors import (
    HEAD_TIMEOUT,
    HEAD_TOO_LARGE,
    OVER_CAPACITY,
    raw_envelope,
    send_envelope,
)
from core.people.i18n import N_, Catalogs, negotiate

if TYPE_CHECKING:
    from uvicorn._types import ASGIReceiveCallable, ASGISendCallable, Scope
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from core.config.settings import Settings

HEAD_TOO_LARGE_TEXT = N_("The request's headers are too large.")
HEAD_TIMEOUT_TEXT = N_("The request's headers took too long to arrive.")
OVER_CAPACITY_TEXT = N_("The server is busy; try again in a few seconds.")
RETRY_AFTER_S = 5


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The per-connection bounds, from the ``HTTP_SURFACE_*`` settings."""

    max_head_bytes: int
    head_timeout_s: float
    keep_alive_timeout_s: float
    max_connections: int

    @classmethod
    def of(cls, settings: Settings) -> ConnectionLimits:
        http = settings.http
        return cls(
            max_head_bytes=http.max_header_bytes,
            head_timeout_s=http.header_timeout_s,
            keep_alive_timeout_s=http.keep_alive_timeout_s,
            max_connections=http.max_connections,
        )


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bounded head size, head time and connection count."""

    limits: ConnectionLimits
    catalogs: Catalogs
    language: str

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._head_bytes = 0
        self._in_head = True  # reading a request head (or waiting for one)
        self._head_timer: asyncio.TimerHandle | None = None

    # -- the head's time ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head or self.transport.is_closing():
            return
        if self._head_bytes:
            self._refuse(HEAD_TIMEOUT, HEAD_TIMEOUT_TEXT)
        else:
            self.transport.close()  # nothing asked: nothing to answer

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # uvicorn arms its keep-alive timer when no pipelined request follows: the next
        # head is awaited from now on.
        if self.timeout_keep_alive_task is not None:
            self._arm_head_timer()

    # -- the head's size ----------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if (
            self._in_head
            and self._head_bytes > self.limits.max_head_bytes
            and not self.transport.is_closing()
        ):
            self._refuse(HEAD_TOO_LARGE, HEAD_TOO_LARGE_TEXT)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._disarm_head_timer()
        if self._over_capacity():
            # uvicorn's own check would answer plain text: hand this request our envelope.
            app, self.app = self.app, self._busy
            try:
                super().on_headers_complete()
            finally:
                self.app = app
            return
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._head_bytes = 0

    # -- how many at once ---------------------------------------------------------------

    def _over_capacity(self) -> bool:
        cap = self.limits.max_connections
        return len(self.connections) > cap or len(self.tasks) >= cap

    async def _busy(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        headers = cast("Iterable[tuple[bytes, bytes]]", scope.get("headers", ()))
        raw = next((value for name, value in headers if name == b"accept-language"), None)
        language = negotiate(raw.decode("latin-1") if raw else None) or self.language
        message = self.catalogs.translator(language).gettext(OVER_CAPACITY_TEXT)
        await send_envelope(
            send,  # type: ignore[arg-type]
            OVER_CAPACITY,
            message,
            {
                "retry-after": str(RETRY_AFTER_S),
                "content-language": language,
                "connection": "close",
            },
        )

    # -- refusing before a request exists ----------------------------------------------

    def _refuse(self, status: int, text: str) -> None:
        message = self.catalogs.translator(self.language).gettext(text)
        self.transport.write(raw_envelope(status, message, {"content-language": self.language}))
        self.transport.close()


def protocol_class(settings: Settings) -> type[LimitedHttpToolsProtocol]:
    """The protocol uvicorn runs, bound to these settings' limits (a class per server)."""
    return type(
        "LimitedHttpToolsProtocol",
        (LimitedHttpToolsProtocol,),
        {
            "limits": ConnectionLimits.of(settings),
            "catalogs": Catalogs.load(),
            "language": settings.defaults.language,
        },
    )


def server_options(settings: Settings) -> dict[str, Any]:
    """The ``uvicorn.Config`` options every server of this surface runs with."""
    limits = ConnectionLimits.of(settings)
    return {
        "http": protocol_class(settings),
        "timeout_keep_alive": limits.keep_alive_timeout_s,
        "limit_concurrency": None,  # counted by the protocol, refused in the envelope
    }
