"""``@microsoft/fetch-event-source`` in Chromium reconnects to a dropped turn by itself.

The library's published ES modules (installed in tests/browser_sse by scripts/test) run in
a page served at the server's own origin (Playwright answers for that one path). The
connection is cut mid-answer by a relay; the library sends its ``POST /turn`` again with
``Last-Event-ID``, which the server treats as rejoining the turn, not as a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, Route, expect

from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.ui.conftest import named
from tests.ui.test_reconnect import CuttingProxy

pytestmark = [pytest.mark.timeout(120)]

HERE = Path(__file__).resolve().parents[1] / "browser_sse"
LIBRARY = HERE / "node_modules" / "@microsoft" / "fetch-event-source" / "lib" / "esm"


def serve_page(route: Route) -> None:
    """The test page, and the library's modules (their imports name no ``.js``: added here)."""
    path = route.request.url.split("/fetch-event-source/", 1)[1]
    if path == "page.html":
        route.fulfill(body=(HERE / "page.html").read_text(), content_type="text/html")
        return
    name = path.removeprefix("lib/").removesuffix(".js")
    source = LIBRARY / f"{name}.js"
    if not name.isidentifier() or not source.is_file():
        route.fulfill(status=404, body="")
        return
    route.fulfill(body=source.read_text(), content_type="text/javascript")


@pytest.fixture
def proxy(
    make_server: Callable[..., RunningServer],
) -> Iterator[tuple[RunningServer, CuttingProxy]]:
    server = make_server(HTTP_SURFACE_REJOIN_S="10")
    relay = CuttingProxy(server.port)
    yield server, relay
    relay.close()


def test_fetch_event_source_reconnects_by_itself_and_the_text_ends_equal_to_final(
    page: Page, proxy: tuple[RunningServer, CuttingProxy], ollama: OllamaStandIn
) -> None:
    assert LIBRARY.is_dir(), "run scripts/test, which installs tests/browser_sse's packages"
    server, relay = proxy
    named(server)
    words = " ".join(f"w{n}" for n in range(40))
    ollama.enqueue(ChatScript.words(words, delay_s=0.1))
    page.route(relay.url + "/fetch-event-source/**", serve_page)

    page.goto(relay.url + "/fetch-event-source/page.html")
    expect(page.locator("#answer")).to_contain_text("w5")
    relay.cut()

    expect(page.locator("#final")).to_have_text(words, timeout=30_000)
    expect(page.locator("body")).to_have_attribute("data-closed", "yes")
    assert page.locator("#answer").text_content() == words
    assert int(page.locator("body").get_attribute("data-errors") or "0") >= 1  # it did drop
    seen = page.evaluate("window.seen")
    numbers = [int(event_id.rsplit(".", 1)[1]) for event_id in seen]
    assert numbers == list(range(len(numbers)))  # no gap, no repeat across the reconnect
    assert len(ollama.requests) == 1  # rejoined, not asked again
