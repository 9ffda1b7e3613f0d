"""The Spaces panel in a real Chromium: an admin adds, changes and deletes a space's
preferences, mutes and unmutes in two steps, sets and resets the space's settings, deletes the
space and answers pairings; a member reads and can change nothing. People are shown by name,
their id on hover.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Request, expect

from tests.conftest import ALICE
from tests.support.server import RunningServer
from tests.ui.conftest import axe_violations, named, sign_in

pytestmark = [pytest.mark.timeout(120)]

Shots = Callable[[Page, str], None]

CONFIG = """
spaces:
  "slack:C1":
    admins: [static:alice]
    members: [static:bob]
    rate_limit: 5
"""
PREFS = "/spaces/slack%3AC1/prefs"


@pytest.fixture
def spaces_server(make_server: Callable[..., RunningServer], tmp_path: Path) -> RunningServer:
    config = tmp_path / "mercury.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    server = make_server(MERCURY_CONFIG_FILE=str(config))
    named(server, "static:alice", "Alice")
    named(server, "static:bob", "Bob")
    return server


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
    status = panel.locator(".space-prefs [role=status]")
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
    expect(row.locator(".pref-meta")).to_contain_text("Set by Alice")
    expect(row.locator(".pref-meta .person")).to_have_attribute("title", "static:alice")

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

    # Deleted after a confirmation: Cancel keeps it and gives focus back to Delete.
    page.get_by_role("button", name="Delete tone").click()
    question = panel.locator(".pref[data-key='tone'] .confirm-box")
    expect(question).to_contain_text("Delete the preference tone?")
    expect(question.get_by_role("button", name="Cancel")).to_be_focused()
    question.get_by_role("button", name="Cancel").click()
    expect(question).to_have_count(0)
    expect(page.get_by_role("button", name="Delete tone")).to_be_focused()
    page.keyboard.press("Enter")
    expect(question).to_have_count(1)
    page.keyboard.press("Escape")  # closes the question, not the side panel
    expect(question).to_have_count(0)
    expect(page.get_by_role("button", name="Delete tone")).to_be_focused()
    assert "tone" in preferences(spaces_server)
    page.get_by_role("button", name="Delete tone").click()
    question.get_by_role("button", name="Confirm").click()
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
    expect(row.locator(".pref-meta")).to_contain_text("Set by Alice")
    # A member sees who is here and the settings, but no mutes, no pairings, nothing to change.
    expect(panel.locator(".member")).to_have_count(2)
    expect(panel.locator(".setting[data-key='rate_limit'] .setting-value")).to_contain_text("5")
    expect(panel.locator(".space-mutes")).to_have_count(0)
    expect(panel.locator(".pairings")).to_have_count(0)
    expect(panel.locator(".space-delete")).to_have_count(0)
    expect(panel.locator("form")).to_have_count(0)
    expect(panel.locator(".pref button")).to_have_count(0)
    assert axe_violations(page) == []


def test_a_person_in_no_space_is_told_so(page: Page, server: RunningServer) -> None:
    sign_in(page, server, "alice-token")
    page.get_by_role("button", name="Panels").click()
    page.get_by_role("tab", name="Spaces").click()
    expect(page.locator("#panel-body")).to_contain_text("You are in no shared space yet.")
    expect(page.locator("#panel-body select")).to_have_count(0)


def mutes(server: RunningServer) -> list[str]:
    answer = httpx.get(server.url + "/spaces/slack%3AC1/mutes", headers=ALICE, timeout=10).json()
    return [m["person"] for m in answer["mutes"]]


def test_an_admin_sees_the_members_by_name_and_mutes_in_two_steps_then_unmutes(
    page: Page, spaces_server: RunningServer, shots: Shots
) -> None:
    posts: list[dict[str, object]] = []
    page.on(
        "request",
        lambda request: (
            posts.append(request.post_data_json)
            if request.url.endswith("/mutes") and request.method == "POST"
            else None
        ),
    )
    reminder = httpx.post(
        spaces_server.url + "/spaces/slack%3AC1/mutes",
        headers=ALICE,
        json={"person": "static:bob", "duration": "1h"},
        timeout=10,
    ).json()["notice"]  # for people: the UI's own Confirm stands under it
    assert "confirm set to true" not in reminder
    sign_in(page, spaces_server, "alice-token")
    open_spaces(page)
    panel = page.locator("#panel-body")
    alice = panel.locator(".member[data-id='static:alice']")
    expect(alice).to_contain_text("Alice")
    expect(alice).to_contain_text("admin")
    expect(alice.locator(".person")).to_have_attribute("title", "static:alice")
    expect(panel.locator(".member[data-id='static:bob']")).to_contain_text("Bob")
    section = panel.locator(".space-mutes")
    expect(section.locator(".mutes")).to_have_text("Nobody is muted here.")

    # Only members who aren't admins are offered; a malformed duration never leaves the page.
    expect(page.get_by_label("Person", exact=True)).to_have_value("static:bob")
    expect(page.get_by_label("Person", exact=True).locator("option")).to_have_count(1)
    page.get_by_label("For how long").fill("forever")
    page.get_by_role("button", name="Mute", exact=True).click()
    expect(section.locator(".mute-form [role=alert]")).to_contain_text("10m, 1h, 24h or 7d")
    expect(page.get_by_label("For how long")).to_be_focused()
    expect(page.get_by_label("For how long")).to_have_attribute("aria-invalid", "true")
    page.get_by_label("For how long").fill("31d")
    page.get_by_role("button", name="Mute", exact=True).click()
    expect(page.get_by_label("For how long")).to_have_attribute("aria-invalid", "true")
    assert posts == []

    # First step: the server's reminder, nothing muted; Cancel goes back to Mute.
    page.get_by_label("For how long").fill("1h")
    page.get_by_label("Reason (optional)").fill("Spam after two warnings")
    page.get_by_role("button", name="Mute", exact=True).click()
    question = section.locator(".confirm-box")
    expect(question).to_have_text(reminder + "ConfirmCancel")
    expect(question.get_by_role("button", name="Cancel")).to_be_focused()
    assert mutes(spaces_server) == []
    assert axe_violations(page) == []
    question.get_by_role("button", name="Cancel").click()
    expect(question).to_have_count(0)
    expect(page.get_by_role("button", name="Mute", exact=True)).to_be_focused()
    assert mutes(spaces_server) == []

    # Second step: Confirm sends the same request with confirm: true.
    page.get_by_role("button", name="Mute", exact=True).click()
    question.get_by_role("button", name="Confirm").click()
    expect(section.locator("[role=status]")).to_contain_text("Bob is muted until")
    row = section.locator(".mute[data-person='static:bob']")
    expect(row.locator(".person").first).to_have_text("Bob")
    expect(row.locator(".person").first).to_have_attribute("title", "static:bob")
    expect(row).to_contain_text("by Alice")
    expect(row).to_contain_text("Spam after two warnings")
    assert mutes(spaces_server) == ["static:bob"]
    reason = "Spam after two warnings"
    assert posts == [
        {"person": "static:bob", "duration": "1h", "reason": reason},
        {"person": "static:bob", "duration": "1h", "reason": reason},
        {"person": "static:bob", "duration": "1h", "reason": reason, "confirm": True},
    ]
    section.scroll_into_view_if_needed()
    shots(page, "spaces-mutes")
    assert axe_violations(page) == []

    page.get_by_role("button", name="Unmute Bob").click()
    expect(section.locator("[role=status]")).to_have_text("Bob is no longer muted.")
    expect(section.locator(".mutes")).to_have_text("Nobody is muted here.")
    expect(page.get_by_label("Person", exact=True)).to_be_focused()
    assert mutes(spaces_server) == []


def test_an_admin_sets_and_resets_settings_checked_as_the_server_checks_them(
    page: Page, spaces_server: RunningServer
) -> None:
    puts: list[str] = []
    page.on(
        "request",
        lambda request: (
            puts.append(f"{request.method} {request.post_data}")
            if "/settings/" in request.url
            else None
        ),
    )
    sign_in(page, spaces_server, "alice-token")
    open_spaces(page)
    section = page.locator("#panel-body .space-settings")
    status = section.locator("[role=status]")
    rate = section.locator(".setting[data-key='rate_limit']")
    field = page.get_by_label("Turns per person per window")
    expect(field).to_have_value("5")
    expect(rate).to_contain_text("from the configuration file")
    expect(rate.get_by_role("button", name="Reset rate_limit")).to_have_count(0)

    # Out of the bounds: said on the page, nothing sent.
    field.fill("1001")
    rate.get_by_role("button", name="Set rate_limit").click()
    expect(rate.locator("[role=alert]")).to_have_text("A whole number from 1 to 1000.")
    expect(field).to_be_focused()
    expect(field).to_have_attribute("aria-invalid", "true")
    field.fill("2.5")
    field.press("Enter")
    expect(field).to_have_attribute("aria-invalid", "true")
    assert puts == []

    # Set from the keyboard, then reset to the file's value.
    field.fill("3")
    field.press("Enter")
    expect(status).to_have_text("rate_limit is now 3.")
    expect(field).to_have_value("3")
    expect(field).to_be_focused()
    expect(rate).to_contain_text("set for this space")
    assert puts == ['PUT {"value":3}']
    rate.get_by_role("button", name="Reset rate_limit").click()
    expect(status).to_have_text("rate_limit was reset: now 5, from the configuration file.")
    expect(field).to_have_value("5")

    # A choice and a switch go as their JSON types.
    page.get_by_label("Answers when").select_option("always")
    section.get_by_role("button", name="Set trigger.match").click()
    expect(status).to_have_text("trigger.match is now always.")
    page.get_by_label("Live answers").select_option("false")
    section.get_by_role("button", name="Set live_answers").click()
    expect(status).to_have_text("live_answers is now off.")
    assert puts[-2:] == ['PUT {"value":"always"}', 'PUT {"value":false}']

    # What only the server knows comes back as its own sentence, beside the field.
    pattern = section.locator(".setting[data-key='trigger.pattern']")
    page.get_by_label("Trigger word").fill("x" * 65)
    pattern.get_by_role("button", name="Set trigger.pattern").click()
    expect(pattern.locator("[role=alert]")).to_have_text("At most 64 characters.")
    assert len(puts) == 4
    page.get_by_label("Trigger word").fill("!m\u202e")
    with page.expect_response(lambda r: "/settings/trigger.pattern" in r.url) as answer:
        pattern.get_by_role("button", name="Set trigger.pattern").click()
    assert answer.value.status == 400
    expect(pattern.locator("[role=alert]")).to_have_text(answer.value.json()["error"])
    expect(page.get_by_label("Trigger word")).to_have_attribute("aria-invalid", "true")
    assert axe_violations(page) == []


def test_an_admin_deletes_the_space_after_a_confirmation_naming_it(
    page: Page, spaces_server: RunningServer
) -> None:
    httpx.put(
        f"{spaces_server.url}{PREFS}/tone", headers=ALICE, json={"value": "Brief."}, timeout=10
    ).raise_for_status()
    deletes: list[str] = []
    page.on(
        "request",
        lambda request: (
            deletes.append(request.url.removeprefix(spaces_server.url))
            if request.method == "DELETE"
            else None
        ),
    )
    sign_in(page, spaces_server, "alice-token")
    open_spaces(page)
    panel = page.locator("#panel-body")
    page.get_by_role("button", name="Delete the space").click()
    question = panel.locator(".space-delete .confirm-box")
    expect(question).to_contain_text("Delete the space slack:C1?")
    expect(question.get_by_role("button", name="Cancel")).to_be_focused()
    question.get_by_role("button", name="Cancel").click()
    expect(question).to_have_count(0)
    expect(page.get_by_role("button", name="Delete the space")).to_be_focused()
    assert deletes == []
    assert preferences(spaces_server) == {"tone": "Brief."}

    page.get_by_role("button", name="Delete the space").click()
    assert axe_violations(page) == []
    question.get_by_role("button", name="Confirm").click()
    expect(panel.locator(".note").first).to_have_text("The space slack:C1 was deleted.")
    assert deletes == ["/spaces/slack%3AC1"]
    assert preferences(spaces_server) == {}


#: Alice approves pairings (her roles include admin); Bob is a member of slack:C1 only.
APPROVERS = [
    {"id": "alice", "displayName": "Alice", "roles": ["admin"], "identities": ["static:alice"]},
    {"id": "bob", "displayName": "Bob", "identities": ["static:bob"]},
]


def test_an_approver_approves_and_denies_pairings(
    page: Page, make_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    config = tmp_path / "mercury.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    server = make_server(
        MERCURY_CONFIG_FILE=str(config), DIRECTORY_STATIC_PEOPLE=json.dumps(APPROVERS)
    )
    pairing = server.services.space_stores.pairing
    carol, dave = (
        server.call(
            pairing.ask(platform, account, name=name, language="en", reach="{}")
        ).request.code
        for platform, account, name in (("telegram", "5550001", "Carol"), ("slack", "U0DAVE", None))
    )
    sign_in(page, server, "alice-token")
    open_spaces(page)
    section = page.locator("#panel-body .pairings")
    carol_row = section.locator(f".pairing[data-code='{carol}']")
    expect(carol_row.locator(".person")).to_have_text("Carol")
    expect(carol_row.locator(".person")).to_have_attribute("title", "telegram:5550001")
    expect(carol_row).to_contain_text(f"Code {carol}")
    # Without a name, the account is what there is to show.
    expect(section.locator(f".pairing[data-code='{dave}'] .person")).to_have_text("slack:U0DAVE")
    assert axe_violations(page) == []

    page.get_by_role("button", name="Approve Carol").click()
    expect(section.locator("[role=status]")).to_have_text("Carol can now talk to the assistant.")
    expect(section).to_be_focused()
    page.get_by_role("button", name="Deny slack:U0DAVE").click()
    expect(section.locator("[role=status]")).to_have_text("slack:U0DAVE's request was denied.")
    expect(section.locator(".pairing-list")).to_have_text("Nobody is waiting.")
    assert server.call(pairing.is_admitted("telegram:5550001")) is True
    assert server.call(pairing.is_admitted("slack:U0DAVE")) is False
    assert server.call(pairing.pending()) == []

    # The account let in is listed, and revoked from the same section.
    admitted = section.locator(".admitted[data-account='telegram:5550001']")
    expect(admitted.locator(".person")).to_have_text("Carol")
    expect(admitted).to_contain_text("Let in by people:alice")
    assert axe_violations(page) == []
    page.get_by_role("button", name="Revoke Carol").click()
    expect(section.locator("[role=status]")).to_have_text(
        "Carol can no longer talk to the assistant."
    )
    expect(section.locator(".admitted-list")).to_have_text("Nobody was let in yet.")
    assert server.call(pairing.is_admitted("telegram:5550001")) is False
