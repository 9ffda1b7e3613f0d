"""The webhook-ingestion benchmark: how fast signed Slack deliveries are acknowledged (#34).

A real server (:mod:`bench.server`, pinned to core 0) with its Slack bridge on, against the
Slack stand-in (``tests/support/slack_standin.py``, in this process, beside the load client and
the Ollama stand-in on core 1). Each phase starts a fresh server, so its bridge knows nothing
yet (neither the bot's identity nor anyone's name, as after every start), and sends signed
``message`` deliveries from 64 connections at once, each the next as soon as the last was
answered: talk in eight channels from a thousand authors the bridge never saw, one in
sixteen a mention of the bot (a turn, and a reply through the Web API). Two phases:

* ``healthy``: the stand-in answers every Web API call at once;
* ``slow``: it answers every call after ``--slow-s`` seconds (25 by default), as when Slack
  is struggling; the bridge's own call timeout (15 s) ends each first.

The figure is the acknowledgement: from the request's first byte sent to its answer's last
byte read, on this client's clock. Target: p99 at most 250 ms in both phases. Prints a table
and writes ``bench/results/ingest.json``::

    python -m bench.ingest [--quick] [--deliveries N] [--slow-s S] [--json PATH]
    (or: scripts/bench ingest …)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.client import Connection
from bench.server import SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET
from bench.turns import (
    HOST,
    RESULTS,
    ROOT,
    _free_port,
    _pct,
    _wait_listening,
    cpu_s,
    environment,
)
from tests.support.slack_standin import SlackStandIn

#: The target (issue #34): every acknowledgement within this, slow platform or not.
TARGET_P99_MS: Final = 250.0
CONCURRENCY: Final = 64
CHANNELS: Final = 8
AUTHORS: Final = 1_000
#: Seconds the warm-up delivery is given to be handled.
WARM_UP_S: Final = 3.0
#: One delivery in this many mentions the bot (a turn and a reply).
MENTION_EVERY: Final = 16


@dataclass(frozen=True)
class Plan:
    deliveries: int = 2_000
    concurrency: int = CONCURRENCY
    slow_s: float = 25.0
    #: Seconds between one burst's last answer and the next burst.
    pause_s: float = 0.25
    platforms: tuple[str, ...] = ("healthy", "slow")
    modes: tuple[str, ...] = ("bursts", "flood")


class Deliveries:
    """Signed Events API deliveries, as Slack sends them: numbered, never repeated."""

    def __init__(self, slack: SlackStandIn) -> None:
        self._slack = slack
        self._numbers = itertools.count()

    def next(self) -> tuple[bytes, dict[str, str]]:
        """The next delivery's body and the headers it is signed with."""
        n = next(self._numbers)
        author = f"UB{n % AUTHORS:06d}"
        text = f"message {n} about the plan"
        if n % MENTION_EVERY == 0:
            text = f"<@{self._slack.bot_user_id}> {text}?"
        event = self._slack.message(f"CB{n % CHANNELS:04d}", author, text)
        return signed(self._slack.envelope(event, event_id=f"EvB{n:08d}"))


def signed(envelope: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(envelope).encode()
    stamp = str(int(time.time()))
    digest = hmac.new(
        SLACK_SIGNING_SECRET.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256
    ).hexdigest()
    return body, {"x-slack-request-timestamp": stamp, "x-slack-signature": f"v0={digest}"}


@contextlib.contextmanager
def server(slack: SlackStandIn, logs: Path) -> Iterator[tuple[int, int]]:
    """The Ollama stand-in and a fresh server with the Slack bridge on: (port, pid)."""
    py = sys.executable
    ollama_port, port = _free_port(), _free_port()
    started: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="mercury-ingest-") as data:
        try:
            ollama = subprocess.Popen(
                [py, "-m", "bench.standin", "--port", str(ollama_port), "--cpu", "1"],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
            )
            started.append(ollama)
            _wait_listening(ollama, ollama_port, "Ollama stand-in")
            with logs.open("ab") as log:
                cmd = [py, "-m", "bench.server", "--port", str(port), "--data", data]
                cmd += ["--ollama", f"http://{HOST}:{ollama_port}", "--cpu", "0"]
                cmd += ["--slack", slack.api_url]
                proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=log)
            started.append(proc)
            _wait_listening(proc, port, "server")
            yield port, proc.pid
        finally:
            for each in reversed(started):
                each.terminate()
            for each in reversed(started):
                try:
                    each.wait(10)
                except subprocess.TimeoutExpired:
                    each.kill()


def _figures(acks: list[float], statuses: Counter[int], elapsed: float) -> dict[str, Any]:
    return {
        "deliveries": len(acks),
        "statuses": {str(status): count for status, count in sorted(statuses.items())},
        "ack_p50_ms": round(_pct(acks, 0.50), 2),
        "ack_p99_ms": round(_pct(acks, 0.99), 2),
        "ack_max_ms": round(max(acks), 2),
        "ack_mean_ms": round(statistics.fmean(acks), 2),
        "deliveries_per_s": round(len(acks) / elapsed, 1),
        "met": _pct(acks, 0.99) <= TARGET_P99_MS and set(statuses) == {200},
    }


async def _send(
    connection: Connection, deliveries: Deliveries, acks: list[float], statuses: Counter[int]
) -> None:
    body, headers = deliveries.next()
    connection.headers = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    reply = await connection.request("POST", "/webhooks/slack", body)
    acks.append((reply.ended - reply.sent) * 1000)
    statuses[reply.status] += 1


async def bursts(port: int, deliveries: Deliveries, plan: Plan) -> dict[str, Any]:
    """Bursts of ``plan.concurrency`` deliveries sent at once, one connection each, the next
    burst ``plan.pause_s`` after the last one was all answered (while the server still
    handles the messages before it): the figures of the target."""
    acks: list[float] = []
    statuses: Counter[int] = Counter()
    connections = [await Connection(HOST, port, {}).open() for _ in range(plan.concurrency)]
    began = time.perf_counter()
    try:
        while len(acks) < plan.deliveries:
            await asyncio.gather(*(_send(c, deliveries, acks, statuses) for c in connections))
            await asyncio.sleep(plan.pause_s)
    finally:
        for connection in connections:
            connection.close()
    return _figures(acks, statuses, time.perf_counter() - began)


async def flood(port: int, deliveries: Deliveries, plan: Plan) -> dict[str, Any]:
    """``plan.deliveries`` from ``plan.concurrency`` connections, each sending the next
    delivery as soon as the last was answered: the server's throughput, for information."""
    acks: list[float] = []
    statuses: Counter[int] = Counter()
    left = iter(range(plan.deliveries))

    async def worker() -> None:
        connection = await Connection(HOST, port, {}).open()
        try:
            for _ in left:
                await _send(connection, deliveries, acks, statuses)
        finally:
            connection.close()

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(plan.concurrency)))
    return _figures(acks, statuses, time.perf_counter() - began)


async def warm_up(port: int, slack: SlackStandIn) -> None:
    """One delivery, handled, before the measure: a server's first message opens its state
    store's tables (about a second on a busy machine, whatever the platform does). It
    teaches the bridge nothing the measured deliveries need: its author and channel are
    none of theirs, and every delivery names the bot itself."""
    connection = await Connection(HOST, port, {}).open()
    try:
        body, headers = signed(slack.envelope(slack.message("CWARM", "UWARM", "warming up")))
        connection.headers = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        reply = await connection.request("POST", "/webhooks/slack", body)
        if reply.status != 200:
            raise RuntimeError(f"The warm-up delivery was answered {reply.status}: {reply.body!r}")
    finally:
        connection.close()
    await asyncio.sleep(WARM_UP_S)


async def phase(
    platform: str, mode: str, plan: Plan, slack: SlackStandIn, logs: Path
) -> dict[str, Any]:
    """One fresh server, the stand-in ``platform`` (healthy or slow), deliveries by ``mode``."""
    slack.reset()
    for n in range(AUTHORS):
        slack.add_user(f"UB{n:06d}", f"author{n}", display_name=f"Author {n}")
    slack.delay_s = plan.slow_s if platform == "slow" else 0.0
    with server(slack, logs) as (port, pid):
        await warm_up(port, slack)
        cpu = cpu_s(pid)
        send = bursts if mode == "bursts" else flood
        figures = await send(port, Deliveries(slack), plan)
        figures["server_cpu_ms_per_delivery"] = round(
            (cpu_s(pid) - cpu) * 1000 / figures["deliveries"], 2
        )
        figures["users_info_calls"] = len(slack.calls_of("users.info"))
        figures["auth_test_calls"] = len(slack.calls_of("auth.test"))
    figures["platform_delay_s"] = slack.delay_s
    slack.reset()  # the stand-in's slow answers end with the server
    return figures


async def run(plan: Plan) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="mercury-ingest-logs-") as where:
        logs = Path(where) / "server.log"
        with SlackStandIn(bot_token=SLACK_BOT_TOKEN, signing_secret=SLACK_SIGNING_SECRET) as slack:
            phases = {
                f"{platform} {mode}": await phase(platform, mode, plan, slack, logs)
                for mode in plan.modes
                for platform in plan.platforms
            }
    return {
        "benchmark": "webhook ingestion (bench/ingest.py, issue 34)",
        "environment": environment()
        | {"load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]},
        "plan": {
            "deliveries": plan.deliveries,
            "concurrency": plan.concurrency,
            "pause_s": plan.pause_s,
            "channels": CHANNELS,
            "authors": AUTHORS,
            "mention_every": MENTION_EVERY,
            "slow_s": plan.slow_s,
        },
        "target_p99_ms": TARGET_P99_MS,
        "phases": phases,
    }


def table(result: dict[str, Any]) -> str:
    plan = result["plan"]
    lines = [
        f"Webhook ingestion: {plan['deliveries']} signed Slack deliveries a phase, "
        f"{plan['concurrency']} at once, a fresh server each phase "
        f"(load average {result['environment']['load_average']})",
        "",
        "| phase | ack p50 (ms) | ack p99 (ms) | max (ms) | deliveries/s | server CPU / delivery "
        f"(ms) | answers | p99 <= {result['target_p99_ms']:g} ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, figures in result["phases"].items():
        delay = figures["platform_delay_s"]
        where = name + (f" ({delay:g} s a call)" if delay else "")
        answers = ", ".join(f"{n}x {status}" for status, n in figures["statuses"].items())
        target = ("met" if figures["met"] else "MISSED") if "bursts" in name else "(information)"
        lines.append(
            f"| {where} | {figures['ack_p50_ms']} | {figures['ack_p99_ms']} "
            f"| {figures['ack_max_ms']} | {figures['deliveries_per_s']} "
            f"| {figures['server_cpu_ms_per_delivery']} | {answers} | {target} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest")
    parser.add_argument("--quick", action="store_true", help="512 deliveries a phase")
    parser.add_argument("--deliveries", type=int, help="deliveries a phase (default 2000)")
    parser.add_argument("--slow-s", type=float, default=25.0, help="the slow stand-in's delay")
    parser.add_argument("--platform", choices=["healthy", "slow"], help="only this stand-in")
    parser.add_argument("--mode", choices=["bursts", "flood"], help="only this way of sending")
    parser.add_argument("--json", type=Path, default=RESULTS / "ingest.json")
    args = parser.parse_args()
    plan = Plan(
        deliveries=args.deliveries or (512 if args.quick else 2_000),
        slow_s=args.slow_s,
        platforms=(args.platform,) if args.platform else ("healthy", "slow"),
        modes=(args.mode,) if args.mode else ("bursts", "flood"),
    )
    result = asyncio.run(run(plan))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(table(result))
    print(f"\n(written to {args.json})")


if __name__ == "__main__":
    main()
