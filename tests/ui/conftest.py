"""A real Chromium (Debian's, through Playwright) against a real server and the Ollama stand-in.

Nothing downloads a browser: Playwright drives ``/usr/bin/chromium`` (``MERCURY_CHROMIUM``
overrides the path). Screenshots go to a temporary folder, or to ``docs/ui/`` with
``MERCURY_UPDATE_SCREENSHOTS=1`` (how the pictures in docs/ui.md are made).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from core.tools.registry import LoginRequired, Plugin, Tool, ToolCallContext
from tests.support.server import RunningServer
from tests.support.system import missing

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "ui" / "node_modules" / "axe-core" / "axe.min.js"
UI_BUILD = ROOT / "channel_http" / "ui"
CHROMIUM = os.environ.get("MERCURY_CHROMIUM", "/usr/bin/chromium")
# The flags that keep Chromium off the network it would otherwise reach for at start.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


# One browser per test file: Playwright's synchronous API runs its event loop on the main
# thread while it is open, and a test file later in the same process (a pytest-xdist worker
# takes files in any order) that starts a loop of its own must not find one running.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        missing(
            f"Chromium isn't at {CHROMIUM}; run scripts/test as root (it installs Debian's "
            "chromium), apt-get install -y chromium, or set MERCURY_CHROMIUM."
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(
        locale="en-GB", timezone_id="Europe/Rome", viewport={"width": 1280, "height": 800}
    )
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert errors == [], errors


@pytest.fixture
def shots(tmp_path: Path) -> Callable[[Page, str], None]:
    folder = ROOT / "docs" / "ui" if os.environ.get("MERCURY_UPDATE_SCREENSHOTS") else tmp_path
    folder.mkdir(parents=True, exist_ok=True)

    def shoot(page: Page, name: str) -> None:
        page.screenshot(path=str(folder / f"{name}.png"))

    return shoot


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """Serious and critical accessibility violations axe-core finds on the page as it is."""
    # Evaluated through the driver, not as a <script>: the UI's CSP rightly refuses inline ones.
    page.evaluate(AXE.read_text() + "\n;0")
    results: dict[str, Any] = page.evaluate("async () => await axe.run(document)")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]]}
        for v in results["violations"]
        if v["impact"] in {"serious", "critical"}
    ]


def named(server: RunningServer, person_key: str = "static:alice", name: str = "Alice") -> None:
    """Saves the person's name, so signing in doesn't start with the opening turn."""
    server.call(server.services.person_settings.set_name(person_key, name))


def sign_in(page: Page, server: RunningServer, token: str, *, opening: bool = False) -> None:
    if not opening:
        user = token.removesuffix("-token")
        named(server, "static:" + user, user.title())
    page.goto(server.url + "/ui/")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_selector("#composer")


class Jira:
    """A plugin of the tests' own acting as the person on a service they haven't logged in to."""

    url = "https://jira.invalid/authorize?state=s1"

    async def search(self, context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        raise LoginRequired("Jira", self.url)

    def plugin(self) -> Plugin:
        return Plugin(
            name="jira",
            api_version=4,
            tools=(
                Tool(
                    name="jira_search",
                    description="Search Jira.",
                    parameters={"type": "object", "properties": {}},
                    run=self.search,
                ),
            ),
        )


class Counter:
    """A confirm-required action that hands its result back to the model."""

    def __init__(self) -> None:
        self.runs = 0

    async def bump(self, context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        self.runs += 1
        return f"counter is now {self.runs}"

    def plugin(self) -> Plugin:
        return Plugin(
            name="counter",
            api_version=4,
            tools=(
                Tool(
                    name="bump_and_tell",
                    description="Add one to the counter and read it.",
                    parameters={"type": "object", "properties": {}},
                    run=self.bump,
                    confirm=True,
                    hands_back=True,
                    summary=lambda context, arguments: "Add one to the counter",
                ),
            ),
        )


class StaticHost:
    """Another origin serving the built UI as plain files; its config.json names the server."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        shutil.copytree(UI_BUILD, folder)
        handler = functools.partial(_QuietHandler, directory=str(folder))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def point_at(self, server_url: str) -> None:
        (self.folder / "config.json").write_text(json.dumps({"server": server_url}))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def static_host(tmp_path: Path) -> Iterator[StaticHost]:
    host = StaticHost(tmp_path / "elsewhere")
    yield host
    host.close()
