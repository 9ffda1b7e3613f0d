"""A server on 127.0.0.1 that serves in the caller's loop or from a thread with its own loop.

The scripted model (:class:`dev_model.ollama.OllamaStandIn`) and the tests' platform
stand-ins (``tests/support/standin.py``) share it: a subclass writes :meth:`ThreadedServer.serve`
(listen, record the port, wait for ``stop``) and gets ``start``/``stop``, ``with`` and
``async with``, its ``url``, code run on its loop, and the waits::

    with SomeServer() as server:
        ...  # server.url answers
        server.wait_until(lambda: server.done, what="the call")

Exceptions::

    StandInError            a stand-in was misused (started twice, not started) or failed to start
    └── StandInTimeoutError      a wait ran out of time (also a TimeoutError)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar

__all__ = ["StandInError", "StandInTimeoutError", "ThreadedServer", "poll_until"]

_T = TypeVar("_T")


class StandInError(Exception):
    """A stand-in was misused (started twice, not started) or could not start."""


class StandInTimeoutError(StandInError, TimeoutError):
    """A wait on a stand-in ran out of time."""


async def poll_until(
    predicate: Callable[[], bool],
    timeout: float,  # noqa: ASYNC109 - the same signature as the blocking waits
    failure: Callable[[], str],
    *,
    every: float = 0.005,
) -> None:
    """Poll ``predicate`` from the caller's loop until it holds; after ``timeout`` s raise
    `StandInTimeoutError` saying ``failure()``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise StandInTimeoutError(failure())
        await asyncio.sleep(every)


class ThreadedServer:
    """A server on 127.0.0.1 (``port`` 0: a free one), a context manager running a thread."""

    #: The name messages give it: "The Slack stand-in …".
    name: ClassVar[str] = "server"
    #: What a wait that ran out of time advises.
    wait_hint: ClassVar[str] = "check that the client really made the call"
    #: How long a wait waits unless told.
    wait_timeout: ClassVar[float] = 5.0

    def __init__(self, *, port: int = 0) -> None:
        self._port = port
        self._bound_port: int | None = None
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._start_error: BaseException | None = None

    async def serve(
        self, stop: asyncio.Event, on_listening: Callable[[str], None] | None = None
    ) -> None:
        """Serve in the running loop until ``stop`` is set: set ``_bound_port`` once
        listening, then call ``on_listening`` with the URL."""
        raise NotImplementedError

    # -- where it is ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._bound_port is None:
            raise StandInError(
                f"The {self.name} is not listening yet; enter its context manager or call "
                "start() first."
            )
        return self._bound_port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    # -- running in a thread -------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> Self:
        """Serve from a thread with its own event loop; return once it listens."""
        if self._thread is not None:
            raise StandInError(f"This {self.name} is already running; stop() it first.")
        ready = threading.Event()
        self._start_error = None
        self._thread = threading.Thread(
            target=self._run_in_thread,
            args=(ready,),
            name=self.name.replace(" ", "-").lower(),
            daemon=True,
        )
        self._thread.start()
        if not ready.wait(timeout) or self._start_error is not None:
            error = self._start_error
            self.stop()
            advice = "; pick another port or use port 0" if self._port else ""
            raise StandInError(
                f"The {self.name} could not listen on 127.0.0.1:{self._port} ({error!r}){advice}."
            ) from error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and join the thread (idempotent)."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            return
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)
        self._thread = self._loop = self._stop = None
        self._bound_port = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)

    def _run_in_thread(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            loop.run_until_complete(self._serve_in_thread(ready))
        except BaseException as exc:  # reported to start(); the thread must not die loudly
            self._start_error = exc
        finally:
            ready.set()
            # Handlers still running (a slowed answer) end with the loop.
            loop.run_until_complete(_cancel_the_rest())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve_in_thread(self, ready: threading.Event) -> None:
        self._stop = asyncio.Event()
        await self.serve(self._stop, on_listening=lambda _url: ready.set())

    # -- its loop, from other threads ----------------------------------------------------

    def run_in_loop(self, coroutine: Coroutine[Any, Any, _T], timeout: float) -> _T:
        """Run ``coroutine`` on the server's loop; block for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._running_loop(coroutine)).result(
            timeout
        )

    async def in_loop(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` on the server's loop; awaitable from any other loop."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._running_loop(coroutine))
        return await asyncio.wrap_future(future)

    def _running_loop(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            coroutine.close()
            raise StandInError(f"The {self.name} is not running; enter it or start() it first.")
        return self._loop

    # -- waiting (from any thread) -------------------------------------------------------

    def wait_until(
        self,
        predicate: Callable[[], bool],
        timeout: float | None = None,
        *,
        what: str = "a condition",
    ) -> None:
        """Block until ``predicate()`` holds (checked whenever the server records something,
        see `_notify`); raise `StandInTimeoutError` after ``timeout`` s (`wait_timeout`)."""
        timeout = self.wait_timeout if timeout is None else timeout
        with self._changed:
            if not self._changed.wait_for(predicate, timeout):
                raise StandInTimeoutError(self._waited(timeout, what))

    async def wait_until_async(
        self,
        predicate: Callable[[], bool],
        timeout: float | None = None,  # noqa: ASYNC109 - the blocking wait's signature
        *,
        what: str = "a condition",
    ) -> None:
        """Like `wait_until` without blocking the caller's event loop (polls every 5 ms)."""
        limit = self.wait_timeout if timeout is None else timeout
        await poll_until(predicate, limit, lambda: self._waited(limit, what))

    def _waited(self, timeout: float, what: str) -> str:
        return (
            f"The {self.name} waited {timeout} s for {what} in vain; {self.wait_hint}, or give "
            "the wait more time."
        )

    def _notify(self) -> None:
        """Wake the blocking waits: something they may wait for was recorded."""
        with self._changed:
            self._changed.notify_all()


async def _cancel_the_rest() -> None:
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
