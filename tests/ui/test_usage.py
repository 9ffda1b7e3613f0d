"""The Usage panel in a real Chromium: a person sees their own tokens by day and model; an
administrator sees everyone's too, by name; changing the period reloads them."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.conftest import ALICE, BOB
from tests.support.server import RunningServer
from tests.ui.conftest import axe_violations, named, sign_in

pytestmark = [pytest.mark.timeout(120)]

PEOPLE = [
    {"id": "alice", "roles": ["admin"], "identities": ["static:alice"]},
    {"id": "bob", "displayName": "Bob B.", "identities": ["static:bob"]},
]


@pytest.fixture
def usage_server(make_server: Callable[..., RunningServer]) -> RunningServer:
    server = make_server(DIRECTORY_STATIC_PEOPLE=json.dumps(PEOPLE))
    named(server, "people:alice", "Alice")
    named(server, "people:bob", "Bob")
    for headers in (ALICE, BOB, BOB):
        answered = httpx.post(
            server.url + "/chat", json={"text": "hi"}, headers=headers, timeout=30
        )
        assert answered.status_code == 200, answered.text
    return server


def open_usage(page: Page) -> None:
    page.get_by_role("button", name="Panels").click()
    page.get_by_role("tab", name="Usage").click()
    expect(page.get_by_role("heading", name="Your usage")).to_be_visible()


def test_an_administrator_sees_their_own_usage_and_everyones_by_name(
    page: Page, usage_server: RunningServer
) -> None:
    sign_in(page, usage_server, "alice-token", opening=True)
    open_usage(page)
    panel = page.locator("#panel-body")
    mine, everyone = panel.locator("table.usage").all()
    expect(mine).to_contain_text("llama3.2")
    expect(mine.locator("tfoot td").last).to_have_text("1")  # one call
    expect(page.get_by_role("heading", name="Everyone's usage")).to_be_visible()
    expect(everyone).to_contain_text("Bob")
    expect(everyone).to_contain_text("own conversations")
    assert axe_violations(page) == []
    page.get_by_label("Period").select_option("today")
    expect(panel.locator("table.usage")).to_have_count(2)


def test_a_person_sees_only_their_own_usage(page: Page, usage_server: RunningServer) -> None:
    sign_in(page, usage_server, "bob-token", opening=True)
    open_usage(page)
    panel = page.locator("#panel-body")
    expect(panel.locator("table.usage")).to_have_count(1)
    expect(panel.locator("table.usage tfoot td").last).to_have_text("2")  # two calls
    expect(page.get_by_role("heading", name="Everyone's usage")).to_have_count(0)
