"""The events of a turn: one union of msgspec Structs, each with its SSE name.

``name`` is the event's name on a channel's wire (the SSE ``event:`` line of the HTTP
channel); the Struct's fields are its data. Optional fields left at their default are
omitted when encoded.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal

import msgspec

ToolOutcome = Literal["success", "failed", "pending"]


class _Event(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    name: ClassVar[bytes]


class Reasoning(_Event, frozen=True):
    """A model reasoning delta."""

    name: ClassVar[bytes] = b"reasoning"
    chunk: str
    id: str


class ReasoningEnd(_Event, frozen=True):
    """A reasoning block ends; ``failed`` only when the turn was aborted inside it."""

    name: ClassVar[bytes] = b"reasoning_end"
    id: str
    failed: bool


class Tool(_Event, frozen=True):
    """A tool call starts. ``name`` is absent when Mercury saves something to memory."""

    name: ClassVar[bytes] = b"tool"
    label: str
    detail: str
    tool_call_id: str
    tool_name: str | None = msgspec.field(default=None, name="name")


class ToolFinish(_Event, frozen=True):
    """A tool call settles."""

    name: ClassVar[bytes] = b"tool_finish"
    tool_call_id: str
    outcome: ToolOutcome


class Text(_Event, frozen=True):
    """An answer-text delta."""

    name: ClassVar[bytes] = b"text"
    chunk: str


ChoiceKind = Literal["confirm", "cancel"]


class Choice(msgspec.Struct, frozen=True, omit_defaults=True):
    """One way to answer a staged action: its token and its label (empty for a plain one).

    ``kind`` marks a yes/no staging's two choices (``confirm`` runs the action, ``cancel``
    drops it), so a client can show them as an approval whatever the person's language.
    """

    token: str
    label: str
    kind: ChoiceKind | None = None


class Pending(_Event, frozen=True):
    """A confirm-required action was staged; ``tool_call_id`` names the call that staged it."""

    name: ClassVar[bytes] = b"pending"
    command: str
    token: str
    choices: tuple[Choice, ...]
    tool_call_id: str | None = None
    #: The staging's id, by which its owner answers it once the tokens are gone (a reload).
    confirmation_id: str | None = None
    #: When the staging expires unanswered (UTC, to the millisecond): a client can settle it
    #: then without asking, measured against the server's clock.
    expires_at: datetime | None = None


class Login(_Event, frozen=True):
    """The person must log in to ``service`` at ``url`` (the model never sees it)."""

    name: ClassVar[bytes] = b"login"
    service: str
    url: str


class Usage(msgspec.Struct, frozen=True, omit_defaults=True):
    """The tokens a turn's model calls used, as the model reported them: the prompts'
    (``input``), the answers' (``output``) and, where the server says, the prompts' tokens
    read from its cache (``cached``, part of ``input``)."""

    input: int
    output: int
    cached: int | None = None


class Final(_Event, frozen=True):
    """The complete, authoritative answer; ``usage`` when the model reported its tokens."""

    name: ClassVar[bytes] = b"final"
    text: str
    pending_note: str | None = None
    usage: Usage | None = None


class Error(_Event, frozen=True):
    """The turn failed; the stream closes after it."""

    name: ClassVar[bytes] = b"error"
    message: str


Event = Reasoning | ReasoningEnd | Tool | ToolFinish | Text | Pending | Login | Final | Error


class TurnStarted(_Event, frozen=True):
    """The first event of a stream: the turn's id, to rejoin it (an extension of contract 6).

    Not part of :data:`Event`: the engine never emits it; the channel opens the stream with it.
    """

    name: ClassVar[bytes] = b"turn"
    turn_id: str


EVENT_TYPES: tuple[type[_Event], ...] = (
    Reasoning,
    ReasoningEnd,
    Tool,
    ToolFinish,
    Text,
    Pending,
    Login,
    Final,
    Error,
)
