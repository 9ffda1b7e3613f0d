"""A turn's events rendered live onto a chat: words as they come, tools as status, buttons.

::

    text ─► the answer so far (paced: bridges.pacing)
    reasoning ─► not shown (``bridges.show_reasoning``: its latest line as the status)
    tool ─► its label as the status line; tool_finish ─► the status goes
    login ─► not an event here: the turn's ``sign_in`` hands it on (bridges.sign_in)
    pending ─► one button per choice (more than the platform carries: the typed tokens)
    final ─► exactly ``final.text`` left in the chat, with the buttons and the files
    error ─► the error's sentence replaces what was shown; a shutdown's (the server
             stopping) follows the answer so far instead: the words stay, with an ending
    a stop button (``s:<stop id>``) on the message while the turn runs

Buttons carry an action string the pipeline reads back from a press (written and read only
here, at most :data:`~bridges.port.ACTION_MAX_BYTES` bytes):

- ``c:<token>:<owner>``: a confirmation's choice; ``<owner>`` is the first 10 hex
  characters of the SHA-256 of the owner's person key, so a foreign press is told apart
  before anything is looked up. The token is the confirmation's own, drawn by a CSPRNG and
  kept server-side with its conversation and owner: a press redeems it only in that
  conversation, for that owner.
- ``s:<stop id>``: stop; ``<stop id>`` is 16 URL-safe characters drawn by a CSPRNG for the
  turn (:func:`new_stop_id`) and kept server-side with it. Nothing public (a space, a
  thread, a session key) gives it, it is new for every turn, and a press stops only the turn
  holding it, in the conversation the press came from.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from bridges.pacing import Pacer
from bridges.port import ACTION_MAX_BYTES, ReplyButton
from core.engine import events

if TYPE_CHECKING:
    from bridges.port import EgressFile, LiveBridge, Received
    from core.engine.sessions import Turn
    from core.people.i18n import Translator

__all__ = [
    "ConfirmPress",
    "LiveAnswer",
    "StopPress",
    "confirm_action",
    "new_stop_id",
    "owner_mark",
    "parse_action",
    "stop_action",
    "timeout_text",
    "turn_mark",
    "typed_confirmation",
]

_OWNER_CHARS: Final = 10
_TURN_CHARS: Final = 16


def owner_mark(person_key: str) -> str:
    """The owner part of a confirmation's action: a short hash of the person key."""
    return hashlib.sha256(person_key.encode()).hexdigest()[:_OWNER_CHARS]


def turn_mark(session_key: str) -> str:
    """A conversation's mark between instances: a short hash of its session key (never a
    button's value: anyone can compute it)."""
    return hashlib.sha256(session_key.encode()).hexdigest()[:_TURN_CHARS]


def new_stop_id() -> str:
    """A turn's stop id: 16 URL-safe characters (96 bits) from a CSPRNG."""
    return secrets.token_urlsafe(12)


def confirm_action(token: str, person_key: str) -> str:
    return f"c:{token}:{owner_mark(person_key)}"


def stop_action(stop_id: str) -> str:
    return f"s:{stop_id}"


@dataclass(frozen=True, slots=True)
class ConfirmPress:
    """A confirmation's choice pressed: its token, and whose confirmation it is."""

    token: str
    owner: str


@dataclass(frozen=True, slots=True)
class StopPress:
    """A stop pressed: the turn's stop id (:func:`new_stop_id`)."""

    turn: str


def parse_action(action: str) -> ConfirmPress | StopPress | None:
    """What a pressed button's action asks; None for anything not written here."""
    if len(action.encode()) > ACTION_MAX_BYTES:
        return None
    kind, _, rest = action.partition(":")
    if kind == "c":
        token, _, owner = rest.partition(":")
        if token and len(owner) == _OWNER_CHARS:
            return ConfirmPress(token=token, owner=owner)
    elif kind == "s" and len(rest) == _TURN_CHARS:
        return StopPress(turn=rest)
    return None


def typed_confirmation(pending: events.Pending, translator: Translator) -> str:
    """The sentence that shows a confirmation's tokens to type back (no buttons)."""
    choices = "; ".join(f"{c.label}: {c.token}" for c in pending.choices) or pending.token
    return translator.gettext("To confirm, answer with the token (%(choices)s).") % {
        "choices": choices
    }


def timeout_text(timeout_s: float, translator: Translator) -> str:
    seconds = math.ceil(timeout_s)
    return translator.ngettext(
        "The turn took longer than %(seconds)d second and was stopped; "
        "ask something shorter or try again.",
        "The turn took longer than %(seconds)d seconds and was stopped; "
        "ask something shorter or try again.",
        seconds,
    ) % {"seconds": seconds}


#: The most of the model's reasoning shown as a status line (its end), and kept to find it.
_REASONING_CHARS: Final = 200
_REASONING_KEPT: Final = 2000


def _last_line(reasoning: str) -> str:
    """The reasoning's line being written (or the last one ended), at most
    :data:`_REASONING_CHARS` characters of its end."""
    lines = reasoning.rstrip("\n").rsplit("\n", 1)
    return lines[-1][-_REASONING_CHARS:]


class LiveAnswer:
    """One turn's answer, rendered live as a reply to ``to`` on ``bridge``."""

    def __init__(
        self,
        bridge: LiveBridge,
        to: Received,
        translator: Translator,
        *,
        owner_key: str,
        stop_id: str,
        show_reasoning: bool = False,
        resume: str | None = None,
        posted: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """``resume`` is the message an earlier run of the delivery posted (written into,
        :class:`~bridges.pacing.Pacer`); ``posted`` is given this answer's first message."""
        self._bridge = bridge
        self._show_reasoning = show_reasoning
        self._to = to
        self._translator = translator
        self._owner_key = owner_key
        #: The answer's text so far (every text event taken).
        self._written = ""
        self.pacer = Pacer(
            bridge,
            to,
            limits=bridge.live_limits,
            status=translator.gettext("Thinking…"),
            buttons=(
                ReplyButton(
                    label=translator.gettext("Stop"),
                    action=stop_action(stop_id),
                    style="danger",
                ),
            ),
            resume=resume,
            posted=posted,
        )

    async def render(
        self,
        turn: Turn,
        *,
        timeout_s: float,
        files_of: Callable[[], Awaitable[Sequence[EgressFile]]],
        notes: Sequence[str] = (),
    ) -> bool:
        """Show ``turn``'s events as they come; leave its answer (or its error) for good.

        False when its last word did not reach the platform (the message is left as it was):
        the delivery is then run again, and that run writes on in the same message."""
        tr = self._translator
        pacer = self.pacer
        await pacer.open()
        try:
            try:
                async with asyncio.timeout(timeout_s):
                    final, pending, error = await self._follow(turn)
            except TimeoutError:
                turn.cancel()
                await pacer.fail(timeout_text(timeout_s, tr))
                return pacer.delivered
            if turn.outcome == "cancelled":
                await pacer.fail(tr.gettext("Stopped."))
                return pacer.delivered
            if error is not None and turn.failure == "stopping":
                # Cut off by a shutdown: what was written stays, and says why it ends there.
                await pacer.end("\n\n".join(t for t in (self._written, error.message) if t))
                return pacer.delivered
            if error is not None:
                await pacer.fail(error.message)
                return pacer.delivered
            if final is None:
                await pacer.fail(
                    tr.gettext("Something went wrong on our side. Try again in a moment.")
                )
                return pacer.delivered
            text = final.text
            buttons: list[ReplyButton] = []
            if pending is not None:
                if 0 < len(pending.choices) <= pacer.limits.max_buttons:
                    buttons = [
                        ReplyButton(
                            label=choice.label or tr.gettext("Confirm"),
                            action=confirm_action(choice.token, self._owner_key),
                            style="primary" if number == 0 else "default",
                        )
                        for number, choice in enumerate(pending.choices)
                    ]
                else:
                    text = f"{text}\n\n{typed_confirmation(pending, tr)}"
            if notes:
                text = "\n\n".join((text, *notes))
            await pacer.end(text, buttons, await files_of())
            return pacer.delivered
        finally:
            await pacer.cancel()

    async def _follow(
        self, turn: Turn
    ) -> tuple[events.Final | None, events.Pending | None, events.Error | None]:
        """Offer the answer so far to the pacer after each batch of events, until the end."""
        final: events.Final | None = None
        pending: events.Pending | None = None
        error: events.Error | None = None
        parts: list[str] = []
        text = ""
        tools: dict[str, str] = {}
        reasoning = ""
        thinking = self._translator.gettext("Thinking…")
        pacer = self.pacer
        while True:
            for event in await turn.events.take():
                if event is None:
                    self._written = text + "".join(parts)
                    return final, pending, error
                if isinstance(event, events.Text):
                    parts.append(event.chunk)
                elif isinstance(event, events.Reasoning):
                    if self._show_reasoning:
                        reasoning = (reasoning + event.chunk)[-_REASONING_KEPT:]
                elif isinstance(event, events.Tool):
                    tools[event.tool_call_id] = event.label
                elif isinstance(event, events.ToolFinish):
                    tools.pop(event.tool_call_id, None)
                elif isinstance(event, events.Pending):
                    pending = event
                elif isinstance(event, events.Final):
                    final = event
                elif isinstance(event, events.Error):
                    error = event
            if parts:
                text += "".join(parts)
                parts.clear()
            status = next(reversed(tools.values()), None) if tools else None
            if status is None and not text:
                status = _last_line(reasoning).strip() or thinking
            pacer.offer(text, status)
