"""A real PostgreSQL server for the tests: Debian's binaries, a temporary cluster, loopback.

One server per test session (:func:`start_postgres`), on a free port of 127.0.0.1, in a
temporary directory removed when it stops; each test asks it for a fresh database
(:meth:`PostgresServer.create_database`) and drops it when done
(:meth:`PostgresServer.drop_database`). ``initdb`` refuses to run as root, so under root
the cluster is made and run as the unprivileged ``postgres`` user Debian's package creates.
Durability is traded for speed (``fsync=off``, the cluster in RAM under ``/dev/shm`` when
it has room): the cluster lives for one session. A database is a copy of the template's
files (``STRATEGY FILE_COPY``), not the template written through the WAL: a few
hundredths of a second instead of tenths, and a few hundred of them per run.

The binaries are Debian's ``postgresql`` package (``scripts/test`` installs it when missing);
``MERCURY_TEST_PG_BINDIR`` points elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from tests.support.ports import free_port

USER = "mercury"


class PostgresUnavailable(RuntimeError):
    """The server binaries or the user to run them as are missing."""


def find_bindir() -> Path:
    named = os.environ.get("MERCURY_TEST_PG_BINDIR")
    if named:
        return Path(named)
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    if candidates:
        return candidates[-1].parent
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    raise PostgresUnavailable(
        "No PostgreSQL server binaries (initdb, postgres) were found; run scripts/test, which "
        "installs Debian's postgresql package, or set MERCURY_TEST_PG_BINDIR."
    )


#: Room the cluster's directory must find in /dev/shm to live there (databases are dropped
#: after their test, so it stays near initdb's size plus the WAL; this leaves margin).
_SHM_ROOM = 2 << 30


def _scratch_parent() -> str | None:
    """/dev/shm when it is a writable tmpfs with room to spare, else the system's temp dir."""
    shm = Path("/dev/shm")
    try:
        stats = os.statvfs(shm)
    except OSError:
        return None
    if not os.access(shm, os.W_OK | os.X_OK) or stats.f_bavail * stats.f_frsize < _SHM_ROOM:
        return None
    return str(shm)


class PostgresServer:
    """A running cluster; ``url(db)`` names one of its databases with the password."""

    def __init__(self, root: Path, port: int, password: str, process: subprocess.Popen[bytes]):
        self.root = root
        self.port = port
        self.password = password
        self.process = process
        self._count = 0

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new, empty database; returns its URL."""
        self._count += 1
        name = f"t{os.getpid()}_{self._count}_{secrets.token_hex(3)}"
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}" STRATEGY FILE_COPY')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database ``url`` names (made by :meth:`create_database`), sessions and all."""
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self.process.poll() is None:
            # "Fast" shutdown: ends the sessions still open instead of waiting for them.
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)


def _as_unprivileged() -> dict[str, Any]:
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresUnavailable(
            "initdb refuses to run as root and there is no 'postgres' user to run it as; "
            "install Debian's postgresql package (scripts/test does)."
        ) from None
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def start_postgres(timeout_s: float = 60.0) -> PostgresServer:
    bindir = find_bindir()
    drop = _as_unprivileged()
    root = Path(tempfile.mkdtemp(prefix="mercury-pg-", dir=_scratch_parent()))
    if drop:
        os.chown(root, drop["user"], drop["group"])
    data = root / "data"
    password = secrets.token_urlsafe(12)
    pwfile = root / "pw"
    pwfile.write_text(password)
    if drop:
        os.chown(pwfile, drop["user"], drop["group"])
    subprocess.run(  # noqa: S603 - our own arguments
        [
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            USER,
            "--pwfile",
            str(pwfile),
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
        cwd=root,
        **drop,
    )
    last_error: Exception | None = None
    for _ in range(3):
        port = free_port()
        log = (root / "postgres.log").open("ab")
        process = subprocess.Popen(  # noqa: S603 - our own arguments
            [
                str(bindir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(port),
                "-h",
                "127.0.0.1",
                "-k",
                str(root),
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=300",
                "-c",
                "shared_buffers=32MB",
                "-c",
                "max_wal_size=256MB",  # the WAL is recycled early: it may live in RAM
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=root,
            **drop,
        )
        log.close()
        server = PostgresServer(root, port, password, process)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with psycopg.connect(server.url(), connect_timeout=2):
                    return server
            except psycopg.OperationalError as error:
                last_error = error
                time.sleep(0.1)
        with contextlib.suppress(Exception):
            process.kill()
            process.wait(5)
    output = (root / "postgres.log").read_text(errors="replace")[-2000:]
    shutil.rmtree(root, ignore_errors=True)
    raise PostgresUnavailable(f"PostgreSQL didn't start ({last_error}):\n{output}")


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()
