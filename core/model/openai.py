"""The model port on any server speaking OpenAI's chat-completions protocol.

vLLM, llama.cpp's ``llama-server``, LM Studio, SGLang and gateways such as LiteLLM all serve
``POST {base}/chat/completions``, streaming ``chat.completion.chunk`` events as Server-Sent
Events. The stream is read on the same keep-alive wire reader as Ollama's on a plain-http
base URL (:class:`core.model.wire.WirePool`), on httpx for https, and every ``data:`` line is
decoded with one msgspec call into the Structs below; no per-chunk pydantic model. Measured
on the per-token path (docs/benchmarks.md), the official ``openai`` client builds a pydantic
``ChatCompletionChunk`` per event and sits on httpx, costing several times the CPU of this
path per token, so it is not used.

What the stream carries and what the engine gets:

* ``delta.content`` → :attr:`ChunkMessage.content`;
* ``delta.reasoning_content`` (vLLM, llama-server, SGLang) or ``delta.reasoning``
  (LM Studio, OpenRouter, newer vLLM) → :attr:`ChunkMessage.thinking`;
* ``delta.tool_calls`` pieces, keyed by ``index``, assembled into whole calls (id, name,
  arguments whose JSON arrives in pieces) and handed over with the last chunk;
* ``finish_reason`` → ``done_reason`` (``tool_calls`` reads as ``stop``), ``usage`` (sent
  when the server honours ``stream_options.include_usage``) → the token counts, with
  ``usage.prompt_tokens_details.cached_tokens`` (a server's prompt cache) → ``cached_count``.

The engine's history has no call ids; requests pair each ``tool`` message with the call it
answers (by name, in order) and give the server the ids it sent.

Exceptions: every failure is a :class:`~core.model.ModelError`::

    ModelError
    ├── ModelUnreachable   connecting failed or timed out
    ├── ModelHTTPError     the server answered 4xx/5xx, or sent an error event mid-stream
    └── ModelBrokeOff      the stream broke off, timed out, ended early or sent a malformed chunk
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from typing import Any, Final

import httpx
import msgspec

from core.model.port import (
    ChatChunk,
    ChatMessage,
    ChunkMessage,
    Completion,
    ModelBrokeOff,
    ModelError,
    ModelHTTPError,
    ModelUnreachable,
    ToolCall,
    ToolFunction,
    ToolSpec,
)
from core.model.wire import Wire, WireError, WirePool, json_post_pool

log = logging.getLogger("mercury.openai")

# --------------------------------------------------------------------------------------------
# What goes out


class _OutFunction(msgspec.Struct):
    name: str
    arguments: str


class _OutToolCall(msgspec.Struct):
    id: str
    function: _OutFunction
    type: str = "function"


class _OutMessage(msgspec.Struct, omit_defaults=True):
    role: str
    content: str = ""
    tool_calls: list[_OutToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class _StreamOptions(msgspec.Struct):
    include_usage: bool = True


class _ChatRequest(msgspec.Struct, omit_defaults=True):
    model: str
    messages: list[_OutMessage]
    stream: bool  # always sent: these servers answer in one piece without it
    stream_options: _StreamOptions | None = None
    tools: list[dict[str, Any]] | None = None


# --------------------------------------------------------------------------------------------
# What comes back


class _FunctionDelta(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None


class _ErrorInfo(msgspec.Struct):
    message: str = ""


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = msgspec.field(default_factory=list)
    usage: _Usage | None = None
    error: _ErrorInfo | str | None = None


class _ErrorBody(msgspec.Struct):
    error: _ErrorInfo | str | None = None
    message: str | None = None
    detail: str | None = None


class _AnswerMessage(msgspec.Struct):
    content: str | None = None


class _AnswerChoice(msgspec.Struct):
    message: _AnswerMessage | None = None


class _Answer(msgspec.Struct):
    choices: list[_AnswerChoice] = msgspec.field(default_factory=list)
    usage: _Usage | None = None


_encode = msgspec.json.Encoder().encode
_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_decode_error = msgspec.json.Decoder(_ErrorBody).decode
_decode_answer = msgspec.json.Decoder(_Answer).decode
_decode_arguments = msgspec.json.Decoder(dict[str, Any]).decode

_DONE: Final = b"[DONE]"
_FINISH: Final = {"tool_calls": "stop", "function_call": "stop"}


def _reason(body: bytes) -> str:
    try:
        parsed = _decode_error(body)
    except msgspec.DecodeError:
        reason = body.decode("utf-8", "replace")
    else:
        error = parsed.error
        if isinstance(error, _ErrorInfo):
            reason = error.message
        else:
            reason = error or parsed.message or parsed.detail or ""
    return reason.strip()[:300] or "no reason given"


def _cached(usage: _Usage | None) -> int | None:
    """The prompt's tokens the server read from its cache, when it says."""
    if usage is None or usage.prompt_tokens_details is None:
        return None
    return usage.prompt_tokens_details.cached_tokens


def _tool_payload(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def _out_messages(messages: Sequence[ChatMessage]) -> list[_OutMessage]:
    """The conversation in OpenAI's shape, each tool result paired with its call's id."""
    out: list[_OutMessage] = []
    waiting: deque[tuple[str, str]] = deque()  # (id, name) of calls not yet answered
    made = 0
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            calls = []
            waiting.clear()
            for call in message.tool_calls:
                made += 1
                call_id = call.id or f"call_{made}"
                waiting.append((call_id, call.function.name))
                arguments = _encode(call.function.arguments).decode()
                calls.append(_OutToolCall(call_id, _OutFunction(call.function.name, arguments)))
            out.append(_OutMessage("assistant", message.content, tool_calls=calls))
        elif message.role == "tool":
            name = message.tool_name or ""
            match = next((pair for pair in waiting if pair[1] == name), None)
            if match is None and waiting:
                match = waiting[0]
            if match is not None:
                waiting.remove(match)
                call_id = match[0]
            else:
                made += 1
                call_id = f"call_{made}"
            out.append(
                _OutMessage("tool", message.content, tool_call_id=call_id, name=name or None)
            )
        else:
            out.append(_OutMessage(message.role, message.content))
    return out


class _Assembly:
    """The state of one streamed answer: tool-call pieces, finish reason, usage."""

    __slots__ = ("calls", "ended", "finish", "usage")

    def __init__(self) -> None:
        self.calls: dict[int, list[Any]] = {}  # index -> [id, name parts, argument parts]
        self.finish: str | None = None
        self.usage: _Usage | None = None
        self.ended = False

    def add_calls(self, deltas: list[_ToolCallDelta]) -> None:
        for delta in deltas:
            entry = self.calls.get(delta.index)
            if entry is None:
                entry = self.calls[delta.index] = [None, [], []]
            if delta.id:
                entry[0] = delta.id
            function = delta.function
            if function is not None:
                if function.name:
                    entry[1].append(function.name)
                if function.arguments:
                    entry[2].append(function.arguments)

    def tool_calls(self, model: str, host: str) -> tuple[ToolCall, ...] | None:
        calls = []
        for index in sorted(self.calls):
            call_id, names, pieces = self.calls[index]
            name = "".join(names)
            text = "".join(pieces).strip() or "{}"
            try:
                arguments = _decode_arguments(text)
            except msgspec.DecodeError:
                raise ModelBrokeOff(
                    f"the arguments of the tool call {name!r} are not a JSON object",
                    model=model,
                    host=host,
                    provider="openai",
                ) from None
            calls.append(ToolCall(ToolFunction(name, arguments), id=call_id))
        return tuple(calls) or None


class OpenAIModel:
    """A :class:`~core.model.ModelClient` served over OpenAI's chat-completions protocol."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        read_timeout_s: float = 300.0,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._model = model
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        self._http = httpx.AsyncClient(
            base_url=self._base + "/", headers=headers, timeout=timeout, limits=limits
        )
        self._usage_unsupported = False
        self._where = {"model": model, "host": self._base, "provider": "openai"}
        self._wire, self._wire_head = self._wire_pool(api_key, read_timeout_s, connect_timeout_s)

    def _wire_pool(
        self, api_key: str | None, read_timeout_s: float, connect_timeout_s: float
    ) -> tuple[WirePool | None, bytes]:
        """For a plain-http base URL, the pool streaming answers; https stays on httpx."""
        return json_post_pool(
            httpx.URL(self._base),
            "/chat/completions",
            accept="text/event-stream",
            extra=f"authorization: Bearer {api_key}\r\n" if api_key else "",
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
        )

    @property
    def model(self) -> str:
        return self._model

    @property
    def host(self) -> str:
        return self._base

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        think: bool = False,
    ) -> AsyncIterator[list[ChatChunk]]:
        # ``think`` has no field in this protocol: a reasoning model streams its reasoning
        # as the server is set up to (a chat-template option or a server flag).
        state = _Assembly()
        pool = self._wire
        if pool is None:
            # https: httpx's stream, closed here rather than by the garbage collector so
            # a cancelled turn gives its connection back at once.
            async with contextlib.aclosing(self._lines_httpx(messages, tools)) as reads:
                async for lines in reads:
                    batch, failure = self._batch(lines, state)
                    if batch:
                        yield batch
                    if failure is not None:
                        raise failure
        else:
            # A plain-http base URL, in this one generator (no inner layers on the
            # per-token path): one batch of chunks per read off the wire.
            wire = await self._send_wire(pool, messages, tools)
            try:
                waiting = wire.lines
                while True:
                    if waiting:
                        batch, failure = self._batch(waiting, state)
                        waiting.clear()
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
        if state.finish is None and not state.ended:
            raise ModelBrokeOff("the stream ended before the answer did", **self._where)
        usage_seen = state.usage
        yield [
            ChatChunk(
                message=ChunkMessage(tool_calls=state.tool_calls(self._model, self._base)),
                done=True,
                done_reason=_FINISH.get(state.finish or "stop", state.finish or "stop"),
                prompt_eval_count=usage_seen.prompt_tokens if usage_seen else None,
                eval_count=usage_seen.completion_tokens if usage_seen else None,
                cached_count=_cached(usage_seen),
                model=self._model,
            )
        ]

    def _batch(
        self, lines: Iterable[bytes], state: _Assembly
    ) -> tuple[list[ChatChunk], ModelError | None]:
        """The chunks of one read up to the first bad line, and the error it is, if any.

        The chunks before a failure still reach the person, as they would one by one.
        """
        batch: list[ChatChunk] = []
        event = self._event
        try:
            for line in lines:
                # Read on past [DONE] to the end of the body, so the connection is reused.
                if state.ended:
                    continue
                chunk = event(line, state)
                if chunk is not None:
                    batch.append(chunk)
        except ModelError as error:
            return batch, error
        return batch, None

    def _body(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], usage: bool
    ) -> bytes:
        return _encode(
            _ChatRequest(
                model=self._model,
                messages=_out_messages(messages),
                stream=True,
                stream_options=_StreamOptions() if usage else None,
                tools=[_tool_payload(tool) for tool in tools] or None,
            )
        )

    def _refuses_usage(self, usage: bool, status: int, reason: str) -> bool:
        """An older server may refuse stream_options: ask again without it and remember."""
        if not (usage and status == 400 and "stream_options" in reason):
            return False
        log.warning("%s refuses stream_options; asking without usage", self._base)
        self._usage_unsupported = True
        return True

    def _event(self, line: bytes, state: _Assembly) -> ChatChunk | None:
        """One SSE line; a chunk for the engine when it carries text or reasoning."""
        if line.endswith(b"\r"):
            line = line[:-1]
        if line.startswith(b"data:"):
            data = line[5:].strip()
        elif line.startswith(b"error:"):  # llama-server's error event
            reason = _reason(line[6:].strip())
            raise ModelHTTPError(reason, **self._where, status=500, reason=reason)
        else:
            return None  # a comment (": ping"), an event name, an id or a retry field
        if data == _DONE:
            state.ended = True
            return None
        try:
            chunk = _decode_chunk(data)
        except msgspec.DecodeError:
            raise ModelBrokeOff(
                "the model sent an event that is not a chat completion chunk",
                **self._where,
            ) from None
        if chunk.error is not None:
            error = chunk.error
            reason = (error.message if isinstance(error, _ErrorInfo) else error).strip()[:300]
            reason = reason or "no reason given"
            raise ModelHTTPError(reason, **self._where, status=500, reason=reason)
        if chunk.usage is not None:
            state.usage = chunk.usage
        if not chunk.choices:
            return None
        choice = chunk.choices[0]
        if choice.finish_reason is not None:
            state.finish = choice.finish_reason
        delta = choice.delta
        if delta is None:
            return None
        if delta.tool_calls:
            state.add_calls(delta.tool_calls)
        thinking = delta.reasoning_content or delta.reasoning
        if delta.content or thinking:
            return ChatChunk(message=ChunkMessage(content=delta.content or "", thinking=thinking))
        return None

    async def _send_wire(
        self, pool: WirePool, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> Wire:
        """A connection whose answer (status < 400) has begun."""
        usage = not self._usage_unsupported
        while True:
            body = self._body(messages, tools, usage)
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
            if self._refuses_usage(usage, wire.status, reason):
                usage = False
                continue
            raise ModelHTTPError(
                f"HTTP {wire.status}: {reason}", status=wire.status, reason=reason, **self._where
            )

    async def _lines_httpx(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> AsyncGenerator[list[bytes], None]:
        """The lines of each read of the answer, on httpx (an https base URL)."""
        where = self._where
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        usage = not self._usage_unsupported
        try:
            while True:
                body = self._body(messages, tools, usage)
                async with self._http.stream(
                    "POST", "chat/completions", content=body, headers=headers
                ) as response:
                    if response.status_code >= 400:
                        status = response.status_code
                        reason = _reason(await response.aread())
                        if self._refuses_usage(usage, status, reason):
                            usage = False
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
                        yield [line for line in lines if line]
                    if buffer.strip():
                        yield [buffer]
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

    async def complete(self, messages: Sequence[ChatMessage]) -> Completion:
        where = self._where
        body = _encode(
            _ChatRequest(model=self._model, messages=_out_messages(messages), stream=False)
        )
        try:
            response = await self._http.post(
                "chat/completions", content=body, headers={"content-type": "application/json"}
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            raise ModelUnreachable(str(error) or "connection refused", **where) from None
        except httpx.HTTPError as error:
            raise ModelBrokeOff(repr(error), **where) from None
        if response.status_code >= 400:
            reason = _reason(response.content)
            raise ModelHTTPError(
                f"HTTP {response.status_code}: {reason}",
                status=response.status_code,
                reason=reason,
                **where,
            )
        try:
            answer = _decode_answer(response.content)
        except msgspec.DecodeError:
            raise ModelBrokeOff("the answer is not a chat completion", **where) from None
        message = answer.choices[0].message if answer.choices else None
        usage = answer.usage  # a non-streamed answer carries it without being asked
        return Completion(
            text=(message.content if message is not None else None) or "",
            model=self._model,
            input=usage.prompt_tokens if usage else None,
            output=usage.completion_tokens if usage else None,
            cached=_cached(usage),
        )

    async def reachable(self) -> bool:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                response = await self._http.get("models")
                return response.status_code < 400
        return False

    async def accepts_images(self) -> bool:
        # The protocol has no way to ask a model whether it sees images, and a tool message
        # can't carry them: the files tools tell the model it can't see the picture instead.
        return False

    async def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
        await self._http.aclose()


class _ModelList(msgspec.Struct):
    data: list[_ListedModel]


class _ListedModel(msgspec.Struct):
    id: str


async def missing_models(
    base_url: str, names: Sequence[str], *, api_key: str | None = None, timeout_s: float = 3.0
) -> tuple[str, ...] | None:
    """The models among ``names`` that the server at ``base_url`` doesn't list (``/models``).

    ``None`` when the server doesn't answer within ``timeout_s`` or answers something else
    than a model list: nothing can be said then.
    """
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    url = base_url.rstrip("/") + "/models"
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client, asyncio.timeout(timeout_s):
            response = await client.get(url, headers=headers)
        response.raise_for_status()
        listed = msgspec.json.decode(response.content, type=_ModelList)
    except Exception:  # any failure means the same here: the server can't say
        return None
    have = {model.id for model in listed.data}
    return tuple(name for name in names if name not in have)
