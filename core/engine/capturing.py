"""When a session's words go to long-term memory: :class:`Capturer`, a step of a turn.

After a turn, once enough new messages exist, the capture runs and the stream shows it as
a nameless tool; a session compacted or freed by the idle sweep has what is left captured
first. A failed capture is logged and retried at the next trigger, never a turn's error.

The summary is a model call like a turn's: its tokens are spent (``spend``: the metric and
the usage ledger) against the conversation's space and the person of its latest turn, whose
words set the capture off or were the last before it was compacted or freed; in a person's
own conversation, that person.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from core.engine import events
from core.memory.capture import conversational
from core.tools.registry import headline
from core.usage import Spent

if TYPE_CHECKING:
    from core.engine.history import Session
    from core.engine.turn_events import TurnEvents
    from core.memory.capture import Capture
    from core.model import ChatMessage, Completion
    from core.tools.registry import ToolCallContext

__all__ = ["Capturer"]

log = logging.getLogger("mercury.sessions")


class Capturer:
    """Captures a session into ``capture`` once ``threshold`` new messages were said."""

    def __init__(
        self,
        capture: Capture,
        *,
        threshold: int,
        spend: Callable[[Spent], None] | None = None,
    ) -> None:
        self._capture = capture
        self._threshold = threshold
        self._spend = spend
        self._tasks: set[asyncio.Task[None]] = set()

    async def after_turn(
        self, session: Session, context: ToolCallContext, emit: TurnEvents, words: str
    ) -> None:
        """Capture once enough new messages exist; the stream shows it as a nameless tool.

        Its detail is the head of the person's ``words`` (the message of the turn that set
        it off): one short line, never the answer, which the client has just rendered.

        The capture runs in a task of its own, so a client leaving after ``final`` doesn't
        cancel it; the turn waits for it (holding the session) while its client stays.
        """
        said = conversational(session.messages)
        if len(said) - session.captured_upto < self._threshold:
            return
        translator = context.translator
        call_id = f"mem_{uuid.uuid4().hex[:16]}"
        await emit(
            events.Tool(
                label=translator.gettext("Noting something important…"),
                detail=headline(words),
                tool_call_id=call_id,
            )
        )
        outcome: list[events.ToolOutcome] = ["failed"]
        task = asyncio.get_running_loop().create_task(self._run(session, said, outcome))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        await asyncio.shield(task)
        await emit(events.ToolFinish(tool_call_id=call_id, outcome=outcome[0]))

    async def rest(self, session: Session) -> None:
        """Capture what the session said since its last capture, if anything (before it is
        compacted or freed)."""
        said = conversational(session.messages)
        if len(said) > session.captured_upto:
            await self._run(session, said, ["failed"])

    async def _run(
        self, session: Session, said: list[ChatMessage], outcome: list[events.ToolOutcome]
    ) -> None:
        try:
            await self._capture.capture(
                session.person_key,
                session.key,
                said[session.captured_upto :],
                answered=lambda answer: self._spent(session, answer),
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:  # retried at the next trigger, never a turn error
            log.warning("memory capture for %s failed: %r", _printable(session.key), error)
            return
        session.captured_upto = len(said)
        outcome[0] = "success"

    def _spent(self, session: Session, answer: Completion) -> None:
        if self._spend is None or not (answer.input or answer.output):
            return
        person_key, name = session.speaker or (session.person_key, None)
        self._spend(
            Spent(
                person_key=person_key,
                space_id=session.space_id,
                model=answer.model,
                input=answer.input or 0,
                output=answer.output or 0,
                cached=answer.cached,
                person_name=name,
            )
        )


def _printable(text: str) -> str:
    """``text`` safe for one log line: control characters become ``?``."""
    return "".join("?" if ord(c) < 32 or ord(c) == 127 else c for c in text)
