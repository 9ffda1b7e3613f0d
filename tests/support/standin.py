"""The base of the platforms' stand-ins: an ``aiohttp.web`` application on 127.0.0.1, run in a
thread with its own event loop (:class:`dev_model.threaded.ThreadedServer`, which the scripted
model's server stands on too).

A stand-in says what it serves in :meth:`ThreadedStandIn.application` and keeps only its
platform's protocol; the base starts and stops it (``with``, ``start``/``stop``), gives its
``url``, runs code on its loop (:meth:`~dev_model.threaded.ThreadedServer.in_loop`), keeps an
``aiohttp`` client on that loop for the deliveries it makes to a webhook (:attr:`session`), and
waits (``wait_until``, ``wait_until_async``), woken after every request it answers.

Exceptions::

    StandInError            a stand-in was misused (started twice, not started) or failed to start
    └── StandInTimeoutError      a wait ran out of time (also a TimeoutError)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import ClassVar

import aiohttp
from aiohttp import web

from dev_model.threaded import StandInError, StandInTimeoutError, ThreadedServer, poll_until

__all__ = ["StandInError", "StandInTimeoutError", "ThreadedStandIn", "poll_until"]


class ThreadedStandIn(ThreadedServer):
    """A platform's stand-in: its :meth:`application` served on 127.0.0.1 from a thread."""

    #: How long aiohttp lets a request still running finish when the stand-in stops.
    shutdown_timeout: ClassVar[float] = 60.0

    def __init__(self) -> None:
        super().__init__()
        self._session: aiohttp.ClientSession | None = None

    def application(self) -> web.Application:
        """The routes the stand-in serves (called on its loop, at each start)."""
        raise NotImplementedError

    @property
    def session(self) -> aiohttp.ClientSession:
        """A client on the stand-in's loop, for what it sends (a webhook delivery)."""
        if self._session is None:
            raise StandInError(f"The {self.name} is not running; enter it or start() it first.")
        return self._session

    async def serve(
        self, stop: asyncio.Event, on_listening: Callable[[str], None] | None = None
    ) -> None:
        app = self.application()
        app.middlewares.insert(0, self._notifying)
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=self.shutdown_timeout
        )
        await runner.setup()
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        try:
            site = web.TCPSite(runner, "127.0.0.1", self._port)
            await site.start()
            self._bound_port = runner.addresses[0][1]
            if on_listening is not None:
                on_listening(self.url)
            await stop.wait()
        finally:
            await self.closing()
            await self._session.close()
            self._session = None
            await runner.cleanup()

    async def closing(self) -> None:
        """What the stand-in ends before its server stops (its websockets, say)."""

    @web.middleware
    async def _notifying(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        finally:
            self._notify()
