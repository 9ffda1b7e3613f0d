"""Open confirmations in a real Chromium, with the scripted model's ``/demo confirm``: after a
reload the transcript gives a waiting confirmation its buttons back (answered by its id, the
tokens being gone), one answered before the reload shows its chip's outcome, and the Pending
tab confirms, chooses and cancels, the tool chip following (confirmed, cancelled), in English
and in Italian. A confirmation shown live expires by the
server's time without a reload, and an open Pending tab follows what ends elsewhere. A live
confirmation ended outside the page (a script, the composer's typed token) settles its chip as
the server recorded it: confirmed or cancelled, not expired."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, expect

from core.clock import ManualClock
from core.config.settings import Settings
from core.engine.confirmations import DEFAULT_TTL
from dev_model.command import DEMO_FILE, model_names, with_demo
from dev_model.demo import DevModel, demo_yaml
from tests.conftest import ALICE
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer, serve
from tests.ui.conftest import Counter, axe_violations, sign_in

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def dev_model() -> Iterator[DevModel]:
    model = DevModel(models=model_names()).start()
    yield model
    model.stop()


@pytest.fixture
def server(
    dev_model: DevModel, make_settings: Callable[..., Settings], tmp_path: Path
) -> Iterator[RunningServer]:
    """A server on the scripted model with its demo services (as ``serve --dev-model``)."""
    (tmp_path / DEMO_FILE).write_text(demo_yaml(dev_model.url), encoding="utf-8")
    settings = make_settings(
        OLLAMA_HOST=dev_model.url,
        OLLAMA_MODEL=model_names()[0],
        MERCURY_SECRET_KEY="a-secret-key-for-the-demo-logins-0123456789",
        HTTP_SURFACE_PUBLIC_URL="http://127.0.0.1:4100",
        MERCURY_MEMORY_STORE="edge",  # the transcript a reload reads back
    )
    with serve(with_demo(settings, tmp_path, development_person=False)) as running:
        yield running


@pytest.fixture
def italian(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(locale="it-IT", timezone_id="Europe/Rome")
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert errors == [], errors


def send(page: Page, text: str) -> None:
    page.fill("#composer", text)
    page.keyboard.press("Enter")


def stage(page: Page) -> None:
    """``/demo confirm`` in the open conversation, until its answer has settled."""
    send(page, "/demo confirm")
    answer = page.locator("article.message.assistant").last
    expect(answer.locator("[data-final]")).to_contain_text("old-ideas")
    expect(answer.locator(".chip")).to_have_attribute("data-outcome", "pending")


def reload(page: Page, server: RunningServer) -> None:
    """The page again, once the archive lists the conversation it opens."""
    deadline = time.monotonic() + 20
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=10) as client:
        while not client.get("/conversations").json()["conversations"]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    page.reload()
    page.wait_for_selector("#composer")


def pending(server: RunningServer) -> list[dict[str, object]]:
    listed: list[dict[str, object]] = httpx.get(
        server.url + "/confirmations", headers=ALICE, timeout=10
    ).json()["pending"]
    return listed


def test_after_a_reload_the_transcript_gives_an_open_confirmation_its_buttons_back(
    page: Page, server: RunningServer
) -> None:
    sign_in(page, server, "alice-token")
    stage(page)
    reload(page, server)
    restored = page.locator("article.message.assistant", has=page.locator(".pending")).last
    expect(restored.locator(".pending-command")).to_contain_text("Archive a demo note")
    chip = restored.locator(".chip")
    expect(chip).to_have_attribute("data-outcome", "pending")
    expect(restored.get_by_role("button", name="Cancel")).to_be_visible()
    assert axe_violations(page) == []
    restored.get_by_role("button", name="Confirm").click()
    expect(chip).to_have_attribute("data-outcome", "confirmed")
    expect(chip).to_contain_text("confirmed")
    # The demo service's action doesn't hand back: the reply is told under the buttons.
    expect(restored.locator(".pending .note")).to_have_text("Confirmed and done.")
    assert pending(server) == []


def test_a_confirmation_answered_before_a_reload_shows_its_chip_confirmed_after_it(
    page: Page, server: RunningServer
) -> None:
    sign_in(page, server, "alice-token")
    stage(page)
    page.locator("article.message.assistant").last.get_by_role("button", name="Confirm").click()
    expect(page.locator("article.message.assistant").last.locator(".chip")).to_have_attribute(
        "data-outcome", "confirmed"
    )
    reload(page, server)
    ended = page.locator("article.message.assistant", has=page.locator(".settled-command"))
    expect(ended).to_have_count(1)
    expect(ended.locator(".settled-command")).to_contain_text("Archive a demo note")
    chip = ended.locator(".chip")
    expect(chip).to_have_attribute("data-outcome", "confirmed")
    expect(chip).to_contain_text("confirmed")
    expect(ended.get_by_role("button")).to_have_count(0)
    expect(page.locator(".log .pending")).to_have_count(0)
    assert axe_violations(page) == []


def test_in_italian_the_pending_tab_cancels_and_the_chip_says_cancelled(
    italian: Page, server: RunningServer
) -> None:
    page = italian
    sign_in(page, server, "alice-token")
    stage(page)
    chip = page.locator("article.message.assistant").last.locator(".chip")
    page.get_by_role("button", name="Pannelli").click()
    page.get_by_role("tab", name="In attesa").click()
    item = page.locator("#panel-body li", has_text="Archive a demo note")
    expect(item.get_by_role("button", name="Conferma")).to_be_visible()
    assert axe_violations(page) == []
    item.get_by_role("button", name="Annulla").click()
    expect(item.locator(".note")).to_have_text("Annullato.")
    expect(chip).to_have_attribute("data-outcome", "cancelled")
    expect(chip).to_contain_text("annullato")
    # The transcript's own buttons went with it.
    expect(page.locator(".log .pending button").first).to_be_disabled()
    assert pending(server) == []


def test_after_a_reload_the_pending_tab_confirms_and_the_restored_chip_follows(
    page: Page, server: RunningServer
) -> None:
    sign_in(page, server, "alice-token")
    stage(page)
    reload(page, server)
    restored = page.locator("article.message.assistant", has=page.locator(".pending")).last
    chip = restored.locator(".chip")
    expect(chip).to_have_attribute("data-outcome", "pending")
    page.get_by_role("button", name="Panels").click()
    page.get_by_role("tab", name="Pending").click()
    page.locator("#panel-body li").get_by_role("button", name="Confirm").click()
    expect(chip).to_have_attribute("data-outcome", "confirmed")
    expect(restored.get_by_role("button", name="Confirm")).to_be_disabled()
    assert pending(server) == []


def bump_and_tell(request: dict[str, Any]) -> ChatScript:
    """The stand-in model: stages the counter's bump, then reads what it handed back."""
    last = request["messages"][-1]
    if last["role"] == "user":
        return ChatScript(tool_calls=[{"name": "bump_and_tell", "arguments": {}}])
    if "counter is now" in str(last.get("content")):
        return ChatScript.words("The counter reads one.")
    return ChatScript.words("Confirm it, please.")


def test_after_a_reload_a_confirmed_action_that_hands_back_streams_the_models_answer(
    page: Page, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    counter = Counter()
    server = make_server({"plugins": [counter.plugin()]}, MERCURY_MEMORY_STORE="edge")
    ollama.responder = bump_and_tell
    sign_in(page, server, "alice-token")
    send(page, "Bump the counter.")
    expect(page.locator("article.message.assistant .chip")).to_have_attribute(
        "data-outcome", "pending"
    )
    reload(page, server)
    restored = page.locator("article.message.assistant", has=page.locator(".pending")).last
    restored.get_by_role("button", name="Confirm").click()
    expect(restored.locator(".chip")).to_have_attribute("data-outcome", "confirmed")
    answer = page.locator("article.message.assistant").last
    expect(answer.locator("[data-final]")).to_have_text("The counter reads one.")
    assert counter.runs == 1


def test_a_restored_confirmation_expires_by_the_servers_clock_and_its_chip_says_so(
    page: Page, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    clock = ManualClock()  # months behind the browser's: the server's clock decides
    counter = Counter()
    server = make_server(
        {"plugins": [counter.plugin()], "clock": clock}, MERCURY_MEMORY_STORE="edge"
    )
    ollama.responder = bump_and_tell
    sign_in(page, server, "alice-token")
    send(page, "Bump the counter.")
    expect(page.locator("article.message.assistant .chip")).to_have_attribute(
        "data-outcome", "pending"
    )
    reload(page, server)
    restored = page.locator("article.message.assistant", has=page.locator(".pending")).last
    chip = restored.locator(".chip")
    page.wait_for_timeout(1_500)  # past the expiry by the browser's clock
    expect(chip).to_have_attribute("data-outcome", "pending")
    expect(restored.get_by_role("button", name="Confirm")).to_be_enabled()
    clock.advance(timedelta(minutes=5, seconds=1))
    expect(chip).to_have_attribute("data-outcome", "expired", timeout=15_000)
    expect(chip).to_contain_text("expired")
    expect(restored.get_by_role("button", name="Confirm")).to_be_disabled()
    assert counter.runs == 0


class Shifted:
    """The real time moved by ``offset``: a clock a test can put behind and then forward."""

    def __init__(self, offset: timedelta) -> None:
        self.offset = offset

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


#: How long a confirmation staged in ``short_lived`` waits, once its clock is set right.
LIVES = timedelta(seconds=8)


@pytest.fixture
def short_lived(
    dev_model: DevModel, make_settings: Callable[..., Settings], tmp_path: Path
) -> Iterator[tuple[RunningServer, Shifted]]:
    """The demo server, its clock behind the real time by all but ``LIVES`` of a
    confirmation's window (its Date headers stay real): set right after a staging, the
    staging has ``LIVES`` left, by the server's clock and by its Date headers alike."""
    (tmp_path / DEMO_FILE).write_text(demo_yaml(dev_model.url), encoding="utf-8")
    settings = make_settings(
        OLLAMA_HOST=dev_model.url,
        OLLAMA_MODEL=model_names()[0],
        MERCURY_SECRET_KEY="a-secret-key-for-the-demo-logins-0123456789",
        HTTP_SURFACE_PUBLIC_URL="http://127.0.0.1:4100",
    )
    clock = Shifted(LIVES - DEFAULT_TTL)
    with serve(with_demo(settings, tmp_path, development_person=False), clock=clock) as running:
        yield running, clock


def test_a_live_confirmation_expires_by_the_servers_time_without_a_reload(
    page: Page, short_lived: tuple[RunningServer, Shifted]
) -> None:
    server, clock = short_lived
    # The browser's clock an hour behind the server's: only the server's time counts.
    page.clock.set_system_time(datetime.now(UTC) - timedelta(hours=1))
    sign_in(page, server, "alice-token")
    stage(page)
    clock.offset = timedelta(0)  # the staging was made 5 minutes less LIVES ago
    answer = page.locator("article.message.assistant").last
    chip = answer.locator(".chip")
    confirm = answer.get_by_role("button", name="Confirm")
    expect(confirm).to_be_enabled()
    assert chip.get_attribute("data-outcome") == "pending"
    expect(chip).to_have_attribute("data-outcome", "expired", timeout=LIVES.seconds * 1000 + 15_000)
    expect(chip).to_contain_text("expired")
    expect(confirm).to_be_disabled()
    expect(answer.get_by_role("button", name="Cancel")).to_be_disabled()
    assert pending(server) == []
    assert axe_violations(page) == []


def test_an_open_pending_tab_follows_a_confirmation_answered_in_the_transcript_or_another_tab(
    page: Page, server: RunningServer
) -> None:
    sign_in(page, server, "alice-token")
    other = page.context.new_page()  # the same UI in a second tab
    sign_in(other, server, "alice-token")
    stage(page)
    for tab in (page, other):
        tab.get_by_role("button", name="Panels").click()
        tab.get_by_role("tab", name="Pending").click()
        expect(tab.locator("#panel-body li", has_text="Archive a demo note")).to_be_visible()
    answer = page.locator("article.message.assistant").last
    answer.get_by_role("button", name="Confirm").click()
    expect(answer.locator(".chip")).to_have_attribute("data-outcome", "confirmed")
    for tab in (page, other):
        expect(tab.locator("#panel-body")).to_contain_text("Nothing waits for you.")
        expect(tab.locator("#panel-body li")).to_have_count(0)
    assert axe_violations(page) == []
    # A second one answered in the other tab's list: the first tab's list and chip follow.
    send(page, "/demo confirm")
    answer = page.locator("article.message.assistant").last
    chip = answer.locator(".chip", has_text="demo_archive")  # a memory chip may come too
    expect(chip).to_have_attribute("data-outcome", "pending")
    expect(page.locator("#panel-body li", has_text="Archive a demo note")).to_be_visible()
    other.get_by_role("tab", name="Pending").click()  # drawn again, as a visit draws it
    other.locator("#panel-body li").get_by_role("button", name="Cancel").click()
    expect(chip).to_have_attribute("data-outcome", "cancelled")
    expect(page.locator("#panel-body")).to_contain_text("Nothing waits for you.")
    # One answered outside the UI (a script, the CLI): the list follows when the page gets
    # the focus back.
    send(page, "/demo confirm")
    expect(page.locator("#panel-body li", has_text="Archive a demo note")).to_be_visible()
    [item] = pending(server)
    answered = httpx.post(
        f"{server.url}/confirmations/{item['id']}", headers=ALICE, json={"cancel": True}
    )
    assert answered.json()["cancelled"] is True
    page.evaluate("window.dispatchEvent(new Event('focus'))")
    expect(page.locator("#panel-body")).to_contain_text("Nothing waits for you.")


def captured_tokens(page: Page) -> list[str]:
    """The tokens the page's turns stream in their ``pending`` events, as they come: the
    stream is read whole (a ``/demo confirm`` turn ends once it has staged) and handed on."""
    tokens: list[str] = []

    def tee(route: Route) -> None:
        response = route.fetch()
        tokens.extend(re.findall(r'"token":\s*"([0-9A-Za-z]{4}-[0-9A-Za-z]{4})"', response.text()))
        route.fulfill(response=response)

    page.route("**/turn", tee)
    return tokens


def test_a_live_confirmation_confirmed_elsewhere_says_confirmed_not_expired(
    page: Page, server: RunningServer
) -> None:
    tokens = captured_tokens(page)
    sign_in(page, server, "alice-token")
    stage(page)
    [item] = pending(server)
    chip = page.locator("article.message.assistant").last.locator(".chip")
    # Confirmed outside the page (a script, the CLI) with the token its stream carried.
    confirmed = httpx.post(
        f"{server.url}/confirm",
        headers=ALICE,
        json={"token": tokens[-1], "conversationId": item["conversationId"]},
        timeout=10,
    )
    assert confirmed.json()["resolved"] is True
    expect(chip).to_have_attribute("data-outcome", "pending")
    page.evaluate("window.dispatchEvent(new Event('focus'))")
    expect(chip).to_have_attribute("data-outcome", "confirmed")
    expect(chip).to_contain_text("confirmed")
    expect(chip).not_to_contain_text("expired")
    expect(page.locator(".log .pending button").first).to_be_disabled()
    assert axe_violations(page) == []


def test_a_token_typed_in_the_composer_settles_its_chip_confirmed(
    page: Page, server: RunningServer
) -> None:
    tokens = captured_tokens(page)
    sign_in(page, server, "alice-token")
    stage(page)
    answers = page.locator("article.message.assistant")
    staged = answers.nth(answers.count() - 1)  # this one, not the token's answer to come
    chip = staged.locator(".chip")
    send(page, tokens[-1])
    expect(answers.last.locator("[data-final]")).to_have_text("Confirmed and done.")
    expect(chip).to_have_attribute("data-outcome", "confirmed")
    expect(chip).to_contain_text("confirmed")
    expect(staged.get_by_role("button", name="Confirm")).to_be_disabled()
    assert pending(server) == []


def test_a_live_confirmation_cancelled_elsewhere_says_cancelled_when_its_time_is_up(
    page: Page, short_lived: tuple[RunningServer, Shifted]
) -> None:
    server, clock = short_lived
    sign_in(page, server, "alice-token")
    stage(page)
    clock.offset = timedelta(0)  # LIVES left: the expiry timer asks the server then
    [item] = pending(server)
    cancelled = httpx.post(
        f"{server.url}/confirmations/{item['id']}", headers=ALICE, json={"cancel": True}
    )
    assert cancelled.json()["cancelled"] is True
    answer = page.locator("article.message.assistant").last
    chip = answer.locator(".chip")
    expect(chip).to_have_attribute(
        "data-outcome", "cancelled", timeout=LIVES.seconds * 1000 + 15_000
    )
    expect(chip).to_contain_text("cancelled")
    expect(answer.get_by_role("button", name="Confirm")).to_be_disabled()
    assert axe_violations(page) == []
