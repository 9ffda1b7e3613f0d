"""The model port on Ollama, through the official ``ollama`` client.

``ollama.AsyncClient`` owns the connection settings: host parsing (``OLLAMA_HOST`` forms
such as ``127.0.0.1:11434`` or ``https://host``), headers, ``OLLAMA_API_KEY``, and the
calls that are not on the per-token path (``list`` for health, ``chat`` without streaming
for summaries). The streamed ``/api/chat`` is decoded here with msgspec (the client's own
path builds a pydantic model per line: about 8 µs a token against about 0.5 µs). On a
plain-http host (a local Ollama) it is also read here, straight off an asyncio transport
with a small keep-alive pool (:class:`_WirePool`): httpx costs about 30 µs a read on that
path and scans its whole pool per request, which halved the server CPU of paced streams
and kept 500 of them from stretching to several times their length (docs/benchmarks.md).
An https host streams on the client's httpx pool (TLS, proxies and certificates as httpx
does them).

Exceptions: every failure is a :class:`~core.model.ModelError`::

    ModelError
    ├── ModelUnreachable   connecting failed or timed out
    ├── ModelHTTPError     Ollama answered 4xx/5xx (``status``, ``reason``)
    └── ModelBrokeOff      the stream broke off, timed out, or carried an error line
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import msgspec
import ollama

from core.model import (
    ChatChunk,
    ChatMessage,
    ModelBrokeOff,
    ModelError,
    ModelHTTPError,
    ModelUnreachable,
    ToolSpec,
)

log = logging.getLogger("mercury.ollama")


class _ChatRequest(msgspec.Struct, omit_defaults=True):
    model: str
    messages: Sequence[ChatMessage]
    stream: bool = True
    tools: list[dict[str, Any]] | None = None
    think: bool | None = None


class _ErrorBody(msgspec.Struct):
    error: str = ""


_encode = msgspec.json.Encoder().encode
_decode_chunk = msgspec.json.Decoder(ChatChunk).decode
_decode_error = msgspec.json.Decoder(_ErrorBody).decode


def _tool_payload(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def _reason(body: bytes) -> str:
    try:
        reason = _decode_error(body).error
    except msgspec.DecodeError:
        reason = body.decode("utf-8", "replace")
    return reason.strip()[:300] or "no reason given"


# --------------------------------------------------------------------------------------------
# The streamed /api/chat on a plain-http host, on asyncio's own transport


class _WireError(Exception):
    """The connection failed before or during a response (mapped to a ModelError)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind  # "connect", "timeout" or "broken"


class _Wire(asyncio.Protocol):
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
        self.failure: _WireError | None = None
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
            self.failure = _WireError("broken", f"the stream broke off ({exc!r})")
        self._wake()

    def data_received(self, data: bytes) -> None:
        self.last_data = self.loop.time()
        self.received_any = True
        self.buffer += data
        try:
            self._parse()
        except (ValueError, IndexError):
            self.failure = _WireError("broken", "the model's answer is not valid HTTP")
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
                break
            size = int(buf[pos:eol].split(b";", 1)[0], 16)
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
            self.body += data
            return
        partial = self.body
        if b"\n" not in data:
            partial += data
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
            self.failure = _WireError("timeout", f"no data for {self.read_timeout_s:g} s")
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
            raise _WireError("broken", "the connection closed before the answer ended")

    def write(self, data: bytes) -> None:
        if self.transport is None or self.closed:
            raise _WireError("broken", "the connection closed before the request went out")
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


class _WirePool:
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
        self.idle: deque[_Wire] = deque()

    async def connect(self) -> _Wire:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, wire = await loop.create_connection(
                    lambda: _Wire(loop, self.read_timeout_s), self.host, self.port
                )
        except TimeoutError:
            raise _WireError("connect", "connecting timed out") from None
        except OSError as error:
            raise _WireError("connect", str(error) or "connection refused") from None
        return wire

    async def send(self, request: bytes) -> _Wire:
        """A connection whose answer to ``request`` has begun (its head is read)."""
        while self.idle:
            wire = self.idle.pop()
            if wire.closed:
                continue
            wire.start()
            try:
                wire.write(request)
                await wire.head()
            except _WireError:
                wire.close()
                if wire.received_any:
                    raise
                continue  # the host had closed the idle connection: try the next one
            return wire
        wire = await self.connect()
        wire.write(request)
        try:
            await wire.head()
        except BaseException:
            wire.close()
            raise
        return wire

    def give_back(self, wire: _Wire) -> None:
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


class OllamaModel:
    """A :class:`~core.model.ModelClient` served by Ollama."""

    def __init__(
        self,
        host: str,
        model: str,
        *,
        read_timeout_s: float = 300.0,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self._host = host
        self._model = model
        timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        self._client = ollama.AsyncClient(host=host, timeout=timeout, limits=limits)
        # The client's connection pool; see the module docstring for why we stream on it.
        self._http: httpx.AsyncClient = self._client._client
        self._thinking_unsupported = False
        self._wire, self._wire_head = self._wire_pool(read_timeout_s, connect_timeout_s)

    def _wire_pool(
        self, read_timeout_s: float, connect_timeout_s: float
    ) -> tuple[_WirePool | None, bytes]:
        """For a plain-http host, the pool streaming /api/chat; https stays on httpx."""
        url = self._http.base_url
        if url.scheme != "http" or not url.host:
            return None, b""
        port = url.port or 80
        skip = {"host", "content-type", "content-length", "accept", "accept-encoding"}
        extra = "".join(
            f"{name}: {value}\r\n"
            for name, value in self._http.headers.items()
            if name.lower() not in skip
        )
        path = url.raw_path.decode("ascii").rstrip("/") + "/api/chat"
        host = f"[{url.host}]" if ":" in url.host else url.host
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\n{extra}"
            "content-type: application/json\r\naccept: application/x-ndjson\r\ncontent-length: "
        ).encode("latin-1")
        pool = _WirePool(
            url.host,
            port,
            b"",
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
        )
        return pool, head

    @property
    def model(self) -> str:
        return self._model

    @property
    def host(self) -> str:
        return self._host

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        think: bool = False,
    ) -> AsyncIterator[ChatChunk]:
        think = think and not self._thinking_unsupported
        try:
            async for chunk in self._stream(messages, tools, think):
                yield chunk
        except ModelHTTPError as error:
            # A model without thinking refuses the whole request; ask again without it
            # and remember, rather than failing every turn on a default setting.
            if not (think and error.status == 400 and "think" in error.reason.lower()):
                raise
            log.warning("model %s does not support thinking; asking without it", self._model)
            self._thinking_unsupported = True
            async for chunk in self._stream(messages, tools, False):
                yield chunk

    async def _stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], think: bool
    ) -> AsyncIterator[ChatChunk]:
        body = _encode(
            _ChatRequest(
                model=self._model,
                messages=messages,
                tools=[_tool_payload(tool) for tool in tools] or None,
                think=think or None,
            )
        )
        where = {"model": self._model, "host": self._host}
        if self._wire is not None:
            async for chunk in self._stream_wire(self._wire, body, where):
                yield chunk
            return
        try:
            async with self._http.stream("POST", "/api/chat", content=body) as response:
                if response.status_code >= 400:
                    reason = _reason(await response.aread())
                    raise ModelHTTPError(
                        f"HTTP {response.status_code}: {reason}",
                        status=response.status_code,
                        reason=reason,
                        **where,
                    )
                buffer = b""
                async for data in response.aiter_raw():
                    buffer += data
                    if b"\n" not in buffer:
                        continue
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line:
                            yield self._chunk(line)
                if buffer.strip():
                    yield self._chunk(buffer)
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            raise ModelUnreachable(str(error) or "connection refused", **where) from None
        except httpx.TimeoutException as error:
            raise ModelBrokeOff(f"no data for too long ({error!r})", **where) from None
        except httpx.TransportError as error:
            raise ModelBrokeOff(f"the stream broke off ({error!r})", **where) from None

    async def _stream_wire(
        self, pool: _WirePool, body: bytes, where: dict[str, str]
    ) -> AsyncIterator[ChatChunk]:
        request = self._wire_head + b"%d\r\n\r\n" % len(body) + body
        try:
            wire = await pool.send(request)
        except _WireError as error:
            raise self._wire_error(error, where) from None
        try:
            if wire.status >= 400:
                reason = _reason(await wire.rest())
                raise ModelHTTPError(
                    f"HTTP {wire.status}: {reason}", status=wire.status, reason=reason, **where
                )
            lines = wire.lines
            while True:
                while lines:
                    yield self._chunk(lines.popleft())
                if wire.done:
                    break
                wire.raise_failure()
                await wire.wait()
        except _WireError as error:
            raise self._wire_error(error, where) from None
        finally:
            pool.give_back(wire)

    @staticmethod
    def _wire_error(error: _WireError, where: dict[str, str]) -> ModelError:
        if error.kind == "connect":
            return ModelUnreachable(str(error), **where)
        if error.kind == "timeout":
            return ModelBrokeOff(f"no data for too long ({error})", **where)
        return ModelBrokeOff(str(error), **where)

    def _chunk(self, line: bytes) -> ChatChunk:
        try:
            chunk = _decode_chunk(line)
        except msgspec.DecodeError:
            raise ModelBrokeOff(
                "the model sent a line that is not a chat chunk", model=self._model, host=self._host
            ) from None
        if chunk.error is not None:  # Ollama reports a failure mid-stream as an error line
            reason = chunk.error.strip()[:300] or "no reason given"
            raise ModelHTTPError(
                reason, model=self._model, host=self._host, status=500, reason=reason
            )
        return chunk

    async def complete(self, messages: Sequence[ChatMessage]) -> str:
        try:
            response = await self._client.chat(
                model=self._model,
                messages=[msgspec.to_builtins(message) for message in messages],
                stream=False,
            )
        except ollama.ResponseError as error:
            raise ModelHTTPError(
                str(error.error),
                model=self._model,
                host=self._host,
                status=error.status_code,
                reason=str(error.error),
            ) from None
        except ConnectionError as error:
            raise ModelUnreachable(str(error), model=self._model, host=self._host) from None
        except httpx.HTTPError as error:
            raise ModelBrokeOff(repr(error), model=self._model, host=self._host) from None
        return response.message.content or ""

    async def reachable(self) -> bool:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await self._client.list()
                return True
        return False

    async def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
        await self._client.close()  # type: ignore[no-untyped-call]
