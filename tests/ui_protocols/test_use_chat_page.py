"""examples/use-chat, a page built on ``@ai-sdk/react``'s ``useChat``, in Chromium against Mercury.

The example is built with esbuild (as the reference UI is) and served at the server's own
origin (Playwright answers for its two files); Debian's Chromium runs it, as in tests/ui.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, Route, expect

from tests.ui.conftest import browser, page  # noqa: F401 - the browser fixtures of tests/ui
from tests.ui_protocols.conftest import ROOT, Server

pytestmark = [pytest.mark.timeout(120)]

EXAMPLE = ROOT / "examples" / "use-chat"


@pytest.fixture(scope="module")
def built() -> Iterator[Path]:
    assert (EXAMPLE / "node_modules" / "@ai-sdk" / "react").is_dir(), (
        "run scripts/test: it installs examples/use-chat"
    )
    subprocess.run(["node", "build.mjs"], cwd=EXAMPLE, check=True, timeout=60)  # noqa: S607
    yield EXAMPLE / "dist"


def open_example(page: Page, server: Server, built: Path) -> None:  # noqa: F811
    def serve(route: Route) -> None:
        name = route.request.url.split("/example/", 1)[1].split("#", 1)[0] or "index.html"
        if name not in {"index.html", "app.js"}:
            route.fulfill(status=404, body="")
            return
        kind = "text/html" if name.endswith(".html") else "text/javascript"
        route.fulfill(body=(built / name).read_bytes(), content_type=kind)

    page.route(f"{server.base}/example/**", serve)
    page.goto(f"{server.base}/example/index.html#token={server.token}")


def say(page: Page, text: str) -> None:  # noqa: F811
    page.get_by_label("Message").fill(text)
    page.get_by_role("button", name="Send").click()


def test_an_answer_streams_into_the_page(page: Page, server: Server, built: Path) -> None:  # noqa: F811
    open_example(page, server, built)
    say(page, "/demo reasoning")
    expect(page.locator("section.assistant .reasoning")).to_contain_text("long reasoning")
    expect(page.locator("section.assistant .text")).to_contain_text("After all that thinking")
    expect(page.locator("main")).to_have_attribute("data-status", "ready")


def test_a_confirmation_approved_with_a_click_continues_the_message(
    page: Page,  # noqa: F811
    server: Server,
    built: Path,
) -> None:
    open_example(page, server, built)
    say(page, "/demo confirm")
    tool = page.locator("section.assistant .tool")
    expect(tool).to_have_attribute("data-state", "approval-requested")
    tool.get_by_role("button", name="Yes").click()
    expect(tool).to_have_attribute("data-state", "output-available")
    expect(page.locator("section.assistant .text").last).to_have_text("Confirmed and done.")
    expect(page.locator("section.assistant")).to_have_count(1)  # the same message, continued
    expect(page.locator("main")).to_have_attribute("data-status", "ready")
