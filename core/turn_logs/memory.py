"""The event logs of turns in this process's memory: the single-instance adapter.

With rejoining on (``HTTP_SURFACE_REJOIN_S`` > 0) a turn's events go into a :class:`TurnLog`
as well as to the live reader. Each event gets a sequence number (the ``turn`` event that
opens the stream is 0). A reader follows the log from any number on; when the last reader
leaves before the turn ended, the turn keeps running for the grace period and is cancelled
(its model request closed) if nobody rejoins by then. An ended turn's log stays for the grace
period, or five minutes when it staged an action, so a reloaded page can offer the choices
of its ``pending`` event again.

The log is bounded: answer and reasoning deltas beyond ``delta_budget`` characters are
dropped oldest first (their sequence numbers stay taken), every other event is kept. A
reader that asks for dropped deltas gets what is left, and ``final`` has the whole text.

Nothing here touches storage or the network: the per-event cost is a list append and, when
a reader waits, waking it once per batch. Logs live in the process that runs the turn; the
shared adapter (:mod:`core.turn_logs.shared`) copies them to the state store in batches.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Final

from core.clock import Clock, system_clock
from core.engine import events

#: An ended turn that staged an action stays rejoinable as long as its tokens live.
PENDING_RETENTION_S: Final = 300.0
DELTA_BUDGET: Final = 256 * 1024
#: Built once: ``A | B`` written inside a loop builds the union again on every event (~0.2 µs).
_DELTAS: Final = events.Text | events.Reasoning


class TurnLog:
    """One turn's events in order, with the readers following it."""

    def __init__(
        self,
        turn_id: str,
        owner: str,
        *,
        cancel: Callable[[], None],
        grace_s: float,
        delta_budget: int = DELTA_BUDGET,
        idle: Callable[[TurnLog], None] | None = None,
    ) -> None:
        self.turn_id = turn_id
        self.owner = owner
        self.events: list[events.Event | events.TurnStarted | None] = [
            events.TurnStarted(turn_id=turn_id)
        ]
        self.done = False
        self.ended_at: float | None = None
        self.staged = False
        self.readers = 0
        self._cancel = cancel
        self._idle = idle
        self._grace_s = grace_s
        self._budget = delta_budget
        self._delta_chars = 0
        self._trimmed_to = 1  # events before this index have had their deltas dropped
        self._changed: asyncio.Future[None] | None = None
        self._grace: asyncio.TimerHandle | None = None
        self.pump: asyncio.Task[None] | None = None

    # -- writing (the turn's side) -----------------------------------------------------

    def extend(self, batch: list[events.Event]) -> None:
        """Appends a batch of the turn's events and wakes the readers once."""
        for event in batch:
            if isinstance(event, _DELTAS):
                self._delta_chars += len(event.chunk)
            elif isinstance(event, events.Pending):
                self.staged = True
        self.events.extend(batch)
        if self._delta_chars > self._budget:
            self._trim()
        self._wake()

    def end(self, now: float) -> None:
        self.done = True
        self.ended_at = now
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        self._wake()

    def _trim(self) -> None:
        entries = self.events
        index = self._trimmed_to
        while self._delta_chars > self._budget // 2 and index < len(entries):
            event = entries[index]
            if isinstance(event, _DELTAS):
                self._delta_chars -= len(event.chunk)
                entries[index] = None
            index += 1
        self._trimmed_to = index

    def _wake(self) -> None:
        changed = self._changed
        if changed is not None:
            self._changed = None
            if not changed.done():
                changed.set_result(None)

    # -- reading (the channel's side) ----------------------------------------------------

    def since(self, start: int) -> list[tuple[int, events.Event | events.TurnStarted]]:
        """The kept events numbered ``start`` and later."""
        return [
            (seq, event)
            for seq, event in enumerate(self.events[start:], start)
            if event is not None
        ]

    async def changed(self) -> None:
        """Returns when events are added or the turn ends."""
        if self._changed is None:
            self._changed = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._changed)

    def attach(self) -> None:
        self.readers += 1
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None

    def detach(self) -> None:
        """A reader left; with none left, the turn gets the grace period to be rejoined."""
        self.readers -= 1
        if self.readers == 0 and not self.done:
            loop = asyncio.get_running_loop()
            self._grace = loop.call_later(self._grace_s, self._abandon)

    def _abandon(self) -> None:
        self._grace = None
        if self.readers == 0 and not self.done:
            if self._idle is None:
                self._cancel()
            else:  # readers may follow from other instances: the adapter decides
                self._idle(self)

    def rearm(self, delay_s: float) -> None:
        """Looks again for readers in ``delay_s`` (a reader elsewhere was seen lately)."""
        if self.readers == 0 and not self.done and self._grace is None:
            loop = asyncio.get_running_loop()
            self._grace = loop.call_later(max(delay_s, 0.0), self._abandon)

    def abandon(self) -> None:
        """Cancels the turn if it is still running with no reader here."""
        if self.readers == 0 and not self.done:
            self._cancel()

    @property
    def trimmed_to(self) -> int:
        """Deltas numbered below this have been dropped to keep the log in bounds."""
        return self._trimmed_to

    def expired(self, now: float) -> bool:
        if self.ended_at is None:
            return False
        keep = max(self._grace_s, PENDING_RETENTION_S if self.staged else 0.0)
        return now - self.ended_at > keep


class MemoryTurnLogs:
    """The rejoinable turns of this process, by id; only their owner finds them."""

    def __init__(self, grace_s: float, *, clock: Clock = system_clock) -> None:
        self.grace_s = grace_s
        self._clock = clock
        self._logs: dict[str, TurnLog] = {}

    def open(
        self, owner: str, cancel: Callable[[], None], idle: Callable[[TurnLog], None] | None = None
    ) -> TurnLog:
        self._prune()
        turn_id = secrets.token_urlsafe(18)
        log = TurnLog(turn_id, owner, cancel=cancel, grace_s=self.grace_s, idle=idle)
        self._logs[turn_id] = log
        return log

    async def find(self, turn_id: str, owner: str) -> TurnLog | None:
        return self.find_here(turn_id, owner)

    async def close(self) -> None:
        """Nothing to release: the logs go with the process."""

    def find_here(self, turn_id: str, owner: str) -> TurnLog | None:
        """The log, or None for an unknown id, an expired log and another person's turn."""
        self._prune()
        log = self._logs.get(turn_id)
        if log is None or not secrets.compare_digest(log.owner, owner):
            return None
        return log

    def end(self, log: TurnLog) -> None:
        log.end(self._clock().timestamp())

    def _prune(self) -> None:
        now = self._clock().timestamp()
        for turn_id in [key for key, log in self._logs.items() if log.expired(now)]:
            del self._logs[turn_id]

    def __len__(self) -> int:
        return len(self._logs)
