"""A minimal HTTP/1.1 client on an asyncio Protocol, to keep client cost out of the way.

One :class:`Connection` is one keep-alive socket; :meth:`Connection.request` sends a
request and returns a :class:`Reply` once the (chunked or sized) body has ended, with the
moments the first body byte and the end arrived (``time.perf_counter``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass


@dataclass(slots=True)
class Reply:
    status: int
    body: bytes
    sent: float
    first_byte: float
    ended: float
    #: ``app`` of the ``Server-Timing`` header: the server's own time from the request to
    #: its first byte, in ms (``None`` when the server sent none).
    server_ms: float | None = None
    #: ``arrived`` of ``Server-Timing`` (bench/server.py only): when the request reached the
    #: application, on ``time.perf_counter``'s clock, which every process here shares.
    arrived: float | None = None


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[Reply] | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.head_done = False
        self.chunked = False
        self.remaining = 0  # bytes of the current chunk (or of a sized body) still to come
        self.body = bytearray()
        self.sent = 0.0
        self.first_byte = 0.0
        self.server_ms: float | None = None
        self.arrived: float | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"the connection closed ({exc!r})"))

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        if not self.head_done:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end]).decode("latin-1").lower()
            del buf[: end + 4]
            self.status = int(head.split(" ", 2)[1])
            timing = _server_timing(head)
            self.server_ms = timing.get("app")
            arrived = timing.get("arrived")
            self.arrived = None if arrived is None else arrived / 1e3
            self.head_done = True
            if "transfer-encoding: chunked" in head:
                self.chunked = True
                self.remaining = -1
            else:
                length = 0
                for line in head.split("\r\n"):
                    if line.startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                self.remaining = length
                if length == 0:
                    self._finish()
                    return
        if not self.first_byte and buf:
            self.first_byte = time.perf_counter()
        if not self.chunked:
            take = min(self.remaining, len(buf))
            self.body += buf[:take]
            del buf[:take]
            self.remaining -= take
            if self.remaining == 0:
                self._finish()
            return
        pos = 0
        n = len(buf)
        while True:
            if self.remaining > 0:
                take = min(self.remaining, n - pos)
                self.body += buf[pos : pos + take]
                pos += take
                self.remaining -= take
                if self.remaining:
                    break
                self.remaining = -2  # the CRLF after the chunk
            if self.remaining == -2:
                if n - pos < 2:
                    break
                pos += 2
                self.remaining = -1
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(buf[pos:eol].split(b";", 1)[0], 16)
            if size == 0:
                if n - (eol + 2) < 2:
                    break  # wait for the final CRLF; the size line stays in the buffer
                pos = eol + 4
                del buf[:pos]
                self._finish()
                return
            pos = eol + 2
            self.remaining = size
        del buf[:pos]

    def _finish(self) -> None:
        reply = Reply(
            self.status,
            bytes(self.body),
            self.sent,
            self.first_byte,
            time.perf_counter(),
            self.server_ms,
            self.arrived,
        )
        if not reply.first_byte:
            reply.first_byte = reply.ended
        waiter = self.waiter
        self.waiter = None
        self._reset()
        if waiter is not None and not waiter.done():
            waiter.set_result(reply)


def _server_timing(head: str) -> dict[str, float]:
    """The ``name;dur=…`` entries of a (lower-cased) head's ``server-timing`` line, in ms."""
    start = head.find("\r\nserver-timing:")
    if start < 0:
        return {}
    line = head[start + 2 : head.find("\r\n", start + 2) % (len(head) + 1)]
    found = {}
    for entry in line.split(":", 1)[1].split(","):
        name, _, rest = entry.strip().partition(";dur=")
        if rest:
            found[name] = float(rest.split(";", 1)[0])
    return found


class Connection:
    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host, self.port = host, port
        self.headers = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.protocol: _Protocol | None = None

    async def open(self) -> Connection:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(_Protocol, self.host, self.port)
        self.protocol = protocol
        return self

    async def request(self, method: str, path: str, body: bytes = b"") -> Reply:
        if self.protocol is None or self.protocol.transport is None:
            await self.open()
        protocol = self.protocol
        assert protocol is not None and protocol.transport is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n{self.headers}"
            + (f"content-type: application/json\r\ncontent-length: {len(body)}\r\n" if body else "")
            + "\r\n"
        )
        waiter: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        protocol.waiter = waiter
        protocol.sent = time.perf_counter()
        protocol.transport.write(head.encode("latin-1") + body)
        return await waiter

    def close(self) -> None:
        if self.protocol is not None and self.protocol.transport is not None:
            self.protocol.transport.close()
