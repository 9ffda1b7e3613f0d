"""``GET /metrics`` on a port of its own, without auth, for a scraper inside the network."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from prometheus_client import start_http_server as _start_http_server

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from core.observe.metrics import Metrics


class MetricsServer:
    """``GET /metrics`` on a port of its own, in the client library's own server thread."""

    def __init__(self, metrics: Metrics, host: str, port: int) -> None:
        server, thread = _start_http_server(port, addr=host, registry=metrics.registry)
        self._server: WSGIServer = server
        self._thread: threading.Thread = thread
        self.port: int = server.server_address[1]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
