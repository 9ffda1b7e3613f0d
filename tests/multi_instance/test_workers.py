"""``mercury-http serve --workers N``: refused on embedded stores, N processes on PostgreSQL."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import ALICE, BOB
from tests.reliability.support import ROOT, ChildServer, child_env, read_turn
from tests.support.ollama_standin import OllamaStandIn
from tests.support.postgres import PostgresServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

CONNECTIONS = 24


def _refusal(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "channel_http", "serve", "--workers", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_two_workers_on_sqlite_are_refused_naming_postgresql(
    tmp_path: Path, ollama_session: OllamaStandIn
) -> None:
    done = _refusal(child_env(tmp_path, ollama_session.url))
    assert done.returncode == 2
    assert "MERCURY_STATE_URL" in done.stderr
    assert "Traceback" not in done.stderr


def test_two_workers_with_memory_in_process_are_refused_naming_the_way_out(
    tmp_path: Path, ollama_session: OllamaStandIn
) -> None:
    env = child_env(
        tmp_path,
        ollama_session.url,
        MERCURY_STATE_URL="postgresql://mercury:secret@127.0.0.1:1/mercury",
        MERCURY_MEMORY_STORE="edge",
    )
    done = _refusal(env)
    assert done.returncode == 2
    assert "MERCURY_MEMORY_STORE" in done.stderr
    assert "secret" not in done.stderr


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def _established_on(port: int) -> set[int]:
    """Socket inodes of established TCP connections whose local port is ``port``."""
    inodes: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def _sockets_of(pid: int) -> set[int]:
    found: set[int] = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        match = re.fullmatch(r"socket:\[(\d+)\]", target)
        if match:
            found.add(int(match.group(1)))
    return found


async def test_two_workers_on_postgresql_serve_turns_through_both(
    tmp_path: Path, ollama_session: OllamaStandIn, postgres_server: PostgresServer
) -> None:
    env = child_env(
        tmp_path / "data",
        ollama_session.url,
        MERCURY_STATE_URL=postgres_server.create_database(),
        HTTP_SURFACE_WORKERS="2",
        MERCURY_RATE_LIMIT_PER_USER="1000",
    )
    with ChildServer(env, tmp_path / "server.log") as server:
        assert server.process is not None
        workers = _children(server.process.pid)
        assert len(workers) == 2
        # One connection per client, kept open: the kernel spreads them over the workers.
        clients = [
            httpx.AsyncClient(
                base_url=server.url, limits=httpx.Limits(max_connections=1), timeout=30
            )
            for _ in range(CONNECTIONS)
        ]
        try:
            outcomes = await asyncio.gather(
                *(
                    read_turn(
                        client,
                        {"text": f"hello {i}", "conversationId": f"w{i}"},
                        ALICE if i % 2 else BOB,
                    )
                    for i, client in enumerate(clients)
                )
            )
            assert [o.status for o in outcomes] == [200] * CONNECTIONS
            assert all(o.events and o.events[-1][0] == "final" for o in outcomes)
            port = int(server.url.rsplit(":", 1)[1])
            established = _established_on(port)
            held = {pid: len(_sockets_of(pid) & established) for pid in workers}
            assert sum(held.values()) == CONNECTIONS, held
            assert all(count > 0 for count in held.values()), held
            # Each worker writes its samples to the shared directory; any worker adds them up.
            metrics = await clients[0].get("/metrics", headers=ALICE)
            assert metrics.status_code == 200
            started = re.search(
                rb"^mercury_turns_started_total(?:\{[^}]*\})? ([0-9.e+]+)$",
                metrics.content,
                re.MULTILINE,
            )
            assert started is not None, metrics.text[:2000]
            assert float(started.group(1)) == CONNECTIONS
        finally:
            for client in clients:
                await client.aclose()
        server.stop()
        assert server.process.returncode == 0
        for pid in workers:
            assert (
                not Path(f"/proc/{pid}").exists()
                or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
            )
