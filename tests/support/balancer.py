"""A real HAProxy on 127.0.0.1, round robin over the instances the tests started.

``scripts/test`` installs Debian's ``haproxy`` when it is missing. The configuration is the
one docs/deploy.md recommends, on loopback ports:

- HTTP mode, ``balance roundrobin``: every request is balanced on its own, even on a
  kept-alive client connection, so consecutive turns of one conversation land on different
  instances;
- responses are streamed as they come (HAProxy never buffers a response body in HTTP mode;
  ``option http-no-delay`` also sends each frame without waiting to fill a packet), and
  ``timeout server`` / ``timeout tunnel`` are longer than any turn; our ``: ping`` heartbeat
  keeps a quiet stream alive well within them;
- each instance is checked on ``GET /version`` every 300 ms: one that stops listening
  (SIGTERM drain, SIGKILL) is out of rotation after two failed checks, and a request that
  can't connect is sent to another instance (``option redispatch``, ``retries``).

The response header ``x-served-by`` names the instance that answered, so tests can tell.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

from tests.reliability.support import free_port
from tests.support.system import missing

__all__ = ["HAProxy", "haproxy_binary"]


def haproxy_binary() -> str:
    """HAProxy's path; without it the test skips, or fails in CI (scripts/test installs it)."""
    found = shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None
    )
    if found is None:
        missing(
            "HAProxy isn't installed; run scripts/test as root (it installs Debian's haproxy) "
            "or apt-get install -y haproxy."
        )
    return found


def _config(port: int, backends: Sequence[tuple[str, str]]) -> str:
    servers = "\n".join(
        f"    server {name} {address} check inter 300ms fall 2 rise 2" for name, address in backends
    )
    return f"""\
global
    maxconn 4096

defaults
    mode http
    option http-no-delay
    option redispatch
    retries 3
    timeout connect 2s
    timeout client 10m
    timeout server 10m
    timeout tunnel 10m
    timeout http-request 15s
    timeout http-keep-alive 15s

frontend mercury_in
    bind 127.0.0.1:{port}
    default_backend mercury

backend mercury
    balance roundrobin
    option httpchk GET /version
    http-check expect status 200
    http-response set-header x-served-by %s
{servers}
"""


class HAProxy:
    """``haproxy -db`` in a child process, in front of ``backends`` (name, host:port)."""

    def __init__(self, workdir: Path, backends: Sequence[tuple[str, str]]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.backends = list(backends)
        self.config_path = workdir / "haproxy.cfg"
        self.log_path = workdir / "haproxy.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> Self:
        self.config_path.write_text(_config(self.port, self.backends))
        binary = haproxy_binary()
        check = subprocess.run(  # noqa: S603 - our own configuration file
            [binary, "-c", "-q", "-f", str(self.config_path)], capture_output=True, check=False
        )
        if check.returncode != 0:
            raise RuntimeError(f"HAProxy refuses its configuration:\n{check.stderr.decode()}")
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(  # noqa: S603
            [binary, "-db", "-f", str(self.config_path)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        self.wait_until_up(len(self.backends), timeout_s)
        return self

    def wait_until_up(self, count: int, timeout_s: float = 60.0) -> None:
        """Wait until ``count`` distinct instances have answered through the balancer."""
        seen: set[str] = set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"HAProxy exited:\n{self.log()}")
            try:
                response = httpx.get(self.url + "/version", timeout=2.0)
                if response.status_code == 200:
                    seen.add(response.headers["x-served-by"])
                    if len(seen) >= count:
                        return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"only {sorted(seen)} answered through HAProxy:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
