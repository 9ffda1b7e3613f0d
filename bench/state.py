"""The state store's cost: a turn on PostgreSQL beside a turn on SQLite, memory off and on,
and turns per second on one and on three instances sharing PostgreSQL.

Everything in one run, side by side: the Ollama stand-in (:mod:`bench.standin`), a real
PostgreSQL (Debian's binaries, started as the tests start it) and one server
(:mod:`bench.server`) per configuration, all at once. Turns go to the configurations in
turn, interleaved, so drift on a shared machine touches them alike. Each turn continues a
conversation (ten turns each), so on PostgreSQL it takes its place in the conversation's
queue and writes the transcript of record. Server CPU is read from ``/proc/<pid>/stat``
around each turn; PostgreSQL's CPU is the sum over its processes. Prints a table and writes
``bench/results/state.json``::

    python -m bench.state [--quick] [--throughput] [--json PATH]   (or: scripts/bench state …)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from bench.client import Connection, Reply
from bench.turns import (
    HOST,
    RESULTS,
    _auth,
    _free_port,
    _pct,
    _wait_listening,
    cpu_s,
    environment,
)
from tests.support.postgres import running_postgres

TOKENS = 20  # content chunks per answer: a short answer, so the per-turn cost shows
CONFIGS = ("sqlite", "postgresql", "sqlite+memory", "postgresql+memory")


@dataclass(frozen=True)
class Plan:
    turns: int = 300
    throughput_s: float = 20.0
    clients: int = 16


QUICK = Plan(turns=80, throughput_s=8.0, clients=12)


def _descendants_cpu_s(root: int) -> float:
    """CPU of ``root`` and every process whose parent it is (PostgreSQL's backends)."""
    total = cpu_s(root)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == root:
                total += cpu_s(int(stat.parent.name))
    return total


@contextlib.contextmanager
def servers(
    standin_url: str, configs: dict[str, list[str]], workdir: Path
) -> Iterator[dict[str, tuple[int, int]]]:
    """One ``bench.server`` per configuration; yields name -> (port, pid)."""
    started: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for name, options in configs.items():
            port = _free_port()
            data = workdir / name
            data.mkdir()
            cmd = [sys.executable, "-m", "bench.server", "--port", str(port), "--data", str(data)]
            cmd += ["--ollama", standin_url, *options]
            started[name] = (subprocess.Popen(cmd, cwd=Path(__file__).parent.parent), port)
        with ThreadPoolExecutor(len(started)) as pool:
            for done in [
                pool.submit(_wait_listening_long, proc, port, name)
                for name, (proc, port) in started.items()
            ]:
                done.result()
        yield {name: (port, proc.pid) for name, (proc, port) in started.items()}
    finally:
        for proc, _ in started.values():
            proc.terminate()
        for proc, _ in started.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def _wait_listening_long(proc: subprocess.Popen[bytes], port: int, what: str) -> None:
    # Six servers importing at once on two cores take longer than one.
    deadline = time.monotonic() + 180
    while True:
        try:
            _wait_listening(proc, port, what)
            return
        except RuntimeError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise


def _turn(conversation: str) -> bytes:
    return json.dumps({"text": f"fast {TOKENS}", "conversationId": conversation}).encode()


async def _post_turn(conn: Connection, conversation: str) -> Reply:
    """One turn on ``conn``, reopened first if the server closed it; never waits forever."""
    protocol = conn.protocol
    if protocol is None or protocol.transport is None or protocol.transport.is_closing():
        await conn.open()
    try:
        return await asyncio.wait_for(conn.request("POST", "/turn", _turn(conversation)), 60)
    except TimeoutError:
        raise RuntimeError(f"a turn on port {conn.port} didn't end within 60 s") from None


async def side_by_side(
    running: dict[str, tuple[int, int]], postgres_pid: int, plan: Plan
) -> dict[str, Any]:
    conns = {
        name: await Connection(HOST, running[name][0], _auth(i)).open()
        for i, name in enumerate(CONFIGS)
    }
    ttfb: dict[str, list[float]] = {n: [] for n in CONFIGS}
    wall: dict[str, list[float]] = {n: [] for n in CONFIGS}
    server_cpu = dict.fromkeys(CONFIGS, 0.0)
    db_cpu = dict.fromkeys(CONFIGS, 0.0)
    warm = 10
    for i in range(plan.turns + warm):
        order = list(CONFIGS[i % 4 :] + CONFIGS[: i % 4])
        for name in order:
            pid = running[name][1]
            before, db_before = cpu_s(pid), _descendants_cpu_s(postgres_pid)
            reply = await _post_turn(conns[name], f"c{i // 10}")
            after, db_after = cpu_s(pid), _descendants_cpu_s(postgres_pid)
            if reply.status != 200 or reply.body.count(b"event: text\n") != TOKENS:
                raise RuntimeError(f"{name} answered {reply.status}: {reply.body[-300:]!r}")
            if i >= warm:
                ttfb[name].append((reply.first_byte - reply.sent) * 1e3)
                wall[name].append((reply.ended - reply.sent) * 1e3)
                server_cpu[name] += after - before
                db_cpu[name] += db_after - db_before
    for conn in conns.values():
        conn.close()
    out: dict[str, Any] = {
        name: {
            "ttfb_p50_ms": statistics.median(ttfb[name]),
            "ttfb_p99_ms": _pct(ttfb[name], 0.99),
            "turn_p50_ms": statistics.median(wall[name]),
            "server_cpu_ms_per_turn": server_cpu[name] / plan.turns * 1e3,
            "postgres_cpu_ms_per_turn": db_cpu[name] / plan.turns * 1e3,
        }
        for name in CONFIGS
    }
    for memory in ("", "+memory"):
        pg, lite = out["postgresql" + memory], out["sqlite" + memory]
        out["ratio_ttfb" + memory.replace("+", "_")] = pg["ttfb_p50_ms"] / lite["ttfb_p50_ms"]
        out["ratio_server_cpu" + memory.replace("+", "_")] = (
            pg["server_cpu_ms_per_turn"] / lite["server_cpu_ms_per_turn"]
        )
    out["turns"] = plan.turns
    return out


async def throughput(ports: list[int], plan: Plan) -> dict[str, Any]:
    """Turns a second from ``plan.clients`` clients spread round robin over ``ports``."""
    done = dropped = 0
    stop_at = time.perf_counter() + plan.throughput_s

    async def client(i: int) -> None:
        nonlocal done, dropped
        conn = Connection(HOST, ports[i % len(ports)], _auth(i))
        n = 0
        while time.perf_counter() < stop_at:
            try:
                reply = await _post_turn(conn, f"t{i}-{n // 10}")
            except ConnectionError:
                dropped += 1  # the server closed the connection: open another
                continue
            if reply.status != 200:
                raise RuntimeError(f"a turn answered {reply.status}: {reply.body[-300:]!r}")
            done += 1
            n += 1
        conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(plan.clients)))
    elapsed = time.perf_counter() - started
    return {
        "instances": len(ports),
        "turns_per_s": done / elapsed,
        "turns": done,
        "connections_dropped": dropped,
    }


async def run(plan: Plan, *, with_throughput: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"environment": environment(), "plan": plan.__dict__}
    standin_port = _free_port()
    standin = subprocess.Popen(
        [sys.executable, "-m", "bench.standin", "--port", str(standin_port)],
        cwd=Path(__file__).parent.parent,
        stdout=subprocess.DEVNULL,
    )
    try:
        _wait_listening(standin, standin_port, "Ollama stand-in")
        url = f"http://{HOST}:{standin_port}"
        with running_postgres() as postgres, tempfile.TemporaryDirectory() as tmp:
            shared, memory_db = postgres.create_database(), postgres.create_database()
            configs = {
                "sqlite": [],
                "postgresql": ["--state-url", shared],
                "sqlite+memory": ["--memory", "edge"],
                "postgresql+memory": ["--state-url", memory_db, "--memory", "edge"],
            }
            if with_throughput:
                configs |= {n: ["--state-url", shared] for n in ("postgresql-2", "postgresql-3")}
            with servers(url, configs, Path(tmp)) as running:
                started = time.perf_counter()
                result["side_by_side"] = await side_by_side(running, postgres.process.pid, plan)
                print(f"side by side done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
                if with_throughput:
                    pg = [running[n][0] for n in ("postgresql", "postgresql-2", "postgresql-3")]
                    result["throughput"] = [
                        await throughput([running["sqlite"][0]], plan) | {"state": "sqlite"},
                        await throughput(pg[:1], plan) | {"state": "postgresql"},
                        await throughput(pg, plan) | {"state": "postgresql"},
                    ]
    finally:
        standin.terminate()
        standin.wait(10)
    return result


def table(result: dict[str, Any]) -> str:
    side = result["side_by_side"]
    rows = [
        "| configuration | TTFB p50 / p99 (ms) | turn p50 (ms) | server CPU / turn (ms) | "
        "PostgreSQL CPU / turn (ms) |",
        "|---|---|---|---|---|",
    ]
    for name in CONFIGS:
        r = side[name]
        rows.append(
            f"| {name} | {r['ttfb_p50_ms']:.1f} / {r['ttfb_p99_ms']:.1f} | "
            f"{r['turn_p50_ms']:.1f} | {r['server_cpu_ms_per_turn']:.2f} | "
            f"{r['postgres_cpu_ms_per_turn']:.2f} |"
        )
    rows += [
        "",
        f"PostgreSQL / SQLite, memory off: TTFB x{side['ratio_ttfb']:.2f}, "
        f"server CPU x{side['ratio_server_cpu']:.2f}; memory on: TTFB "
        f"x{side['ratio_ttfb_memory']:.2f}, server CPU x{side['ratio_server_cpu_memory']:.2f}",
        "",
    ]
    if "throughput" in result:
        rows += ["| state | instances | turns / s |", "|---|---|---|"]
        rows += [
            f"| {t['state']} | {t['instances']} | {t['turns_per_s']:.1f} |"
            for t in result["throughput"]
        ]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(prog="scripts/bench state")
    parser.add_argument("--quick", action="store_true", help="a run of about two minutes")
    parser.add_argument("--json", type=Path, default=RESULTS / "state.json")
    parser.add_argument(
        "--throughput",
        action="store_true",
        help="also turns a second on one and three instances (see docs/benchmarks.md)",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    result = uvloop.run(run(QUICK if args.quick else Plan(), with_throughput=args.throughput))
    result["duration_s"] = time.perf_counter() - started
    result["table"] = table(result)
    print(result["table"])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.json} in {result['duration_s']:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
