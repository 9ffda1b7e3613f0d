"""Every waiting connection accepted at once, on uvloop.

Since libuv 1.45 (libuv pull request 3696) a listening socket's readiness accepts one
connection, and the next is left to the next loop iteration. On a loop busy with streams an
iteration takes milliseconds, so a burst of new clients is let in one per iteration: 500
clients connecting within a second beside 500 open streams waited up to 0.7 s for their
first byte, where the same clients on connections opened beforehand waited 0.07 s
(docs/benchmarks.md, "New connections under load").

:class:`GreedyAccept` watches a duplicate of uvicorn's listening socket and, when it is
readable, accepts what is waiting (up to :data:`AT_ONCE`) and hands each connection to
uvicorn's own protocol through ``loop.connect_accepted_socket``: the connections are served
from the next iteration, all of them. uvicorn's server stays as it is (it still accepts its
one per iteration, and owns the socket); this only stops new clients from queueing behind
each other. asyncio's own loop accepts greedily already and gets none.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, Final

log = logging.getLogger("mercury.http")

#: The most connections taken in one readiness; the rest wait for the next iteration.
AT_ONCE: Final = 256

#: How long an acceptor that could not accept (no file descriptor left) stops watching.
BACK_OFF_S: Final = 0.1

#: Errors that mean "nothing to accept now" or "this one is gone already".
_TRANSIENT: Final = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR, errno.ECONNABORTED})


class GreedyAccept:
    """Accepts every waiting connection of ``listener`` when it is readable."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        listener: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
    ) -> None:
        self._loop = loop
        self._factory = protocol_factory
        self._socket = socket.socket(fileno=os.dup(listener.fileno()))
        self._socket.setblocking(False)
        self._opening: dict[asyncio.Task[Any], socket.socket] = {}
        self._starved = False
        self._resume: asyncio.TimerHandle | None = None
        loop.add_reader(self._socket.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(AT_ONCE):
            try:
                connection, _ = self._socket.accept()
            except OSError as error:
                if error.errno in _TRANSIENT:
                    return
                self._back_off(error)
                return
            self._starved = False
            connection.setblocking(False)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            opening = self._loop.create_task(
                self._loop.connect_accepted_socket(self._factory, connection)  # type: ignore[arg-type]
            )
            self._opening[opening] = connection
            opening.add_done_callback(self._opened)

    def _opened(self, task: asyncio.Task[Any]) -> None:
        connection = self._opening.pop(task)
        if task.cancelled() or task.exception() is not None:
            connection.close()

    def _back_off(self, error: OSError) -> None:
        """Out of file descriptors (most likely): stop watching for :data:`BACK_OFF_S`.

        The waiting connections keep the socket readable, so watching on would run this
        again at every loop iteration and never let the loop sleep. uvicorn's own server
        still takes them, one per iteration, as descriptors free up.
        """
        if not self._starved:
            self._starved = True
            log.warning("Could not accept a connection (%s); trying again shortly.", error)
        self._loop.remove_reader(self._socket.fileno())
        self._resume = self._loop.call_later(BACK_OFF_S, self._watch)

    def _watch(self) -> None:
        self._resume = None
        if self._socket.fileno() >= 0:
            self._loop.add_reader(self._socket.fileno(), self._accept)

    def close(self) -> None:
        """Stop accepting; connections already handed over are uvicorn's."""
        if self._resume is not None:
            self._resume.cancel()
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_reader(self._socket.fileno())
        self._socket.close()


def one_accept_per_iteration(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` takes new connections one per iteration (uvloop's does)."""
    return type(loop).__module__.startswith("uvloop")


def accept_greedily(server: Any) -> list[GreedyAccept]:
    """A :class:`GreedyAccept` on each TCP listener of a started ``uvicorn.Server``.

    Only on uvloop (asyncio's loop accepts up to the backlog per readiness already).
    """
    loop = asyncio.get_running_loop()
    if not one_accept_per_iteration(loop):
        return []
    config = server.config

    def protocol() -> asyncio.Protocol:
        made: asyncio.Protocol = config.http_protocol_class(
            config=config,
            server_state=server.server_state,
            app_state=server.lifespan.state,
            _loop=loop,
        )
        return made

    acceptors = []
    for listening in server.servers:
        for sock in listening.sockets or ():
            if sock.family in (socket.AF_INET, socket.AF_INET6) and config.ssl is None:
                acceptors.append(GreedyAccept(loop, sock, protocol))
    return acceptors
