"""A running turn's events on their way to the one reader that forwards them.

The turn appends; the reader takes everything waiting in one batch, so a model read that
brings 32 tokens costs one wake-up and one write, not 32 queue round trips. It replaces an
``asyncio.Queue``, whose ``put``/``get_nowait``/``qsize`` per token were about a third of the
server's main thread on a fast answer (docs/benchmarks.md). One producer (the turn's task,
plus the shutdown and the stream's heartbeat timer, all on the loop) and one reader.

The end of the turn is ``None``. Backpressure: a turn that is :data:`EVENT_LIMIT` events
ahead of its reader waits (:meth:`TurnEvents.room`) until the reader takes them, so a slow
client slows the model read instead of growing memory. The end and the shutdown's words
never wait.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from core.engine import events

#: How many events may wait between a turn and a slow client before the turn waits.
EVENT_LIMIT: Final = 256


class TurnEvents:
    """A turn's waiting events: appended one by one, taken in batches by one reader.

    Calling it (``await emit(event)``) appends and waits for room when the reader is
    behind; :meth:`push` appends without waiting (the model step pushes a whole read,
    then waits for room once).
    """

    __slots__ = ("_items", "_reader", "_writer", "limit", "model")

    def __init__(self, limit: int = EVENT_LIMIT) -> None:
        self._items: list[Any] = []
        self._reader: asyncio.Future[None] | None = None
        self._writer: asyncio.Future[None] | None = None
        self.limit = limit
        #: The model that answered the turn's latest model call (a fallback may answer in
        #: the first model's place), for the turn's log line; ``None`` before any call.
        self.model: str | None = None

    def __len__(self) -> int:
        return len(self._items)

    def push(self, item: events.Event | None) -> None:
        """Append ``item`` (``None`` ends the turn) and wake the reader."""
        self._items.append(item)
        reader = self._reader
        if reader is not None and not reader.done():
            reader.set_result(None)

    def wake(self, marker: object) -> None:
        """Append a reader's own ``marker`` (a heartbeat tick), only when nothing waits."""
        if not self._items:
            self.push(marker)  # type: ignore[arg-type]

    async def __call__(self, event: events.Event) -> None:
        """Append ``event``; wait while the reader is :attr:`limit` events behind."""
        self.push(event)
        if len(self._items) >= self.limit:
            await self.room()

    def is_full(self) -> bool:
        return len(self._items) >= self.limit

    async def room(self) -> None:
        """Until the reader has taken what waits (returns at once when there is room)."""
        while len(self._items) >= self.limit:
            writer = self._writer = asyncio.get_running_loop().create_future()
            try:
                await writer
            finally:
                self._writer = None

    def take_nowait(self) -> list[Any]:
        """Everything waiting, oldest first (empty when nothing does)."""
        items = self._items
        if not items:
            return []
        self._items = []
        writer = self._writer
        if writer is not None and not writer.done():
            writer.set_result(None)
        return items

    async def take(self) -> list[Any]:
        """Everything waiting, oldest first; waits until there is something."""
        while not self._items:
            reader = self._reader = asyncio.get_running_loop().create_future()
            try:
                await reader
            finally:
                self._reader = None
        return self.take_nowait()
