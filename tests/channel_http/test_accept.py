"""New connections on a busy uvloop loop: one per iteration from libuv, all at once from us."""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
import time

import uvloop

from channel_http.serving.accept import BACK_OFF_S, GreedyAccept

CLIENTS = 60
BUSY_S = 0.01  # how long each loop iteration takes: a loop busy with streams


class _Counted(asyncio.Protocol):
    made: list[float]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made.append(time.perf_counter())


def _time_to_let_all_in(greedy: bool, *, backed_off: bool = False) -> tuple[float, int]:
    """Seconds from the last client's connect to the last ``connection_made``; how many."""
    loop = uvloop.new_event_loop()
    made: list[float] = []

    def protocol() -> asyncio.Protocol:
        counted = _Counted()
        counted.made = made
        return counted

    async def run() -> tuple[float, int]:
        server = await loop.create_server(protocol, "127.0.0.1", 0, backlog=1024)
        listener = server.sockets[0]
        acceptor = GreedyAccept(loop, listener, protocol) if greedy else None  # type: ignore[arg-type]
        if acceptor is not None and backed_off:
            # As when accept() failed for want of a descriptor: it stops watching a while.
            acceptor._back_off(OSError(errno.EMFILE, "Too many open files"))
            await asyncio.sleep(BACK_OFF_S * 2)
        port = listener.getsockname()[1]
        busy = True

        def iteration() -> None:  # every loop iteration takes BUSY_S, as under load
            time.sleep(BUSY_S)
            if busy:
                loop.call_soon(iteration)

        loop.call_soon(iteration)
        clients: list[socket.socket] = []
        connected = threading.Event()

        def connect() -> None:  # the kernel completes each connect; accepting is the loop's
            for _ in range(CLIENTS):
                clients.append(socket.create_connection(("127.0.0.1", port)))
            connected.set()

        threading.Thread(target=connect).start()
        while not connected.is_set():
            await asyncio.sleep(0)
        started = time.perf_counter()
        deadline = started + 30
        while len(made) < CLIENTS and time.perf_counter() < deadline:
            await asyncio.sleep(0)
        busy = False
        took = (max(made) if made else time.perf_counter()) - started
        if acceptor is not None:
            acceptor.close()
        for client in clients:
            client.close()
        server.close()
        await server.wait_closed()
        return took, len(made)

    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


def test_a_burst_of_clients_is_let_in_at_once_not_one_per_busy_iteration() -> None:
    plain, plain_count = _time_to_let_all_in(greedy=False)
    greedy, greedy_count = _time_to_let_all_in(greedy=True)
    assert plain_count == greedy_count == CLIENTS
    # libuv: one per iteration, so about CLIENTS iterations; greedy: a few.
    assert plain > CLIENTS * BUSY_S / 2
    assert greedy * 4 < plain, (greedy, plain)


def test_an_acceptor_that_backed_off_watches_again() -> None:
    plain, _ = _time_to_let_all_in(greedy=False)
    again, count = _time_to_let_all_in(greedy=True, backed_off=True)
    assert count == CLIENTS
    assert again * 4 < plain, (again, plain)


def test_a_closed_acceptor_leaves_the_listener_to_its_server() -> None:
    loop = uvloop.new_event_loop()

    async def run() -> int:
        made: list[float] = []

        def protocol() -> asyncio.Protocol:
            counted = _Counted()
            counted.made = made
            return counted

        server = await loop.create_server(protocol, "127.0.0.1", 0)
        acceptor = GreedyAccept(loop, server.sockets[0], protocol)  # type: ignore[arg-type]
        acceptor.close()
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):
            if made:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()
        del reader
        return len(made)

    try:
        assert loop.run_until_complete(run()) == 1  # served by the server's own accept
    finally:
        loop.close()
