"""The translation layer: catalogs, translators, plural forms and language negotiation."""

from __future__ import annotations

import gettext
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.plurals import get_plural
from babel.messages.pofile import read_po, write_po
from hypothesis import given, settings
from hypothesis import strategies as st

from core.people import catalogs, messages
from core.people.catalogs import (
    SOURCE_PACKAGES,
    catalog_path,
    check,
    placeholders,
    template_path,
    update,
)
from core.people.i18n import (
    DEFAULT_LANGUAGE,
    LOCALES_DIRECTORY,
    N_,
    SUPPORTED_LANGUAGES,
    CatalogError,
    Catalogs,
    N_plural,
    PluralText,
    Translator,
    choose_language,
    negotiate,
)

ROOT = Path(__file__).resolve().parents[2]
TRANSLATED = tuple(language for language in SUPPORTED_LANGUAGES if language != DEFAULT_LANGUAGE)


@pytest.fixture(scope="module")
def loaded() -> Catalogs:
    return Catalogs.load()


def read_catalog(path: Path, language: str | None = None) -> Catalog:
    with path.open("rb") as file:
        return read_po(file, locale=language)


def translate(path: Path, language: str, strings: dict[str, str | tuple[str, ...]]) -> None:
    """Fill in msgstr for the given msgids, as a translator would."""
    catalog = read_catalog(path, language)
    for key, string in strings.items():
        message = catalog.get(key)
        assert message is not None, key
        message.string = string
        message.flags.discard("fuzzy")
    with path.open("wb") as file:
        write_po(file, catalog, width=100, include_lineno=False)


def write_source(root: Path, text: str) -> None:
    package = root / "app"
    package.mkdir(parents=True, exist_ok=True)
    (package / "texts.py").write_text(text, encoding="utf-8")


APP_SOURCE = """
def show(tr, n):
    tr.gettext("Hello %(name)s.")
    tr.ngettext("%(n)d apple", "%(n)d apples", n)
"""


@pytest.fixture
def small_project(tmp_path: Path) -> Path:
    """A one-module project with English and Italian catalogs made by `update`."""
    write_source(tmp_path, APP_SOURCE)
    update(tmp_path, ("app",), tmp_path / "locales", ("en", "it"))
    return tmp_path


def check_small(root: Path) -> list[str]:
    return check(root, ("app",), root / "locales", ("en", "it"))


def update_small(root: Path) -> list[Path]:
    return update(root, ("app",), root / "locales", ("en", "it"))


# --- The shipped catalogs ---------------------------------------------------------------------


def test_every_catalog_matches_the_code() -> None:
    assert check() == []


def test_every_translation_keeps_the_placeholders_of_its_msgid() -> None:
    for language in SUPPORTED_LANGUAGES:
        for message in read_catalog(catalog_path(LOCALES_DIRECTORY, language), language):
            if not message.id:
                continue
            if isinstance(message.id, tuple):
                singular, plural = message.id
                assert placeholders(singular) == placeholders(plural), singular
                for form in message.string:
                    if form:
                        assert placeholders(form) == placeholders(plural), (language, form)
            elif message.string:
                assert placeholders(message.string) == placeholders(message.id), (
                    language,
                    message.string,
                )


@pytest.mark.parametrize("language", SUPPORTED_LANGUAGES)
def test_each_catalog_declares_the_cldr_plural_forms_and_fills_every_one(language: str) -> None:
    path = catalog_path(LOCALES_DIRECTORY, language)
    text = path.read_text(encoding="utf-8")
    assert f'"Plural-Forms: {get_plural(language)}\\n"' in text
    catalog = read_catalog(path, language)
    assert catalog.num_plurals == get_plural(language).num_plurals
    plural_entries = [m for m in catalog if m.id and isinstance(m.id, tuple)]
    assert plural_entries
    for message in plural_entries:
        assert len(message.string) == catalog.num_plurals
        if language != DEFAULT_LANGUAGE:
            assert all(message.string), message.id


def test_italian_spanish_and_french_have_three_plural_forms_german_and_english_two() -> None:
    counts = {language: get_plural(language).num_plurals for language in SUPPORTED_LANGUAGES}
    assert counts == {"en": 2, "it": 3, "de": 2, "fr": 3, "es": 3}


def test_every_text_declared_in_the_messages_module_is_in_every_catalog() -> None:
    declared: set[str] = set()
    for name in dir(messages):
        value = getattr(messages, name)
        if name.isupper() and isinstance(value, PluralText):
            declared.add(value.singular)
        elif name.isupper() and isinstance(value, str):
            declared.add(value)
    assert len(declared) >= 57  # the seed texts, and every one added since
    for language in SUPPORTED_LANGUAGES:
        catalog = read_catalog(catalog_path(LOCALES_DIRECTORY, language), language)
        assert all(catalog.get(text) is not None for text in declared), language


def test_the_catalogs_script_checks_the_real_catalogs() -> None:
    result = subprocess.run(  # noqa: S603 - our own script, fixed arguments
        [str(ROOT / "scripts" / "catalogs"), "check"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "match the code" in result.stdout


def test_the_catalogs_tool_refuses_an_unknown_verb() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "core.people.catalogs", "translate"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 2
    assert "usage" in result.stderr


# --- check and update on temporary trees --------------------------------------------------------


def test_check_reports_a_catalog_entry_the_code_no_longer_uses(tmp_path: Path) -> None:
    shutil.copytree(LOCALES_DIRECTORY, tmp_path / "locales")
    # The whole source, as the catalogs read it (texts live beside their code too), with one
    # text retired from the table of person-facing texts.
    for package in SOURCE_PACKAGES:
        shutil.copytree(
            ROOT / package,
            tmp_path / package,
            ignore=shutil.ignore_patterns("__pycache__", "node_modules", "locales"),
        )
    messages = tmp_path / "core" / "people" / "messages.py"
    source = messages.read_text(encoding="utf-8")
    retired = 'CHOICE_APPEND_NOTE: Final = N_("Append to the note")\n'
    assert retired in source
    messages.write_text(source.replace(retired, ""), encoding="utf-8")
    # ... and wherever the code asks for it by its words.
    for path in tmp_path.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if 'gettext("Append to the note")' in text:
            path.write_text(
                text.replace('gettext("Append to the note")', 'format("Append to the note")'),
                encoding="utf-8",
            )

    problems = check(tmp_path, SOURCE_PACKAGES, tmp_path / "locales")

    assert len(problems) == 1 + len(SUPPORTED_LANGUAGES)  # the template and every catalog
    assert all("'Append to the note'" in p and "no code uses" in p for p in problems)


def test_check_reports_texts_missing_or_untranslated_but_exempts_english(
    small_project: Path,
) -> None:
    write_source(small_project, APP_SOURCE + '    tr.gettext("Goodbye.")\n')

    problems = check_small(small_project)

    missing = [p for p in problems if "'Goodbye.'" in p and "lacks" in p]
    untranslated = [p for p in problems if "is not translated" in p]
    assert len(missing) == 3  # template, en, it
    assert len(untranslated) == 2  # both of Italian's texts, none of English's
    assert all(str(catalog_path(small_project / "locales", "it")) in p for p in untranslated)


def test_a_translated_catalog_passes_and_its_translations_survive_an_update(
    small_project: Path,
) -> None:
    it = catalog_path(small_project / "locales", "it")
    translate(
        it,
        "it",
        {
            "Hello %(name)s.": "Ciao %(name)s.",
            "%(n)d apple": ("%(n)d mela", "%(n)d di mele", "%(n)d mele"),
        },
    )
    assert check_small(small_project) == []

    write_source(small_project, APP_SOURCE + '    tr.gettext("Goodbye.")\n')
    update_small(small_project)

    catalog = read_catalog(it, "it")
    assert catalog.get("Hello %(name)s.").string == "Ciao %(name)s."
    assert check_small(small_project) == [
        f"it catalog {it}: 'Goodbye.' is not translated (in every plural form)."
    ]


def test_update_drops_entries_no_code_uses(small_project: Path) -> None:
    write_source(small_project, 'def show(tr):\n    tr.gettext("Hello %(name)s.")\n')
    assert any("no code uses" in p for p in check_small(small_project))

    update_small(small_project)

    assert read_catalog(template_path(small_project / "locales")).get("%(n)d apple") is None
    assert not any("no code uses" in p for p in check_small(small_project))


def test_a_reworded_text_keeps_its_old_translation_marked_fuzzy_until_reviewed(
    small_project: Path,
) -> None:
    it = catalog_path(small_project / "locales", "it")
    translate(
        it,
        "it",
        {
            "Hello %(name)s.": "Ciao %(name)s.",
            "%(n)d apple": ("%(n)d mela", "%(n)d di mele", "%(n)d mele"),
        },
    )
    write_source(small_project, APP_SOURCE.replace("Hello %(name)s.", "Hello, %(name)s."))

    update_small(small_project)

    entry = read_catalog(it, "it").get("Hello, %(name)s.")
    assert entry.fuzzy and entry.string == "Ciao %(name)s."
    assert any("is marked fuzzy" in p for p in check_small(small_project))
    assert Catalogs.load(small_project / "locales", ("en", "it")).translator("it").gettext(
        "Hello, %(name)s."
    ) == ("Hello, %(name)s.")  # a fuzzy guess is never shown


def test_update_leaves_files_alone_when_nothing_changed(small_project: Path) -> None:
    assert update_small(small_project) == []


def test_check_reports_a_translation_whose_placeholders_differ(small_project: Path) -> None:
    translate(
        catalog_path(small_project / "locales", "it"),
        "it",
        {
            "Hello %(name)s.": "Ciao %(nome)s.",
            "%(n)d apple": ("%(n)d mela", "%(n)d di mele", "mele"),
        },
    )

    problems = [p for p in check_small(small_project) if "placeholders" in p]

    assert len(problems) == 2
    assert "'Ciao %(nome)s.'" in problems[0]
    assert "'mele'" in problems[1]


def test_check_reports_a_plural_header_that_differs_from_cldr_and_update_resets_it(
    small_project: Path,
) -> None:
    it = catalog_path(small_project / "locales", "it")
    text = it.read_text(encoding="utf-8")
    it.write_text(
        text.replace(str(get_plural("it")), "nplurals=2; plural=(n != 1);"), encoding="utf-8"
    )
    assert any("Plural-Forms" in p for p in check_small(small_project))

    update_small(small_project)

    assert not any("Plural-Forms" in p for p in check_small(small_project))
    assert read_catalog(it, "it").num_plurals == 3


def test_placeholders_are_named_conversions_and_ignore_literal_percent_signs() -> None:
    assert placeholders("%(a)s and %(b)d, 100%% sure") == {("a", "s"), ("b", "d")}
    assert placeholders("%s then %05.1f") == {(None, "s"), (None, "f")}
    assert placeholders("no placeholders") == frozenset()


def test_extraction_finds_method_calls_and_markers_but_not_definitions(tmp_path: Path) -> None:
    write_source(
        tmp_path,
        "from core.people.i18n import N_, N_plural\n"
        "class T:\n"
        "    def gettext(self, message):\n"
        "        return message\n"
        "def show(tr, x):\n"
        '    tr.gettext("Method call.")\n'
        "    tr.gettext(x)\n"
        'LATER = N_("Marked.")\n'
        'COUNTED = N_plural("%(n)d thing", "%(n)d things")\n'
        '_("Not a keyword.")\n',
    )

    found = {message.id for message in catalogs.extract(tmp_path, ("app",)) if message.id}

    assert found == {"Method call.", "Marked.", ("%(n)d thing", "%(n)d things")}


# --- Runtime: catalogs and translators --------------------------------------------------------


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        ("en", "Not found."),
        ("it", "Non trovato."),
        ("de", "Nicht gefunden."),
        ("fr", "Introuvable."),
        ("es", "No encontrado."),
    ],
)
def test_each_language_translates_a_known_text(
    loaded: Catalogs, language: str, expected: str
) -> None:
    translator: Translator = loaded.translator(language)
    assert translator.language == language
    assert translator.gettext(messages.NOT_FOUND) == expected


def test_a_translation_formats_with_the_msgids_placeholders(loaded: Catalogs) -> None:
    text = loaded.translator("it").gettext(messages.LINKED) % {"name": "Ada"}
    assert text == "Collegato: ora questo account è Ada."


def test_english_returns_every_msgid_as_written(loaded: Catalogs) -> None:
    english = loaded.translator("en")
    for message in catalogs.extract():
        if isinstance(message.id, str) and message.id:
            assert english.gettext(message.id) == message.id


def test_an_unknown_language_falls_back_to_english(loaded: Catalogs) -> None:
    for language in ("pt", "xx", "", None, "zh-Hans"):
        translator = loaded.translator(language)
        assert translator.language == "en"
        assert translator.gettext(messages.NOT_FOUND) == "Not found."


def test_a_regional_or_upper_case_tag_gets_its_language(loaded: Catalogs) -> None:
    assert loaded.translator("it-CH").language == "it"
    assert loaded.translator("FR").language == "fr"
    assert loaded.translator("es_MX").language == "es"


def test_an_unknown_msgid_comes_back_unchanged(loaded: Catalogs) -> None:
    assert loaded.translator("de").gettext("Never extracted.") == "Never extracted."
    assert loaded.translator("de").ngettext("%(n)d cat", "%(n)d cats", 1) == "%(n)d cat"
    assert loaded.translator("fr").ngettext("%(n)d cat", "%(n)d cats", 0) == "%(n)d cats"


def seconds(loaded: Catalogs, language: str, n: int) -> str:
    return loaded.translator(language).ngettext(*messages.RATE_LIMITED, n) % {"seconds": n}


def test_italian_uses_one_for_1_other_for_2_and_many_for_a_million(loaded: Catalogs) -> None:
    assert "1 secondo " in seconds(loaded, "it", 1)
    assert "2 secondi " in seconds(loaded, "it", 2)
    assert "0 secondi " in seconds(loaded, "it", 0)
    assert "1000000 di secondi " in seconds(loaded, "it", 1_000_000)


def test_french_uses_one_for_0_and_1(loaded: Catalogs) -> None:
    assert "0 seconde " in seconds(loaded, "fr", 0)
    assert "1 seconde " in seconds(loaded, "fr", 1)
    assert "2 secondes " in seconds(loaded, "fr", 2)
    assert "1000000 de secondes " in seconds(loaded, "fr", 1_000_000)


def test_spanish_uses_many_for_a_million_and_german_and_english_do_not(loaded: Catalogs) -> None:
    assert "1 segundo " in seconds(loaded, "es", 1)
    assert "0 segundos " in seconds(loaded, "es", 0)
    assert "1000000 de segundos " in seconds(loaded, "es", 1_000_000)
    assert "1000000 Sekunden," in seconds(loaded, "de", 1_000_000)
    assert "1 Sekunde," in seconds(loaded, "de", 1)
    assert seconds(loaded, "en", 1_000_000).startswith("Too many messages: wait 1000000 seconds")
    assert seconds(loaded, "en", 1).startswith("Too many messages: wait 1 second ")


@pytest.mark.parametrize("language", SUPPORTED_LANGUAGES)
def test_the_runtime_plural_choice_agrees_with_the_catalog_header(
    loaded: Catalogs, language: str
) -> None:
    header_rule = gettext.c2py(get_plural(language).plural_expr)
    catalog = read_catalog(catalog_path(LOCALES_DIRECTORY, language), language)
    message = catalog.get(messages.STEP_LIMIT.singular)
    translator = loaded.translator(language)
    numbers = [*range(120), 1_000, 10_000, 999_999, 1_000_000, 2_000_000, 1_000_001]
    for n in numbers:
        got = translator.ngettext(*messages.STEP_LIMIT, n)
        if language == DEFAULT_LANGUAGE:
            assert got == messages.STEP_LIMIT[header_rule(n)]
        else:
            assert got == message.string[header_rule(n)], (language, n)


def test_loading_a_missing_catalog_says_how_to_create_it(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"missing; run scripts/catalogs update"):
        Catalogs.load(tmp_path)


def test_loaded_catalogs_know_every_supported_language(loaded: Catalogs) -> None:
    assert loaded.languages == SUPPORTED_LANGUAGES


def test_markers_return_their_text_untouched() -> None:
    assert N_("Some text.") == "Some text."
    assert N_plural("%(n)d cat", "%(n)d cats") == PluralText("%(n)d cat", "%(n)d cats")


# --- Negotiation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("it", "it"),
        ("it-CH", "it"),
        ("IT-ch", "it"),
        ("de-DE,de;q=0.9,en;q=0.8", "de"),
        ("fr;q=0.4, es;q=0.9", "es"),
        ("pt-BR, pt;q=0.9, es;q=0.5", "es"),
        ("fr;q=0.5, de;q=0.5", "fr"),  # a tie keeps the header's order
        ("de;q=0.5, fr;q=0.5", "de"),
        ("*", "en"),
        ("en;q=0, *", "it"),  # * is any language not named otherwise
        ("*;q=0.5, de", "de"),
        ("*, fr", "fr"),  # a named language beats * at the same q
        ("it;q=0", None),
        ("it;q=0, it-CH", None),  # refusing "it" refuses its regions too
        ("it-CH;q=0, it;q=0.2, *;q=0.1", "it"),
        ("es;q=0.000", None),
        ("es;q=0.001", "es"),
        ("en;q=1.000", "en"),
        ("en;Q=0.5", "en"),
        ("de ; q=0.7 , fr;q=0.6", "de"),
        (",,, ,\t,fr", "fr"),
        ("pt", None),
        ("", None),
        (None, None),
    ],
)
def test_negotiate_picks_the_best_supported_language(
    header: str | None, expected: str | None
) -> None:
    assert negotiate(header) == expected


@pytest.mark.parametrize(
    "header",
    [
        "fr;q=2, es;q=0.1",  # q above 1
        "fr;q=1.5, es;q=0.1",
        "fr;q=0.1234, es;q=0.1",  # more than three decimals
        "fr;q=, es;q=0.1",
        "fr;q=abc, es;q=0.1",
        "fr;q=-1, es;q=0.1",
        "fr;q=0.5;q=0.9, es;q=0.1",  # two weights
        "fr;level=1, es;q=0.1",  # not a weight
        "fr_FR, es;q=0.1",  # underscore is not a subtag separator
        "toolonglang, es;q=0.1",  # more than 8 letters
        "fr-, es;q=0.1",
        "f r, es;q=0.1",
        "fr;q=٠.٥, es;q=0.1",  # non-ASCII digits
        "ｆｒ, es;q=0.1",  # full-width letters
    ],
)
def test_negotiate_skips_malformed_entries(header: str) -> None:
    assert negotiate(header) == "es"


def test_negotiate_reads_at_most_1000_characters() -> None:
    filler = ",".join(["pt-BR;q=0.9"] * 90)  # 90 * 12 - 1 characters
    assert negotiate(filler + ",de;q=0.1") is None
    assert negotiate("de;q=0.1," + filler) == "de"
    assert negotiate("x" * 100_000) is None


def test_negotiate_honours_a_narrower_supported_set() -> None:
    assert negotiate("fr, de;q=0.5", supported=("en", "de")) == "de"
    assert negotiate("*", supported=("de", "en")) == "de"


_tags = st.sampled_from(
    ["en", "it", "de", "fr", "es", "pt", "it-CH", "EN-us", "fr-CA", "*", "zh-Hant-TW", "x", ""]
)
_weights = st.sampled_from(["", ";q=0", ";q=1", ";q=0.5", ";q=0.123", ";q=1.0", ";q=2", ";Q=0.9"])
_entries = st.tuples(_tags, _weights).map("".join)
_headers = st.lists(_entries, max_size=12).flatmap(
    lambda entries: st.sampled_from([",", ", ", " ,\t"]).map(lambda sep: sep.join(entries))
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=1500), _headers))
def test_negotiate_never_raises_and_answers_a_supported_language_or_none(header: str) -> None:
    assert negotiate(header) in (*SUPPORTED_LANGUAGES, None)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200), st.one_of(st.none(), st.text(max_size=50)))
def test_choose_language_always_answers_a_language(header: str, saved: str | None) -> None:
    assert choose_language(saved, header, "en") in SUPPORTED_LANGUAGES


# --- Precedence -----------------------------------------------------------------------------------


def test_a_saved_language_wins_over_the_header_and_the_default() -> None:
    assert choose_language("de", "fr, it;q=0.5", "es") == "de"


def test_the_header_wins_over_the_default_when_nothing_is_saved() -> None:
    assert choose_language(None, "fr, it;q=0.5", "es") == "fr"


def test_the_default_applies_when_neither_saved_nor_header_names_a_supported_language() -> None:
    assert choose_language(None, None, "it") == "it"
    assert choose_language(None, "pt-BR, ja", "it") == "it"


def test_a_saved_language_that_is_not_supported_gives_way_to_the_header() -> None:
    assert choose_language("pt", "es", "en") == "es"


def test_a_saved_regional_tag_counts_as_its_language() -> None:
    assert choose_language("fr-CA", "de", "en") == "fr"
