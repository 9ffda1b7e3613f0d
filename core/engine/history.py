"""A conversation's history as the engine holds it in memory while the conversation is active.

:class:`Session` is shared by the session manager (which finds, rebuilds and frees it) and
the answerer (which adds the model's steps to it); it lives here so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from core.engine.transcript import ShownMessage
from core.model import ChatMessage
from core.tools.displays import ToolResults

#: What the model reads after an answer that was cut off (not shown to the person).
INTERRUPTED_NOTE: Final = "[This answer was interrupted before it was finished.]"


@dataclass
class Session:
    """One conversation's history, held in memory while it is active."""

    key: str
    person_key: str
    conversation_id: str | None
    messages: list[ChatMessage] = field(default_factory=list)
    last_active: float = 0.0
    #: How many of the conversation's messages (the person's and the assistant's) the
    #: last successful capture covered.
    captured_upto: int = 0
    #: The conversation's version in the shared transcript these messages reflect
    #: (:mod:`core.engine.conversation_order`); another version means another instance moved on.
    version: int = 0
    #: How many of ``messages`` are in the transcript of record (or never go there).
    recorded: int = 0
    #: What the person saw and the transcript of record doesn't hold yet.
    shown: list[ShownMessage] = field(default_factory=list)
    #: The latest tool results by call id, which ``present`` can show by reference.
    results: ToolResults = field(default_factory=ToolResults)
    #: The shared space the conversation is in (None: a person's own).
    space_id: str | None = None
    #: The person of the latest turn, key and name: whose tokens a capture of it uses.
    speaker: tuple[str, str | None] | None = None


def interrupted_answer(text: str) -> ChatMessage:
    """The history's assistant message for an answer cut off after ``text`` streamed."""
    return ChatMessage(
        role="assistant", content=f"{text}\n\n{INTERRUPTED_NOTE}" if text else INTERRUPTED_NOTE
    )


def shown_time(when: datetime) -> str:
    """The displayed time of an archived message; its order is the writer's ``ts``."""
    return when.isoformat(timespec="milliseconds")
