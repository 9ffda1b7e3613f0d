"""A real uvicorn on 127.0.0.1:0 in a thread of its own, serving the real application."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from channel_http.app import build_app, with_cors
from channel_http.serving.connections import server_options
from core.config.settings import Settings


class RunningServer:
    def __init__(self, server: uvicorn.Server, thread: threading.Thread, app: Any) -> None:
        self.server = server
        self.thread = thread
        self.app = app
        sock = server.servers[0].sockets[0]
        self.port: int = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def services(self) -> Any:
        return self.app.state.services

    def call(self, coroutine: Any, timeout: float = 10.0) -> Any:
        """Run a coroutine on the server's own loop (to reach its services)."""
        loop = self.server_loop
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout)

    server_loop: asyncio.AbstractEventLoop


class _Server(uvicorn.Server):
    loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: Any = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().startup(sockets)


@contextmanager
def serve(settings: Settings, **build: Any) -> Iterator[RunningServer]:
    app = build_app(settings, **build)
    config = uvicorn.Config(
        with_cors(app, settings),
        host="127.0.0.1",
        port=0,
        loop="uvloop",
        lifespan="on",
        log_level="warning",
        timeout_graceful_shutdown=5,
        **server_options(settings),  # the limits `serve` runs with
    )
    server = _Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    running = RunningServer(server, thread, app)
    assert server.loop is not None
    running.server_loop = server.loop
    try:
        yield running
    finally:
        server.should_exit = True
        thread.join(15)
