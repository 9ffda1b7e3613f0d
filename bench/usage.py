"""The usage ledger's cost (``scripts/bench usage [--quick]``): a turn with it on and off.

Three figures:

* the per-event server CPU of the same ``fast N`` turn on a server keeping the ledger and on
  one with ``usage.ledger: false``, their turns interleaved (bench/turns.py's side by side);
* the ledger's writes against the model calls: the turns sent (each one model call), the
  calls the ledger summed (``GET /me/usage``, which writes what waits first), and the
  server's own counts (``mercury_usage_ledger_writes_total``): model calls written, rows
  upserted and statements run. The ledger writes behind: the calls of a flush window are
  summed by row (day, person, space, model) and written as one multi-row upsert, so each
  call is in exactly one row written (calls written = model calls) while rows and
  statements are fewer: a row counts as one write carrying its calls, a statement as one
  round trip carrying its rows;
* the budget check, in this process on a SQLite store: its p50 and p99 with the totals and
  the allowances cached (every turn but the first few each ``Budgets.ttl_s``), and the p50 of
  a check that reads the store (the cache expired).

The table goes to stdout, the JSON to bench/results/usage.json (or ``--json PATH``).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import uvloop

from bench.turns import HOST, Plan, _auth, processes, turns_side_by_side
from core.config.settings import load_settings
from core.spaces.settings import SpaceSettings
from core.state.sqlite import SqliteDatabase
from core.usage import Budgets, Spent, UsageLedger

ROOT = Path(__file__).resolve().parents[1]


async def _calls(port: int) -> int:
    async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}", timeout=10) as client:
        answer = (await client.get("/me/usage?period=today", headers=_auth(0))).json()
    return int(answer["total"]["calls"])


_WRITES = re.compile(r'^mercury_usage_ledger_writes_total\{what="(\w+)"\} (\S+)$', re.MULTILINE)


async def _writes(port: int) -> dict[str, int]:
    """The server's own counts: model calls written, rows upserted, statements run."""
    async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}", timeout=10) as client:
        text = (await client.get("/metrics", headers=_auth(0))).text
    return {what: int(float(value)) for what, value in _WRITES.findall(text)}


async def budget_check(checks: int) -> dict[str, float]:
    """The check's cost in µs: cached (p50, p99) and reading the store (p50)."""
    with tempfile.TemporaryDirectory(prefix="mercury-bench-usage-") as folder:
        db = await SqliteDatabase.open(Path(folder) / "state.db")
        settings = load_settings(
            {
                "MERCURY_CONFIG_FILE": "",
                "MERCURY_DATA_DIR": folder,
                "MERCURY_USAGE_PERSON_DAY": "1000000000",
                "MERCURY_USAGE_PERSON_MONTH": "1000000000",
                "MERCURY_USAGE_SPACE_DAY": "1000000000",
                "MERCURY_USAGE_SPACE_MONTH": "1000000000",
            },
            cwd=Path(folder),
        )
        ledger = UsageLedger(db)
        space_settings = SpaceSettings(db, settings)
        budgets = Budgets(ledger, settings, space_settings)
        for n in range(200):  # a store with some people and spaces in it
            await ledger.record(
                Spent(
                    person_key=f"people:p{n % 20}",
                    space_id=f"slack:C{n % 5}",
                    model="bench",
                    input=1000,
                    output=100,
                )
            )
        cached: list[float] = []
        for n in range(checks):
            started = time.perf_counter()
            refusal = await budgets.check(f"people:p{n % 20}", f"slack:C{n % 5}")
            cached.append(time.perf_counter() - started)
            assert refusal is None
        read: list[float] = []
        budgets.ttl_s = 0.0  # every check reads the store
        for n in range(200):
            started = time.perf_counter()
            await budgets.check(f"people:p{n % 20}", f"slack:C{n % 5}")
            read.append(time.perf_counter() - started)
        await db.close()
    cached.sort()
    return {
        "cached_p50_us": statistics.median(cached[25:]) * 1e6,  # past the first reads
        "cached_p99_us": cached[int(len(cached) * 0.99)] * 1e6,
        "store_read_p50_us": statistics.median(read) * 1e6,
    }


async def run(plan: Plan, checks: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    with (
        processes(None, None, []) as (on_port, on_pid, _, _),
        processes(None, None, ["--ledger", "off"]) as (off_port, off_pid, _, _),
    ):
        result["on_off"] = await turns_side_by_side(
            {"ledger on": (on_port, on_pid), "ledger off": (off_port, off_pid)}, plan
        )
        turns = plan.rounds + 1  # the warm-up round's turn is one model call too
        summed = await _calls(on_port)  # writes what waits first (read after write)
        result["writes_per_model_call"] = summed / turns
        result["model_calls"] = turns
        result["ledger_writes"] = await _writes(on_port)
    result["budget_check"] = await budget_check(checks)
    return result


def table(result: dict[str, Any]) -> str:
    on_off = result["on_off"]
    check = result["budget_check"]
    on, off = on_off["ledger on"], on_off["ledger off"]
    writes = result.get("ledger_writes", {})
    rows = [
        "| Figure | Value | Target |",
        "|---|---|---|",
        f"| per-event server CPU, ledger on | {on['cpu_us_per_event']:.2f} µs | |",
        f"| per-event server CPU, ledger off | {off['cpu_us_per_event']:.2f} µs | |",
        f"| ratio on / off | {on_off['ratio_cpu']:.3f}x | ≤ 1.02x |",
        f"| ledger writes per model call | {result['writes_per_model_call']:.2f} "
        f"({result['model_calls']} calls) | 1 |",
        f"| calls written / rows upserted / statements | {writes.get('calls', 0)} / "
        f"{writes.get('rows', 0)} / {writes.get('statements', 0)} | calls = model calls |",
        f"| budget check p50, cached | {check['cached_p50_us']:.1f} µs | ≤ 500 µs |",
        f"| budget check p99, cached | {check['cached_p99_us']:.1f} µs | |",
        f"| budget check p50, reading the store | {check['store_read_p50_us']:.1f} µs | |",
    ]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(prog="scripts/bench usage")
    parser.add_argument("--quick", action="store_true", help="fewer and shorter turns")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "usage.json")
    args = parser.parse_args()
    plan = Plan(events=5_000, rounds=4) if args.quick else Plan(events=20_000, rounds=20)
    result = uvloop.run(run(plan, 2_000 if args.quick else 20_000))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(table(result))
    print(f"(JSON: {args.json})", file=sys.stderr)


if __name__ == "__main__":
    main()
