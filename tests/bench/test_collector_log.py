"""bench/collector_log.py: the server's collector passes, grouped by the run they fell in."""

from __future__ import annotations

import gc
import json
from pathlib import Path

from bench import collector_log


def test_a_pass_is_logged_with_its_generation_and_duration(tmp_path: Path) -> None:
    log = tmp_path / "gc.jsonl"
    stop = collector_log.install(log)
    try:
        gc.collect(1)
    finally:
        stop()
    gc.collect(1)  # stopped: not logged

    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["generation"] for e in entries] == [1]
    assert entries[0]["ms"] >= 0
    assert entries[0]["collected"] >= 0


def test_passes_are_grouped_by_the_run_they_fell_in(tmp_path: Path) -> None:
    log = tmp_path / "gc.jsonl"
    lines = [
        {"t": 0.5, "generation": 2, "ms": 90.0, "collected": 0},  # before any run: left out
        {"t": 1.0, "run": "500 turns"},
        {"t": 1.1, "generation": 0, "ms": 3.0, "collected": 0},
        {"t": 1.2, "generation": 0, "ms": 5.5, "collected": 10},
        {"t": 2.0, "run": "500 floor"},
        {"t": 2.1, "generation": 1, "ms": 31.7, "collected": 25150},
        {"t": 3.0, "run": "500 straight from the stand-in"},
    ]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))

    runs = collector_log.by_run(log)

    assert [r["run"] for r in runs] == ["500 turns", "500 floor", "500 straight from the stand-in"]
    assert runs[0]["passes"] == {"0": {"count": 2, "max_ms": 5.5, "total_ms": 8.5}}
    assert runs[1]["passes"] == {"1": {"count": 1, "max_ms": 31.7, "total_ms": 31.7}}
    assert collector_log.describe(runs).splitlines() == [
        "500 turns: gen0 2 passes, longest 5.5 ms",
        "500 floor: gen1 1 pass, longest 31.7 ms",
        "500 straight from the stand-in: no pass",
    ]


def test_the_client_marks_a_run_on_the_same_clock(tmp_path: Path) -> None:
    log = tmp_path / "gc.jsonl"
    collector_log.mark(log, "100 turns")
    collector_log.mark(log, "100 floor")
    assert [r["run"] for r in collector_log.by_run(log)] == ["100 turns", "100 floor"]
