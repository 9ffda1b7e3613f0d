"""How a server process collects cyclic garbage once it has started.

CPython's collector runs a young-generation pass every 700 net container allocations and,
every hundred of those, a full pass over every tracked object. A serving process allocates a
few dozen containers per streamed event (frames, coroutines, futures), and after start-up
holds ~150,000 tracked objects that live as long as it does (modules, the app, catalogs, the
tz database) beside ~300 per open stream. Measured at 500 paced streams
(docs/benchmarks.md): with the defaults the collector took 8% of the server's CPU, and each
full pass held the event loop for 70-150 ms, straight into every stream's latency.

:func:`settle` runs once the application has started: one full collection, then
``gc.freeze()`` moves everything alive into the permanent generation (never traversed
again), and the young generation's threshold goes up to :data:`YOUNG_THRESHOLD` so passes
come 70 times less often. Reference counting still frees everything acyclic at once; a
garbage cycle waits at most one young pass.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["YOUNG_THRESHOLD", "settle"]

YOUNG_THRESHOLD: Final = 50_000


def settle() -> None:
    """Freeze what start-up left alive and collect the young generation less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
