"""The UI's own words: English, all from ui/src/strings.ts; the server's follow the browser.

The UI writes its labels itself from one table (``ui/src/strings.ts``); what the server
writes (error sentences, pending choices, tool labels) comes in the language the browser asks
for with ``Accept-Language``, which Chromium sends from its locale.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support.server import RunningServer

pytestmark = [pytest.mark.timeout(120)]

SOURCES = Path(__file__).resolve().parents[2] / "ui" / "src"
# A string literal that reads as words for a person: a capitalised word, or two words.
WORDS = re.compile(r"""(["'`])((?:[A-Z][a-z]+|[A-Za-z]+ [a-z]+)[^"'`]*)\1""")
# Literals that are not for people: DOM and HTTP vocabulary the regex would otherwise catch.
NOT_WORDS = {"Enter", "Escape", "noopener noreferrer", "Bearer ${token}"}
CLASS_NAMES = re.compile(r"""class: (["'`])[^"'`]*\1""")


def test_every_word_the_ui_writes_comes_from_its_strings_table() -> None:
    found = []
    for source in sorted(SOURCES.glob("*.ts")):
        if source.name == "strings.ts":
            continue
        for number, line in enumerate(source.read_text().splitlines(), 1):
            code = CLASS_NAMES.sub("", line.split("//", 1)[0])
            if code.lstrip().startswith(("*", "/*", "import ")):
                continue
            for _, literal in WORDS.findall(code):
                if literal not in NOT_WORDS:
                    found.append(f"{source.name}:{number}: {literal}")
    assert found == []


@pytest.fixture
def italian(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(locale="it-IT", timezone_id="Europe/Rome")
    context.set_default_timeout(20_000)
    yield context.new_page()
    context.close()


def test_labels_stay_english_while_the_servers_sentences_follow_the_browsers_language(
    italian: Page, server: RunningServer
) -> None:
    refused = {
        language: httpx.get(
            server.url + "/me",
            headers={"authorization": "Bearer nobody", "accept-language": language},
        ).json()["error"]
        for language in ("it-IT,it;q=0.9", "en")
    }
    assert refused["it-IT,it;q=0.9"] != refused["en"]

    italian.goto(server.url + "/ui/")
    expect(italian.locator("label[for=token]")).to_have_text("Access token")
    expect(italian.get_by_role("button", name="Sign in")).to_be_visible()
    assert italian.evaluate("navigator.language") == "it-IT"
    italian.fill("#token", "nobody")
    italian.click("button[type=submit]")
    expect(italian.get_by_role("alert")).to_have_text(refused["it-IT,it;q=0.9"])
    expect(italian.get_by_role("button", name="Sign in")).to_be_visible()
