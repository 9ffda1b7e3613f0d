"""Ollama's protocol for the scripted model: a real HTTP/1.1 server on 127.0.0.1.

The real ``ollama.AsyncClient`` (and raw httpx) talks to it over a socket, so tests exercise the
same wire format, streaming, errors and disconnects as against a real Ollama::

    with OllamaStandIn(models=["qwen3"]) as ollama:
        ollama.enqueue(ChatScript(thinking=["Hm."], content=["Hi ", "there."]))
        client = ollama_client.AsyncClient(host=ollama.url)
        ...
        ollama.wait_for_closed(1)

It serves ``POST /api/chat`` (NDJSON stream unless ``"stream": false``), ``POST /api/embed``,
``POST /api/embeddings``, ``POST /api/show``, ``GET /api/tags``, ``GET /api/version`` and
``GET /``; anything else
is a 404 with ``{"error": ...}``. A chat request takes the next enqueued `ChatScript` (FIFO),
else asks `OllamaStandIn.responder`, else echoes the last user message (`echo_script`).

The server runs on raw asyncio streams (not uvicorn) so that it can abort a connection
mid-body, notice a departed client while it sleeps between chunks, and stay out of the way of
benchmarks; it is started in a thread with its own event loop (:mod:`dev_model.threaded`), or
in the foreground with ``python -m dev_model.ollama --port N``.

Exceptions::

    StandInError            the stand-in was misused (started twice, not started) or failed to start
    └── StandInTimeoutError      a wait helper ran out of time (also a TimeoutError)
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import http
import math
import re
import signal
import struct
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate
from functools import lru_cache
from typing import Any, Final, Literal

import msgspec

from channel_http.serving.accept import GreedyAccept, one_accept_per_iteration
from dev_model.threaded import StandInError, StandInTimeoutError, ThreadedServer

__all__ = [
    "DEFAULT_DIMENSIONS",
    "VERSION",
    "ChatScript",
    "OllamaStandIn",
    "Responder",
    "StandInError",
    "StandInTimeoutError",
    "echo_script",
    "embed_text",
    "main",
    "write_lines",
]

VERSION: Final = "0.12.0"
DEFAULT_DIMENSIONS: Final = 768

Responder = Callable[[dict[str, Any]], "ChatScript"]
_Outcome = Literal["completed", "error", "closed"]

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder()
_NDJSON: Final = "application/x-ndjson"
_JSON: Final = "application/json; charset=utf-8"
_HEAD_LIMIT: Final = 1 << 20
_WORDS: Final = re.compile(r"\s*\S+\s*")
_TOKENS: Final = re.compile(r"\w+")


# --------------------------------------------------------------------------------------------
# Scripts


@dataclass(kw_only=True)
class ChatScript:
    """What the stand-in answers to one ``/api/chat`` request.

    Chunks go out in Ollama's order: every ``thinking`` chunk, then one chunk carrying all
    ``tool_calls`` (each ``{"name", "arguments"}``), then every ``content`` chunk, then the
    ``done`` line. ``error_after``/``close_after`` count those chunks (the done line excluded).
    """

    thinking: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    delay_s: float = 0.0
    """Pause before every chunk but the first (the done line included)."""
    first_delay_s: float = 0.0
    """Pause before the status line and headers."""
    status: int | None = None
    """Answer with this HTTP status and ``{"error": error}`` instead of streaming."""
    error: str = "the Ollama stand-in was scripted to fail"
    error_after: int | None = None
    """After this many chunks send ``{"error": error}`` as a line and end the body cleanly."""
    close_after: int | None = None
    """After this many chunks drop the connection without ending the chunked body."""
    hang: bool = False
    """After all chunks send nothing more (no done line) until the client goes away."""
    drop: bool = False
    """Read the request, then close the connection without a byte of answer: a host that
    dropped an idle keep-alive connection just as the request reached it."""
    done_reason: str = "stop"
    coalesce: int = 1
    """Lines per write when ``delay_s`` is 0; `fast_tokens` batches to keep the stand-in cheap."""
    _encoded: dict[tuple[str, bool], list[bytes]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def words(cls, text: str, *, thinking: str = "", **options: Any) -> ChatScript:
        """A script streaming ``text`` (and ``thinking``) word by word."""
        return cls(thinking=_split_words(thinking), content=_split_words(text), **options)

    @classmethod
    def fast_tokens(
        cls,
        n: int,
        token: str = "tok ",  # noqa: S107 - a model token, not a secret
        *,
        coalesce: int = 32,
    ) -> ChatScript:
        """``n`` content chunks as fast as possible; reuse one instance so lines encode once."""
        return cls(content=[token] * n, coalesce=coalesce)

    @classmethod
    def paced(
        cls,
        n: int,
        rate_per_s: float = 50.0,
        token: str = "tok ",  # noqa: S107 - a model token, not a secret
    ) -> ChatScript:
        """``n`` content chunks at ``rate_per_s`` chunks a second."""
        if rate_per_s <= 0:
            raise StandInError(
                f"ChatScript.paced got a rate of {rate_per_s} chunks a second; "
                "give a positive rate."
            )
        return cls(content=[token] * n, delay_s=1.0 / rate_per_s)

    @property
    def chunk_count(self) -> int:
        """How many chunks precede the done line."""
        return len(self.thinking) + (1 if self.tool_calls else 0) + len(self.content)

    def encoded_lines(self, model: str, think: bool) -> list[bytes]:
        """The NDJSON lines before the done line, encoded once per model (``created_at`` fixed)."""
        key = (model, think)
        lines = self._encoded.get(key)
        if lines is None:
            created_at = _now_rfc3339()
            parts: list[dict[str, Any]] = []
            if think:
                parts.extend(
                    {"role": "assistant", "content": "", "thinking": t} for t in self.thinking
                )
            if self.tool_calls:
                calls = [_wire_tool_call(call) for call in self.tool_calls]
                parts.append({"role": "assistant", "content": "", "tool_calls": calls})
            parts.extend({"role": "assistant", "content": c} for c in self.content)
            lines = [
                _ENCODER.encode(
                    {"model": model, "created_at": created_at, "message": m, "done": False}
                )
                + b"\n"
                for m in parts
            ]
            self._encoded[key] = lines
        return lines

    def cutoff(self, count: int) -> tuple[int, Literal["done", "error", "close"]]:
        """How many chunks go out, and what follows them (an early end wins; a tie closes)."""
        ends: list[tuple[int, int, Literal["done", "error", "close"]]] = [(count, 2, "done")]
        if self.close_after is not None:
            ends.append((min(max(self.close_after, 0), count), 0, "close"))
        if self.error_after is not None:
            ends.append((min(max(self.error_after, 0), count), 1, "error"))
        stop, _, action = min(ends)
        return stop, action


def echo_script(request: dict[str, Any]) -> ChatScript:
    """The default answer: thinks in two chunks, then says "You said: <last user message>"."""
    last = ""
    for message in reversed(request.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            last = str(message.get("content") or "")
            break
    return ChatScript(
        thinking=["Thinking ", "about it."], content=_split_words(f"You said: {last}")
    )


def _split_words(text: str) -> list[str]:
    return _WORDS.findall(text)


def _wire_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    if "function" in call:
        return call
    return {"function": {"name": call["name"], "arguments": call.get("arguments", {})}}


def _now_rfc3339() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------------------------
# Embeddings


@lru_cache(maxsize=8192)
def _hashed_vector(key: str, dimensions: int) -> tuple[float, ...]:
    digest = hashlib.shake_256(key.encode()).digest(2 * dimensions)
    return tuple(v / 32768.0 for v in struct.unpack(f"<{dimensions}h", digest))


@lru_cache(maxsize=4096)
def _embedding(text: str, dimensions: int) -> tuple[float, ...]:
    # A bag of hashed word vectors plus a hash of the whole text: equal texts are equal,
    # texts sharing words are close (so recall tests can find things), no two texts coincide.
    total = [0.35 * v for v in _hashed_vector("\0" + text, dimensions)]
    for token in _TOKENS.findall(text.lower()):
        for i, v in enumerate(_hashed_vector(token, dimensions)):
            total[i] += v
    norm = math.sqrt(sum(v * v for v in total)) or 1.0
    return tuple(v / norm for v in total)


def embed_text(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The unit vector the stand-in returns for ``text``: deterministic, hash-derived."""
    return list(_embedding(text, dimensions))


# --------------------------------------------------------------------------------------------
# HTTP/1.1


class _BadRequestError(Exception):
    pass


@dataclass(slots=True)
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool
    query: str = ""


async def _read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> _Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise _BadRequestError from None
        return None
    except asyncio.LimitOverrunError:
        raise _BadRequestError from None
    lines = head.decode("latin-1").lstrip("\r\n").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequestError
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise _BadRequestError
        headers[name.strip().lower()] = value.strip()
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader)
        else:
            body = await reader.readexactly(int(headers.get("content-length") or 0))
    except (ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        raise _BadRequestError from None
    connection = headers.get("connection", "").lower()
    if version == "HTTP/1.1":
        keep_alive = "close" not in connection
    else:
        keep_alive = "keep-alive" in connection
    path, _, query = target.partition("?")
    return _Request(method, path, headers, body, keep_alive, query)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass  # trailers, ignored
            return bytes(body)
        body += await reader.readexactly(size)
        await reader.readexactly(2)


def _head(status: int, content_type: str, *, length: int | None, keep_alive: bool) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    lines = [
        f"HTTP/1.1 {status} {phrase}",
        f"Content-Type: {content_type}",
        f"Date: {formatdate(usegmt=True)}",
        "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}",
    ]
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


async def _write_json(
    writer: asyncio.StreamWriter, status: int, payload: Any, *, keep_alive: bool
) -> None:
    body = _ENCODER.encode(payload)
    writer.write(_head(status, _JSON, length=len(body), keep_alive=keep_alive) + body)
    await writer.drain()


async def _abort(writer: asyncio.StreamWriter) -> None:
    # Let what was already written reach the client, then drop the socket without the
    # terminating zero-length chunk: the client sees an incomplete body.
    transport = writer.transport
    for _ in range(100):
        if transport.is_closing() or transport.get_write_buffer_size() == 0:
            break
        await asyncio.sleep(0.01)
    transport.abort()


async def _watch_for_departure(reader: asyncio.StreamReader, early: bytearray) -> None:
    """Return once the client has closed or reset the connection.

    Bytes that arrive meanwhile go to ``early``, which the caller puts back in front of the
    reader's buffer (:func:`_give_back`): a kept-alive client sends its next request the
    moment the last chunk of this answer reaches it, possibly before this watch is cancelled,
    and that request must be answered, not dropped.
    """
    try:
        while data := await reader.read(65536):
            early += data
    except OSError:
        return


def _give_back(reader: asyncio.StreamReader, early: bytearray) -> None:
    """Put bytes read ahead back in front of what the reader holds, in their order."""
    if early:
        # StreamReader has no public unread; nothing else reads this connection meanwhile.
        reader._buffer[:0] = early  # type: ignore[attr-defined]
        early.clear()


# --------------------------------------------------------------------------------------------
# The stand-in


class OllamaStandIn(ThreadedServer):
    """An Ollama-speaking HTTP server on 127.0.0.1; a context manager running it in a thread."""

    name = "Ollama stand-in"
    wait_hint = "check that the client really made the request"

    def __init__(
        self,
        *,
        models: Sequence[str] | None = None,
        dimensions: int = DEFAULT_DIMENSIONS,
        port: int = 0,
        responder: Responder | None = None,
    ) -> None:
        self.models: list[str] | None = None if models is None else list(models)
        self.dimensions = dimensions
        self.responder: Responder | None = responder
        self.vision = False
        """Whether ``/api/show`` lists the ``vision`` capability (the model reads images)."""
        self.requests: list[dict[str, Any]] = []
        self.embed_requests: list[dict[str, Any]] = []
        self.closed_at: list[float] = []
        self.open_streams = 0
        self.disconnects = 0
        self.completed = 0
        self.connections = 0
        """TCP connections accepted so far (keep-alive shows as fewer than requests)."""
        super().__init__(port=port)
        self._scripts: deque[ChatScript] = deque()
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._shutting_down = False
        self._modified_at = _now_rfc3339()

    # -- scripting -----------------------------------------------------------------------

    def enqueue(self, *scripts: ChatScript) -> None:
        """Queue scripts; each ``/api/chat`` request takes the oldest one."""
        self._scripts.extend(scripts)

    def reset(self) -> None:
        """Forget queued scripts, the responder, recorded requests and counters."""
        self._scripts.clear()
        self.responder = None
        self.vision = False
        self.requests.clear()
        self.embed_requests.clear()
        self.closed_at.clear()
        self.disconnects = 0
        self.completed = 0
        self.connections = 0

    # -- waiting (from any thread) -------------------------------------------------------

    def wait_for_closed(self, n: int = 1, timeout: float = 5.0) -> list[float]:
        """Block until ``n`` chat streams ended by client departure; their monotonic times."""
        self.wait_until(lambda: len(self.closed_at) >= n, timeout, what=f"{n} client disconnect(s)")
        return list(self.closed_at)

    def wait_for_requests(self, n: int = 1, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Block until ``n`` chat requests arrived; their bodies."""
        self.wait_until(lambda: len(self.requests) >= n, timeout, what=f"{n} chat request(s)")
        return list(self.requests)

    async def wait_for_closed_async(
        self,
        n: int = 1,
        timeout: float = 5.0,  # noqa: ASYNC109 - the same signature as the blocking wait
    ) -> list[float]:
        await self.wait_until_async(
            lambda: len(self.closed_at) >= n, timeout, what=f"{n} client disconnect(s)"
        )
        return list(self.closed_at)

    async def wait_for_requests_async(
        self,
        n: int = 1,
        timeout: float = 5.0,  # noqa: ASYNC109 - the same signature as the blocking wait
    ) -> list[dict[str, Any]]:
        await self.wait_until_async(
            lambda: len(self.requests) >= n, timeout, what=f"{n} chat request(s)"
        )
        return list(self.requests)

    # -- serving in the caller's loop ----------------------------------------------------

    async def serve(
        self, stop: asyncio.Event, on_listening: Callable[[str], None] | None = None
    ) -> None:
        """Serve in the running loop until ``stop`` is set (the foreground entry point).

        The blocking ``wait_*`` helpers would deadlock this loop; use the ``*_async`` ones.
        """
        server = await asyncio.start_server(
            self._serve_connection, "127.0.0.1", self._port, limit=_HEAD_LIMIT, backlog=4096
        )
        self._bound_port = server.sockets[0].getsockname()[1]
        # On uvloop (the benchmark's stand-in) a burst of new connections would be taken in
        # one per loop iteration, late by seconds beside hundreds of paced streams; taken
        # all at once, as the server takes its own (channel_http/serving/accept.py).
        loop = asyncio.get_running_loop()
        greedy = (
            GreedyAccept(loop, server.sockets[0], self._stream_protocol)
            if one_accept_per_iteration(loop)
            else None
        )
        try:
            if on_listening is not None:
                on_listening(self.url)
            await stop.wait()
        finally:
            # Abort rather than cancel: each connection then ends through its normal path
            # (3.11's start_server callback logs a traceback for a task that ends cancelled).
            if greedy is not None:
                greedy.close()
            server.close()
            self._shutting_down = True
            for writer in self._connections.values():
                writer.transport.abort()
            tasks = set(self._connections)
            if tasks:
                _, pending = await asyncio.wait(tasks, timeout=5.0)
                for task in pending:
                    task.cancel()
            await server.wait_closed()
            self._shutting_down = False

    # -- connections ---------------------------------------------------------------------

    def _stream_protocol(self) -> asyncio.Protocol:
        """What ``asyncio.start_server`` makes for each connection it accepts."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_HEAD_LIMIT, loop=loop)
        return asyncio.StreamReaderProtocol(reader, self._serve_connection, loop=loop)

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is None:  # never: asyncio runs each connection's callback in a task
            raise StandInError("A connection was served outside a task.")
        self._connections[task] = writer
        self.connections += 1
        try:
            while True:
                try:
                    request = await _read_request(reader, writer)
                except _BadRequestError:
                    await _write_json(
                        writer, 400, {"error": "malformed HTTP request"}, keep_alive=False
                    )
                    return
                if request is None or not await self._dispatch(request, reader, writer):
                    return
        except OSError:
            return  # the client went away between requests or during a short answer
        finally:
            self._connections.pop(task, None)
            if task.cancelling():
                writer.transport.abort()
            else:
                writer.close()

    async def _dispatch(
        self, request: _Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; whether the connection may carry another."""
        routes: dict[str, tuple[str, ...]] = {
            "/api/chat": ("POST",),
            "/api/embed": ("POST",),
            "/api/embeddings": ("POST",),
            "/api/tags": ("GET", "HEAD"),
            "/api/version": ("GET", "HEAD"),
            "/api/show": ("POST",),
            "/": ("GET", "HEAD"),
        }
        keep = request.keep_alive
        methods = routes.get(request.path)
        if methods is None:
            await _write_json(writer, 404, {"error": "404 page not found"}, keep_alive=keep)
            return keep
        if request.method not in methods:
            await _write_json(writer, 405, {"error": "405 method not allowed"}, keep_alive=keep)
            return keep
        if request.path == "/":
            body = b"Ollama is running"
            head = _head(200, "text/plain; charset=utf-8", length=len(body), keep_alive=keep)
            writer.write(head + (b"" if request.method == "HEAD" else body))
            await writer.drain()
            return keep
        if request.path == "/api/tags":
            await _write_json(writer, 200, self._tags(), keep_alive=keep)
            return keep
        if request.path == "/api/version":
            await _write_json(writer, 200, {"version": VERSION}, keep_alive=keep)
            return keep
        try:
            payload = _DECODER.decode(request.body)
        except msgspec.DecodeError as exc:
            await _write_json(writer, 400, {"error": str(exc)}, keep_alive=keep)
            return keep
        if not isinstance(payload, dict):
            await _write_json(
                writer, 400, {"error": "the body must be a JSON object"}, keep_alive=keep
            )
            return keep
        if request.path == "/api/show":
            await self._show(payload, writer, keep)
            return keep
        if request.path == "/api/chat":
            self.requests.append(payload)
        else:
            self.embed_requests.append(payload)
        self._notify()
        model = payload.get("model")
        if not isinstance(model, str) or not model:
            await _write_json(writer, 400, {"error": "model is required"}, keep_alive=keep)
            return keep
        if not self._knows(model):
            error = f'model "{model}" not found, try pulling it first'
            await _write_json(writer, 404, {"error": error}, keep_alive=keep)
            return keep
        if request.path == "/api/chat":
            return await self._chat(request, payload, model, reader, writer)
        await self._embed(request, payload, model, writer)
        return keep

    # -- /api/chat -----------------------------------------------------------------------

    async def _chat(
        self,
        request: _Request,
        payload: dict[str, Any],
        model: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        keep = request.keep_alive
        try:
            script = self._next_script(payload)
        except Exception as exc:  # a test's responder failed: tell the client, loudly
            error = f"the stand-in responder raised {exc!r}"
            await _write_json(writer, 500, {"error": error}, keep_alive=keep)
            return keep
        if script.drop:
            await _abort(writer)
            return False
        if payload.get("stream", True) is False:
            answer = self._answer(script, payload, model, keep, writer)
        else:
            answer = self._stream(script, payload, model, keep, writer)
        self.open_streams += 1
        self._notify()
        responding = asyncio.create_task(answer)
        early = bytearray()
        watching = asyncio.create_task(_watch_for_departure(reader, early))
        try:
            await asyncio.wait({responding, watching}, return_when=asyncio.FIRST_COMPLETED)
            outcome: _Outcome | None = None
            if responding.done():
                try:
                    outcome = responding.result()
                except OSError:
                    outcome = None  # a write failed: the client is gone
            if outcome is None:
                self._record_departure()
                return False
            if outcome == "completed":
                self.completed += 1
            return keep and outcome != "closed"
        finally:
            for task in (responding, watching):
                task.cancel()
            await asyncio.wait({responding, watching})
            _give_back(reader, early)
            self.open_streams -= 1
            self._notify()

    async def _stream(
        self,
        script: ChatScript,
        payload: dict[str, Any],
        model: str,
        keep: bool,
        writer: asyncio.StreamWriter,
    ) -> _Outcome:
        started = time.perf_counter_ns()
        if script.first_delay_s > 0:
            await asyncio.sleep(script.first_delay_s)
        if script.status is not None:
            await _write_json(writer, script.status, {"error": script.error}, keep_alive=keep)
            return "error"
        lines = script.encoded_lines(model, payload.get("think") is not False)
        stop, action = script.cutoff(len(lines))
        writer.write(_head(200, _NDJSON, length=None, keep_alive=keep))
        await writer.drain()
        started_at = asyncio.get_running_loop().time()
        await write_lines(writer, lines, stop, script.delay_s, script.coalesce)
        if action == "close":
            await _abort(writer)
            return "closed"
        if action == "error":
            writer.write(_chunk(_ENCODER.encode({"error": script.error}) + b"\n") + b"0\r\n\r\n")
            await writer.drain()
            return "error"
        if script.hang:
            await asyncio.get_running_loop().create_future()  # until the client leaves
        if script.delay_s > 0 and stop:
            await _until(started_at + stop * script.delay_s)
        done = self._done_fields(script, payload, model, started)
        done["message"] = {"role": "assistant", "content": ""}
        writer.write(_chunk(_ENCODER.encode(done) + b"\n") + b"0\r\n\r\n")
        await writer.drain()
        return "completed"

    async def _answer(
        self,
        script: ChatScript,
        payload: dict[str, Any],
        model: str,
        keep: bool,
        writer: asyncio.StreamWriter,
    ) -> _Outcome:
        started = time.perf_counter_ns()
        if script.first_delay_s > 0:
            await asyncio.sleep(script.first_delay_s)
        if script.status is not None:
            await _write_json(writer, script.status, {"error": script.error}, keep_alive=keep)
            return "error"
        if script.delay_s > 0:
            await asyncio.sleep(script.delay_s * max(script.chunk_count - 1, 0))
        if script.close_after is not None:
            await _abort(writer)
            return "closed"
        if script.error_after is not None:
            await _write_json(writer, 500, {"error": script.error}, keep_alive=keep)
            return "error"
        if script.hang:
            await asyncio.get_running_loop().create_future()
        message: dict[str, Any] = {"role": "assistant", "content": "".join(script.content)}
        if script.thinking and payload.get("think") is not False:
            message["thinking"] = "".join(script.thinking)
        if script.tool_calls:
            message["tool_calls"] = [_wire_tool_call(call) for call in script.tool_calls]
        done = self._done_fields(script, payload, model, started)
        done["message"] = message
        await _write_json(writer, 200, done, keep_alive=keep)
        return "completed"

    def _done_fields(
        self, script: ChatScript, payload: dict[str, Any], model: str, started_ns: int
    ) -> dict[str, Any]:
        total = max(time.perf_counter_ns() - started_ns, 1)
        prompt_tokens = max(
            sum(
                len(_TOKENS.findall(str(m.get("content") or "")))
                for m in payload.get("messages") or []
                if isinstance(m, dict)
            ),
            1,
        )
        return {
            "model": model,
            "created_at": _now_rfc3339(),
            "done": True,
            "done_reason": script.done_reason,
            "total_duration": total,
            "load_duration": max(total // 20, 1),
            "prompt_eval_count": prompt_tokens,
            "prompt_eval_duration": max(total // 10, 1),
            "eval_count": max(script.chunk_count, 1),
            "eval_duration": max(total - total // 20 - total // 10, 1),
        }

    def _next_script(self, payload: dict[str, Any]) -> ChatScript:
        try:
            return self._scripts.popleft()
        except IndexError:
            pass
        if self.responder is not None:
            return self.responder(payload)
        return echo_script(payload)

    # -- /api/embed, /api/embeddings, /api/tags -----------------------------------------

    async def _embed(
        self,
        request: _Request,
        payload: dict[str, Any],
        model: str,
        writer: asyncio.StreamWriter,
    ) -> None:
        keep = request.keep_alive
        dimensions = payload.get("dimensions") or self.dimensions
        if not isinstance(dimensions, int) or dimensions <= 0:
            await _write_json(writer, 400, {"error": "invalid dimensions"}, keep_alive=keep)
            return
        started = time.perf_counter_ns()
        if request.path == "/api/embeddings":
            vector = embed_text(str(payload.get("prompt") or ""), dimensions)
            await _write_json(writer, 200, {"embedding": vector}, keep_alive=keep)
            return
        given = payload.get("input", "")
        texts: Any = ([given] if given else []) if isinstance(given, str) else given
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            error = "invalid input type: give a string or a list of strings"
            await _write_json(writer, 400, {"error": error}, keep_alive=keep)
            return
        embeddings = [embed_text(t, dimensions) for t in texts]
        total = max(time.perf_counter_ns() - started, 1)
        answer = {
            "model": model,
            "embeddings": embeddings,
            "total_duration": total,
            "load_duration": 1,
            "prompt_eval_count": sum(len(_TOKENS.findall(t)) for t in texts),
        }
        await _write_json(writer, 200, answer, keep_alive=keep)

    def _tags(self) -> dict[str, Any]:
        models = []
        for name in self.models or []:
            canonical = _canonical(name)
            models.append(
                {
                    "name": canonical,
                    "model": canonical,
                    "modified_at": self._modified_at,
                    "size": 1_000_000,
                    "digest": hashlib.sha256(canonical.encode()).hexdigest(),
                    "details": {
                        "parent_model": "",
                        "format": "gguf",
                        "family": "standin",
                        "families": ["standin"],
                        "parameter_size": "1B",
                        "quantization_level": "Q4_0",
                    },
                }
            )
        return {"models": models}

    async def _show(
        self, payload: dict[str, Any], writer: asyncio.StreamWriter, keep: bool
    ) -> None:
        model = payload.get("model")
        if not isinstance(model, str) or not self._knows(model):
            await _write_json(writer, 404, {"error": f"model '{model}' not found"}, keep_alive=keep)
            return
        capabilities = ["completion", "tools", "thinking"]
        if self.vision:
            capabilities.append("vision")
        answer = {
            "modelfile": "",
            "template": "{{ .Prompt }}",
            "details": {"format": "gguf", "family": "standin", "parameter_size": "1B"},
            "model_info": {},
            "capabilities": capabilities,
            "modified_at": self._modified_at,
        }
        await _write_json(writer, 200, answer, keep_alive=keep)

    def _knows(self, model: str) -> bool:
        if self.models is None:
            return True
        return _canonical(model) in {_canonical(m) for m in self.models}

    # -- bookkeeping ---------------------------------------------------------------------

    def _record_departure(self) -> None:
        if self._shutting_down:
            return  # the stand-in dropped the connection, not the client
        self.closed_at.append(time.monotonic())
        self.disconnects += 1


async def write_lines(
    writer: asyncio.StreamWriter, lines: list[bytes], stop: int, delay: float, coalesce: int
) -> None:
    """The first ``stop`` lines: ``coalesce`` a write as fast as possible when ``delay`` is 0,
    else line ``i`` due ``i * delay`` after the first.

    Paced lines keep to their schedule, not to the pause since the last write: when the
    stand-in's own loop runs late (hundreds of streams on one core), the next pause is
    shorter and the lines already due go out in one write, as a model server's buffered
    tokens would. Pausing ``delay`` after each write instead would add the loop's lateness
    to every line, and the stand-in's drift to every stream it serves.
    """
    if delay <= 0:
        batch_size = max(coalesce, 1)
        for start in range(0, stop, batch_size):
            await _flush(writer, lines[start : min(start + batch_size, stop)])
            await asyncio.sleep(0)  # let the other streams have the loop
        return
    loop = asyncio.get_running_loop()
    first = loop.time()
    sent = 0
    while sent < stop:
        due = min(stop, int((loop.time() - first) / delay) + 1)
        await _flush(writer, lines[sent:due])
        sent = due
        if sent < stop:
            await _until(first + sent * delay)


async def _until(when: float) -> None:
    """Sleeps until the loop's clock reads ``when`` (at once if it already does)."""
    wait = when - asyncio.get_running_loop().time()
    await asyncio.sleep(wait if wait > 0 else 0)


async def _flush(writer: asyncio.StreamWriter, batch: list[bytes]) -> None:
    if batch:
        writer.write(_chunk(b"".join(batch)))
        batch.clear()
        await writer.drain()


def _canonical(model: str) -> str:
    return model if ":" in model.rsplit("/", 1)[-1] else f"{model}:latest"


# --------------------------------------------------------------------------------------------
# Foreground entry point


def _paced_option(text: str) -> tuple[int, float]:
    count, sep, rate = text.partition(",")
    try:
        return int(count), float(rate) if sep else 50.0
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--paced expects COUNT,RATE such as 200,50; got {text!r}."
        ) from None


async def _run_foreground(standin: OllamaStandIn) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await standin.serve(stop, on_listening=lambda url: print(f"listening on {url}", flush=True))


def main(argv: Sequence[str] | None = None) -> int:
    """Serve in the foreground until SIGINT or SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m dev_model.ollama",
        description="Serve the Ollama stand-in on 127.0.0.1 until SIGINT or SIGTERM.",
    )
    parser.add_argument("--port", type=int, default=11434, help="0 picks a free port")
    parser.add_argument(
        "--model", action="append", help="a model to know (repeatable); default: any name"
    )
    parser.add_argument("--dimensions", type=int, default=DEFAULT_DIMENSIONS)
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument("--fast-tokens", type=int, metavar="N", help="answer N tokens at once")
    shape.add_argument(
        "--paced", type=_paced_option, metavar="N,RATE", help="answer N tokens at RATE a second"
    )
    args = parser.parse_args(argv)
    standin = OllamaStandIn(models=args.model, dimensions=args.dimensions, port=args.port)
    script: ChatScript | None = None
    if args.fast_tokens is not None:
        script = ChatScript.fast_tokens(args.fast_tokens)
    elif args.paced is not None:
        script = ChatScript.paced(*args.paced)
    if script is not None:
        shared = script  # one instance for every request, so its lines are encoded once
        standin.responder = lambda _payload: shared
    asyncio.run(_run_foreground(standin))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
