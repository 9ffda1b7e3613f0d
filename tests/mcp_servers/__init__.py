"""MCP servers from npm the tests start: the reference server ``server-everything``.

:func:`everything_over_http` runs it over streamable HTTP on a free loopback port: a
preloaded module (``loopback.mjs``) makes it listen on 127.0.0.1 only, whatever it asks for,
and report the address it got.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

HERE: Final = Path(__file__).parent
EVERYTHING: Final = (
    HERE / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
)
LOOPBACK: Final = HERE / "loopback.mjs"
_LISTENING: Final = "mercury-test listening "


def ensure_node_modules() -> None:
    """Install the servers' npm packages (from the lockfile) unless they already are."""
    if EVERYTHING.is_file():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm isn't on PATH; install Node.js 20.19+ to run the MCP tests.")
    subprocess.run(  # noqa: S603 - a fixed command in our own directory
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=HERE,
        check=True,
        timeout=300,
    )


def node() -> str:
    found = shutil.which("node")
    if found is None:
        raise RuntimeError("node isn't on PATH; install Node.js 20.19+ to run the MCP tests.")
    return found


@contextmanager
def everything_over_http(timeout: float = 30) -> Iterator[tuple[str, str]]:
    """The reference server over streamable HTTP: yields its URL and the address it bound."""
    ensure_node_modules()
    process = subprocess.Popen(  # noqa: S603 - a fixed command in our own directory
        [node(), "--import", LOOPBACK.as_uri(), str(EVERYTHING), "streamableHttp"],
        cwd=HERE,
        env={**os.environ, "PORT": "0"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + timeout
        address = port = ""
        while not port:
            line = process.stderr.readline()
            if not line:
                raise RuntimeError(
                    f"server-everything exited ({process.wait(5)}) before it listened"
                )
            if line.startswith(_LISTENING):
                address, port = line[len(_LISTENING) :].split()
            if time.monotonic() > deadline:
                raise RuntimeError("server-everything did not listen in time")
        yield f"http://127.0.0.1:{port}/mcp", address
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        if process.stderr is not None:
            process.stderr.close()
