"""``stop`` across instances: a stop taken by one instance reaches the turn running on another.

A conversation's turn runs on whichever instance took its message; the ``stop`` that follows
(the command, or the stop button) may land on any other. The instance that took it stops a
turn of its own at once; otherwise, when the store is shared (PostgreSQL), it **asks** every
instance through the store's notices (``LISTEN``/``NOTIFY`` on :data:`CHANNEL`): the ask names
the conversation the stop was sent in (its mark, :func:`bridges.live.turn_mark`), the stop
button's id when a button was pressed, and who sends the stop. An instance running a turn of
that conversation (holding that stop id, for a button) decides with the one ``stop`` rule
(:meth:`core.spaces.routing.Router.may_stop`: the one who asked, or an admin of the turn's
own space), cancels it if so, and **answers** on the same channel; the asking instance tells
the sender what came of it. Nobody answering within :data:`ANSWER_WITHIN_S` while the
conversation is still held elsewhere is said as such, never as "nothing is running".

Nothing is written to a table: an ask and its answer are two notices, so a stop costs two
round trips to the server and no turn pays anything while it runs. On SQLite (one instance)
there is nobody to ask.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Final, Literal

import msgspec

from core.state import Database, Notice

__all__ = ["ANSWER_WITHIN_S", "CHANNEL", "StopAsk", "StopOutcome", "TurnStops"]

log = logging.getLogger("mercury.bridges")

CHANNEL: Final = "turn_stops"
#: Seconds the asking instance waits for the one running the turn to answer.
ANSWER_WITHIN_S: Final = 2.0

#: What an instance running the asked conversation's turn did: cancelled it, refused the
#: sender, or found the button's turn ended (another turn of the conversation runs).
StopOutcome = Literal["stopped", "refused", "expired"]


class StopAsk(msgspec.Struct, frozen=True, kw_only=True):
    """A stop for another instance's turn: which conversation, which button, and who sends
    it. Whether they may is judged by the instance running the turn, in the turn's space."""

    #: The mark of the conversation the stop was sent in (its session key's short hash).
    mark: str
    #: The sender's person key: the one who asked may stop their own turn.
    person_key: str
    #: The account the sender wrote from (``<platform>:<id>``), for their role in the space.
    caller_id: str = ""
    #: The pressed stop button's id; empty for a typed ``stop`` (the conversation's turn).
    button: str = ""


class _Ask(msgspec.Struct, frozen=True, tag="ask"):
    id: str
    sender: str
    stop: StopAsk


class _Answer(msgspec.Struct, frozen=True, tag="answer"):
    id: str
    to: str
    outcome: StopOutcome


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(_Ask | _Answer).decode

#: What an instance does with an ask: the outcome, or None when the turn isn't running here.
Handler = Callable[[StopAsk], Awaitable[StopOutcome | None]]


class TurnStops:
    """Stops asked of, and answered by, every instance sharing the state store."""

    def __init__(
        self,
        db: Database,
        *,
        answer_within_s: float = ANSWER_WITHIN_S,
        instance: str | None = None,
    ) -> None:
        self._db = db
        self.answer_within_s = answer_within_s
        self.instance = instance or uuid.uuid4().hex
        self._handler: Handler | None = None
        self._waiting: dict[str, asyncio.Future[StopOutcome]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._listening = False

    @property
    def shared(self) -> bool:
        """Whether other instances may run turns (and so be asked)."""
        return self._db.shared

    async def start(self) -> None:
        """Listen for asks and answers, when other instances share the store."""
        if self._db.shared and not self._listening:
            await self._db.subscribe(CHANNEL, self._heard)
            self._listening = True

    def serve(self, handler: Handler) -> None:
        """Answer other instances' asks with ``handler`` from now on."""
        self._handler = handler

    async def ask(self, stop: StopAsk) -> StopOutcome | None:
        """Ask every other instance to stop the turn; what the one running it did, or None
        when none answered in time (nothing was running)."""
        if not self._listening:
            return None
        ask_id = uuid.uuid4().hex
        answered: asyncio.Future[StopOutcome] = asyncio.get_running_loop().create_future()
        self._waiting[ask_id] = answered
        try:
            await self._db.notify(
                CHANNEL, _encode(_Ask(id=ask_id, sender=self.instance, stop=stop)).decode()
            )
            async with asyncio.timeout(self.answer_within_s):
                return await answered
        except TimeoutError:
            return None
        finally:
            del self._waiting[ask_id]

    # --- inside -----------------------------------------------------------------------

    def _heard(self, notice: Notice) -> None:
        if notice is None:
            return  # missed notices: an ask waits out its time, as if nobody had answered
        try:
            heard = _decode(notice)
        except msgspec.DecodeError:
            log.warning("a %s notice was not understood; ignored", CHANNEL)
            return
        if isinstance(heard, _Answer):
            waiting = self._waiting.get(heard.id)
            if heard.to == self.instance and waiting is not None and not waiting.done():
                waiting.set_result(heard.outcome)
        elif heard.sender != self.instance and self._handler is not None:
            task = asyncio.get_running_loop().create_task(self._answer(heard, self._handler))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _answer(self, ask: _Ask, handler: Handler) -> None:
        try:
            outcome = await handler(ask.stop)
            if outcome is None:
                return  # not running here: another instance answers, or nobody does
            answer = _Answer(id=ask.id, to=ask.sender, outcome=outcome)
            await self._db.notify(CHANNEL, _encode(answer).decode())
        except Exception:
            log.exception("answering another instance's stop failed")
