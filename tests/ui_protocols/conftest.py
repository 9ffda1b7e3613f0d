"""One ``mercury-http serve --dev --dev-model`` for a test module of the UI protocols.

The scripted model answers each ``/demo`` keyword with the events a UI must handle; the
server runs its turns into logs (``HTTP_SURFACE_REJOIN_S``) so a chat can be resumed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.ports import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHAT = HERE / "chat.mjs"


class Server:
    def __init__(self, base: str, token: str) -> None:
        self.base = base
        self.token = token
        self.headers = {"authorization": f"Bearer {token}"}

    def chat(self, scenario: str, chat_id: str, text: str = "") -> dict[str, Any]:
        """One scenario of chat.mjs, its JSON report."""
        done = subprocess.run(  # noqa: S603 - node and our own script
            ["node", str(CHAT), self.base, self.token, scenario, chat_id, text],  # noqa: S607
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        report: dict[str, Any] = json.loads(done.stdout or "{}")
        assert "failed" not in report, report.get("failed") or done.stderr
        return report


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    assert (HERE / "node_modules" / "ai").is_dir(), (
        "run scripts/test: it installs tests/ui_protocols"
    )
    folder = tmp_path_factory.mktemp("ui-stream")
    port = free_port()
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [
            sys.executable,
            "-m",
            "channel_http",
            "serve",
            "--dev",
            "--dev-model",
            "--port",
            str(port),
        ],
        cwd=folder,
        env={
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(ROOT),
            "MERCURY_DATA_DIR": str(folder / "data"),
            "MERCURY_MEMORY_STORE": "off",
            "HTTP_SURFACE_REJOIN_S": "30",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines: list[str] = []
    token = None
    deadline = time.monotonic() + 60
    while "mercury-http: listening on" not in "".join(lines[-1:]):
        assert time.monotonic() < deadline and process.poll() is None, lines
        lines.append(process.stdout.readline())
        found = re.search(r"Bearer (dev-[\w-]+)'", lines[-1])
        token = found.group(1) if found else token
    assert token is not None, lines
    try:
        yield Server(f"http://127.0.0.1:{port}", token)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(20)
        process.stdout.close()
