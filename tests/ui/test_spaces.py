"""The Spaces panel in a real Chromium: an admin adds, changes and deletes a space's
preferences; a member reads them and can change nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Request, expect

from tests.conftest import ALICE
from tests.support.server import RunningServer
from tests.ui.conftest import axe_violations, sign_in

pytestmark = [pytest.mark.timeout(120)]

Shots = Callable[[Page, str], None]

CONFIG = """
spaces:
  "slack:C1":
    admins: [static:alice]
    members: [static:bob]
"""
PREFS = "/spaces/slack%3AC1/prefs"


@pytest.fixture
def spaces_server(make_server: Callable[..., RunningServer], tmp_path: Path) -> RunningServer:
    config = tmp_path / "mercury.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    return make_server(MERCURY_CONFIG_FILE=str(config))


def preferences(server: RunningServer) -> dict[str, str]:
    answer = httpx.get(server.url + PREFS, headers=ALICE, timeout=10).json()
    return {p["key"]: p["value"] for p in answer["preferences"]}


def open_spaces(page: Page) -> None:
    page.get_by_role("button", name="Panels").click()
    page.get_by_role("tab", name="Spaces").click()
    expect(page.get_by_label("Space", exact=True)).to_have_value("slack:C1")


def test_an_admin_adds_changes_and_deletes_a_preference_and_sees_the_refusals(
    page: Page, spaces_server: RunningServer, shots: Shots
) -> None:
    changes: list[str] = []

    def record(request: Request) -> None:
        if "/prefs" in request.url and request.method != "GET":
            changes.append(f"{request.method} {request.url.removeprefix(spaces_server.url)}")

    page.on("request", record)
    sign_in(page, spaces_server, "alice-token")
    open_spaces(page)
    panel = page.locator("#panel-body")
    status = panel.locator(".space [role=status]")
    alert = panel.locator(".pref-form [role=alert]")
    expect(panel).to_contain_text("Your role here: admin.")
    expect(panel.locator(".prefs")).to_have_text("No preferences yet.")

    # Added from the keyboard alone: the key, Tab to the value, Tab to Save, Enter.
    page.get_by_label("Key").focus()
    page.keyboard.type("report.format")
    page.keyboard.press("Tab")
    page.keyboard.type("Tables")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Save")).to_be_focused()
    page.keyboard.press("Enter")
    expect(status).to_have_text("Preference report.format added.")
    expect(page.get_by_label("Key")).to_be_focused()
    expect(page.get_by_label("Key")).to_have_value("")
    row = panel.locator(".pref[data-key='report.format']")
    expect(row.locator(".pref-value")).to_have_text("Tables")
    expect(row.locator(".pref-meta")).to_contain_text("Set by static:alice")

    # Changed: the row's Change button fills the form and puts the cursor in the value.
    page.get_by_role("button", name="Change report.format").click()
    expect(page.get_by_label("Key")).to_have_value("report.format")
    expect(page.get_by_label("Value")).to_be_focused()
    page.get_by_label("Value").fill("Tables, with a one-line summary above each.")
    page.get_by_role("button", name="Save").click()
    expect(status).to_have_text("Preference report.format changed.")
    expect(row.locator(".pref-value")).to_have_text("Tables, with a one-line summary above each.")
    assert preferences(spaces_server) == {
        "report.format": "Tables, with a one-line summary above each."
    }
    page.get_by_label("Key").fill("tone")
    page.get_by_label("Value").fill("Friendly and brief; no emoji.")
    page.get_by_role("button", name="Save").click()
    expect(status).to_have_text("Preference tone added.")
    expect(panel.locator(".pref")).to_have_count(2)
    page.locator("#side").evaluate("side => { side.scrollTop = 0; }")
    shots(page, "spaces")
    assert axe_violations(page) == []

    # The limits are checked before sending: nothing reaches the server.
    sent = len(changes)
    page.get_by_label("Key").fill("Sources News")
    page.get_by_label("Value").fill("Reuters")
    page.get_by_role("button", name="Save").click()
    expect(alert).to_contain_text("A key is 1 to 64 lower-case letters")
    expect(page.get_by_label("Key")).to_be_focused()
    expect(page.get_by_label("Key")).to_have_attribute("aria-invalid", "true")
    page.get_by_label("Key").fill("sources.news")
    page.get_by_label("Value").fill("x" * 501)
    expect(panel.locator(".counter")).to_have_text("501 of 500 characters")
    page.get_by_role("button", name="Save").click()
    expect(alert).to_have_text(
        "A value holds at most 500 characters; this one has 501. Shorten it and save again."
    )
    expect(page.get_by_label("Value")).to_be_focused()
    expect(page.get_by_label("Value")).to_have_attribute("aria-invalid", "true")
    assert len(changes) == sent
    assert "sources.news" not in preferences(spaces_server)

    # Deleted: the row goes, and focus goes on to the form.
    page.get_by_role("button", name="Delete tone").click()
    expect(status).to_have_text("Preference tone deleted.")
    expect(panel.locator(".pref")).to_have_count(1)
    expect(page.get_by_label("Key")).to_be_focused()
    assert list(preferences(spaces_server)) == ["report.format"]

    # What only the server knows (the space is full) comes back as its own sentence.
    for n in range(49):
        httpx.put(
            f"{spaces_server.url}{PREFS}/seed.{n}", headers=ALICE, json={"value": "v"}, timeout=10
        ).raise_for_status()
    refusal = httpx.put(
        f"{spaces_server.url}{PREFS}/one.more", headers=ALICE, json={"value": "v"}, timeout=10
    )
    assert refusal.status_code == 400
    page.get_by_label("Key").fill("one.more")
    page.get_by_label("Value").fill("v")
    page.get_by_role("button", name="Save").click()
    expect(alert).to_have_text(refusal.json()["error"])
    assert changes[-1] == f"PUT {PREFS}/one.more"
    assert changes.count(f"DELETE {PREFS}/tone") == 1


def test_a_member_reads_the_preferences_and_has_nothing_to_change_them_with(
    page: Page, spaces_server: RunningServer
) -> None:
    httpx.put(
        f"{spaces_server.url}{PREFS}/tone",
        headers=ALICE,
        json={"value": "Friendly and brief."},
        timeout=10,
    ).raise_for_status()
    sign_in(page, spaces_server, "bob-token")
    open_spaces(page)
    panel = page.locator("#panel-body")
    expect(panel).to_contain_text("Your role here: member.")
    row = panel.locator(".pref[data-key='tone']")
    expect(row.locator(".pref-value")).to_have_text("Friendly and brief.")
    expect(row.locator(".pref-meta")).to_contain_text("Set by static:alice")
    expect(panel.locator("form")).to_have_count(0)
    expect(panel.locator(".pref button")).to_have_count(0)
    assert axe_violations(page) == []


def test_a_person_in_no_space_is_told_so(page: Page, server: RunningServer) -> None:
    sign_in(page, server, "alice-token")
    page.get_by_role("button", name="Panels").click()
    page.get_by_role("tab", name="Spaces").click()
    expect(page.locator("#panel-body")).to_contain_text("You are in no shared space yet.")
    expect(page.locator("#panel-body select")).to_have_count(0)
