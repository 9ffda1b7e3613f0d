"""Which of the benchmark's runs the server's garbage collector paused, and for how long.

``scripts/bench --gc-log PATH``: the server (:mod:`bench.server`) appends a JSON line for
each collector pass (``gc.callbacks``: its generation, how long it held the interpreter, what
it freed), and the load client appends one as each measured run starts, both on
``time.perf_counter``'s clock, which every process on the machine shares. :func:`by_run`
then groups the passes by the run they fell in, so a run's first-byte tail can be matched
with a pass, or cleared of one. Lines of a few hundred bytes appended with ``O_APPEND``
don't interleave.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["by_run", "describe", "install", "mark"]


def install(path: Path) -> Callable[[], None]:
    """Log every collector pass of this process to ``path`` (the server's side); returns
    what stops it."""
    out = path.open("a", buffering=1)
    began = [0.0]

    def note(phase: str, info: dict[str, Any]) -> None:
        now = time.perf_counter()
        if phase == "start":
            began[0] = now
            return
        entry = {
            "t": round(now, 4),
            "generation": info["generation"],
            "ms": round((now - began[0]) * 1000, 2),
            "collected": info["collected"],
        }
        out.write(json.dumps(entry) + "\n")

    gc.callbacks.append(note)

    def stop() -> None:
        gc.callbacks.remove(note)
        out.close()

    return stop


def mark(path: Path, run: str) -> None:
    """Note that the run called ``run`` starts now (the load client's side)."""
    with path.open("a") as out:
        out.write(json.dumps({"t": round(time.perf_counter(), 4), "run": run}) + "\n")


def by_run(path: Path) -> list[dict[str, Any]]:
    """The runs in the order they started, each with its passes per generation: how many,
    the longest and their total, in ms (passes before the first run are left out)."""
    runs: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if "run" in entry:
            runs.append({"run": entry["run"], "passes": {}})
        elif runs:
            kept = runs[-1]["passes"].setdefault(
                str(entry["generation"]), {"count": 0, "max_ms": 0.0, "total_ms": 0.0}
            )
            kept["count"] += 1
            kept["max_ms"] = max(kept["max_ms"], entry["ms"])
            kept["total_ms"] = round(kept["total_ms"] + entry["ms"], 2)
    return runs


def describe(runs: list[dict[str, Any]]) -> str:
    """One line per run: ``run: gen0 12 passes, longest 4.4 ms; gen1 1 pass, 36.0 ms``."""
    lines = []
    for run in runs:
        parts = []
        for generation, p in sorted(run["passes"].items()):
            count = f"{p['count']} pass" + ("es" if p["count"] != 1 else "")
            parts.append(f"gen{generation} {count}, longest {p['max_ms']:.1f} ms")
        lines.append(f"{run['run']}: {'; '.join(parts) or 'no pass'}")
    return "\n".join(lines)
