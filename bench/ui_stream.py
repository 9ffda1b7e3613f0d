"""``POST /ui-stream`` beside ``POST /turn``: server CPU per streamed event, time to first byte.

The same turn (the stand-in's ``fast N``: N answer chunks) sent to both routes of one server
(:mod:`bench.server`), one request each per round, the order swapped every round so drift on
the shared machine falls on both alike. Server CPU is read from ``/proc/<pid>/stat`` around
each request; time to first byte is a short turn's first body byte after the request was
sent. Each request names a conversation of its own, so both start from an empty history.
Prints a table and writes ``bench/results/ui_stream.json``::

    python -m bench.ui_stream [--quick] [--json PATH]      (scripts/bench ui-stream)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import uvloop

from bench.client import Connection, Reply
from bench.turns import HOST, RESULTS, _auth, _pct, cpu_s, processes
from channel_http.serving import collector

#: How each route's answer chunk shows on the wire, to count them.
_DELTA = {"turn": b"event: text\n", "ui-stream": b'"type":"text-delta"'}


@dataclass(frozen=True)
class Plan:
    #: Enough that a 10 ms tick of the CPU clock is a small part of a route's total.
    events: int = 100_000
    rounds: int = 6
    ttfb_turns: int = 300
    ttfb_tokens: int = 20


QUICK = Plan(events=30_000, rounds=3, ttfb_turns=100)


def _body(route: str, text: str, conversation: str) -> bytes:
    if route == "turn":
        return json.dumps({"text": text, "conversationId": conversation}).encode()
    message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}
    return json.dumps(
        {"id": conversation, "messages": [message], "trigger": "submit-message"}
    ).encode()


def _checked(reply: Reply, route: str, events: int) -> Reply:
    got = reply.body.count(_DELTA[route])
    if reply.status != 200 or got != events:
        raise RuntimeError(f"/{route} answered {reply.status} with {got} of {events} chunks")
    return reply


async def side_by_side(port: int, pid: int, plan: Plan) -> dict[str, Any]:
    routes = ("turn", "ui-stream")
    conns = {route: await Connection(HOST, port, _auth(i)).open() for i, route in enumerate(routes)}
    n, k = plan.events, plan.ttfb_tokens
    cpu = dict.fromkeys(routes, 0.0)
    wall: dict[str, list[float]] = {route: [] for route in routes}
    for r in range(plan.rounds + 1):  # round 0 warms up
        for route in routes if r % 2 else routes[::-1]:
            body = _body(route, f"fast {n}", f"cpu-{route.replace('-', '')}-{r}")
            before = cpu_s(pid)
            reply = _checked(await conns[route].request("POST", f"/{route}", body), route, n)
            await asyncio.sleep(0.05)  # the turn's own tail (its archive, its log) counts too
            after = cpu_s(pid)
            if r:
                cpu[route] += after - before
                wall[route].append(reply.ended - reply.sent)
    ttfb: dict[str, list[float]] = {route: [] for route in routes}
    for i in range(plan.ttfb_turns + 10):  # the first 10 warm up
        for route in routes if i % 2 else routes[::-1]:
            body = _body(route, f"fast {k}", f"ttfb-{route.replace('-', '')}-{i}")
            reply = _checked(await conns[route].request("POST", f"/{route}", body), route, k)
            if i >= 10:
                ttfb[route].append((reply.first_byte - reply.sent) * 1e3)
    for conn in conns.values():
        conn.close()
    events = n * plan.rounds
    out: dict[str, Any] = {
        route: {
            "cpu_us_per_event": cpu[route] / events * 1e6,
            "wall_us_per_event_p50": statistics.median(wall[route]) / n * 1e6,
            "ttfb_p50_ms": statistics.median(ttfb[route]),
            "ttfb_p99_ms": _pct(ttfb[route], 0.99),
        }
        for route in routes
    }
    out["ratio_cpu_ui_stream_vs_turn"] = cpu["ui-stream"] / cpu["turn"]
    out["ratio_ttfb_p50_ui_stream_vs_turn"] = (
        out["ui-stream"]["ttfb_p50_ms"] / out["turn"]["ttfb_p50_ms"]
    )
    return out


async def run(plan: Plan, server_cpu: int | None, other_cpu: int | None) -> dict[str, Any]:
    collector.settle()  # as the server and the load client do: no full passes while streaming
    with processes(server_cpu, other_cpu, []) as (port, pid, _, _):
        result = await side_by_side(port, pid, plan)
    result["plan"] = asdict(plan)
    result["load_average"] = os.getloadavg()[0]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ui_stream")
    parser.add_argument("--quick", action="store_true", help="fewer events and turns")
    parser.add_argument("--json", type=Path, default=RESULTS / "ui_stream.json")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    server_cpu, other_cpu = (0, 1) if cores >= 2 else (None, None)
    result = uvloop.run(run(QUICK if args.quick else Plan(), server_cpu, other_cpu))
    print(f"{'route':<12}{'CPU µs/event':>14}{'wall µs/event':>15}{'TTFB p50 ms':>13}{'p99 ms':>9}")
    for route in ("turn", "ui-stream"):
        row = result[route]
        print(
            f"/{route:<11}{row['cpu_us_per_event']:>14.2f}{row['wall_us_per_event_p50']:>15.2f}"
            f"{row['ttfb_p50_ms']:>13.2f}{row['ttfb_p99_ms']:>9.2f}"
        )
    print(
        f"/ui-stream vs /turn: CPU {result['ratio_cpu_ui_stream_vs_turn']:.3f}x, "
        f"TTFB p50 {result['ratio_ttfb_p50_ui_stream_vs_turn']:.3f}x"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
