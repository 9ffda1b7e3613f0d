"""Turns per second with 1 and with 2 ``serve --workers``, side by side, on PostgreSQL.

Starts a PostgreSQL (the test suite's, ``tests/support/postgres.py``) and the benchmark's
Ollama stand-in, then for each worker count a real ``mercury-http serve --workers N`` (state
in PostgreSQL, memory off: the embedded stores are refused with more than one worker) and
``--connections`` keep-alive clients, each running short turns (``fast 20``) back to back
for ``--seconds``. Counts alternate (1, 2, 1, 2 …) for ``--repeats`` rounds; prints turns per
second per count (min / median / max) and the load average, and writes
``bench/results/workers.json``::

    python -m bench.workers [--seconds 10] [--connections 32] [--repeats 3]

On a 2-core machine the stand-in, the client and PostgreSQL share the cores with the
workers, so the second worker's gain is bounded by what they leave.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import uvloop

from bench.client import Connection
from bench.server import TOKEN, USERS, tokens
from bench.turns import HOST, RESULTS, ROOT, _check, _free_port, _wait_listening
from tests.support.postgres import running_postgres

TOKENS = 20


async def _drive(port: int, connections: int, seconds: float, run: str) -> float:
    conns = [
        await Connection(HOST, port, {"authorization": f"Bearer {TOKEN % (i % USERS)}"}).open()
        for i in range(connections)
    ]
    done = 0
    deadline = time.perf_counter() + seconds

    async def loop(i: int, conn: Connection) -> None:
        nonlocal done
        n = 0
        while time.perf_counter() < deadline:
            body = json.dumps({"text": f"fast {TOKENS}", "conversationId": f"{run}-{i}-{n}"})
            try:
                reply = await asyncio.wait_for(conn.request("POST", "/turn", body.encode()), 30)
            except TimeoutError:
                raise RuntimeError(f"a turn on connection {i} got no answer within 30 s") from None
            _check(reply, TOKENS, "turn")
            done += 1
            n += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(i, c) for i, c in enumerate(conns)))
    elapsed = time.perf_counter() - started
    for conn in conns:
        conn.close()
    return done / elapsed


def _serve(
    workers: int, state_url: str, ollama: str, data: Path
) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MERCURY_", "OLLAMA_"))}
    env.update(
        {
            "MERCURY_CONFIG_FILE": "",
            "MERCURY_AUTH": "static",
            "AUTH_STATIC_TOKENS": json.dumps(tokens()),
            "MERCURY_DATA_DIR": str(data),
            "MERCURY_STATE_URL": state_url,
            "MERCURY_MEMORY_STORE": "off",
            "MERCURY_RATE_LIMIT_PER_USER": "1000",
            "MERCURY_RATE_LIMIT_WINDOW_MS": "1000",
            "MERCURY_LOG_LEVEL": "warning",
            "OLLAMA_HOST": ollama,
            "OLLAMA_MODEL": "bench",
            "HTTP_SURFACE_HOST": HOST,
            "HTTP_SURFACE_PORT": str(port),
            "HTTP_SURFACE_WORKERS": str(workers),
        }
    )
    cmd = [sys.executable, "-m", "channel_http", "serve"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    _wait_listening(proc, port, f"server with {workers} worker(s)")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # listening is not ready: wait for the app
        try:
            if httpx.get(f"http://{HOST}:{port}/version", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    return proc, port


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[int, list[float]] = {1: [], 2: []}
    ollama_port = _free_port()
    standin = subprocess.Popen(
        [sys.executable, "-m", "bench.standin", "--port", str(ollama_port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    try:
        _wait_listening(standin, ollama_port, "Ollama stand-in")
        with running_postgres() as postgres, tempfile.TemporaryDirectory() as data:
            for r in range(args.repeats):
                for workers in (1, 2) if r % 2 == 0 else (2, 1):
                    proc, port = _serve(
                        workers,
                        postgres.create_database(),
                        f"http://{HOST}:{ollama_port}",
                        Path(data) / f"{r}-{workers}",
                    )
                    try:
                        await _drive(port, args.connections, 2.0, "warm")
                        rate = await _drive(port, args.connections, args.seconds, "run")
                    finally:
                        proc.terminate()
                        proc.wait(30)
                    print(json.dumps({"workers": workers, "turns_per_s": rate}), flush=True)
                    results[workers].append(rate)
    finally:
        standin.terminate()
        standin.wait(10)
    return {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "connections": args.connections,
        "seconds": args.seconds,
        "load_average": os.getloadavg(),
        "turns_per_s": {
            str(w): {"min": min(v), "median": statistics.median(v), "max": max(v)}
            for w, v in results.items()
        },
        "ratio_2_vs_1": statistics.median(results[2]) / statistics.median(results[1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.workers")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=RESULTS / "workers.json")
    args = parser.parse_args()
    document = uvloop.run(main_async(args))
    for workers, figures in document["turns_per_s"].items():
        print(
            f"{workers} worker(s): {figures['median']:.0f} turns/s "
            f"(min {figures['min']:.0f}, max {figures['max']:.0f})"
        )
    print(
        f"2 vs 1: {document['ratio_2_vs_1']:.2f}x; load average {document['load_average'][0]:.2f}"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
