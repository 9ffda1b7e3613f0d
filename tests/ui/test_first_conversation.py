"""A newcomer's first conversation in Chromium (#36): a message written while the opening turn
streams, the conversation list's titles, tables in answers, and the page's icon."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, Response, expect

from tests.conftest import ALICE
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.ui.conftest import axe_violations, sign_in
from tests.ui.test_browser_ui import last_answer, send, wait_for_archive

pytestmark = [pytest.mark.timeout(120)]

GREETING = "Hi, I'm Mercury, your assistant here. What should I call you, and how can I help?"
QUESTION = "What can you do?"
LONG_QUESTION = "Which of my notes mention the quarterly planning meeting with the design team?"
TABLE = (
    "Here they are:\n\n"
    "| Name | Role | Office | Started | Notes |\n"
    "|---|---|---|---|---|\n"
    "| Ann Example | Designer | Rome | 2024-03-01 | Leads the quarterly planning meeting |\n"
    "| Bob Example | Engineer | Turin | 2025-09-15 | Reviews the budget every month |\n"
)


def last_user_text(request: dict[str, Any]) -> str:
    users = [m for m in request["messages"] if m["role"] == "user"]
    return str(users[-1]["content"]) if users else ""


def test_enter_while_the_opening_turn_streams_queues_the_message_until_the_turn_ends(
    page: Page, server: RunningServer, ollama: OllamaStandIn, shots: Any
) -> None:
    def respond(request: dict[str, Any]) -> ChatScript:
        if QUESTION in last_user_text(request):
            return ChatScript.words("I keep notes and answer questions.")
        # Slow enough (about 8 s) for the queueing below to happen while it streams.
        return ChatScript.words(GREETING, delay_s=0.5)

    ollama.responder = respond
    sign_in(page, server, "alice-token", opening=True)
    greeting = page.locator(".live article.message.assistant").first
    expect(greeting.locator(".streamed")).not_to_have_text("")
    send(page, QUESTION)
    queued = page.locator(".queue .message.queued")
    expect(queued).to_have_count(1)
    expect(queued.locator(".body")).to_have_text(QUESTION)
    expect(queued).to_contain_text("Queued: sent when the answer ends.")
    expect(page.locator("#composer")).to_have_value("")
    expect(page.locator(".visually-hidden[role=status]")).to_have_text(
        "Queued: sent when the answer ends."
    )
    # A second one, cancelled: it leaves the queue and comes back to the empty box.
    send(page, "Never mind")
    expect(queued).to_have_count(2)
    shots(page, "queued")
    assert axe_violations(page) == []
    queued.nth(1).get_by_role("button", name="Cancel").click()
    expect(queued).to_have_count(1)
    expect(page.locator("#composer")).to_have_value("Never mind")
    # Nothing was sent while the greeting streamed (it still does).
    expect(greeting.locator("[data-final]")).to_have_count(0)
    assert not any(QUESTION in last_user_text(r) for r in ollama.requests)

    expect(greeting.locator("[data-final]")).to_have_text(GREETING, timeout=30_000)
    expect(queued).to_have_count(0)
    expect(page.locator(".live .message.user")).to_have_text([QUESTION])
    expect(last_answer(page).locator("[data-final]")).to_have_text(
        "I keep notes and answer questions."
    )
    asked = [r for r in ollama.requests if QUESTION in last_user_text(r)]
    assert len(asked) >= 1
    assert not any("Never mind" in last_user_text(r) for r in ollama.requests)
    expect(page.locator("#composer")).to_have_value("Never mind")


def test_the_list_shows_each_conversations_first_question_on_one_line(
    page: Page, make_server: Callable[..., RunningServer], ollama: OllamaStandIn, shots: Any
) -> None:
    server = make_server(MERCURY_MEMORY_STORE="edge")
    ollama.enqueue(
        ChatScript.words("**Hello!** What should I call you?"),
        ChatScript.words("You said: [2026-12-06 10:00] **planning** — see `notes/plan.md`."),
        ChatScript.words("A short answer."),
    )
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as client:
        for body in (
            {"opening": True, "conversationId": "greeted"},
            {"text": LONG_QUESTION, "conversationId": "planning"},
            {"text": "Short one", "conversationId": "short"},
        ):
            client.post("/turn", json=body).raise_for_status()
    wait_for_archive(server, "greeted", 1)
    wait_for_archive(server, "planning", 2)
    wait_for_archive(server, "short", 2)
    listed = httpx.get(server.url + "/conversations", headers=ALICE).json()["conversations"]
    assert {c["conversationId"]: c["title"] for c in listed} == {
        "short": "Short one",
        "planning": LONG_QUESTION,
        "greeted": "",
    }

    sign_in(page, server, "alice-token")
    titles = page.locator(".conversation-link .conversation-title")
    # The first question, else the newest message as plain words: no Markdown syntax.
    expect(titles).to_have_text(["Short one", LONG_QUESTION, "Hello! What should I call you?"])
    long_title = titles.nth(1)
    style = long_title.evaluate(
        """e => {
          const s = getComputedStyle(e);
          return {overflow: s.textOverflow, wrap: s.whiteSpace, hidden: s.overflowX,
                  cut: e.scrollWidth > e.clientWidth, height: e.getBoundingClientRect().height,
                  line: parseFloat(s.lineHeight),
                  fits: e.closest('nav').scrollWidth <= e.closest('nav').clientWidth}
        }"""
    )
    assert style["overflow"] == "ellipsis" and style["wrap"] == "nowrap", style
    assert style["hidden"] == "hidden" and style["cut"] and style["fits"], style
    assert style["height"] < 1.5 * style["line"], style  # one line
    expect(page.locator(".conversation-link").nth(1)).to_have_attribute("title", LONG_QUESTION)
    shots(page, "conversations")
    assert axe_violations(page) == []


def test_a_table_in_an_answer_has_borders_and_scrolls_sideways_on_a_phone(
    page: Page, server: RunningServer, ollama: OllamaStandIn, shots: Any
) -> None:
    ollama.enqueue(ChatScript(content=[TABLE]))
    sign_in(page, server, "alice-token")
    send(page, "Who is on the team?")
    table = last_answer(page).locator("[data-final] table")
    expect(table.locator("th")).to_have_count(5)
    cell = table.locator("td").first.evaluate(
        """e => { const s = getComputedStyle(e);
          return {width: s.borderTopWidth, style: s.borderTopStyle, left: s.borderLeftStyle,
                  padding: parseFloat(s.paddingLeft), collapse: getComputedStyle(
                  e.closest('table')).borderCollapse} }"""
    )
    assert cell["width"] == "1px" and cell["style"] == "solid" and cell["left"] == "solid", cell
    assert cell["padding"] > 0 and cell["collapse"] == "collapse", cell
    header = table.locator("th").first.evaluate(
        "e => [getComputedStyle(e).backgroundColor, getComputedStyle(e).borderTopStyle]"
    )
    assert header == ["rgb(233, 237, 242)", "solid"], header
    shots(page, "table")
    assert axe_violations(page) == []

    page.set_viewport_size({"width": 390, "height": 844})
    box = last_answer(page).locator(".table-scroll")
    scroll = box.evaluate(
        """e => ({x: getComputedStyle(e).overflowX, wide: e.scrollWidth > e.clientWidth,
                  page: document.documentElement.scrollWidth <= window.innerWidth})"""
    )
    assert scroll == {"x": "auto", "wide": True, "page": True}, scroll
    assert axe_violations(page) == []


def test_the_page_has_an_icon_and_loading_it_asks_for_nothing_missing(
    page: Page, server: RunningServer
) -> None:
    failed: list[str] = []
    console: list[str] = []

    def note(response: Response) -> None:
        if response.status >= 400:
            failed.append(f"{response.status} {response.url}")

    page.on("response", note)
    page.on("console", lambda message: console.append(message.text))
    sign_in(page, server, "alice-token")
    href = page.locator("link[rel=icon]").get_attribute("href")
    assert href is not None
    icon = httpx.get(server.url + "/ui/" + href)
    assert icon.status_code == 200, icon.text
    assert icon.headers["content-type"] == "image/svg+xml"
    assert icon.text.startswith("<svg") and "script" not in icon.text
    assert "default-src 'none'" in icon.headers["content-security-policy"]
    page.reload()
    page.wait_for_selector("#composer")
    shown = page.evaluate(
        """async () => { const link = document.querySelector('link[rel=icon]');
          const r = await fetch(link.href); return [r.status, r.headers.get('content-type')] }"""
    )
    assert shown == [200, "image/svg+xml"]
    assert failed == []
    assert [text for text in console if "404" in text or "Failed to load" in text] == []
