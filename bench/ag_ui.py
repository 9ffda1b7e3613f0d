"""``POST /ag-ui`` beside ``POST /turn`` on the same turn: server CPU per event, first byte.

The processes of :mod:`bench.turns` (the server pinned to core 0, the stand-in and this
client on core 1). Both routes run the stand-in's ``fast N`` answer, each request in a fresh
conversation (AG-UI needs a ``threadId``; ``/turn`` gets a ``conversationId`` of the same
shape, so both pay the same session set-up):

- **per event**: ``--rounds`` rounds (after a warm-up) of an N-delta turn on each route, in
  alternating order on keep-alive connections; the server's CPU over the N deltas.
  Target: ``/ag-ui`` ≤ 1.1x ``/turn``.
- **first byte**: ``--ttfb`` sequential short turns (20 deltas) on each route, alternating,
  request written to first body byte. Target: ``/ag-ui``'s p50 within 5% of ``/turn``'s.

::

    python -m bench.ag_ui [--events 20000] [--rounds 6] [--ttfb 300] [--repeats 3]
        [--json bench/results/ag_ui.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path
from typing import Any

import uvloop

from bench.client import Connection, Reply
from bench.turns import HOST, RESULTS, _auth, _pct, cpu_s, environment, processes

_ids = itertools.count()

#: How each route's reply counts the text deltas it streamed.
_DELTA: dict[str, bytes] = {"turn": b"event: text\n", "ag-ui": b'"TEXT_MESSAGE_CONTENT"'}


def _request(kind: str, tokens: int) -> tuple[str, bytes]:
    conversation = f"bench-{next(_ids)}"
    text = f"fast {tokens}"
    if kind == "turn":
        return "/turn", json.dumps({"text": text, "conversationId": conversation}).encode()
    body = {
        "threadId": conversation,
        "runId": f"run-{conversation}",
        "messages": [{"id": "u1", "role": "user", "content": text}],
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    return "/ag-ui", json.dumps(body).encode()


def _check(reply: Reply, kind: str, tokens: int) -> None:
    if reply.status != 200:
        raise RuntimeError(f"{kind} answered {reply.status}: {reply.body[:300]!r}")
    got = reply.body.count(_DELTA[kind])
    if got != tokens:
        raise RuntimeError(f"{kind} streamed {got} deltas, not {tokens}: {reply.body[-300:]!r}")


async def _side_by_side(
    port: int, pid: int, tokens: int, rounds: int, warm: int
) -> dict[str, tuple[list[float], list[float]]]:
    """Per kind: the server CPU of each measured request and its first-byte time (s)."""
    kinds = ("turn", "ag-ui")
    conns = {k: await Connection(HOST, port, _auth(i + 1)).open() for i, k in enumerate(kinds)}
    got: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in kinds}
    for r in range(rounds + warm):
        for kind in kinds if r % 2 else kinds[::-1]:
            path, body = _request(kind, tokens)
            before = cpu_s(pid)
            reply = await conns[kind].request("POST", path, body)
            after = cpu_s(pid)
            _check(reply, kind, tokens)
            if r >= warm:
                got[kind][0].append(after - before)
                got[kind][1].append(reply.first_byte - reply.sent)
    for conn in conns.values():
        conn.close()
    return got


async def measure(port: int, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    per_event: list[dict[str, float]] = []
    for _ in range(args.repeats):
        got = await _side_by_side(port, pid, args.events, args.rounds, 1)
        cost = {k: sum(cpu) / (args.events * len(cpu)) * 1e6 for k, (cpu, _) in got.items()}
        per_event.append({**cost, "ratio": cost["ag-ui"] / cost["turn"]})
    got = await _side_by_side(port, pid, 20, args.ttfb, 10)
    first_byte = {
        kind: {
            "p50_ms": statistics.median(times) * 1e3,
            "p99_ms": _pct(times, 0.99) * 1e3,
            "server_cpu_ms_per_request": sum(cpu) / len(cpu) * 1e3,
        }
        for kind, (cpu, times) in got.items()
    }
    first_byte["ratio_p50"] = first_byte["ag-ui"]["p50_ms"] / first_byte["turn"]["p50_ms"]  # type: ignore[assignment]
    return {
        "per_event": per_event,
        "first_byte": first_byte,
        "events": args.events,
        "rounds": args.rounds,
        "ttfb_turns": args.ttfb,
    }


def table(result: dict[str, Any]) -> str:
    lines = ["per event (µs of server CPU per text delta):"]
    lines.append(f"  {'run':<5}{'/turn':>9}{'/ag-ui':>9}{'ratio':>8}   target ≤ 1.10x")
    for i, run in enumerate(result["per_event"], 1):
        lines.append(f"  {i:<5}{run['turn']:>9.2f}{run['ag-ui']:>9.2f}{run['ratio']:>7.2f}x")
    ratios = [run["ratio"] for run in result["per_event"]]
    lines.append(f"  median ratio {statistics.median(ratios):.2f}x")
    fb = result["first_byte"]
    lines.append(f"first byte ({result['ttfb_turns']} turns of 20 deltas each, sequential):")
    for kind in ("turn", "ag-ui"):
        row = fb[kind]
        lines.append(
            f"  /{kind:<6} p50 {row['p50_ms']:.2f} ms  p99 {row['p99_ms']:.2f} ms  "
            f"server CPU {row['server_cpu_ms_per_request']:.2f} ms a request"
        )
    lines.append(f"  p50 ratio {fb['ratio_p50']:.3f}   target within 5% (≤ 1.05)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="scripts/bench ag-ui")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--ttfb", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=RESULTS / "ag_ui.json")
    args = parser.parse_args()
    with processes(0, 1, []) as (port, pid, _standin_port, _standin_pid):
        result = uvloop.run(measure(port, pid, args))
    result["environment"] = environment()
    print(table(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
