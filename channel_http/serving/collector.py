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
come 14 times less often. Reference counting still frees everything acyclic at once; a
garbage cycle waits at most one young pass, or one middle pass once it has outlived one.

A young pass traverses what was allocated since the last one and is still alive, and 500
streams starting within a second leave ~170 live objects each: at a threshold of 50,000 the
two passes of such a ramp held the loop 13-34 ms each (no garbage found), at 10,000 the ten
passes 3-6 ms each, for the same CPU per event (docs/benchmarks.md; ff0c536). The middle
generation's threshold goes from 10 to :data:`MIDDLE_THRESHOLD` young passes, so its passes,
which traverse every object that survived a young one, come as rarely as before.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["MIDDLE_THRESHOLD", "YOUNG_THRESHOLD", "settle"]

YOUNG_THRESHOLD: Final = 10_000
MIDDLE_THRESHOLD: Final = 50


def settle(young: int = YOUNG_THRESHOLD, middle: int = MIDDLE_THRESHOLD) -> None:
    """Freeze what start-up left alive and collect the young generation less often."""
    gc.collect()
    gc.freeze()
    old = gc.get_threshold()[2]
    gc.set_threshold(young, middle, old)
