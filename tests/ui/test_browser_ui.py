"""The reference browser UI in a real Chromium, against a real server and the Ollama stand-in."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from core.people.messages import TOKEN_REFUSED
from tests.conftest import ALICE, BOB
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.ui.conftest import Counter, Jira, StaticHost, axe_violations, named, sign_in

pytestmark = [pytest.mark.timeout(120)]

Shots = Callable[[Page, str], None]

# Records what the last answer looked like at every change, with the time, so a test can see
# the stream arrive piece by piece rather than only its end state.
RECORDER = """
window.__seen = [];
new MutationObserver(() => {
  const all = document.querySelectorAll('.live article.assistant');
  const m = all[all.length - 1];
  if (!m) return;
  const r = m.querySelector('.reasoning-text');
  const s = m.querySelector('.streamed');
  const c = m.querySelector('.chip');
  window.__seen.push({
    t: performance.now(),
    reasoning: r ? r.textContent.length : 0,
    chip: c ? c.className : '',
    text: s ? s.textContent.length : 0,
    final: !!m.querySelector('[data-final]'),
  });
}).observe(document, {subtree: true, childList: true, characterData: true, attributes: true});
"""


def tool_loop(*steps: ChatScript) -> Callable[[dict[str, Any]], ChatScript]:
    pending = list(steps)

    def respond(request: dict[str, Any]) -> ChatScript:
        return pending.pop(0) if pending else ChatScript.words("That is all.")

    return respond


def send(page: Page, text: str) -> None:
    page.fill("#composer", text)
    page.keyboard.press("Enter")


def last_answer(page: Page) -> Any:
    return page.locator("article.message.assistant").last


@pytest.fixture
def memory_server(make_server: Callable[..., RunningServer]) -> RunningServer:
    return make_server(MERCURY_MEMORY_STORE="edge")


def wait_for_archive(server: RunningServer, conversation: str, count: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        messages = httpx.get(
            server.url + "/conversation", headers=ALICE, params={"id": conversation}
        ).json()["messages"]
        if len(messages) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"{conversation} never reached {count} archived messages")


def test_signing_in_and_a_turn_arriving_piece_by_piece(
    page: Page, server: RunningServer, ollama: OllamaStandIn, shots: Shots
) -> None:
    ollama.responder = tool_loop(
        ChatScript(
            thinking=["Let ", "me ", "look ", "at ", "the ", "notes."],
            tool_calls=[{"name": "wiki_list", "arguments": {}}],
            delay_s=0.12,
        ),
        ChatScript.words("You have no notes yet, so there is nothing to list.", delay_s=0.12),
    )
    page.add_init_script(RECORDER)
    named(server)
    page.goto(server.url + "/ui/")
    expect(page.locator("#token")).to_be_focused()
    shots(page, "signin")
    assert axe_violations(page) == []
    page.fill("#token", "alice-token")
    page.click("button[type=submit]")
    page.wait_for_selector("#composer")
    send(page, "What notes do I have?")
    answer = last_answer(page)
    expect(answer.locator("[data-final]")).to_have_text(
        "You have no notes yet, so there is nothing to list."
    )
    expect(answer.locator(".chip")).to_have_class("chip success")
    shots(page, "turn")
    seen: list[dict[str, Any]] = page.evaluate("window.__seen")
    first = {
        key: next(i for i, s in enumerate(seen) if test(s))
        for key, test in {
            "reasoning": lambda s: s["reasoning"] > 0,
            "chip": lambda s: s["chip"] != "",
            "text": lambda s: s["text"] > 0,
            "final": lambda s: s["final"],
        }.items()
    }
    assert first["reasoning"] < first["chip"] < first["text"] < first["final"]
    # Reasoning and text each grew over several moments before the final replaced them.
    reasoning_lengths = {s["reasoning"] for s in seen[: first["chip"]] if s["reasoning"]}
    text_lengths = {s["text"] for s in seen[first["text"] : first["final"]] if s["text"]}
    assert len(reasoning_lengths) >= 3, reasoning_lengths
    assert len(text_lengths) >= 3, text_lengths
    times = [s["t"] for s in seen if s["text"] in text_lengths]
    assert times[-1] - times[0] > 200  # milliseconds: the deltas came over time, not at once
    assert axe_violations(page) == []


def test_a_multi_choice_staging_is_confirmed_with_a_button(
    page: Page, server: RunningServer, ollama: OllamaStandIn, shots: Shots
) -> None:
    write = {"name": "wiki_write", "arguments": {"path": "personal/notes/plan.md", "content": "x"}}
    ollama.responder = tool_loop(
        ChatScript(tool_calls=[write]), ChatScript.words("Written."), ChatScript(tool_calls=[write])
    )
    sign_in(page, server, "alice-token")
    send(page, "Write my plan.")
    expect(last_answer(page).locator("[data-final]")).to_have_text("Written.")
    send(page, "Write it again.")
    answer = last_answer(page)
    # Each choice, then the UI's own Cancel (the staging has none of its own).
    expect(answer.locator(".pending button")).to_have_text(
        ["Replace the note", "Append to the note", "Cancel"]
    )
    shots(page, "pending")
    assert axe_violations(page) == []
    answer.get_by_role("button", name="Append to the note").click()
    expect(answer.locator(".pending .note")).to_have_text("Confirmed and done.")
    expect(answer.locator(".chip")).to_contain_text("chosen: Append to the note")
    note = httpx.get(
        server.url + "/wiki/read", headers=ALICE, params={"path": "personal/notes/plan.md"}
    )
    assert note.json()["content"] == "x\nx"


def test_a_confirmed_action_that_hands_back_streams_the_models_answer(
    page: Page, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    counter = Counter()
    server = make_server({"plugins": [counter.plugin()]})

    def respond(request: dict[str, Any]) -> ChatScript:
        last = request["messages"][-1]
        if last["role"] == "tool" and "counter is now 1" in last["content"]:
            return ChatScript.words("The counter now reads one.")
        if last["role"] == "user":
            return ChatScript(tool_calls=[{"name": "bump_and_tell", "arguments": {}}])
        return ChatScript.words("Waiting for your confirmation.")

    ollama.responder = respond
    sign_in(page, server, "alice-token")
    send(page, "Bump the counter.")
    page.locator(".pending").get_by_role("button", name="Confirm").click()
    expect(last_answer(page).locator("[data-final]")).to_have_text("The counter now reads one.")
    assert counter.runs == 1


def test_a_login_link_is_shown_with_its_warning(
    page: Page, make_server: Callable[..., RunningServer], ollama: OllamaStandIn, shots: Shots
) -> None:
    server = make_server({"plugins": [Jira().plugin()]})
    ollama.responder = tool_loop(
        ChatScript(tool_calls=[{"name": "jira_search", "arguments": {}}]),
        ChatScript.words("Please log in to Jira first."),
    )
    sign_in(page, server, "alice-token")
    send(page, "Find my issues.")
    login = last_answer(page).locator(".login")
    expect(login.get_by_role("link", name="Log in to Jira")).to_have_attribute("href", Jira.url)
    expect(login.locator(".warning")).to_contain_text("links their account to you")
    expect(login.get_by_role("link")).to_have_attribute("rel", "noopener noreferrer")
    shots(page, "login")


def test_stop_closes_the_model_request(
    page: Page, server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("word " * 400, delay_s=0.05))
    sign_in(page, server, "alice-token")
    send(page, "Talk for a long time.")
    answer = last_answer(page)
    expect(answer.locator(".streamed")).not_to_have_text("")
    page.get_by_role("button", name="Stop").click()
    ollama.wait_for_closed(1, timeout=10)
    expect(answer.locator(".stopped")).to_have_text("Stopped.")
    expect(page.get_by_role("button", name="Send")).to_be_visible()


def test_the_transcript_survives_a_reload_and_a_second_conversation_is_listed(
    page: Page, memory_server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = tool_loop(ChatScript.words("First answer."), ChatScript.words("Second one."))
    sign_in(page, memory_server, "alice-token")
    send(page, "Hello there")
    expect(last_answer(page).locator("[data-final]")).to_have_text("First answer.")
    first_id = page.evaluate("document.querySelector('[aria-current=true]')?.dataset.id ?? null")
    conversations = httpx.get(memory_server.url + "/conversations", headers=ALICE).json()
    ids = [c["conversationId"] for c in conversations["conversations"]]
    assert first_id is None or first_id in ids
    wait_for_archive(memory_server, ids[0], 2)
    page.reload()
    page.wait_for_selector("#composer")
    expect(page.locator(".history .message.user")).to_have_text(["Hello there"])
    expect(page.locator(".history .message.assistant")).to_have_text(["First answer."])
    page.get_by_role("button", name="New conversation").click()
    send(page, "Another topic")
    expect(last_answer(page).locator("[data-final]")).to_have_text("Second one.")
    expect(page.locator(".conversation-link")).to_have_count(2)


def test_the_panels_show_this_persons_data_only(
    page: Page, memory_server: RunningServer, ollama: OllamaStandIn, shots: Shots
) -> None:
    vault = memory_server.services.vault
    memory_server.call(vault.write_note("static:alice", "personal/notes/alice.md", "alpha"))
    memory_server.call(vault.write_note("static:bob", "personal/notes/bob.md", "bravo"))
    ollama.responder = tool_loop(
        ChatScript(tool_calls=[{"name": "wiki_list", "arguments": {}}]),
        ChatScript.words("Alice's answer."),
    )
    ollama.enqueue(ChatScript.words("Bob's answer."))
    with httpx.Client(base_url=memory_server.url, timeout=20) as client:
        client.post(
            "/turn", headers=BOB, json={"text": "bob secret question", "conversationId": "b"}
        )
    sign_in(page, memory_server, "alice-token")
    send(page, "alice question")
    expect(last_answer(page).locator("[data-final]")).to_have_text("Alice's answer.")
    page.get_by_role("button", name="Panels").click()
    expect(page.get_by_role("tab", name="Settings")).to_be_focused()
    expect(page.locator("#panel-body dl")).to_contain_text("Time zone")
    shots(page, "settings")
    assert axe_violations(page) == []

    page.get_by_role("tab", name="Wiki").click()
    page.get_by_role("button", name="personal/notes/alice.md").click()
    expect(page.locator(".wiki-note pre")).to_have_text("alpha")
    expect(page.locator("#panel-body")).not_to_contain_text("bob.md")
    page.get_by_role("searchbox", name="Search the wiki").fill("bravo|alpha")
    page.get_by_role("button", name="Search").click()
    expect(page.locator(".grep-results li")).to_have_count(1)
    expect(page.locator(".grep-results")).not_to_contain_text("bravo")
    shots(page, "wiki")
    assert axe_violations(page) == []

    page.get_by_role("tab", name="Memory").click()
    expect(page.locator(".points")).to_contain_text("alice question", timeout=20_000)
    expect(page.locator(".points")).not_to_contain_text("bob secret")
    shots(page, "memory")

    page.get_by_role("tab", name="Tool log").click()
    expect(page.locator(".tool-log li")).to_have_count(1)
    expect(page.locator(".tool-log")).to_contain_text("wiki_list")
    shots(page, "tool-log")
    assert axe_violations(page) == []

    for tab in ("Pending", "Plugins"):
        page.get_by_role("tab", name=tab).click()
        expect(page.locator("#panel-body h2")).to_be_visible()
        assert axe_violations(page) == []


def test_a_person_without_a_name_is_greeted_by_the_opening_turn(
    page: Page, server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Hi, I'm Mercury. What should I call you?"))
    sign_in(page, server, "alice-token", opening=True)
    expect(last_answer(page).locator("[data-final]")).to_have_text(
        "Hi, I'm Mercury. What should I call you?"
    )
    assert page.locator(".message.user").count() == 0


def test_the_time_zone_is_saved_from_the_browser(page: Page, server: RunningServer) -> None:
    sign_in(page, server, "alice-token")
    page.get_by_role("button", name="Panels").click()
    page.get_by_role("button", name="Use this browser's time zone (Europe/Rome)").click()
    expect(page.locator("#panel-body [role=status]")).to_have_text("Time zone saved: Europe/Rome.")
    assert httpx.get(server.url + "/me", headers=ALICE).json()["timeZone"] == "Europe/Rome"


def test_a_refused_token_goes_back_to_sign_in(page: Page, server: RunningServer) -> None:
    named(server)
    page.goto(server.url + "/ui/")
    page.fill("#token", "not-a-token")
    page.click("button[type=submit]")
    expect(page.get_by_role("alert")).to_have_text(TOKEN_REFUSED)
    expect(page.locator("#token")).to_be_visible()
    sign_in(page, server, "alice-token")
    page.evaluate("sessionStorage.setItem('mercury.token', 'revoked')")
    send(page, "hello")
    expect(page.locator("#token")).to_be_visible()


def test_model_output_that_tries_to_run_script_is_shown_as_text(
    page: Page, server: RunningServer, ollama: OllamaStandIn
) -> None:
    payload = '<img src=x onerror="window.__xss=1"> and [click me](javascript:window.__xss=2)'
    ollama.enqueue(ChatScript(content=[payload]))
    sign_in(page, server, "alice-token")
    send(page, "Say something nasty.")
    final = last_answer(page).locator("[data-final]")
    expect(final).to_contain_text('<img src=x onerror="window.__xss=1">')
    expect(final).to_contain_text("click me (javascript:window.__xss=2)")
    assert final.locator("img").count() == 0
    assert final.locator("a").count() == 0
    assert page.evaluate("window.__xss") is None


def test_the_ui_served_from_another_origin_works_through_cors(
    page: Page,
    make_server: Callable[..., RunningServer],
    ollama: OllamaStandIn,
    static_host: StaticHost,
) -> None:
    server = make_server(HTTP_SURFACE_CORS_ORIGIN=static_host.origin)
    static_host.point_at(server.url)
    ollama.enqueue(ChatScript.words("Hello from afar."))
    named(server)
    page.goto(static_host.origin + "/index.html")
    page.fill("#token", "alice-token")
    page.click("button[type=submit]")
    send(page, "hi")
    expect(last_answer(page).locator("[data-final]")).to_have_text("Hello from afar.")


def test_the_ui_is_served_compressed_small_and_locked_down(server: RunningServer) -> None:
    index = httpx.get(server.url + "/ui/", headers={"accept-encoding": "gzip"})
    assert index.status_code == 200
    csp = index.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert index.headers["x-content-type-options"] == "nosniff"
    total = 0
    for asset in ("assets/app.js", "assets/style.css"):
        response = httpx.get(f"{server.url}/ui/{asset}", headers={"accept-encoding": "gzip"})
        assert response.headers["content-encoding"] == "gzip"
        total += int(response.headers["content-length"])
    assert total < 150_000
    assert httpx.get(server.url + "/ui", follow_redirects=False).status_code in {301, 302, 307, 308}
    missing = httpx.get(server.url + "/ui/../openapi.yaml")
    assert missing.status_code in {200, 404}  # httpx normalizes the path; never a file outside
    assert httpx.get(server.url + "/ui/assets/nothing.js").json()["ok"] is False


def test_the_ui_can_be_turned_off(make_server: Callable[..., RunningServer]) -> None:
    server = make_server(HTTP_SURFACE_UI="false")
    assert httpx.get(server.url + "/ui/").status_code in {401, 404}


def test_the_dev_token_is_offered_only_in_dev_mode(
    make_server: Callable[..., RunningServer],
) -> None:
    quiet = make_server()
    assert httpx.get(quiet.url + "/ui/config.json").json()["devToken"] is None
    dev = make_server({"dev_token": "alice-token"})
    assert httpx.get(dev.url + "/ui/config.json").json()["devToken"] == "alice-token"


def test_the_built_ui_matches_its_sources() -> None:
    built = Path(__file__).resolve().parents[2] / "channel_http" / "ui"
    assert (built / "index.html").is_file() and (built / "assets" / "app.js").is_file()


def test_on_a_phone_with_the_keyboard_alone_and_heartbeats_in_the_stream(
    browser: Any, make_server: Callable[..., RunningServer], ollama: OllamaStandIn, shots: Shots
) -> None:
    server = make_server(HTTP_SURFACE_HEARTBEAT_S="0.05")
    named(server)
    ollama.enqueue(ChatScript.words("A **short** answer, slowly.", delay_s=0.2))
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    try:
        page.goto(server.url + "/ui/")
        # The page focuses the token field once its config has loaded: type only then.
        expect(page.locator("#token")).to_be_focused()
        page.keyboard.type("alice-token")
        page.keyboard.press("Enter")
        page.wait_for_selector("#composer")
        expect(page.locator("#composer")).to_be_focused()
        page.keyboard.type("hello from a phone")
        page.keyboard.press("Enter")
        final = page.locator("article.message.assistant [data-final]").last
        expect(final).to_have_text("A short answer, slowly.")
        expect(final.locator("strong")).to_have_text("short")
        # Back to the box by itself, ready for the next message; the panel opens and closes
        # with the keyboard and gives focus back.
        expect(page.locator("#composer")).to_be_focused()
        page.get_by_role("button", name="Panels").focus()
        page.keyboard.press("Enter")
        expect(page.get_by_role("tab", name="Settings")).to_be_focused()
        shots(page, "phone")
        assert axe_violations(page) == []
        page.keyboard.press("Escape")
        expect(page.get_by_role("button", name="Panels")).to_be_focused()
    finally:
        context.close()


def test_a_refused_turn_says_when_to_try_again(
    page: Page, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server(MERCURY_RATE_LIMIT_PER_USER="1", MERCURY_RATE_LIMIT_WINDOW_MS="60000")
    ollama.enqueue(ChatScript.words("One."))
    sign_in(page, server, "alice-token")
    send(page, "first")
    expect(last_answer(page).locator("[data-final]")).to_have_text("One.")
    send(page, "second")
    error = last_answer(page).locator(".error")
    expect(error).to_contain_text("You can try again in")
    expect(error.get_by_role("button", name="Retry")).to_be_visible()


def test_a_twenty_thousand_delta_answer_keeps_up_with_the_stream(
    page: Page, server: RunningServer, ollama: OllamaStandIn
) -> None:
    script = ChatScript.fast_tokens(20_000, "x ")
    ollama.enqueue(script)
    started = time.monotonic()
    with httpx.Client(base_url=server.url, timeout=60) as client:
        client.post("/turn", headers=ALICE, json={"text": "go"}).raise_for_status()
    bare = time.monotonic() - started
    ollama.enqueue(script)
    sign_in(page, server, "alice-token")
    started = time.monotonic()
    send(page, "go")
    expect(last_answer(page).locator("[data-final]")).to_have_text(("x " * 20_000).strip())
    in_browser = time.monotonic() - started
    # Rendering adds at most one DOM write per frame: the page finishes within a few times
    # what a bare HTTP client takes to read the same stream (plus a browser's fixed costs).
    assert in_browser < 5 * bare + 5.0, (in_browser, bare)
