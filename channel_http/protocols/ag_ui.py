"""AG-UI 1.0 over HTTP+SSE: a turn's events rendered as AG-UI events, one per ``data:`` line.

A translation, not a second engine: :class:`AgUiRun` is a pure function of Mercury's event
stream plus the little state AG-UI needs (the open text message, the open reasoning blocks,
the text streamed so far, the interrupts the run ends with). ``POST /ag-ui`` runs the turn
through the same session manager as ``POST /turn`` and answers an interrupt through the same
confirmation code as ``POST /confirm``.

Mapping (Mercury → AG-UI)::

    (opening)            RUN_STARTED {threadId, runId}
    reasoning / _end     REASONING_START + REASONING_MESSAGE_START / _CONTENT / _END + REASONING_END
    text                 TEXT_MESSAGE_START (first chunk of a part) / TEXT_MESSAGE_CONTENT;
                         TEXT_MESSAGE_END before a tool, reasoning, login or the end
    tool                 TOOL_CALL_START {toolCallName: name or "memory"} + TOOL_CALL_ARGS
                         ({"detail": …}) + TOOL_CALL_END; the label in ``metadata``
    tool_finish          TOOL_CALL_RESULT {content: '{"outcome":"success"|"failed"}'};
                         nothing for ``pending``: the call waits for its interrupt
    pending              an interrupt of RUN_FINISHED {outcome: {type: "interrupt"}}
    login                CUSTOM {name: "mercury.login"} + a text part with the link
    final                the text ``final`` adds to the deltas; RUN_FINISHED once the stream
                         ends (a memory capture's tool call may follow ``final``)
    error                RUN_ERROR {message}

AG-UI has no resumption (a re-run is a new run), so these runs are not rejoinable; the run id
is the client's, echoed in RUN_STARTED and RUN_FINISHED.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, timedelta
from typing import Any, Final

import msgspec

from core.clock import Clock, system_clock
from core.engine import events

PROTOCOL_VERSION: Final = "1.0"
#: The ``reason`` of a staged confirmation's interrupt.
CONFIRMATION: Final = "confirmation"
#: The name of the CUSTOM event a ``login`` becomes.
LOGIN_EVENT: Final = "mercury.login"
#: ``toolCallName`` of Mercury's own memory saves (a ``tool`` event without a name).
MEMORY_TOOL: Final = "memory"

_encode = msgspec.json.Encoder().encode
_TEXT_END: Final = b'data: {"type":"TEXT_MESSAGE_END","messageId":"%b"}\n\n'


def frame(event: dict[str, Any]) -> bytes:
    """``data: <one AG-UI event as compact JSON>`` and the blank line that ends the frame."""
    return b"data: " + _encode(event) + b"\n\n"


def _new_id() -> str:
    """A message id: 64 random bits, unique enough within a thread, short on every frame."""
    return os.urandom(8).hex()  # a tenth of uuid4's cost


class AgUiRun:
    """One AG-UI run's rendering of a turn's events: :meth:`render_batch` per batch.

    ``link`` makes the text a login shows (the translated "Sign in to …" with the link);
    ``expires_in`` is how long a staged confirmation stays open, from ``clock``'s now, for
    each interrupt's ``expiresAt``.
    """

    __slots__ = (
        "_clock",
        "_content",
        "_link",
        "_outcome",
        "_reasoning",
        "_streamed",
        "_text_id",
        "expires_in",
        "interrupts",
        "run_id",
        "thread_id",
        "tool_calls",
    )

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        *,
        link: Callable[[str, str], str],
        expires_in: timedelta,
        clock: Clock = system_clock,
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self._link = link
        self.expires_in = expires_in
        self._clock = clock
        self._text_id: bytes | None = None
        self._content = b""
        self._reasoning: set[str] = set()
        self._streamed: list[str] = []
        self._outcome: tuple[dict[str, Any], dict[str, Any] | None] | None = None
        #: The interrupts the run ends with, one per ``pending``.
        self.interrupts: list[dict[str, Any]] = []
        #: Staged calls by confirmation token: the tool call each interrupt answers.
        self.tool_calls: dict[str, str] = {}

    # ------------------------------------------------------------------ frames

    def started(self) -> bytes:
        return frame(
            {
                "type": "RUN_STARTED",
                "threadId": self.thread_id,
                "runId": self.run_id,
                "protocolVersion": PROTOCOL_VERSION,
            }
        )

    def render(self, event: events.Event) -> bytes:
        """The frames ``event`` becomes (possibly none)."""
        if type(event) is events.Text:
            chunk = event.chunk
            if not chunk:
                return b""
            self._streamed.append(chunk)
            return self._text(chunk)
        if type(event) is events.Reasoning:
            return self._reasoning_delta(event)
        if isinstance(event, events.ReasoningEnd):
            if event.id not in self._reasoning:
                return b""
            self._reasoning.discard(event.id)
            return frame({"type": "REASONING_MESSAGE_END", "messageId": event.id}) + frame(
                {"type": "REASONING_END", "messageId": event.id}
            )
        if isinstance(event, events.Tool):
            return self._tool(event)
        if isinstance(event, events.ToolFinish):
            if event.outcome == "pending":
                return b""
            return self.tool_result(event.tool_call_id, {"outcome": event.outcome})
        if isinstance(event, events.Pending):
            self._pending(event)
            return b""
        if isinstance(event, events.Login):
            return self.login(event.service, event.url)
        if isinstance(event, events.Final):
            return self._final(event)
        if isinstance(event, events.Error):
            return self.close_text() + frame({"type": "RUN_ERROR", "message": event.message})
        return b""

    def render_batch(self, batch: list[events.Event]) -> bytes:
        """The frames of a batch of events, as :meth:`render` makes them.

        An answer's deltas, nearly every event of a turn, are written here without a call
        each: into the open text message, one %-format (as ``/turn``'s frames are).
        """
        frames: list[bytes] = []
        append = frames.append
        streamed = self._streamed.append
        for event in batch:
            if type(event) is events.Text and self._text_id is not None and event.chunk:
                streamed(event.chunk)
                append(self._content % _encode(event.chunk))
            else:
                append(self.render(event))
        return b"".join(frames)

    def text(self, chunk: str) -> bytes:
        """A text delta of the server's own (a confirmation's reply), not the model's."""
        return self._text(chunk) if chunk else b""

    def close_text(self) -> bytes:
        """TEXT_MESSAGE_END for the open text message, if one is open."""
        if self._text_id is None:
            return b""
        ended = _TEXT_END % self._text_id
        self._text_id = None
        return ended

    def tool_result(self, tool_call_id: str, content: dict[str, Any]) -> bytes:
        result = {
            "type": "TOOL_CALL_RESULT",
            "messageId": _new_id(),
            "toolCallId": tool_call_id,
            "role": "tool",
            "content": _encode(content).decode(),
        }
        return self.close_text() + frame(result)

    def login(self, service: str, url: str) -> bytes:
        custom = {"type": "CUSTOM", "name": LOGIN_EVENT, "value": {"service": service, "url": url}}
        # A UI that knows nothing of Mercury still shows the link: a Markdown autolink.
        shown = self._link(service, f"<{url}>")
        return self.close_text() + frame(custom) + self._text(shown) + self.close_text()

    def finished(self, result: dict[str, Any] | None = None, usage: Any = None) -> bytes:
        """RUN_FINISHED: an interrupt when the run staged confirmations, success otherwise."""
        finished: dict[str, Any] = {
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": self.run_id,
        }
        if self.interrupts:
            finished["outcome"] = {"type": "interrupt", "interrupts": self.interrupts}
        else:
            finished["outcome"] = {"type": "success"}
        if result is not None:
            finished["result"] = result
        if usage is not None:
            finished["usage"] = [usage]
        return self.close_text() + self._close_reasoning() + frame(finished)

    # ------------------------------------------------------------------ steps

    def _text(self, chunk: str) -> bytes:
        head = b""
        if self._text_id is None:
            message_id = _new_id().encode()
            self._text_id = message_id
            self._content = (
                b'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"%b","delta":%%b}\n\n'
                % message_id
            )
            head = (
                b'data: {"type":"TEXT_MESSAGE_START","messageId":"%b","role":"assistant"}\n\n'
                % message_id
            )
        return head + self._content % _encode(chunk)

    def _reasoning_delta(self, event: events.Reasoning) -> bytes:
        head = b""
        if event.id not in self._reasoning:
            self._reasoning.add(event.id)
            head = (
                self.close_text()
                + frame({"type": "REASONING_START", "messageId": event.id})
                + frame(
                    {"type": "REASONING_MESSAGE_START", "messageId": event.id, "role": "reasoning"}
                )
            )
        if not event.chunk:
            return head
        content = {"type": "REASONING_MESSAGE_CONTENT", "messageId": event.id, "delta": event.chunk}
        return head + frame(content)

    def _close_reasoning(self) -> bytes:
        closing = b"".join(
            frame({"type": "REASONING_MESSAGE_END", "messageId": open_id})
            + frame({"type": "REASONING_END", "messageId": open_id})
            for open_id in sorted(self._reasoning)
        )
        self._reasoning.clear()
        return closing

    def _tool(self, event: events.Tool) -> bytes:
        call_id = event.tool_call_id
        start = {
            "type": "TOOL_CALL_START",
            "toolCallId": call_id,
            "toolCallName": event.tool_name or MEMORY_TOOL,
            "metadata": {"label": event.label},
        }
        detail = _encode({"detail": event.detail}).decode()
        arguments = {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": detail}
        return (
            self.close_text()
            + frame(start)
            + frame(arguments)
            + frame({"type": "TOOL_CALL_END", "toolCallId": call_id})
        )

    def _pending(self, event: events.Pending) -> None:
        # The staging's own expiry; else (an event from before it was carried) the window.
        expires = event.expires_at or self._clock() + self.expires_in
        interrupt: dict[str, Any] = {
            "id": event.token,
            "reason": CONFIRMATION,
            "message": event.command,
            "responseSchema": response_schema(event),
            "expiresAt": expires.astimezone(UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
        }
        if event.tool_call_id is not None:
            interrupt["toolCallId"] = event.tool_call_id
            self.tool_calls[event.token] = event.tool_call_id
        self.interrupts.append(interrupt)

    def _final(self, event: events.Final) -> bytes:
        streamed = "".join(self._streamed)
        rest = ""
        if event.text.startswith(streamed):
            rest = event.text[len(streamed) :]
        elif not streamed:
            rest = event.text
        result: dict[str, Any] = {"text": event.text}
        if event.pending_note is not None:
            result["pendingNote"] = event.pending_note
        usage = getattr(event, "usage", None)  # the turn's token usage, where `final` has it
        self._outcome = (result, None if usage is None else token_usage(usage))
        shown = self._text(rest) if rest else b""
        return shown + self.close_text() + self._close_reasoning()

    def ended(self) -> bytes:
        """RUN_FINISHED, once the turn has ended after its ``final``.

        Not at ``final`` itself: a memory capture may follow it as a tool call, which AG-UI
        allows only inside the run.
        """
        if self._outcome is None:
            return b""
        return self.finished(*self._outcome)


def response_schema(pending: events.Pending) -> dict[str, Any]:
    """The JSON Schema of an answer: ``{"choice": <one of the staging's choice tokens>}``."""
    choices = [
        {"const": choice.token, "title": choice.label or pending.command}
        for choice in pending.choices
    ]
    return {
        "type": "object",
        "required": ["choice"],
        "properties": {"choice": {"oneOf": choices}},
    }


#: ``final.usage``'s counts (``input``, ``output``, ``cached``) by AG-UI ``TokenUsage``'s names.
_USAGE_NAMES: Final = {
    "input": "inputTokens",
    "output": "outputTokens",
    "cached": "cachedInputTokens",
}


def token_usage(usage: Any) -> dict[str, Any]:
    """A ``final`` event's usage as an AG-UI ``TokenUsage`` (the counts it reports)."""
    plain = msgspec.to_builtins(usage)
    counts = plain if isinstance(plain, dict) else {}
    mapped = {
        _USAGE_NAMES[name]: value
        for name, value in counts.items()
        if name in _USAGE_NAMES and isinstance(value, int)
    }
    return mapped


class InterruptCalls:
    """The tool call each open interrupt answers, by its token, for the run that resumes it.

    AG-UI's ``resume`` names only the interrupt; its TOOL_CALL_RESULT must name the call.
    Kept in memory on the instance that staged it, until the confirmation would expire; a
    resume elsewhere (or after a restart) still confirms, only without that result event.
    """

    __slots__ = ("_calls", "limit")

    def __init__(self, limit: int = 10_000) -> None:
        self._calls: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()
        self.limit = limit

    def remember(self, person_key: str, run: AgUiRun) -> None:
        until = time.monotonic() + run.expires_in.total_seconds()
        for token, call_id in run.tool_calls.items():
            self._calls[(person_key, token)] = (call_id, until)
        while len(self._calls) > self.limit:
            self._calls.popitem(last=False)

    def take(self, person_key: str, token: str) -> str | None:
        found = self._calls.pop((person_key, token), None)
        if found is None or found[1] < time.monotonic():
            return None
        return found[0]
