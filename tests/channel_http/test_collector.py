"""The server process's collector (start-up's objects frozen, young passes rarer) and its
switch interval (threads answering the loop get the interpreter sooner)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from channel_http.serving.collector import MIDDLE_THRESHOLD, YOUNG_THRESHOLD
from channel_http.serving.switching import SWITCH_INTERVAL_S

pytestmark = [pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parents[2]

# uvicorn's start-up through the serve command's server class, on an app that does nothing,
# in a process of its own (freezing the test runner's objects would outlive the test).
_STARTED = """
import asyncio, gc, json, sys
import uvicorn
from channel_http.cli.command import _Server

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})

async def main():
    before = {
        "frozen": gc.get_freeze_count(),
        "threshold": gc.get_threshold(),
        "switch": sys.getswitchinterval(),
    }
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"), app)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    after = {
        "frozen": gc.get_freeze_count(),
        "threshold": gc.get_threshold(),
        "switch": sys.getswitchinterval(),
    }
    server.should_exit = True
    await serving
    print(json.dumps({"before": before, "after": after}))

asyncio.run(main())
"""


def test_serve_freezes_start_up_collects_the_young_less_often_and_switches_sooner() -> None:
    result = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", _STARTED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["before"]["frozen"] == 0
    assert seen["before"]["threshold"][0] == 700  # CPython's default until the app is up
    # Everything alive once the server listens (modules, the app) is never traversed again.
    assert seen["after"]["frozen"] > 10_000
    # Young passes rarer and short; a middle pass (every object that outlived a young one)
    # after 50 of them: every 500,000 allocations, as before the young threshold came down.
    assert seen["after"]["threshold"][:2] == [YOUNG_THRESHOLD, MIDDLE_THRESHOLD]
    assert seen["after"]["threshold"][2] == seen["before"]["threshold"][2]
    # Threads (SQLite, Edge) get the interpreter after 0.5 ms of a busy loop, not 5 ms.
    assert seen["before"]["switch"] == pytest.approx(0.005)
    assert seen["after"]["switch"] == pytest.approx(SWITCH_INTERVAL_S)
