"""A keep-alive HTTP/1.1 connection pool that hands out a streamed response line by line.

Used by :mod:`core.model.ollama` for the streamed ``/api/chat`` on a plain-http host: httpx costs
about 30 µs a read on that path (h11, anyio cancel scopes, four stream layers) and scans its
whole pool per request, which dominated the server's CPU at 500 streams
(docs/benchmarks.md). It speaks just what Ollama's answers need: a status line, headers,
a chunked or sized body, keep-alive; failures are :class:`WireError` with a ``kind``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import httpx

#: A response head longer than this is not one a model server sends: the answer is refused.
MAX_HEAD_BYTES: Final = 64 * 1024
#: One line of the streamed body (one JSON chunk) may not grow past this without a newline.
MAX_LINE_BYTES: Final = 16 * 1024 * 1024
#: The kept part of an error response's body (its reason is read from it).
MAX_ERROR_BODY_BYTES: Final = 64 * 1024


class WireError(Exception):
    """The connection failed before or during a response (mapped to a ModelError)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind  # "connect", "timeout" or "broken"


class Wire(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection that hands out a response's body line by line.

    httpx costs about 30 µs a read on the per-token path (h11, anyio cancel scopes, four
    stream layers) and looks at every pooled connection per request; this reads the chunked
    NDJSON body straight off the transport. A watchdog timer, re-armed only when it fires,
    enforces the read timeout without a timer per read.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout_s: float) -> None:
        self.loop = loop
        self.read_timeout_s = read_timeout_s
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.failure: WireError | None = None
        self.buffer = bytearray()
        self.lines: deque[bytes] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self._watchdog: asyncio.TimerHandle | None = None
        self.start()

    def start(self) -> None:
        """Ready for the next response on this connection."""
        self.status = 0
        self.head_done = False
        self.chunked = False
        self.keep_alive = True
        self.remaining = 0
        self.done = False
        self.body = bytearray()  # the body of an error response
        self.received_any = False
        self.last_data = self.loop.time()

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.done and self.failure is None:
            self.failure = WireError("broken", f"the stream broke off ({exc!r})")
        self._wake()

    def data_received(self, data: bytes) -> None:
        self.last_data = self.loop.time()
        self.received_any = True
        self.buffer += data
        try:
            self._parse()
        except (ValueError, IndexError):
            self.failure = WireError("broken", "the model's answer is not valid HTTP")
            self.close()
        if len(self.lines) > 256 and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        return None

    # -- parsing -----------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self.buffer
        if not self.head_done:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    raise ValueError("the response head is too long")
                return
            head = bytes(buf[:end]).decode("latin-1").lower().split("\r\n")
            del buf[: end + 4]
            self.status = int(head[0].split(" ", 2)[1])
            length = -1
            for line in head[1:]:
                name, _, value = line.partition(":")
                value = value.strip()
                if name == "transfer-encoding" and "chunked" in value:
                    self.chunked = True
                elif name == "content-length":
                    if not value.isdigit() or len(value) > 18:
                        raise ValueError("Content-Length is not a length")
                    length = int(value)
                elif name == "connection" and "close" in value:
                    self.keep_alive = False
            self.head_done = True
            if not self.chunked:
                if length < 0:
                    self.keep_alive = False  # the body runs to the end of the connection
                self.remaining = length
            else:
                self.remaining = -1
        if self.chunked:
            self._dechunk()
        else:
            take = len(buf) if self.remaining < 0 else min(self.remaining, len(buf))
            self._body(bytes(buf[:take]))
            del buf[:take]
            if self.remaining > 0:
                self.remaining -= take
            if self.remaining == 0:
                self._finish()

    def _dechunk(self) -> None:
        buf = self.buffer
        pos, n = 0, len(buf)
        while True:
            if self.remaining > 0:
                take = min(self.remaining, n - pos)
                self._body(bytes(buf[pos : pos + take]))
                pos += take
                self.remaining -= take
                if self.remaining:
                    break
                self.remaining = -2
            if self.remaining == -2:
                if n - pos < 2:
                    break
                pos += 2
                self.remaining = -1
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if n - pos > 1024:  # a chunk-size line is a few hex digits
                    raise ValueError("a chunk size line is too long")
                break
            size_field = buf[pos:eol].split(b";", 1)[0].strip()
            if len(size_field) > 16:
                raise ValueError("a chunk size is too long")
            size = int(size_field, 16)
            if size == 0:
                if n - (eol + 2) < 2:
                    break
                pos = eol + 4  # no trailers: Ollama sends none
                self._finish()
                break
            pos = eol + 2
            self.remaining = size
        del buf[:pos]

    def _body(self, data: bytes) -> None:
        if self.status >= 400:
            self.body += data[: MAX_ERROR_BODY_BYTES - len(self.body)]
            return
        partial = self.body
        if b"\n" not in data:
            partial += data
            if len(partial) > MAX_LINE_BYTES:
                raise ValueError("a line of the answer is too long")
            return
        *lines, rest = data.split(b"\n")
        if partial:
            lines[0] = bytes(partial) + lines[0]
            partial.clear()
        self.lines.extend(line for line in lines if line)
        partial += rest

    def _finish(self) -> None:
        if self.status < 400 and self.body.strip():
            self.lines.append(bytes(self.body))
            self.body.clear()
        self.done = True
        if not self.keep_alive:
            self.close()

    # -- the consumer ------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _arm(self) -> None:
        self._watchdog = self.loop.call_at(self.last_data + self.read_timeout_s, self._check)

    def _check(self) -> None:
        if self.done or self.closed:
            self._watchdog = None
            return
        if self.loop.time() - self.last_data >= self.read_timeout_s:
            self._watchdog = None
            self.failure = WireError("timeout", f"no data for {self.read_timeout_s:g} s")
            self.close()
            return
        self._arm()

    async def wait(self) -> None:
        """Until more of the response is here, it has ended, or the connection failed."""
        if self._watchdog is None:
            self._arm()
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        waiter = self.waiter = self.loop.create_future()
        try:
            await waiter
        finally:
            self.waiter = None

    async def head(self) -> None:
        while not self.head_done:
            self.raise_failure()
            await self.wait()

    async def rest(self) -> bytes:
        while not self.done:
            self.raise_failure()
            await self.wait()
        return bytes(self.body)

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure
        if self.closed and not self.done:
            raise WireError("broken", "the connection closed before the answer ended")

    def write(self, data: bytes) -> None:
        if self.transport is None or self.closed:
            raise WireError("broken", "the connection closed before the request went out")
        self.transport.write(data)

    def release(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def close(self) -> None:
        self.release()
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True


class WirePool:
    """Idle keep-alive connections to one plain-http host."""

    def __init__(
        self,
        host: str,
        port: int,
        headers: bytes,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        keep: int = 64,
    ) -> None:
        self.host, self.port, self.headers = host, port, headers
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.keep = keep
        self.idle: deque[Wire] = deque()

    async def connect(self) -> Wire:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, wire = await loop.create_connection(
                    lambda: Wire(loop, self.read_timeout_s), self.host, self.port
                )
        except TimeoutError:
            raise WireError("connect", "connecting timed out") from None
        except OSError as error:
            raise WireError("connect", str(error) or "connection refused") from None
        return wire

    async def send(self, request: bytes) -> Wire:
        """A connection whose answer to ``request`` has begun (its head is read).

        An idle connection the host had closed fails before anything could have been
        processed (reset or EOF on write or at the first read, no byte back): the request
        goes once more, on a fresh connection. Anything else ends the request, a read
        timeout above all: the host may be working on it, and sending it again on the next
        idle connection would have the model answer it once per pooled connection.
        """
        while self.idle:
            wire = self.idle.pop()
            if wire.closed:
                continue
            wire.start()
            try:
                wire.write(request)
                await wire.head()
            except WireError as error:
                wire.close()
                if wire.received_any or error.kind != "broken":
                    raise
                break  # the host had closed the idle connection: once more, on a fresh one
            except BaseException:  # cancelled while waiting: the answer would be orphaned
                wire.close()
                raise
            return wire
        wire = await self.connect()
        try:
            wire.write(request)
            await wire.head()
        except BaseException:
            wire.close()
            raise
        return wire

    def give_back(self, wire: Wire) -> None:
        wire.release()
        if wire.paused and wire.transport is not None and not wire.closed:
            wire.paused = False
            wire.transport.resume_reading()
        if wire.done and not wire.closed and wire.keep_alive and len(self.idle) < self.keep:
            self.idle.append(wire)
        else:
            wire.close()

    def close(self) -> None:
        while self.idle:
            self.idle.pop().close()


#: Headers a wire request's head sets itself; a client's defaults never repeat them.
_OWN_HEADERS: Final = frozenset(
    {"host", "content-type", "content-length", "accept", "accept-encoding"}
)


def header_lines(headers: Iterable[tuple[str, str]]) -> str:
    """A client's default headers as lines of a request head, less those the head sets."""
    return "".join(
        f"{name}: {value}\r\n" for name, value in headers if name.lower() not in _OWN_HEADERS
    )


def json_post_pool(
    url: httpx.URL,
    endpoint: str,
    *,
    accept: str,
    extra: str = "",
    connect_timeout_s: float,
    read_timeout_s: float,
) -> tuple[WirePool | None, bytes]:
    """For a plain-http ``url``, a pool and the head of a JSON POST to ``endpoint`` under it.

    The head ends with ``content-length: ``: the caller adds the length and the body.
    An https URL (or one without a host) gets ``(None, b"")`` and stays on httpx.
    """
    if url.scheme != "http" or not url.host:
        return None, b""
    port = url.port or 80
    path = url.raw_path.decode("ascii").rstrip("/") + endpoint
    host = f"[{url.host}]" if ":" in url.host else url.host
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\n{extra}"
        f"content-type: application/json\r\naccept: {accept}\r\ncontent-length: "
    ).encode("latin-1")
    pool = WirePool(
        url.host, port, b"", connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s
    )
    return pool, head
