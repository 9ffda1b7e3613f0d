"""The UI's own words: all from ui/src/strings.ts and its translations, in the person's language.

The UI writes its labels itself from one table (``ui/src/strings.ts``, English) and its
copies in the other languages the server speaks (``strings_de.ts``, ``strings_es.ts``,
``strings_fr.ts``, ``strings_it.ts``), chosen as the server chooses: before sign-in the
browser's language, after it the one ``GET /me`` names in ``Content-Language`` (saved, else
``Accept-Language``, else the default). What the server writes comes in that language too.
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
TRANSLATIONS = ("de", "es", "fr", "it")
# A table's keys: each entry's name at the table's own indentation (two spaces).
KEY = re.compile(r'^  ("[^"]+"|\w+):', re.MULTILINE)
# A string literal that reads as words for a person: a capitalised word, or two words.
WORDS = re.compile(r"""(["'`])((?:[A-Z][a-z]+|[A-Za-z]+ [a-z]+)[^"'`]*)\1""")
# Literals that are not for people: DOM and HTTP vocabulary the regex would otherwise catch.
NOT_WORDS = {"Enter", "Escape", "noopener noreferrer", "Bearer ${token}"}
CLASS_NAMES = re.compile(r"""class: (["'`])[^"'`]*\1""")


def test_every_word_the_ui_writes_comes_from_its_strings_table() -> None:
    found = []
    for source in sorted(SOURCES.glob("*.ts")):
        if source.name.startswith("strings"):
            continue
        for number, line in enumerate(source.read_text().splitlines(), 1):
            code = CLASS_NAMES.sub("", line.split("//", 1)[0])
            if code.lstrip().startswith(("*", "/*", "import ")):
                continue
            for _, literal in WORDS.findall(code):
                if literal not in NOT_WORDS:
                    found.append(f"{source.name}:{number}: {literal}")
    assert found == []


def keys_of(table: str) -> list[str]:
    """Every key of a strings table, nested ones (roles, settingLabels, sources) included."""
    return KEY.findall(table) + re.findall(r'^    ("[^"]+"|\w+):', table, re.MULTILINE)


def test_every_string_of_the_ui_has_a_translation_in_each_language_the_server_speaks() -> None:
    english = keys_of((SOURCES / "strings.ts").read_text())
    assert len(english) > 150
    catalogs = sorted(path.stem.removeprefix("strings_") for path in SOURCES.glob("strings_*.ts"))
    assert catalogs == sorted(TRANSLATIONS)
    for language in TRANSLATIONS:
        table = (SOURCES / f"strings_{language}.ts").read_text()
        assert keys_of(table) == english, f"strings_{language}.ts lacks or adds a key"
    assert set(TRANSLATIONS) | {"en"} == {
        path.name for path in (SOURCES.parents[1] / "core" / "locales").iterdir() if path.is_dir()
    }


@pytest.fixture
def italian(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(locale="it-IT", timezone_id="Europe/Rome")
    context.set_default_timeout(20_000)
    yield context.new_page()
    context.close()


def test_the_ui_writes_its_own_words_in_the_language_the_server_speaks_to_the_person(
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
    expect(italian.locator("label[for=token]")).to_have_text("Token di accesso")
    expect(italian.get_by_role("button", name="Accedi", exact=True)).to_be_visible()
    assert italian.evaluate("document.documentElement.lang") == "it"
    italian.fill("#token", "nobody")
    italian.click("button[type=submit]")
    expect(italian.get_by_role("alert")).to_have_text(refused["it-IT,it;q=0.9"])

    # Signed in, a language the person saved wins over the browser's: German here.
    server.call(server.services.person_settings.set_language("static:alice", "de"))
    server.call(server.services.person_settings.set_name("static:alice", "Alice"))
    italian.fill("#token", "alice-token")
    italian.click("button[type=submit]")
    expect(italian.get_by_role("button", name="Senden")).to_be_visible()
    expect(italian.locator("button.primary", has_text="Neue Unterhaltung")).to_be_visible()
    assert italian.evaluate("document.documentElement.lang") == "de"
    # Forgotten, the browser's language (Italian) is the server's choice again.
    forgot = httpx.patch(
        server.url + "/me",
        headers={"authorization": "Bearer alice-token"},
        json={"language": None},
    )
    assert forgot.status_code == 200
    italian.reload()
    expect(italian.get_by_role("button", name="Invia")).to_be_visible()
    expect(italian.locator("button.primary", has_text="Nuova conversazione")).to_be_visible()
