"""The turn benchmark: per-event cost, time to first byte, concurrency, auth, recall.

Three processes on loopback: the server (:mod:`bench.server`, pinned to core 0), the
Ollama stand-in (:mod:`bench.standin`) and this load client (both on core 1). Every figure
is a ratio to a baseline measured side by side, in the same run, interleaved, because
absolute times on a shared machine drift. Server CPU is read from ``/proc/<pid>/stat``
(utime + stime) around each measured request. Prints a table and writes
``bench/results/turns.json``::

    python -m bench.turns [--quick] [--no-recall] [--no-auth] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final

import uvloop

from bench import collector_log
from bench.client import Connection, Reply
from bench.server import TOKEN, USERS
from channel_http.serving import collector

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
HOST = "127.0.0.1"


#: bench/recall.py at the target's size: Edge, clustered vectors, as steady writes leave them.
RECALL_100K: Final = tuple(
    "--sizes 100000 --adapters edge --data clustered --index-every 10000".split()
)
#: ``--full``: one million points per person too (~11 minutes of inserts on two cores).
RECALL_1M: Final = tuple("--sizes 1000000 --adapters edge --data clustered --budget-s 7200".split())


@dataclass(frozen=True)
class Plan:
    events: int = 20_000
    rounds: int = 6
    ttfb_turns: int = 300
    ttfb_tokens: int = 20
    levels: tuple[int, ...] = (100, 500, 1000)
    paced_tokens: int = 150
    rate: float = 50.0
    ramp_s: float = 1.0
    auth_tokens: int = 200
    auth_cached_rounds: int = 50
    #: bench/recall.py's invocations: 1k and 10k on both adapters and data sets; 100k on
    #: Edge with clustered vectors written as steady writes leave them (the target's size).
    recall_runs: tuple[tuple[str, ...], ...] = (
        ("--sizes", "1000,10000"),
        RECALL_100K,
    )
    repeats: int = 3
    #: ``--gc-log``: where the server logs its collector passes and :func:`_level` marks
    #: each run's start (bench/collector_log.py); None: not logged.
    gc_log: str | None = None


QUICK = Plan(
    rounds=3,
    ttfb_turns=100,
    levels=(100, 500, 1000),
    paced_tokens=50,
    auth_tokens=50,
    auth_cached_rounds=20,
    recall_runs=(("--sizes", "1000"),),
)


# ------------------------------------------------------------------ processes


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE


def _wait_listening(proc: subprocess.Popen[bytes], port: int, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"The {what} exited with {proc.returncode} before listening.")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"The {what} did not listen on port {port} within 30 s.")


@contextlib.contextmanager
def processes(
    server_cpu: int | None,
    other_cpu: int | None,
    server_options: list[str],
    provider: str = "ollama",
) -> Iterator[tuple[int, int, int, int]]:
    """Start the stand-in and the server; yields (server port, server pid, stand-in pid)."""
    py = sys.executable
    ollama_port, port = _free_port(), _free_port()
    started: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="mercury-bench-") as data:
        try:
            cmd = [py, "-m", "bench.standin", "--port", str(ollama_port)]
            cmd += ["--protocol", provider]
            if other_cpu is not None:
                cmd += ["--cpu", str(other_cpu)]
            standin = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
            started.append(standin)
            _wait_listening(standin, ollama_port, "Ollama stand-in")
            cmd = [py, "-m", "bench.server", "--port", str(port), "--data", data]
            cmd += ["--ollama", f"http://{HOST}:{ollama_port}", "--provider", provider]
            if server_cpu is not None:
                cmd += ["--cpu", str(server_cpu)]
            cmd += server_options
            server = subprocess.Popen(cmd, cwd=ROOT)
            started.append(server)
            _wait_listening(server, port, "server")
            yield port, server.pid, ollama_port, standin.pid
        finally:
            for proc in reversed(started):
                proc.terminate()
            for proc in reversed(started):
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


# ------------------------------------------------------------------ helpers


def _auth(i: int = 0) -> dict[str, str]:
    return {"authorization": f"Bearer {TOKEN % (i % USERS)}"}


def _turn_body(text: str) -> bytes:
    return json.dumps({"text": text}).encode()


def _check(reply: Reply, events: int, what: str) -> None:
    if reply.status != 200:
        raise RuntimeError(f"{what} answered {reply.status}: {reply.body[:300]!r}")
    got = reply.body.count(b"event: text\n")
    if got != events:
        raise RuntimeError(
            f"{what} streamed {got} text events, not {events}: {reply.body[-300:]!r}"
        )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ------------------------------------------------------------------ per-event cost


#: The per-event routes, measured side by side; "batched" is the baseline of record.
PER_EVENT_KINDS = ("turn", "batched", "relay", "bare")


async def per_event(
    port: int, pid: int, plan: Plan, measured: tuple[str, ...] = PER_EVENT_KINDS
) -> dict[str, Any]:
    """One per-event measurement: each kind, ``plan.rounds`` times, in rotating order."""
    n = plan.events
    routes = {
        "turn": ("POST", "/turn", _turn_body(f"fast {n}")),
        "batched": ("GET", f"/bench/batched?n={n}", b""),
        "relay": ("GET", f"/bench/relay?n={n}", b""),
        "bare": ("GET", f"/bench/bare?n={n}", b""),
    }
    kinds = {kind: routes[kind] for kind in measured}
    conns = {k: await Connection(HOST, port, _auth(i)).open() for i, k in enumerate(kinds)}
    cpu = dict.fromkeys(kinds, 0.0)
    wall = {k: [] for k in kinds}  # type: dict[str, list[float]]
    names = list(kinds)
    for r in range(plan.rounds + 1):  # round 0 warms up
        order = names[r % len(names) :] + names[: r % len(names)]
        for kind in order:
            method, path, body = kinds[kind]
            before = cpu_s(pid)
            reply = await conns[kind].request(method, path, body)
            after = cpu_s(pid)
            _check(reply, n, kind)
            if r:
                cpu[kind] += after - before
                wall[kind].append(reply.ended - reply.sent)
    for conn in conns.values():
        conn.close()
    events = n * plan.rounds
    out: dict[str, Any] = {
        k: {
            "cpu_us_per_event": cpu[k] / events * 1e6,
            "wall_us_per_event_p50": statistics.median(wall[k]) / n * 1e6,
        }
        for k in kinds
    }
    for kind in kinds:
        if kind != "turn":
            out[f"ratio_cpu_turn_vs_{kind}"] = cpu["turn"] / cpu[kind]
    out["events"] = n
    out["rounds"] = plan.rounds
    return out


async def turns_side_by_side(servers: dict[str, tuple[int, int]], plan: Plan) -> dict[str, Any]:
    """The per-event cost of the same turn on two servers, their requests interleaved.

    ``servers`` maps a name to (port, pid). Each round sends one ``fast N`` turn to each, the
    order swapped every round, so drift on the shared machine falls on both alike.
    """
    n = plan.events
    body = _turn_body(f"fast {n}")
    names = list(servers)
    conns = {
        name: await Connection(HOST, servers[name][0], _auth(i)).open()
        for i, name in enumerate(names)
    }
    cpu = dict.fromkeys(names, 0.0)
    wall: dict[str, list[float]] = {name: [] for name in names}
    for r in range(plan.rounds + 1):  # round 0 warms up
        for name in names if r % 2 else list(reversed(names)):
            pid = servers[name][1]
            before = cpu_s(pid)
            reply = await conns[name].request("POST", "/turn", body)
            after = cpu_s(pid)
            _check(reply, n, name)
            if r:
                cpu[name] += after - before
                wall[name].append(reply.ended - reply.sent)
    for conn in conns.values():
        conn.close()
    events = n * plan.rounds
    out: dict[str, Any] = {
        name: {
            "cpu_us_per_event": cpu[name] / events * 1e6,
            "wall_us_per_event_p50": statistics.median(wall[name]) / n * 1e6,
        }
        for name in names
    }
    first, second = names
    out["ratio_cpu"] = cpu[first] / cpu[second]
    out["ratio_wall_p50"] = statistics.median(wall[first]) / statistics.median(wall[second])
    out["events"] = n
    out["rounds"] = plan.rounds
    return out


def spread(values: list[float]) -> dict[str, float]:
    """min / median / max of repeated figures."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


async def per_event_repeated(
    port: int, pid: int, plan: Plan, measured: tuple[str, ...] = PER_EVENT_KINDS
) -> dict[str, Any]:
    """``plan.repeats`` per-event measurements, each with the load average it ran under."""
    runs = []
    for _ in range(plan.repeats):
        load = os.getloadavg()[0]
        run = await per_event(port, pid, plan, measured)
        run["load_average"] = load
        runs.append(run)
    out: dict[str, Any] = {"runs": runs}
    for kind in measured:
        out[kind] = spread([r[kind]["cpu_us_per_event"] for r in runs])
        if kind != "turn":
            key = f"ratio_cpu_turn_vs_{kind}"
            out[key] = spread([r[key] for r in runs])
    out["load_average"] = spread([r["load_average"] for r in runs])
    return out


# ------------------------------------------------------------------ rejoining on vs off


async def per_event_rejoin(off: tuple[int, int], on: tuple[int, int], plan: Plan) -> dict[str, Any]:
    """The per-event server CPU of a turn with rejoining off and on, interleaved.

    Two servers (same core, same stand-in script), ``off`` without ``HTTP_SURFACE_REJOIN_S``
    and ``on`` with it; each its own keep-alive connection, alternating which goes first.
    """
    n = plan.events
    servers = {"off": off, "on": on}
    conns = {k: await Connection(HOST, port, _auth(1)).open() for k, (port, _) in servers.items()}
    cpu = dict.fromkeys(servers, 0.0)
    wall: dict[str, list[float]] = {k: [] for k in servers}
    body = _turn_body(f"fast {n}")
    for r in range(plan.rounds * 2 + 1):  # round 0 warms up; twice the rounds: one pair each
        for kind in ("off", "on") if r % 2 else ("on", "off"):
            pid = servers[kind][1]
            before = cpu_s(pid)
            reply = await conns[kind].request("POST", "/turn", body)
            await asyncio.sleep(0.2)  # the turn's own tail (a log's last batch) counts too
            after = cpu_s(pid)
            _check(reply, n, f"rejoin {kind}")
            if r:
                cpu[kind] += after - before
                wall[kind].append(reply.ended - reply.sent)
    for conn in conns.values():
        conn.close()
    events = n * plan.rounds * 2
    out: dict[str, Any] = {
        k: {
            "cpu_us_per_event": cpu[k] / events * 1e6,
            "wall_us_per_event_p50": statistics.median(wall[k]) / n * 1e6,
        }
        for k in servers
    }
    out["ratio_cpu_on_vs_off"] = cpu["on"] / cpu["off"]
    out["ratio_wall_on_vs_off"] = statistics.median(wall["on"]) / statistics.median(wall["off"])
    return out


async def rejoin_phase(
    server_cpu: int | None, other_cpu: int | None, plan: Plan, shared: bool
) -> dict[str, Any]:
    """Rejoining on vs off in memory (SQLite) and, with ``shared``, on a PostgreSQL store."""
    out: dict[str, Any] = {}
    with (
        processes(server_cpu, other_cpu, []) as (port, pid, _, _),
        processes(server_cpu, other_cpu, ["--rejoin", "10"]) as (on_port, on_pid, _, _),
    ):
        out["memory"] = await per_event_rejoin((port, pid), (on_port, on_pid), plan)
    if not shared:
        return out
    try:
        from tests.support.postgres import running_postgres
    except ImportError as error:  # the test support isn't installed beside the bench
        out["postgresql"] = {"skipped": str(error)}
        return out
    try:
        with running_postgres() as postgres:
            off_url, on_url = postgres.create_database(), postgres.create_database()
            with (
                processes(server_cpu, other_cpu, ["--state-url", off_url]) as (port, pid, _, _),
                processes(server_cpu, other_cpu, ["--rejoin", "10", "--state-url", on_url]) as (
                    on_port,
                    on_pid,
                    _,
                    _,
                ),
            ):
                out["postgresql"] = await per_event_rejoin((port, pid), (on_port, on_pid), plan)
    except Exception as error:  # no PostgreSQL binaries here: say so, keep the rest
        out["postgresql"] = {"skipped": f"PostgreSQL run failed: {error}"}
    return out


# ------------------------------------------------------------------ time to first byte


async def first_byte(port: int, pid: int, plan: Plan) -> dict[str, Any]:
    k = plan.ttfb_tokens
    turn = await Connection(HOST, port, _auth(1)).open()
    bare = await Connection(HOST, port, _auth(2)).open()
    relay = await Connection(HOST, port, _auth(3)).open()
    times: dict[str, list[float]] = {"turn": [], "bare": [], "relay": []}
    cpu = {"turn": 0.0, "bare": 0.0, "relay": 0.0}
    body = _turn_body(f"fast {k}")
    for i in range(plan.ttfb_turns + 10):
        pair = [
            ("turn", turn, "POST", "/turn", body),
            ("bare", bare, "GET", f"/bench/bare?n={k}", b""),
            ("relay", relay, "GET", f"/bench/relay?n={k}", b""),
        ]
        pair = pair[i % 3 :] + pair[: i % 3]
        for kind, conn, method, path, payload in pair:
            before = cpu_s(pid)
            reply = await conn.request(method, path, payload)
            after = cpu_s(pid)
            _check(reply, k, kind)
            if i >= 10:
                times[kind].append((reply.first_byte - reply.sent) * 1e3)
                cpu[kind] += after - before
    for conn in (turn, bare, relay):
        conn.close()
    out: dict[str, Any] = {
        kind: {
            "p50_ms": statistics.median(v),
            "p99_ms": _pct(v, 0.99),
            "server_cpu_ms_per_request": cpu[kind] / len(v) * 1e3,
        }
        for kind, v in times.items()
    }
    out["ratio_p50"] = out["turn"]["p50_ms"] / out["bare"]["p50_ms"]
    out["ratio_p50_vs_relay"] = out["turn"]["p50_ms"] / out["relay"]["p50_ms"]
    out["turns"] = plan.ttfb_turns
    return out


# ------------------------------------------------------------------ concurrency


async def concurrency(
    port: int, pid: int, standin_port: int, standin_pid: int, plan: Plan
) -> list[dict[str, Any]]:
    """Each level through the server, then straight against the stand-in (its own pacing),
    ``plan.repeats`` times, each run with the load average it started under."""
    results = []
    shape = f"paced {plan.paced_tokens} {plan.rate:g}"
    direct = msgspec_json({"model": "bench", "messages": [{"role": "user", "content": shape}]})
    relay_path = f"/bench/batched?n={plan.paced_tokens}&rate={plan.rate:g}"
    for level, repeat in ((lv, r) for lv in plan.levels for r in range(plan.repeats)):
        await asyncio.sleep(1.0)
        load = os.getloadavg()[0]
        through = await _level(
            port,
            pid,
            standin_pid,
            plan,
            level,
            ("POST", "/turn", _turn_body(shape), b"event: text\n"),
        )
        await asyncio.sleep(0.5)
        # The baseline of record: the same paced stream through the batching relay, in the
        # same server (httpx upstream, one write per upstream read).
        relayed = await _level(
            port, pid, standin_pid, plan, level, ("GET", relay_path, b"", b"event: text\n")
        )
        await asyncio.sleep(0.5)
        # The floor of the stack: the same frames at the same pace from a timer, no upstream.
        bare = ("GET", f"/bench/bare?n={plan.paced_tokens}&rate={plan.rate:g}", b"", TEXT)
        floor = await _level(port, pid, standin_pid, plan, level, bare)
        await asyncio.sleep(0.5)
        # The same floor, each stream on a connection it opens as it starts: new clients
        # arriving while the others stream (channel_http/serving/accept.py).
        floor_fresh = await _level(port, pid, standin_pid, plan, level, bare, fresh=True)
        await asyncio.sleep(0.5)
        alone = await _level(
            standin_port,
            standin_pid,
            standin_pid,
            plan,
            level,
            ("POST", "/api/chat", direct, b'"done":false'),
        )
        through["standin_alone"] = {
            k: alone[k]
            for k in (
                "completed",
                "stretch_p50",
                "stretch_p99",
                "stretch_max",
                "standin_cpu_share",
                "client_cpu_share",
                "client_lag_p99_ms",
            )
        }
        through["batching_relay"] = {
            k: relayed[k]
            for k in (
                "completed",
                "stretch_p50",
                "stretch_p99",
                "stretch_max",
                "ttfb_p50_ms",
                "ttfb_p99_ms",
                "server_cpu_share",
                "server_cpu_us_per_event",
            )
        }
        through["bare_paced"] = {k: floor[k] for k in _FLOOR_KEYS}
        through["bare_paced_fresh"] = {k: floor_fresh[k] for k in _FLOOR_KEYS}
        through["run"] = repeat + 1
        through["load_average"] = load
        results.append(through)
    return results


#: How a text event starts on the wire: what a paced run counts in each body.
TEXT: Final = b"event: text\n"

#: What a floor run keeps of its level's figures.
_FLOOR_KEYS: Final = (
    "completed",
    "stretch_p99",
    "ttfb_p99_ms",
    "server_ttfb_p99_ms",
    "before_app_p99_ms",
    "server_cpu_us_per_event",
)


def msgspec_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _run_kind(path: str, fresh: bool) -> str:
    if path.startswith("/bench/batched"):
        return "through the batching relay"
    if path.startswith("/bench/bare"):
        return "floor, each on a new connection" if fresh else "floor"
    return "straight from the stand-in" if path.startswith("/api/") else "turns"


async def _level(
    port: int,
    pid: int,
    standin_pid: int,
    plan: Plan,
    level: int,
    target: tuple[str, str, bytes, bytes],
    *,
    fresh: bool = False,
) -> dict[str, Any]:
    """``level`` paced streams opened over ``plan.ramp_s``; with ``fresh``, each on a
    connection it opens as it starts (its TTFB then counts the connect and the accept),
    else on connections all opened beforehand."""
    ideal = plan.paced_tokens / plan.rate
    method, path, body, marker = target
    conns = [Connection(HOST, port, _auth(i)) for i in range(level)]
    opening = asyncio.Semaphore(100)

    async def open_one(conn: Connection) -> None:
        async with opening:
            await conn.open()

    if plan.gc_log is not None:
        collector_log.mark(Path(plan.gc_log), f"{level} {_run_kind(path, fresh)}")
    if not fresh:
        await asyncio.gather(*(open_one(c) for c in conns))
    await asyncio.sleep(0.3)
    idle = rss_bytes(pid)
    peak = idle
    cpu0, sb0, t0 = cpu_s(pid), cpu_s(standin_pid), time.perf_counter()
    client0 = time.process_time()
    running = True
    lags: list[float] = []  # how late the client's own loop woke the sampler, in ms
    cpu_at: list[tuple[float, float]] = []  # (when, the server's CPU seconds so far)

    async def sample() -> None:
        nonlocal peak
        while running:
            peak = max(peak, rss_bytes(pid))
            cpu_at.append((time.perf_counter(), cpu_s(pid)))
            due = time.perf_counter() + 0.05
            await asyncio.sleep(0.05)
            lags.append((time.perf_counter() - due) * 1e3)

    async def one(i: int, conn: Connection) -> Reply:
        await asyncio.sleep(plan.ramp_s * i / level)
        started = time.perf_counter()
        if fresh:
            await conn.open()
        # A stream that never ends (a connection lost without a close on a saturated
        # machine) counts as not completed instead of hanging the benchmark.
        reply = await asyncio.wait_for(conn.request(method, path, body), ideal * 10 + 30)
        reply.sent = started  # a fresh connection's connect is part of its wait
        return reply

    sampler = asyncio.create_task(sample())
    replies = await asyncio.gather(
        *(one(i, c) for i, c in enumerate(conns)), return_exceptions=True
    )
    running = False
    await sampler
    elapsed = time.perf_counter() - t0
    cpu, standin_cpu = cpu_s(pid) - cpu0, cpu_s(standin_pid) - sb0
    client_cpu = time.process_time() - client0
    for conn in conns:
        conn.close()
    good = [
        r
        for r in replies
        if isinstance(r, Reply) and r.status == 200 and r.body.count(marker) == plan.paced_tokens
    ]
    stretch = [(r.ended - r.sent) / ideal - 1 for r in good]
    # The stream alone: first text frame to the end, against (tokens - 1) / rate.
    streaming = [(r.ended - r.first_byte) / (ideal - 1 / plan.rate) - 1 for r in good]
    ttfb = [(r.first_byte - r.sent) * 1e3 for r in good]
    # The server's share of it (Server-Timing ``app``): from the request, once the server's
    # loop has read it, to the first byte; the rest is the accept queue, the loop's backlog
    # and the client's own loop.
    in_server = [r.server_ms for r in good if r.server_ms is not None]
    # The wait before the application: the client's write until the server's loop has read
    # the request and started the application on it (one clock for both processes).
    before_app = [(r.arrived - r.sent) * 1e3 for r in good if r.arrived is not None]
    some = bool(good)
    return {
        "streams": level,
        "completed": len(good),
        "ideal_s": ideal,
        "ramp_s": plan.ramp_s,
        "stretch_p50": statistics.median(stretch) if some else None,
        "stretch_p99": _pct(stretch, 0.99) if some else None,
        "stretch_max": max(stretch) if some else None,
        "streaming_stretch_p50": statistics.median(streaming) if some else None,
        "streaming_stretch_p99": _pct(streaming, 0.99) if some else None,
        "ttfb_p50_ms": statistics.median(ttfb) if some else None,
        "ttfb_p99_ms": _pct(ttfb, 0.99) if some else None,
        "server_ttfb_p50_ms": statistics.median(in_server) if in_server else None,
        "server_ttfb_p99_ms": _pct(in_server, 0.99) if in_server else None,
        "before_app_p50_ms": statistics.median(before_app) if before_app else None,
        "before_app_p99_ms": _pct(before_app, 0.99) if before_app else None,
        "server_cpu_share": cpu / elapsed,
        # The busiest 200 ms of the server's core (the ramp's end, when every stream is
        # streaming and the last turns are starting): how near it came to saturation.
        "server_cpu_peak_share": _peak_share(cpu_at, 0.2),
        "standin_cpu_share": standin_cpu / elapsed,
        # The load client shares its core with the stand-in: its CPU and how late its own
        # loop ran (part of every TTFB and stretch it measures).
        "client_cpu_share": client_cpu / elapsed,
        "client_lag_p99_ms": _pct(lags, 0.99) if lags else None,
        "server_cpu_us_per_event": cpu / max(len(good) * plan.paced_tokens, 1) * 1e6,
        "rss_idle_mb": idle / 2**20,
        "rss_peak_mb": peak / 2**20,
        "rss_kb_per_stream": (peak - idle) / level / 1024,
    }


# ------------------------------------------------------------------ auth


async def oidc(plan: Plan) -> dict[str, Any]:
    from auth_providers.oidc import OidcProvider
    from tests.oidc.harness import OidcProviderProcess, ensure_node_modules

    ensure_node_modules()
    with OidcProviderProcess() as idp:
        tokens = await asyncio.to_thread(
            lambda: [idp.client_credentials_token() for _ in range(plan.auth_tokens + 1)]
        )
        provider = OidcProvider.from_env(idp.issuer, idp.audience, allow_http=True)
        headers = [{"authorization": f"Bearer {t}"} for t in tokens]
        if await provider.authenticate(headers[0]) is None:  # discovery and keys
            raise RuntimeError("The OIDC provider's first token was refused.")
        fresh_headers = headers[1:]
        t0 = time.perf_counter()
        for h in fresh_headers:
            if await provider.authenticate(h) is None:
                raise RuntimeError("A fresh OIDC token was refused.")
        fresh = (time.perf_counter() - t0) / len(fresh_headers)
        t0 = time.perf_counter()
        for _ in range(plan.auth_cached_rounds):
            for h in fresh_headers:
                await provider.authenticate(h)
        cached = (time.perf_counter() - t0) / (len(fresh_headers) * plan.auth_cached_rounds)
    return {
        "fresh_us": fresh * 1e6,
        "cached_us": cached * 1e6,
        "ratio_fresh_vs_cached": fresh / cached,
        "tokens": plan.auth_tokens,
        "alg": "RS256",
    }


# ------------------------------------------------------------------ recall


def recall(plan: Plan, embedded: Path | None = None) -> dict[str, Any]:
    """bench/recall.py's invocations of the plan, one after another, in one table.

    With ``embedded`` (a corpus of bench/embed_corpus.py), the 100,000-point run measures
    its real sentence vectors too.
    """
    if not (ROOT / "bench" / "recall.py").exists():
        return {"skipped": "bench/recall.py does not exist yet"}
    lines: list[str] = []
    for run in plan.recall_runs:
        options = list(run)
        if embedded is not None and run == RECALL_100K:
            at = options.index("--data") + 1
            options[at] += f",embedded:{embedded}"
        big = max(int(size) for size in options[options.index("--sizes") + 1].split(","))
        with tempfile.TemporaryDirectory(prefix="mercury-recall-") as scratch:
            # Its own JSON goes to scratch: bench/results/recall.json is its full-size run's.
            cmd = [sys.executable, "-m", "bench.recall", *options, "--queries", "20"]
            cmd += ["--json", str(Path(scratch) / "recall.json")]
            done = subprocess.run(
                cmd,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=240 + big * 0.01,  # 1,000 s for 100k, 10,240 s for 1M
                check=False,
            )
        if done.returncode:
            return {"skipped": f"bench/recall.py failed: {done.stderr.strip()[-500:]}"}
        lines += done.stdout.splitlines()
    table = [line for line in lines if line.startswith("|")]
    header = table[:2]
    return {
        "runs": [" ".join(run) for run in plan.recall_runs],
        "table": "\n".join(header + [line for line in table if line not in header]),
        "rows": [json.loads(line) for line in lines if line.startswith("{")],
    }


# ------------------------------------------------------------------ profiling


@contextlib.contextmanager
def profiled(pid: int, where: Path | None, name: str) -> Iterator[None]:
    """py-spy samples the server while the block runs (``--profile DIR``), as collapsed stacks."""
    if where is None:
        yield
        return
    where.mkdir(parents=True, exist_ok=True)
    cmd = [
        "py-spy",
        "record",
        "-p",
        str(pid),
        "-r",
        "250",
        "-f",
        "raw",
        "-o",
        str(where / f"{name}.txt"),
    ]
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        yield
    finally:
        spy.send_signal(2)
        spy.wait(30)


# ------------------------------------------------------------------ report


def environment() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": model,
        "cpus": os.cpu_count(),
        "uvicorn": version("uvicorn"),
        "loop": f"uvloop {version('uvloop')}",
        "http": f"httptools {version('httptools')}",
        "litestar": version("litestar"),
        "msgspec": version("msgspec"),
        "httpx": version("httpx"),
    }


def _peak_share(samples: list[tuple[float, float]], window: float) -> float | None:
    """The most CPU seconds per second over any ``window`` of (time, CPU seconds) samples."""
    best = None
    start = 0
    for end in range(1, len(samples)):
        while samples[end][0] - samples[start + 1][0] >= window:
            start += 1
        spanned = samples[end][0] - samples[start][0]
        if spanned >= window:
            share = (samples[end][1] - samples[start][1]) / spanned
            best = share if best is None else max(best, share)
    return best


def _floor_measured(b: dict[str, Any]) -> str:
    return f"p99 {b['stretch_p99']:.1%}; TTFB p99 {b['ttfb_p99_ms']:.0f} ms" + _in_server(
        b.get("server_ttfb_p99_ms"), b.get("before_app_p99_ms")
    )


def _floor_cost(b: dict[str, Any]) -> str:
    return f"{b['server_cpu_us_per_event']:.1f} µs/event"


def _in_server(ms: float | None, before: float | None = None) -> str:
    """`` (in the server p99; before the application p99)`` of a TTFB, as measured."""
    if ms is None:
        return ""
    return f" ({ms:.0f} ms)" if before is None else f" ({ms:.0f}; {before:.0f} ms)"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


#: The rows beside each level's turn: what ran, what it measured, what it cost the server.
_BASELINES: Final[tuple[tuple[str, str, Any, Any], ...]] = (
    (
        "batching_relay",
        "streams through the batching relay (same server, baseline)",
        lambda b: (
            f"{b['stretch_p50']:.1%} / {b['stretch_p99']:.1%} / {b['stretch_max']:.1%}; "
            f"TTFB {b['ttfb_p50_ms']:.0f} / {b['ttfb_p99_ms']:.0f} ms"
        ),
        lambda b, lv: (
            f"server CPU {b['server_cpu_share']:.0%}, "
            f"{b['server_cpu_us_per_event']:.1f} µs/event "
            f"(turn: {lv['server_cpu_us_per_event']:.1f})"
        ),
    ),
    (
        "bare_paced",
        "streams of prebuilt frames on a timer (the stack's floor)",
        lambda b: _floor_measured(b),
        lambda b, lv: _floor_cost(b),
    ),
    (
        "bare_paced_fresh",
        "streams of the same frames, each on a new connection opened as it starts",
        lambda b: _floor_measured(b),
        lambda b, lv: _floor_cost(b),
    ),
    (
        "standin_alone",
        "streams straight from the stand-in (its own pacing)",
        lambda b: f"{b['stretch_p50']:.1%} / {b['stretch_p99']:.1%} / {b['stretch_max']:.1%}",
        lambda b, lv: f"stand-in CPU {b['standin_cpu_share']:.0%}" + _client(b),
    ),
)


def _client(b: dict[str, Any]) -> str:
    """The load client's own CPU and loop lag, where the run measured them."""
    text = ""
    if (share := b.get("client_cpu_share")) is not None:
        text += f", client CPU {share:.0%}"
    if (lag := b.get("client_lag_p99_ms")) is not None:
        text += f" (loop lag p99 {lag:.0f} ms)"
    return text


def _met(ok: bool) -> str:
    return "yes" if ok else "no"


def _spread_us(figure: dict[str, float]) -> str:
    return f"{figure['min']:.2f} / {figure['median']:.2f} / {figure['max']:.2f} µs"


def table(result: dict[str, Any]) -> str:
    rows = [_row("figure", "measured", "baseline", "ratio", "target", "met")]
    rows.append("|---|---|---|---|---|---|")
    pe = result.get("per_event")
    providers = result.get("providers")
    if providers:
        openai_us = providers["openai"]["cpu_us_per_event"]
        ollama_us = providers["ollama"]["cpu_us_per_event"]
        rows.append(
            _row(
                "per-event server CPU of a turn, OpenAI adapter vs Ollama adapter",
                f"{openai_us:.2f} µs",
                f"{ollama_us:.2f} µs",
                f"{providers['ratio_cpu']:.2f}x",
                "(info)",
                "",
            )
        )
    on_off = result.get("metrics_on_off")
    if on_off:
        r = on_off["ratio_cpu"]
        rows.append(
            _row(
                "per-event server CPU of a turn, metrics on vs off",
                f"{on_off['metrics on']['cpu_us_per_event']:.2f} µs",
                f"{on_off['metrics off']['cpu_us_per_event']:.2f} µs",
                f"{r:.3f}x",
                "≤ 1.05x",
                _met(r <= 1.05),
            )
        )
    for store, rj in (result.get("rejoin") or {}).items():
        if "skipped" in rj:
            rows.append(_row(f"rejoining on vs off ({store})", rj["skipped"], "", "", "", ""))
            continue
        ratio = rj["ratio_cpu_on_vs_off"]
        rows.append(
            _row(
                f"per-event server CPU of a turn, rejoining on vs off ({store})",
                f"{rj['on']['cpu_us_per_event']:.2f} µs",
                f"{rj['off']['cpu_us_per_event']:.2f} µs",
                f"{ratio:.2f}x",
                "≤ 1.15x",
                _met(ratio <= 1.15),
            )
        )
        rows.append(
            _row(
                f"per-event wall time (p50), rejoining on vs off ({store})",
                f"{rj['on']['wall_us_per_event_p50']:.2f} µs",
                f"{rj['off']['wall_us_per_event_p50']:.2f} µs",
                f"{rj['ratio_wall_on_vs_off']:.2f}x",
                "(info)",
                "",
            )
        )
    if pe:
        load = pe["load_average"]
        bound: float | None
        for kind, key, label, bound in (
            ("batched", "ratio_cpu_turn_vs_batched", "batching relay (of record)", 1.25),
            ("relay", "ratio_cpu_turn_vs_relay", "relay growing its write with += (info)", None),
            ("bare", "ratio_cpu_turn_vs_bare", "bare frames, one write each (info)", None),
        ):
            ratio = pe[key]
            rows.append(
                _row(
                    f"per-event server CPU, turn vs {label}; "
                    f"{len(pe['runs'])} runs min/median/max, load {load['median']:.2f}",
                    _spread_us(pe["turn"]),
                    _spread_us(pe[kind]),
                    f"{ratio['min']:.2f} / {ratio['median']:.2f} / {ratio['max']:.2f}x",
                    f"≤ {bound}x (every run)" if bound else "(info)",
                    _met(ratio["max"] <= bound) if bound else "",
                )
            )
    fb = result.get("first_byte")
    if fb:
        turn = f"{fb['turn']['p50_ms']:.2f} / {fb['turn']['p99_ms']:.2f} ms"
        for name, key, target in (
            ("bare", "ratio_p50", "≤ 1.5x"),
            ("relay", "ratio_p50_vs_relay", "(info)"),
        ):
            r = fb[key]
            rows.append(
                _row(
                    f"time to first byte p50 / p99, turn vs {name}",
                    turn,
                    f"{fb[name]['p50_ms']:.2f} / {fb[name]['p99_ms']:.2f} ms",
                    f"{r:.2f}x (p50)",
                    target,
                    _met(r <= 1.5) if name == "bare" else "",
                )
            )
    levels = result.get("concurrency", [])
    for lv in levels:
        if lv["stretch_p50"] is None:
            rows.append(_row(f"{lv['streams']} streams", "none completed", "", "", "", "no"))
            continue
        scored = lv["streams"] == 500
        met = lv["stretch_p99"] <= 0.10 and lv["completed"] == lv["streams"]
        rows.append(
            _row(
                f"{lv['streams']} streams at {result['plan']['rate']:g}/s, run {lv.get('run', 1)} "
                f"(load {lv.get('load_average', 0):.2f}): stretch p50/p99/max "
                "(streaming only p50/p99); TTFB p50/p99 (in the server p99; before the "
                "application p99)",
                f"{lv['stretch_p50']:.1%} / {lv['stretch_p99']:.1%} / {lv['stretch_max']:.1%} "
                f"({lv['streaming_stretch_p50']:.1%} / {lv['streaming_stretch_p99']:.1%}); "
                f"{lv['ttfb_p50_ms']:.0f} / {lv['ttfb_p99_ms']:.0f} ms"
                + _in_server(lv.get("server_ttfb_p99_ms"), lv.get("before_app_p99_ms")),
                f"ideal {lv['ideal_s']:.1f} s",
                f"{lv['completed']}/{lv['streams']} done, server CPU "
                f"{lv['server_cpu_share']:.0%}"
                + (
                    f" (busiest 200 ms: {lv['server_cpu_peak_share']:.0%})"
                    if lv.get("server_cpu_peak_share") is not None
                    else ""
                )
                + f", {lv['rss_kb_per_stream']:.0f} KiB RSS/stream"
                + _client(lv),
                "≤ 10% (p99)" if scored else "(info)",
                _met(met) if scored else "",
            )
        )
        for key, label, measured, cost in _BASELINES:
            base = lv.get(key)
            if base and base["stretch_p99"] is not None:
                rows.append(
                    _row(
                        f"{lv['streams']} {label}",
                        measured(base),
                        f"ideal {lv['ideal_s']:.1f} s",
                        f"{base['completed']}/{lv['streams']} done, {cost(base, lv)}",
                        "(info)",
                        "",
                    )
                )
    scored_runs = [lv for lv in levels if lv["streams"] == 500]
    if scored_runs:
        held = [
            lv
            for lv in scored_runs
            if lv["stretch_p99"] is not None
            and lv["stretch_p99"] <= 0.10
            and lv["completed"] == lv["streams"]
        ]
        rows.append(
            _row(
                "500 streams within 10% stretch at p99, every run",
                f"{len(held)} of {len(scored_runs)} runs",
                "",
                "",
                "every run",
                _met(len(held) == len(scored_runs)),
            )
        )
    au = result.get("auth")
    if au and "fresh_us" in au:
        rows.append(
            _row(
                "OIDC authenticate, fresh vs cached token",
                f"{au['fresh_us']:.1f} µs",
                f"{au['cached_us']:.2f} µs",
                f"{au['ratio_fresh_vs_cached']:.0f}x",
                "(info)",
                "",
            )
        )
    elif au:
        rows.append(_row("OIDC authenticate", str(au.get("skipped")), "", "", "", ""))
    return "\n".join(rows)


async def run(plan: Plan, args: argparse.Namespace) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, other_cpu = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    if other_cpu is not None:
        os.sched_setaffinity(0, {other_cpu})
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    result: dict[str, Any] = {
        "environment": environment(),
        "plan": plan.__dict__ | {"levels": list(plan.levels)},
        "pinning": {"server": server_cpu, "standin_and_client": other_cpu},
    }
    options = ["--httpx-model"] if args.httpx_model else []
    if args.gc_default:
        options += ["--gc", "default"]
    if args.gc_thresholds:
        options += ["--gc-thresholds", args.gc_thresholds]
    if plan.gc_log is not None:
        Path(plan.gc_log).unlink(missing_ok=True)
        options += ["--gc-log", plan.gc_log]
    if args.accept_uvloop:
        options += ["--accept", "uvloop"]
    if args.switch_default:
        options += ["--switch", "default"]
    if args.opening_in_task:
        options += ["--opening", "task"]
    result["opening"] = "body task (before)" if args.opening_in_task else "at once (serve's)"
    result["accept"] = "uvloop's" if args.accept_uvloop else "greedy (serve's)"
    result["collector"] = (
        "CPython defaults"
        if args.gc_default
        else f"settled, thresholds {args.gc_thresholds}"
        if args.gc_thresholds
        else "settled (serve's)"
    )
    result["switch_interval"] = "5 ms (CPython's)" if args.switch_default else "0.5 ms (serve's)"
    result["model_path"] = "httpx (before)" if args.httpx_model else "asyncio wire"
    result["load_average_before"] = os.getloadavg()
    with processes(server_cpu, other_cpu, options) as (port, pid, standin_port, standin_pid):
        started = time.perf_counter()
        if args.only in (None, "per-event"):
            with profiled(pid, args.profile, "per-event"):
                result["per_event"] = await per_event_repeated(port, pid, plan)
            print(f"per-event done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
        if args.only in (None, "first-byte"):
            with profiled(pid, args.profile, "first-byte"):
                result["first_byte"] = await first_byte(port, pid, plan)
            print(f"first byte done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
        if args.only in (None, "concurrency"):
            with profiled(pid, args.profile, "concurrency"):
                result["concurrency"] = await concurrency(
                    port, pid, standin_port, standin_pid, plan
                )
            print(f"concurrency done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    if args.only in (None, "per-event", "providers"):
        # The same turn on the OpenAI adapter and on the Ollama adapter, each against its
        # stand-in, both servers up at once and their turns interleaved.
        with (
            processes(server_cpu, other_cpu, [], "openai") as (o_port, o_pid, _, _),
            processes(server_cpu, other_cpu, [], "ollama") as (l_port, l_pid, _, _),
        ):
            result["providers"] = await turns_side_by_side(
                {"openai": (o_port, o_pid), "ollama": (l_port, l_pid)}, plan
            )
        print("per-event, OpenAI vs Ollama adapter done", file=sys.stderr)
    if args.only in (None, "per-event", "metrics"):
        # The same turn with metrics kept and with metrics off, interleaved the same way.
        with (
            processes(server_cpu, other_cpu, []) as (on_port, on_pid, _, _),
            processes(server_cpu, other_cpu, ["--metrics", "off"]) as (off_port, off_pid, _, _),
        ):
            result["metrics_on_off"] = await turns_side_by_side(
                {"metrics on": (on_port, on_pid), "metrics off": (off_port, off_pid)}, plan
            )
        print("per-event, metrics on vs off done", file=sys.stderr)
    if args.only in (None, "rejoin"):
        result["rejoin"] = await rejoin_phase(server_cpu, other_cpu, plan, not args.no_postgres)
        print("rejoining on vs off done", file=sys.stderr)
    result["load_average_after"] = os.getloadavg()
    if not args.no_auth:
        try:
            result["auth"] = await oidc(plan)
        except Exception as error:  # node missing or the provider failed: say so, go on
            result["auth"] = {"skipped": f"OIDC benchmark failed: {error}"}
    if not args.no_recall:
        result["recall"] = recall(plan, args.recall_embedded)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="scripts/bench")
    parser.add_argument("--quick", action="store_true", help="a run of about a minute")
    parser.add_argument(
        "--full",
        action="store_true",
        help="recall at one million points per person too (~15 more minutes)",
    )
    parser.add_argument(
        "--recall-embedded",
        type=Path,
        metavar="DIR",
        help="recall at 100,000 points on real sentence vectors too (bench/embed_corpus.py)",
    )
    parser.add_argument("--no-auth", action="store_true")
    parser.add_argument("--no-recall", action="store_true")
    parser.add_argument(
        "--only",
        choices=["per-event", "first-byte", "concurrency", "providers", "metrics", "rejoin"],
    )
    parser.add_argument(
        "--no-postgres", action="store_true", help="rejoining on vs off in memory only"
    )
    parser.add_argument(
        "--httpx-model", action="store_true", help="the server streams /api/chat on httpx"
    )
    parser.add_argument(
        "--gc-default",
        action="store_true",
        help="the server keeps CPython's collector settings "
        "(before channel_http/serving/collector.py)",
    )
    parser.add_argument(
        "--gc-thresholds",
        metavar="YOUNG,MIDDLE",
        help="the server's collector thresholds once settled (50000,10: before ff0c536)",
    )
    parser.add_argument(
        "--accept-uvloop",
        action="store_true",
        help="the server takes new connections one per loop iteration, as uvloop does "
        "(before channel_http/serving/accept.py)",
    )
    parser.add_argument(
        "--switch-default",
        action="store_true",
        help="the server keeps CPython's 5 ms switch interval "
        "(before channel_http/serving/switching.py)",
    )
    parser.add_argument(
        "--opening-in-task",
        action="store_true",
        help="a turn's first frame waits for the body's task, one loop iteration after the "
        "headers (before channel_http/protocols/sse.py Opening)",
    )
    parser.add_argument(
        "--gc-log",
        type=Path,
        metavar="PATH",
        help="log the server's collector passes to PATH and show which concurrency run each "
        "fell in (bench/collector_log.py)",
    )
    parser.add_argument("--levels", help="concurrency levels, comma-separated (e.g. 500)")
    parser.add_argument("--profile", type=Path, help="py-spy the server into DIR, per phase")
    parser.add_argument("--json", type=Path, default=RESULTS / "turns.json")
    args = parser.parse_args()
    plan = QUICK if args.quick else Plan()
    if args.full:
        plan = dataclasses.replace(plan, recall_runs=(*plan.recall_runs, RECALL_1M))
    if args.levels:
        plan = dataclasses.replace(plan, levels=tuple(int(x) for x in args.levels.split(",")))
    if args.gc_log:
        plan = dataclasses.replace(plan, gc_log=str(args.gc_log))
    started = time.perf_counter()
    # The load client's own collector, left at CPython's defaults, paused its loop for up to
    # 174 ms in a run of 500 streams (four full passes), straight into the TTFB and stretch
    # it measures: it settles as the server does.
    collector.settle()
    result = uvloop.run(run(plan, args))
    result["duration_s"] = time.perf_counter() - started
    result["table"] = table(result)
    print(result["table"])
    if args.gc_log and args.gc_log.exists():
        result["collector_passes"] = collector_log.by_run(args.gc_log)
        print("\nThe server's collector passes, by the run they fell in (--gc-log):")
        print(collector_log.describe(result["collector_passes"]))
    recall_result = result.get("recall") or {}
    print("\nMemory recall (bench/recall.py):")
    print(recall_result.get("table") or recall_result.get("skipped") or "not run (--no-recall)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.json} in {result['duration_s']:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
