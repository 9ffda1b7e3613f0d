"""The model port on Ollama, through the official ``ollama`` client.

``ollama.AsyncClient`` owns the connection settings: host parsing (``OLLAMA_HOST`` forms
such as ``127.0.0.1:11434`` or ``https://host``), headers, ``OLLAMA_API_KEY``, and the
calls that are not on the per-token path (``list`` for health, ``chat`` without streaming
for summaries). The streamed ``/api/chat`` is decoded here with msgspec (the client's own
path builds a pydantic model per line: about 8 µs a token against about 0.5 µs). On a
plain-http host (a local Ollama) it is read straight off an asyncio transport, with a
small keep-alive pool (:class:`core.model.wire.WirePool`): httpx costs about 30 µs a read
on that path and scans its whole pool per request, which halved the server CPU of paced streams
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
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from typing import Any

import httpx
import msgspec
import ollama

from core.model.port import (
    ChatChunk,
    ChatMessage,
    Completion,
    ModelBrokeOff,
    ModelError,
    ModelHTTPError,
    ModelUnreachable,
    ToolSpec,
)
from core.model.wire import Wire, WireError, WirePool, header_lines, json_post_pool

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
        self._vision: bool | None = None
        self._where = {"model": model, "host": host}
        self._wire, self._wire_head = self._wire_pool(read_timeout_s, connect_timeout_s)

    def _wire_pool(
        self, read_timeout_s: float, connect_timeout_s: float
    ) -> tuple[WirePool | None, bytes]:
        """For a plain-http host, the pool streaming /api/chat; https stays on httpx."""
        return json_post_pool(
            self._http.base_url,
            "/api/chat",
            accept="application/x-ndjson",
            extra=header_lines(self._http.headers.items()),
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
        )

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
    ) -> AsyncIterator[list[ChatChunk]]:
        think = think and not self._thinking_unsupported
        pool = self._wire
        if pool is None:
            # https: httpx's stream, closed here rather than by the garbage collector so
            # a cancelled turn gives its connection back at once.
            async with contextlib.aclosing(self._stream_httpx(messages, tools, think)) as stream:
                async for batch in stream:
                    yield batch
            return
        # A plain-http host, in this one generator (no inner layers on the per-token path):
        # one batch of decoded chunks per read off the wire.
        wire = await self._send_wire(pool, messages, tools, think)
        try:
            lines = wire.lines
            while True:
                if lines:
                    batch, failure = self._chunks(lines)
                    lines.clear()
                    if batch:
                        yield batch
                    if failure is not None:
                        raise failure
                if wire.done:
                    break
                wire.raise_failure()
                await wire.wait()
        except WireError as error:
            raise self._wire_error(error) from None
        finally:
            pool.give_back(wire)

    def _body(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], think: bool
    ) -> bytes:
        return _encode(
            _ChatRequest(
                model=self._model,
                messages=messages,
                tools=[_tool_payload(tool) for tool in tools] or None,
                think=think or None,
            )
        )

    async def _send_wire(
        self,
        pool: WirePool,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        think: bool,
    ) -> Wire:
        """A connection whose answer (status < 400) has begun."""
        while True:
            body = self._body(messages, tools, think)
            try:
                wire = await pool.send(self._wire_head + b"%d\r\n\r\n" % len(body) + body)
            except WireError as error:
                raise self._wire_error(error) from None
            if wire.status < 400:
                return wire
            try:
                reason = _reason(await wire.rest())
            except WireError as error:
                raise self._wire_error(error) from None
            finally:
                pool.give_back(wire)
            if self._refuses_thinking(think, wire.status, reason):
                think = False
                continue
            raise ModelHTTPError(
                f"HTTP {wire.status}: {reason}", status=wire.status, reason=reason, **self._where
            )

    def _refuses_thinking(self, think: bool, status: int, reason: str) -> bool:
        """A model without thinking refuses the whole request: ask again without it and
        remember, rather than failing every turn on a default setting."""
        if not (think and status == 400 and "think" in reason.lower()):
            return False
        log.warning("model %s does not support thinking; asking without it", self._model)
        self._thinking_unsupported = True
        return True

    async def _stream_httpx(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], think: bool
    ) -> AsyncGenerator[list[ChatChunk], None]:
        where = self._where
        try:
            while True:
                body = self._body(messages, tools, think)
                async with self._http.stream("POST", "/api/chat", content=body) as response:
                    if response.status_code >= 400:
                        status = response.status_code
                        reason = _reason(await response.aread())
                        if self._refuses_thinking(think, status, reason):
                            think = False
                            continue
                        raise ModelHTTPError(
                            f"HTTP {status}: {reason}", status=status, reason=reason, **where
                        )
                    buffer = b""
                    async for data in response.aiter_raw():
                        buffer += data
                        if b"\n" not in buffer:
                            continue
                        *lines, buffer = buffer.split(b"\n")
                        batch, failure = self._chunks(lines)
                        if batch:
                            yield batch
                        if failure is not None:
                            raise failure
                    if buffer.strip():
                        batch, failure = self._chunks([buffer])
                        if batch:
                            yield batch
                        if failure is not None:
                            raise failure
                    return
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            raise ModelUnreachable(str(error) or "connection refused", **where) from None
        except httpx.TimeoutException as error:
            raise ModelBrokeOff(f"no data for too long ({error!r})", **where) from None
        except httpx.TransportError as error:
            raise ModelBrokeOff(f"the stream broke off ({error!r})", **where) from None

    def _wire_error(self, error: WireError) -> ModelError:
        where = self._where
        if error.kind == "connect":
            return ModelUnreachable(str(error), **where)
        if error.kind == "timeout":
            return ModelBrokeOff(f"no data for too long ({error})", **where)
        return ModelBrokeOff(str(error), **where)

    def _chunks(self, lines: Iterable[bytes]) -> tuple[list[ChatChunk], ModelError | None]:
        """The chunks of ``lines`` up to the first bad one, and the error it is, if any.

        The chunks before a failure still reach the person, as they would one by one.
        """
        batch: list[ChatChunk] = []
        append = batch.append
        for line in lines:
            if not line:
                continue
            try:
                chunk = _decode_chunk(line)
            except msgspec.DecodeError:
                return batch, ModelBrokeOff(
                    "the model sent a line that is not a chat chunk", **self._where
                )
            if chunk.error is not None:  # Ollama reports a failure mid-stream as an error line
                reason = chunk.error.strip()[:300] or "no reason given"
                return batch, ModelHTTPError(reason, status=500, reason=reason, **self._where)
            append(chunk)
        return batch, None

    async def complete(self, messages: Sequence[ChatMessage]) -> Completion:
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
        # Ollama counts on the answer itself, as on a stream's last line; no prompt cache count.
        return Completion(
            text=response.message.content or "",
            model=response.model or self._model,
            input=response.prompt_eval_count,
            output=response.eval_count,
        )

    async def accepts_images(self) -> bool:
        # Asked once: a model's capabilities don't change while it is loaded under its name.
        if self._vision is None:
            try:
                async with asyncio.timeout(5.0):
                    shown = await self._client.show(self._model)
            except Exception as error:  # unknown: send no images rather than fail the turn
                log.warning("could not ask %s for its capabilities: %r", self._model, error)
                return False
            self._vision = "vision" in (shown.capabilities or [])
        return self._vision

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


def _canonical(name: str) -> str:
    """``llama3.2`` and ``llama3.2:latest`` name one model, as Ollama resolves them."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


async def missing_models(
    host: str, names: Sequence[str], *, timeout_s: float = 3.0
) -> tuple[str, ...] | None:
    """The models among ``names`` that Ollama at ``host`` doesn't have.

    ``None`` when the host doesn't answer within ``timeout_s``: nothing can be said then.
    """
    client = ollama.AsyncClient(host=host, timeout=timeout_s)
    try:
        async with asyncio.timeout(timeout_s):
            listed = await client.list()
    except Exception:  # any failure means the same here: the host can't say
        return None
    finally:
        await client.close()  # type: ignore[no-untyped-call]
    have = {_canonical(model.model) for model in listed.models if model.model}
    return tuple(name for name in names if _canonical(name) not in have)
