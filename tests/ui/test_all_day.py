"""The UI a team keeps open all day, in a real Chromium: an answer shows one reasoning block
however many model rounds it takes, a tool chip's state follows its confirmation (without the
confirmation box's border), the Memory tab renders the archive's Markdown safely, the header
names the person by the token's name, and a visit in Italian logs no console error, a
non-approver's Spaces tab included."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.conftest import ALICE
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.ui.conftest import Counter, axe_violations, sign_in

pytestmark = [pytest.mark.timeout(120)]


def send(page: Page, text: str) -> None:
    page.fill("#composer", text)
    page.keyboard.press("Enter")


def test_one_reasoning_block_per_answer_and_the_chip_follows_the_confirmation(
    page: Page, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    counter = Counter()
    server = make_server({"plugins": [counter.plugin()]})

    def respond(request: dict[str, Any]) -> ChatScript:
        last = request["messages"][-1]
        if last["role"] == "user":
            call = [{"name": "bump_and_tell", "arguments": {}}]
            return ChatScript(thinking=["First ", "round."], tool_calls=call)
        if "counter is now" in str(last.get("content")):
            return ChatScript.words("The counter reads one.", thinking="Third round.")
        return ChatScript.words("Confirm it, please.", thinking="Second round.")

    ollama.responder = respond
    sign_in(page, server, "alice-token")
    send(page, "Bump the counter.")
    answer = page.locator("article.message.assistant").first  # the resumed answer follows it
    expect(answer.locator("[data-final]")).to_have_text("Confirm it, please.")
    # Two model rounds, one reasoning block holding both.
    expect(answer.locator("details.reasoning")).to_have_count(1)
    expect(answer.locator(".reasoning-text")).to_contain_text("First round.")
    expect(answer.locator(".reasoning-text")).to_contain_text("Second round.")
    chip = answer.locator(".chip")
    expect(chip).to_have_attribute("data-outcome", "pending")
    border = chip.evaluate("node => getComputedStyle(node).borderLeftWidth")
    assert border == "1px"  # the chip's own outline, not the confirmation box's amber bar
    assert axe_violations(page) == []
    answer.locator(".pending").get_by_role("button", name="Confirm").click()
    expect(chip).to_have_attribute("data-outcome", "confirmed")
    expect(chip).to_contain_text("confirmed")
    expect(page.locator("article.message.assistant").last.locator("[data-final]")).to_have_text(
        "The counter reads one."
    )
    assert counter.runs == 1


@pytest.fixture
def italian(browser: Browser) -> Iterator[tuple[Page, list[str]]]:
    context = browser.new_context(locale="it-IT", timezone_id="Europe/Rome")
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page, errors
    context.close()


def test_in_italian_the_memory_tab_renders_markdown_and_nothing_logs_an_error(
    italian: tuple[Page, list[str]],
    make_server: Callable[..., RunningServer],
    ollama: OllamaStandIn,
) -> None:
    page, errors = italian
    server = make_server(MERCURY_MEMORY_STORE="edge")
    ollama.enqueue(ChatScript.words("Benvenuta!"))  # the opening turn: no name told yet
    ollama.enqueue(ChatScript.words("Ecco **grassetto** e <b>html</b> come testo."))
    sign_in(page, server, "alice-token", opening=True)
    # The header names her by the token's name before she tells the assistant one.
    expect(page.locator("header .who")).to_have_text("Accesso come Alice")
    expect(page.locator("article.message.assistant").first).to_contain_text("Benvenuta!")
    send(page, "ciao")
    answer = page.locator("article.message.assistant").last
    expect(answer.locator("[data-final] strong")).to_have_text("grassetto")
    page.get_by_role("button", name="Pannelli").click()
    page.get_by_role("tab", name="Memoria").click()
    points = page.locator(".points")
    expect(points.locator("strong").first).to_have_text("grassetto", timeout=20_000)
    expect(points).to_contain_text("<b>html</b>")  # raw HTML stays text
    expect(points.locator("b")).to_have_count(0)
    assert axe_violations(page) == []
    # Alice is no approver: her Spaces tab doesn't ask for the pairings (no 403 logged).
    page.get_by_role("tab", name="Spazi").click()
    expect(page.locator("#panel-body h2")).to_have_text("Spazi")
    expect(page.locator("#panel-body")).to_contain_text("Non sei ancora in nessuno spazio")
    page.wait_for_timeout(300)
    assert errors == [], errors


def test_a_long_conversation_opens_at_its_newest_message_and_keeps_the_place_scrolling_up(
    page: Page, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server(MERCURY_MEMORY_STORE="edge", MERCURY_RATE_LIMIT_PER_USER="1000")

    def respond(request: dict[str, Any]) -> ChatScript:
        asked = str(request["messages"][-1]["content"]).rsplit(" ", 1)[-1]
        return ChatScript.words(f"answer {asked}")

    ollama.responder = respond
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as client:
        for n in range(30):
            body = {"text": f"question {n}", "conversationId": "long"}
            assert client.post("/chat", json=body).status_code == 200
        deadline = time.monotonic() + 30
        while len(client.get("/conversation", params={"id": "long"}).json()["messages"]) < 60:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    sign_in(page, server, "alice-token")
    log = page.locator(".log")
    newest = log.locator("article", has_text="answer 29")
    expect(newest).to_be_in_viewport()
    expect(log.locator("article")).to_have_count(50)  # the newest 50; older ones wait
    expect(log.locator("article", has_text="question 0")).to_have_count(0)
    oldest_shown = log.locator("article").first
    expect(oldest_shown).to_have_text("question 5")
    log.evaluate("node => { node.scrollTop = 0; }")
    expect(log.locator("article")).to_have_count(60)
    # The message that was at the top stays where the reader left it, the older ones above.
    top = log.evaluate("node => node.getBoundingClientRect().top")
    place = log.locator("article", has_text="question 5").evaluate(
        "node => node.getBoundingClientRect().top"
    )
    assert abs(place - top) < 60, (place, top)
