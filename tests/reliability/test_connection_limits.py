"""Connections before authentication: a huge head, a slow head, too many at once.

The adversarial review found a 50 MB header accepted, 100 half-sent heads kept open for
minutes and no cap on connections. Each attack runs against a real uvicorn configured as
``serve`` configures it (``channel_http.serving.connections.server_options``), over raw sockets.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import pytest

from tests.support.server import RunningServer

pytestmark = [pytest.mark.timeout(90)]


@contextmanager
def raw_connection(server: RunningServer, timeout_s: float = 15.0) -> Iterator[socket.socket]:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout_s)
    try:
        yield sock
    finally:
        sock.close()


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or the socket times out)."""
    received = b""
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return received
        if not data:
            return received
        received += data


def envelope_of(answer: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), headers, json.loads(body)


def test_a_head_past_its_limit_is_refused_with_431_and_the_connection_closed(
    make_server: Callable[..., RunningServer],
) -> None:
    server = make_server(None, HTTP_SURFACE_MAX_HEADER_BYTES="16384")
    # A head within the limit is served.
    padded = httpx.get(server.url + "/version", headers={"x-pad": "a" * 8000})
    assert padded.status_code == 200
    with raw_connection(server) as sock:
        sock.sendall(b"GET /version HTTP/1.1\r\nhost: x\r\nx-big: ")
        sent = 0
        try:
            while sent < 4_000_000:  # far past the limit: the server must stop reading
                sock.sendall(b"a" * 8192)
                sent += 8192
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = read_until_closed(sock)
    assert sent < 4_000_000, "the server kept reading a 4 MB header"
    status, headers, body = envelope_of(answer)
    assert status == 431
    assert headers["connection"] == "close"
    assert body["ok"] is False and body["error"] == "The request's headers are too large."
    assert httpx.get(server.url + "/version").status_code == 200


def test_a_slow_head_is_answered_408_and_an_idle_connection_closed_at_the_head_timeout(
    make_server: Callable[..., RunningServer],
) -> None:
    server = make_server(
        None, HTTP_SURFACE_HEADER_TIMEOUT_S="1", HTTP_SURFACE_KEEP_ALIVE_TIMEOUT_S="30"
    )
    with ExitStack() as stack:
        slow = [stack.enter_context(raw_connection(server)) for _ in range(20)]
        idle = stack.enter_context(raw_connection(server))
        started = time.monotonic()
        for sock in slow:
            sock.sendall(b"GET /version HTTP/1.1\r\nhost: x\r\n")
        # Slowloris: a header line now and then, never the blank line that ends the head.
        closed: dict[int, bytes] = {}
        while len(closed) < len(slow) and time.monotonic() - started < 20:
            for i, sock in enumerate(slow):
                if i in closed:
                    continue
                try:
                    sock.sendall(b"x-more: 1\r\n")
                    sock.settimeout(0.01)
                    data = sock.recv(65536)
                except TimeoutError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    data = b""
                sock.settimeout(15)
                closed[i] = data + read_until_closed(sock) if data else data
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        assert len(closed) == len(slow), f"{len(slow) - len(closed)} slow heads still open"
        assert elapsed < 15
        answered = [envelope_of(data) for data in closed.values() if data]
        assert answered, "no slow head was told why it was closed"
        for status, _, body in answered:
            assert status == 408
            assert body["error"] == "The request's headers took too long to arrive."
        # The connection that sent nothing is closed without an answer.
        assert read_until_closed(idle) == b""
        # A head that arrives in time after the first answer on a kept-alive connection
        # is still served.
    with httpx.Client(base_url=server.url) as client:
        assert client.get("/version").status_code == 200
        time.sleep(0.5)
        assert client.get("/version").status_code == 200


def test_past_the_connection_cap_a_request_gets_503_in_the_envelope(
    make_server: Callable[..., RunningServer],
) -> None:
    server = make_server(None, HTTP_SURFACE_MAX_CONNECTIONS="4", HTTP_SURFACE_HEADER_TIMEOUT_S="60")
    with ExitStack() as stack:
        held = [stack.enter_context(raw_connection(server)) for _ in range(4)]
        for sock in held:
            sock.sendall(b"GET /version HTTP/1.1\r\nhost: x\r\n\r\n")
            assert b"200 OK" in sock.recv(65536)  # served, and kept open
        refused = httpx.get(server.url + "/version", headers={"accept-language": "it"}, timeout=10)
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "5"
        assert refused.headers["content-language"] == "it"
        assert refused.json()["ok"] is False
        assert refused.json()["error"].strip()
    deadline = time.monotonic() + 10
    while True:  # the held connections are gone once the server has seen them close
        answer = httpx.get(server.url + "/version", timeout=10)
        if answer.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert answer.status_code == 200
