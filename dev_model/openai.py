"""A stand-in for a server speaking OpenAI's chat-completions protocol, on 127.0.0.1.

What vLLM, llama-server, LM Studio and LiteLLM answer, byte for byte where it matters:
``POST /v1/chat/completions`` streams ``chat.completion.chunk`` events as Server-Sent Events
(``data: {...}`` lines, ``data: [DONE]`` at the end), or one ``chat.completion`` object
without ``"stream": true``; ``POST /v1/embeddings`` and ``GET /v1/models``. Errors carry
``{"error": {"message", "type", "code"}}``. It shares its HTTP server, scripting queue,
disconnect bookkeeping and wait helpers with :class:`OllamaStandIn`::

    with OpenAIStandIn(models=["qwen3"]) as server:
        server.enqueue(CompletionScript(reasoning=["Hm."], content=["Hi ", "there."]))
        model = OpenAIModel(server.base_url, "qwen3")

A :class:`CompletionScript` adds what differs here: which field carries reasoning, tool-call
arguments cut into pieces of ``tool_piece`` characters (ids and names in the first piece,
calls interleaved by ``index``), a malformed event, and whether ``usage`` is sent.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec

from dev_model.ollama import (
    ChatScript,
    OllamaStandIn,
    _abort,
    _chunk,
    _head,
    _Outcome,
    _Request,
    _split_words,
    _until,
    _write_json,
    embed_text,
    write_lines,
)

__all__ = ["CompletionScript", "OpenAIStandIn", "completion_echo"]

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder()
_SSE: Final = "text/event-stream"


@dataclass(kw_only=True)
class CompletionScript(ChatScript):
    """What the stand-in streams for one chat completion.

    Events go out in this order: every ``thinking`` piece (as ``reasoning_field``), every
    ``content`` piece, then the tool calls' pieces, then the event with ``finish_reason``,
    the ``usage`` event when asked for, and ``data: [DONE]``. ``error_after``,
    ``close_after`` and ``malformed_after`` count the events before the finish.
    """

    reasoning_field: Literal["reasoning_content", "reasoning"] = "reasoning_content"
    tool_piece: int = 3
    """Characters of a tool call's arguments per event: small, to split JSON at odd places."""
    malformed_after: int | None = None
    """After this many events send a ``data:`` line that is not JSON."""
    error_event: Literal["data", "error"] = "data"
    """How ``error_after`` reports: ``data: {"error": …}`` or llama-server's ``error: {…}``."""
    finish: bool = True
    """Whether the stream names a ``finish_reason`` and ends with ``[DONE]``."""

    @classmethod
    def words(cls, text: str, *, thinking: str = "", **options: Any) -> CompletionScript:
        return cls(thinking=_split_words(thinking), content=_split_words(text), **options)

    def deltas(self) -> list[dict[str, Any]]:
        """Every delta before the finish, in order."""
        out: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        out += [{self.reasoning_field: piece} for piece in self.thinking]
        out += [{"content": piece} for piece in self.content]
        pieces: list[list[dict[str, Any]]] = []
        for index, call in enumerate(self.tool_calls):
            name = call.get("name") or call["function"]["name"]
            arguments = call.get("arguments", call.get("function", {}).get("arguments", {}))
            text = arguments if isinstance(arguments, str) else _ENCODER.encode(arguments).decode()
            step = max(self.tool_piece, 1)
            parts = [text[i : i + step] for i in range(0, len(text), step)] or [""]
            first = {
                "index": index,
                "id": f"call_standin_{index}",
                "type": "function",
                "function": {"name": name, "arguments": parts[0]},
            }
            rest = [{"index": index, "function": {"arguments": p}} for p in parts[1:]]
            pieces.append([first, *rest])
        # Interleave the calls' pieces, as a server streaming parallel calls may.
        longest = max((len(p) for p in pieces), default=0)
        for i in range(longest):
            for call_pieces in pieces:
                if i < len(call_pieces):
                    out.append({"tool_calls": [call_pieces[i]]})
        return out


def completion_echo(request: dict[str, Any]) -> CompletionScript:
    """The default answer: reasons in two pieces, then says "You said: <last user message>"."""
    last = ""
    for message in reversed(request.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            last = str(message.get("content") or "")
            break
    return CompletionScript(
        thinking=["Thinking ", "about it."], content=_split_words(f"You said: {last}")
    )


def _event(payload: Any) -> bytes:
    return b"data: " + _ENCODER.encode(payload) + b"\n\n"


class OpenAIStandIn(OllamaStandIn):
    """An OpenAI-protocol HTTP server on 127.0.0.1; a context manager running it in a thread."""

    @property
    def base_url(self) -> str:
        """The address with ``/v1``, as ``OPENAI_BASE_URL`` takes it."""
        return f"{self.url}/v1"

    def _next_script(self, payload: dict[str, Any]) -> ChatScript:
        try:
            return self._scripts.popleft()
        except IndexError:
            pass
        if self.responder is not None:
            return self.responder(payload)
        return completion_echo(payload)

    async def _dispatch(
        self, request: _Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        keep = request.keep_alive
        routes = {
            "/v1/chat/completions": "POST",
            "/v1/embeddings": "POST",
            "/v1/models": "GET",
        }
        method = routes.get(request.path)
        if method is None:
            await self._error(writer, 404, f"File Not Found: {request.path}", keep)
            return keep
        if request.method != method:
            await self._error(writer, 405, "Method Not Allowed", keep)
            return keep
        if request.path == "/v1/models":
            names = self.models or ["standin"]
            data = [{"id": n, "object": "model", "owned_by": "standin"} for n in names]
            await _write_json(writer, 200, {"object": "list", "data": data}, keep_alive=keep)
            return keep
        try:
            payload = _DECODER.decode(request.body)
        except msgspec.DecodeError as exc:
            await self._error(writer, 400, f"invalid JSON: {exc}", keep)
            return keep
        if not isinstance(payload, dict):
            await self._error(writer, 400, "the body must be a JSON object", keep)
            return keep
        if request.path == "/v1/chat/completions":
            self.requests.append(payload)
        else:
            self.embed_requests.append(payload)
        self._notify()
        model = payload.get("model")
        if not isinstance(model, str) or not model:
            await self._error(writer, 400, "'model' is a required property", keep)
            return keep
        if self.models is not None and model not in self.models:
            await self._error(writer, 404, f"The model `{model}` does not exist.", keep)
            return keep
        if request.path == "/v1/chat/completions":
            return await self._chat(request, payload, model, reader, writer)
        await self._embeddings(payload, model, writer, keep)
        return keep

    @staticmethod
    async def _error(writer: asyncio.StreamWriter, status: int, message: str, keep: bool) -> None:
        body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
        await _write_json(writer, status, body, keep_alive=keep)

    async def _stream(
        self,
        script: ChatScript,
        payload: dict[str, Any],
        model: str,
        keep: bool,
        writer: asyncio.StreamWriter,
    ) -> _Outcome:
        if payload.get("stream") is not True:  # as these servers do: no stream unless asked
            return await self._answer(script, payload, model, keep, writer)
        if not isinstance(script, CompletionScript):
            script = CompletionScript(**{k: v for k, v in vars(script).items() if k != "_encoded"})
        if script.first_delay_s > 0:
            await asyncio.sleep(script.first_delay_s)
        if script.status is not None:
            await self._error(writer, script.status, script.error, keep)
            return "error"
        base = {
            "id": "chatcmpl-standin",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        events = [
            _event({**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]})
            for d in script.deltas()
        ]
        stop, end = script.cutoff(len(events))
        action: str = end
        if script.malformed_after is not None and script.malformed_after <= stop:
            stop, action = script.malformed_after, "malformed"
        writer.write(_head(200, _SSE, length=None, keep_alive=keep))
        await writer.drain()
        started_at = asyncio.get_running_loop().time()
        await write_lines(writer, events, stop, script.delay_s, script.coalesce)
        if action == "close":
            await _abort(writer)
            return "closed"
        if action == "malformed":
            writer.write(_chunk(b'data: {"choices": [{"delta": {"content": "half\n\n'))
            writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
            return "error"
        if action == "error":
            error = {"error": {"message": script.error, "type": "server_error", "code": 500}}
            if script.error_event == "error":
                line = b"error: " + _ENCODER.encode(error["error"]) + b"\n\n"
            else:
                line = _event(error)
            writer.write(_chunk(line) + b"0\r\n\r\n")
            await writer.drain()
            return "error"
        if script.hang:
            await asyncio.get_running_loop().create_future()  # until the client leaves
        if script.delay_s > 0 and stop:
            await _until(started_at + stop * script.delay_s)
        if not script.finish:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return "completed"
        reason = "tool_calls" if script.tool_calls else script.done_reason
        tail = [_event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})]
        options = payload.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            usage = {
                "prompt_tokens": self._prompt_tokens(payload),
                "completion_tokens": max(len(events) - 1, 1),
                "total_tokens": self._prompt_tokens(payload) + max(len(events) - 1, 1),
                "prompt_tokens_details": {"cached_tokens": self._cached_tokens(payload)},
            }
            tail.append(_event({**base, "choices": [], "usage": usage}))
        tail.append(b"data: [DONE]\n\n")
        writer.write(_chunk(b"".join(tail)) + b"0\r\n\r\n")
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
        if script.status is not None:
            await self._error(writer, script.status, script.error, keep)
            return "error"
        if script.hang:
            await asyncio.get_running_loop().create_future()
        message = {"role": "assistant", "content": "".join(script.content)}
        prompt = self._prompt_tokens(payload)
        answer = max(len(script.content), 1)
        body = {
            "id": "chatcmpl-standin",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            # Always on a whole answer, as the protocol's servers send it.
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": answer,
                "total_tokens": prompt + answer,
                "prompt_tokens_details": {"cached_tokens": self._cached_tokens(payload)},
            },
        }
        await _write_json(writer, 200, body, keep_alive=keep)
        return "completed"

    async def _embeddings(
        self, payload: dict[str, Any], model: str, writer: asyncio.StreamWriter, keep: bool
    ) -> None:
        given = payload.get("input", "")
        texts: Any = [given] if isinstance(given, str) else given
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            await self._error(writer, 400, "'input' must be a string or a list of strings", keep)
            return
        data = [
            {"object": "embedding", "index": i, "embedding": embed_text(t, self.dimensions)}
            for i, t in enumerate(texts)
        ]
        body = {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": 1}}
        await _write_json(writer, 200, body, keep_alive=keep)

    def _cached_tokens(self, payload: dict[str, Any]) -> int:
        """The prompt's tokens a server's prompt cache would hold: those of the longest run
        of leading messages an earlier request began with, byte for byte."""
        seen: set[bytes] = self.__dict__.setdefault("_prefixes", set())
        messages = payload.get("messages") or []
        cached = tokens = 0
        prefix = b""
        for message in messages:
            prefix += _ENCODER.encode(message)
            tokens += len(str(message.get("content") or "").split())
            if prefix in seen:
                cached = tokens
            seen.add(prefix)
        return cached

    @staticmethod
    def _prompt_tokens(payload: dict[str, Any]) -> int:
        messages = payload.get("messages") or []
        return max(sum(len(str(m.get("content") or "").split()) for m in messages), 1)
