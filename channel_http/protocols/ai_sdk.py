"""The AI SDK's UI message stream (v1): a turn's events as the chunks ``useChat`` reads.

One :class:`UiMessageStream` renders one response: ``data: <json>`` lines, no ``event:`` or
``id:`` lines, ending with ``data: [DONE]``. It is a pure translation of Mercury's events
with the little state the protocol needs (the open text and reasoning parts, the tool calls
that wait for a confirmation, the text streamed so far):

============================  ===========================================================
Mercury                       UI message chunks
============================  ===========================================================
``turn``                      ``start{messageId, messageMetadata.turnId}``, ``start-step``
``reasoning``/``_end``        ``reasoning-start{id}`` on its first chunk, ``-delta``, ``-end``
``text``                      ``text-start{id}``, ``text-delta``, ``text-end`` (one id per part,
                              closed before a tool and reopened after)
``tool``                      ``tool-input-available{toolCallId, toolName, input.detail, title}``
``tool_finish``               ``tool-output-available{output.outcome}`` / ``tool-output-error``
                              (``pending``: nothing; the ``pending`` event follows)
``pending`` (one plain        ``tool-approval-request{approvalId: token, toolCallId}``
choice)
``pending`` (labelled         ``data-pending{token, command, choices, toolCallId, expiresAt}``
choices)                      and a text naming the choices and their tokens
``login``                     ``data-login{service, url}`` and a Markdown link in the text
``final``                     what ``final.text`` adds to the streamed text, ``finish-step``,
                              ``finish{messageMetadata: turnId, pendingNote, usage}``
``error``                     ``error{errorText}``
============================  ===========================================================

Heartbeats stay SSE comments (``: ping``), which the AI SDK's parser skips.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from core.engine import events

if TYPE_CHECKING:
    from core.people.i18n import Translator

#: ``UI_MESSAGE_STREAM_HEADERS`` of the ``ai`` package, but the media type Litestar sets.
HEADERS: Final = {
    "cache-control": "no-cache, no-transform",
    "x-accel-buffering": "no",
    "connection": "keep-alive",
    "x-vercel-ai-ui-message-stream": "v1",
}
DONE: Final = b"data: [DONE]\n\n"
#: The tool name of a ``tool`` event without one: Mercury saving something to memory.
MEMORY_TOOL: Final = "memory"

_encode = msgspec.json.Encoder().encode


def chunk(value: dict[str, Any]) -> bytes:
    """One chunk as its ``data:`` line."""
    return b"data: " + _encode(value) + b"\n\n"


def approval_id(pending: events.Pending) -> str | None:
    """The approval id of a ``pending`` that is a plain yes/no of a known call, else None.

    A single unlabelled choice is approved by its token (a denial lets it lapse); a Confirm
    and a Cancel choice (``kind``) by ``<confirm token>.<cancel token>``, so the re-post
    presses one or the other without anything kept on the server.
    """
    if pending.tool_call_id is None:
        return None
    choices = pending.choices
    if len(choices) == 1 and not choices[0].label:
        return choices[0].token
    kinds = {choice.kind: choice.token for choice in choices}
    if len(choices) == 2 and set(kinds) == {"confirm", "cancel"}:
        return f"{kinds['confirm']}.{kinds['cancel']}"
    return None


def is_approval(pending: events.Pending) -> bool:
    """Whether a ``pending`` is shown as a tool approval request (see :func:`approval_id`)."""
    return approval_id(pending) is not None


def approval_tokens(approval: str) -> tuple[str, str | None]:
    """The token an approval's "yes" presses, and its "no" (None: the staging lapses)."""
    confirm, _, cancel = approval.partition(".")
    return confirm, cancel or None


class UiMessageStream:
    """The chunks of one response, from the events of one turn (or a turn resumed into it).

    ``message_id`` continues an assistant message the client already holds (the re-post
    after an approval): ``start`` names it instead of the turn, and ``lead`` (chunks for the
    approved or denied call) follows ``start`` before the resumed turn's own chunks.
    """

    __slots__ = (
        "_delta_head",
        "_lead",
        "_message_id",
        "_parts",
        "_reasoning",
        "_streamed",
        "_text",
        "_tr",
        "_turn_id",
        "ended",
    )

    def __init__(
        self, translator: Translator, *, message_id: str | None = None, lead: bytes = b""
    ) -> None:
        self._tr = translator
        self._message_id = message_id
        self._lead = lead
        self._turn_id: str | None = None
        self._text: str | None = None  # the open text part's id
        self._delta_head = b""  # its text-delta chunk up to the delta
        self._reasoning: set[str] = set()  # the open reasoning parts' ids
        self._parts = 0  # text parts opened so far, for their ids
        self._streamed: list[str] = []  # the answer text sent so far, to compare with final
        self.ended = False  # a final or an error was rendered: the message is complete

    def __call__(self, batch: Sequence[events.Event | events.TurnStarted]) -> bytes:
        """The chunks of a batch of events, as one write (empty when it shows nothing).

        ``finish`` or ``error`` ends the message, followed by ``[DONE]``; what the turn
        emits after it (memory capture's tool calls) is not part of the message.
        """
        out: list[bytes] = []
        append, streamed = out.append, self._streamed
        # Most events are answer deltas of an open text part: written here, in one
        # concatenation each, without a call (the cost per event beside /turn's frames).
        head = None if self._text is None else self._delta_head
        for event in batch:
            if head is not None and type(event) is events.Text:
                delta = event.chunk
                append(head + _encode(delta) + b"}\n\n")
                streamed.append(delta)
                continue
            if self.ended:
                break
            self._event(event, out)
            head = None if self._text is None else self._delta_head
        return b"".join(out)

    def settled(self, text: str) -> bytes:
        """A whole response without a turn: ``lead``, then ``text`` as the answer."""
        out: list[bytes] = []
        self._start(None, out)
        self._final(events.Final(text=text), out)
        return b"".join(out)

    # ------------------------------------------------------------------ the events

    def _event(self, event: events.Event | events.TurnStarted, out: list[bytes]) -> None:
        if type(event) is events.Text:  # most events: first, and by exact type
            self._say(event.chunk, out)
        elif isinstance(event, events.Reasoning):
            if event.id not in self._reasoning:
                self._reasoning.add(event.id)
                out.append(chunk({"type": "reasoning-start", "id": event.id}))
            out.append(chunk({"type": "reasoning-delta", "id": event.id, "delta": event.chunk}))
        elif isinstance(event, events.ReasoningEnd):
            if event.id in self._reasoning:
                self._reasoning.discard(event.id)
                out.append(chunk({"type": "reasoning-end", "id": event.id}))
        elif isinstance(event, events.Tool):
            self._close_text(out)
            out.append(
                chunk(
                    {
                        "type": "tool-input-available",
                        "toolCallId": event.tool_call_id,
                        "toolName": event.tool_name or MEMORY_TOOL,
                        "input": {"detail": event.detail},
                        "title": event.label,
                    }
                )
            )
        elif isinstance(event, events.ToolFinish):
            self._tool_finish(event, out)
        elif isinstance(event, events.Pending):
            self._pending(event, out)
        elif isinstance(event, events.Login):
            out.append(
                chunk({"type": "data-login", "data": {"service": event.service, "url": event.url}})
            )
            link = self._tr.gettext("Sign in to %(service)s: %(url)s") % {
                "service": event.service,
                "url": f"[{event.url}]({event.url})",
            }
            self._aside(link, out)
        elif isinstance(event, events.Final):
            self._final(event, out)
        elif isinstance(event, events.Error):
            self._close_parts(out)
            out.append(chunk({"type": "error", "errorText": event.message}))
            out.append(DONE)
            self.ended = True
        elif isinstance(event, events.TurnStarted):
            self._start(event.turn_id, out)

    def _start(self, turn_id: str | None, out: list[bytes]) -> None:
        self._turn_id = turn_id
        opening: dict[str, Any] = {"type": "start"}
        if (message_id := self._message_id or turn_id) is not None:
            opening["messageId"] = message_id
        if turn_id is not None:
            opening["messageMetadata"] = {"turnId": turn_id}
        out.append(chunk(opening))
        if self._lead:
            out.append(self._lead)
        out.append(chunk({"type": "start-step"}))

    def _tool_finish(self, event: events.ToolFinish, out: list[bytes]) -> None:
        if event.outcome == "success":
            out.append(
                chunk(
                    {
                        "type": "tool-output-available",
                        "toolCallId": event.tool_call_id,
                        "output": {"outcome": "success"},
                    }
                )
            )
        elif event.outcome == "failed":
            out.append(
                chunk(
                    {
                        "type": "tool-output-error",
                        "toolCallId": event.tool_call_id,
                        # Shown: a failed tool call's error in a useChat UI.
                        "errorText": self._tr.gettext("The tool failed."),
                    }
                )
            )
        # "pending": the call waits; its pending event says how it is answered.

    def _pending(self, event: events.Pending, out: list[bytes]) -> None:
        approval = approval_id(event)
        if approval is not None:
            out.append(
                chunk(
                    {
                        "type": "tool-approval-request",
                        "approvalId": approval,
                        "toolCallId": event.tool_call_id,
                    }
                )
            )
            return
        data: dict[str, Any] = {
            "token": event.token,
            "command": event.command,
            "choices": [{"label": c.label, "token": c.token} for c in event.choices],
        }
        if event.tool_call_id is not None:
            data["toolCallId"] = event.tool_call_id
        if event.expires_at is not None:
            data["expiresAt"] = event.expires_at  # encoded as /turn's pending encodes it
        out.append(chunk({"type": "data-pending", "data": data}))
        choices = "; ".join(f"{c.label}: {c.token}" for c in event.choices) or event.token
        self._aside(
            self._tr.gettext("To confirm, answer with the token (%(choices)s).")
            % {"choices": choices},
            out,
        )

    def _final(self, event: events.Final, out: list[bytes]) -> None:
        streamed = "".join(self._streamed)
        if event.text.startswith(streamed) and len(event.text) > len(streamed):
            self._say(event.text[len(streamed) :], out)
        self._close_parts(out)
        out.append(chunk({"type": "finish-step"}))
        metadata: dict[str, Any] = {} if self._turn_id is None else {"turnId": self._turn_id}
        if event.pending_note is not None:
            metadata["pendingNote"] = event.pending_note
        usage = getattr(event, "usage", None)  # the turn's token usage, where final carries it
        if usage is not None:
            metadata["usage"] = msgspec.to_builtins(usage)
        out.append(chunk({"type": "finish", "finishReason": "stop", "messageMetadata": metadata}))
        out.append(DONE)
        self.ended = True

    # ------------------------------------------------------------------ the parts

    def _say(self, delta: str, out: list[bytes]) -> None:
        if self._text is None:
            self._parts += 1
            self._text = f"text-{self._parts}"
            out.append(chunk({"type": "text-start", "id": self._text}))
            # The part's deltas share all but their text: one concatenation each.
            self._delta_head = b'data: {"type":"text-delta","id":"%b","delta":' % (
                self._text.encode()
            )
        out.append(self._delta_head + _encode(delta) + b"}\n\n")
        self._streamed.append(delta)

    def _aside(self, sentence: str, out: list[bytes]) -> None:
        """A text part of the protocol's own (a link, a choice): not part of ``final``'s text."""
        self._close_text(out)
        self._parts += 1
        part = f"text-{self._parts}"
        out.append(chunk({"type": "text-start", "id": part}))
        out.append(chunk({"type": "text-delta", "id": part, "delta": sentence}))
        out.append(chunk({"type": "text-end", "id": part}))

    def _close_text(self, out: list[bytes]) -> None:
        if self._text is not None:
            out.append(chunk({"type": "text-end", "id": self._text}))
            self._text = None

    def _close_parts(self, out: list[bytes]) -> None:
        self._close_text(out)
        for part in sorted(self._reasoning):
            out.append(chunk({"type": "reasoning-end", "id": part}))
        self._reasoning.clear()
