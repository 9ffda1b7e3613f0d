"""Server CPU per turn with memory on, against a relay of the same answer, side by side.

One server (memory on Qdrant Edge: the query embedding, the primer, archiving each message)
and the Ollama stand-in, pinned as in :mod:`bench.turns`. Blocks of ``--block`` short turns
(``fast 20``: one short answer, each on a new conversation, so the primer is read each time)
alternate with blocks of as many relays of the same 20-token answer (``/bench/relay``). After
each block the server is left to settle (the archive writes a turn queued after its last
frame are the turn's cost too) before its CPU is read. Repeated ``--repeats`` times; prints
min / median / max of the ratio and the load average, and writes
``bench/results/per_turn.json``::

    python -m bench.per_turn [--blocks 10] [--block 20] [--repeats 3] [--memory edge|off]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import uvloop

from bench.client import Connection
from bench.turns import HOST, RESULTS, _auth, _check, cpu_s, processes

TOKENS = 20


async def _block(conn: Connection, pid: int, kind: str, size: int, start: int) -> float:
    before = cpu_s(pid)
    for i in range(size):
        if kind == "turn":
            body = json.dumps(
                {"text": f"fast {TOKENS}", "conversationId": f"c{start + i}"}
            ).encode()
            reply = await conn.request("POST", "/turn", body)
        else:
            reply = await conn.request("GET", f"/bench/relay?n={TOKENS}")
        _check(reply, TOKENS, kind)
    # Let the archive writer finish what the turns queued (its write-behind waits up to
    # MERCURY_ARCHIVE_LINGER_MS, 100 ms by default, for more).
    await asyncio.sleep(0.4)
    return cpu_s(pid) - before - 0.4 * _idle_rate


_idle_rate = 0.0  # CPU seconds per second of an idle server, measured once per run


async def one_run(args: argparse.Namespace) -> dict[str, Any]:
    global _idle_rate
    server_cpu, other_cpu = (None, None) if args.no_pin else (0, 1)
    with processes(server_cpu, other_cpu, ["--memory", args.memory]) as (port, pid, _, _standin):
        conn = await Connection(HOST, port, _auth(1)).open()
        relay = await Connection(HOST, port, _auth(2)).open()
        # Warm up: the embedder's vector size, the shards, the connections.
        await _block(conn, pid, "turn", 5, 10_000_000)
        await _block(relay, pid, "relay", 5, 0)
        idle0 = cpu_s(pid)
        await asyncio.sleep(2.0)
        _idle_rate = (cpu_s(pid) - idle0) / 2.0
        cpu = {"turn": 0.0, "relay": 0.0}
        count = 0
        for b in range(args.blocks):
            order = ("turn", "relay") if b % 2 == 0 else ("relay", "turn")
            for kind in order:
                cpu[kind] += await _block(
                    conn if kind == "turn" else relay, pid, kind, args.block, count
                )
            count += args.block
        conn.close()
        relay.close()
    turns = args.blocks * args.block
    return {
        "turn_cpu_ms": cpu["turn"] / turns * 1e3,
        "relay_cpu_ms": cpu["relay"] / turns * 1e3,
        "ratio": cpu["turn"] / cpu["relay"],
        "idle_cpu_share": _idle_rate,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    for _ in range(args.repeats):
        result = await one_run(args)
        print(json.dumps(result), flush=True)
        runs.append(result)
    ratios = [r["ratio"] for r in runs]
    return {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "memory": args.memory,
        "tokens": TOKENS,
        "turns_per_run": args.blocks * args.block,
        "load_average": os.getloadavg(),
        "runs": runs,
        "ratio": {
            "min": min(ratios),
            "median": statistics.median(ratios),
            "max": max(ratios),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.per_turn")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory", choices=["edge", "off"], default="edge")
    parser.add_argument("--json", type=Path, default=RESULTS / "per_turn.json")
    parser.add_argument(
        "--no-pin", action="store_true", help="leave the processes unpinned (a crowded machine)"
    )
    args = parser.parse_args()
    document = uvloop.run(main_async(args))
    ratio = document["ratio"]
    print(
        f"server CPU per turn (memory {args.memory}) vs relay: "
        f"min {ratio['min']:.2f}x median {ratio['median']:.2f}x max {ratio['max']:.2f}x; "
        f"load average {document['load_average'][0]:.2f}"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
