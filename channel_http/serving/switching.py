"""How soon the serving process's event loop hands the interpreter to a waiting thread.

Work leaves the event loop for threads: SQLite calls (aiosqlite), Edge searches and writes,
files. A thread that has its answer ready still needs the interpreter's lock (the GIL) to
hand it back, and a busy loop gives the lock up only every ``sys.getswitchinterval()``:
5 ms by default. A SQLite call takes the lock at least twice, so on a loop streaming 500
turns each one waited up to ~10 ms, and 128 reads queued behind one another at a restart
kept new people's first byte waiting up to 200 ms (docs/benchmarks.md).

:func:`hand_over_sooner` shortens the interval to :data:`SWITCH_INTERVAL_S` once the
application has started. It changes nothing while no thread waits; when one does, the loop
yields sooner and, the other way round, a busy thread hands the loop back sooner too.
"""

from __future__ import annotations

import sys
from typing import Final

__all__ = ["SWITCH_INTERVAL_S", "hand_over_sooner"]

SWITCH_INTERVAL_S: Final = 0.0005


def hand_over_sooner() -> None:
    """Let a waiting thread take the interpreter after at most :data:`SWITCH_INTERVAL_S`."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
