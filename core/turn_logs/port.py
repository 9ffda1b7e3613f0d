"""Where turns' event logs live, as the channel sees it: the :class:`TurnLogs` port.

Two adapters sit beside it: :mod:`core.turn_logs.memory` (this process only: one instance,
SQLite) and :mod:`core.turn_logs.shared` (the state store every instance shares, when it is
PostgreSQL). Either way the turn's own instance keeps the log in memory and its readers
follow it there; the shared adapter also copies it to the store in batches, so that a reader
who comes back through another instance follows a :class:`LogElsewhere`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from core.turn_logs.memory import TurnLog

__all__ = ["Frame", "LogElsewhere", "TurnLogs"]

#: One logged event as another instance reads it: its number, name and JSON data.
Frame = tuple[int, bytes, bytes]


class LogElsewhere(Protocol):
    """The log of a turn that runs (or ran) on another instance, read from the store."""

    turn_id: str

    async def read(self, start: int) -> tuple[list[Frame], bool]:
        """The kept events numbered ``start`` and later, and whether the turn has ended."""
        ...

    def expect(self) -> None:
        """From now on, :meth:`changed` returns as soon as the turn's owner writes more."""
        ...

    async def changed(self, timeout_s: float) -> None:
        """Returns when more was written since :meth:`expect`, or after ``timeout_s``."""
        ...

    async def attach(self) -> None:
        """Counts this reader as attached, for the grace period kept by the turn's instance."""
        ...

    async def detach(self) -> None: ...


class TurnLogs(Protocol):
    """The rejoinable turns: open one for a turn, find one for its owner."""

    grace_s: float

    def open(self, owner: str, cancel: Callable[[], None]) -> TurnLog:
        """A new log with an unguessable id; ``cancel`` stops the turn when it is abandoned."""
        ...

    def end(self, log: TurnLog) -> None:
        """The turn ended: its log stays readable for the retention time."""
        ...

    async def find(self, turn_id: str, owner: str) -> TurnLog | LogElsewhere | None:
        """The log, or None for an unknown id, an expired log and another person's turn."""
        ...

    async def close(self) -> None: ...
