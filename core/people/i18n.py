"""Translation of person-facing texts: catalogs, translators and language negotiation.

Every sentence a person reads goes through a `Translator` with the gettext API::

    translator.gettext("Linked: this account is now %(name)s.") % {"name": name}
    translator.ngettext("… %(steps)d step …", "… %(steps)d steps …", steps) % {"steps": steps}

English is the source language: a msgid is the English text, shown as is. `Catalogs.load` reads the
`.po` files under `core/locales/` once at start-up (no compiled `.mo` files, so a fresh checkout
works); after that a lookup is a dictionary access. Texts defined at import time are marked
with `N_` (or `N_plural`) so extraction finds them, and translated later.

`negotiate` picks a language from an Accept-Language value; `choose_language` applies the
precedence saved choice > that value > the app's default.

Exceptions::

    CatalogError            a catalog file is missing or unreadable (a deployment mistake)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, NamedTuple, Protocol

from babel import Locale
from babel.messages.pofile import read_po
from babel.plural import PluralRule

__all__ = [
    "DEFAULT_LANGUAGE",
    "LOCALES_DIRECTORY",
    "N_",
    "SUPPORTED_LANGUAGES",
    "CatalogError",
    "Catalogs",
    "N_plural",
    "PluralText",
    "Translation",
    "Translator",
    "choose_language",
    "negotiate",
    "plural_categories",
    "primary_language",
]

SUPPORTED_LANGUAGES: Final = ("en", "it", "de", "fr", "es")
DEFAULT_LANGUAGE: Final = "en"
# The catalogs stay at core/locales/: they hold the texts of every package.
LOCALES_DIRECTORY: Final = Path(__file__).parent.parent / "locales"
DOMAIN: Final = "messages"

# Longer Accept-Language values are cut (at the last whole entry) before parsing, so a hostile
# header costs bounded work. Browsers send well under 200 characters.
MAX_ACCEPT_LANGUAGE_CHARS: Final = 1000

# The order gettext gives plural categories; babel's `get_plural` table and `to_gettext` index
# msgstr[i] in this order, keeping only the categories a language uses ("other" always last).
_PLURAL_CATEGORY_ORDER: Final = ("zero", "one", "two", "few", "many", "other")


class CatalogError(Exception):
    """A translation catalog is missing or can't be read."""


class Translator(Protocol):
    """Translates English msgids into one language, with gettext's two calls."""

    @property
    def language(self) -> str:
        """The primary language subtag this translator speaks, such as "it"."""
        ...

    def gettext(self, message: str) -> str:
        """The translation of `message`, or `message` itself when there is none."""
        ...

    def ngettext(self, singular: str, plural: str, n: int) -> str:
        """The translation of the form of `singular`/`plural` that fits the count `n`."""
        ...


class PluralText(NamedTuple):
    """A plural msgid pair declared at import time: `translator.ngettext(*text, n)`."""

    singular: str
    plural: str


def N_(message: str) -> str:  # noqa: N802 - gettext's conventional no-op marker name
    """Mark `message` for extraction without translating it; translate it later."""
    return message


def N_plural(singular: str, plural: str) -> PluralText:  # noqa: N802 - companion of N_
    """Mark a plural msgid pair for extraction without translating it."""
    return PluralText(singular, plural)


def _english_form(singular: str, plural: str, n: int) -> str:
    return singular if n == 1 else plural


@dataclass(frozen=True, slots=True)
class Translation:
    """One language's translations, read from its catalog; implements `Translator`.

    Missing, empty and fuzzy entries fall back to the English msgid, as gettext does; so
    `Translation(language="en")` is the untranslated English translator (handy in tests, where
    `gettext.NullTranslations` lacks `language`). The English catalog normally leaves msgstr
    empty; one filled in there rewords the English text without touching the code.
    """

    language: str
    messages: Mapping[str, str] = field(default_factory=dict)
    plurals: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    plural_rule: PluralRule | None = None
    categories: tuple[str, ...] = ("one", "other")

    def gettext(self, message: str) -> str:
        return self.messages.get(message) or message

    def ngettext(self, singular: str, plural: str, n: int) -> str:
        forms = self.plurals.get(singular)
        if forms is None or self.plural_rule is None:
            return _english_form(singular, plural, n)
        index = self.categories.index(self.plural_rule(n))
        if index < len(forms) and forms[index]:
            return forms[index]
        # A form left empty falls back to English rather than showing nothing.
        return _english_form(singular, plural, n)


def plural_categories(rule: PluralRule) -> tuple[str, ...]:
    """The categories of `rule` in msgstr[i] order, as gettext's Plural-Forms numbers them."""
    return tuple(tag for tag in _PLURAL_CATEGORY_ORDER if tag in rule.tags or tag == "other")


#: Catalogs already parsed in this process, by language, path, and the file's size and time:
#: every server built in one process (the tests build hundreds) reads a file once, and a file
#: changed on disk is read again. Parsing the five catalogs takes about half a second.
_PARSED: dict[tuple[str, Path, int, int], Translation] = {}


def _read_translation(language: str, path: Path) -> Translation:
    try:
        stat = path.stat()
    except OSError:
        stat = None
    key = (language, path, stat.st_size, stat.st_mtime_ns) if stat is not None else None
    if key is not None and key in _PARSED:
        return _PARSED[key]
    translation = _parse_translation(language, path)
    if key is not None:
        _PARSED[key] = translation
    return translation


def _parse_translation(language: str, path: Path) -> Translation:
    try:
        with path.open("rb") as file:
            catalog = read_po(file, locale=language, domain=DOMAIN)
    except FileNotFoundError:
        raise CatalogError(
            f"The {language!r} catalog {path} is missing; run scripts/catalogs update to "
            "create it, then translate it."
        ) from None
    except (OSError, ValueError) as error:
        raise CatalogError(
            f"The {language!r} catalog {path} can't be read ({error}); fix the file or "
            "regenerate it with scripts/catalogs update."
        ) from error
    rule = Locale.parse(language).plural_form
    messages: dict[str, str] = {}
    plurals: dict[str, tuple[str, ...]] = {}
    for message in catalog:
        if not message.id or message.fuzzy:
            continue  # the header, and guesses a translator hasn't reviewed
        if isinstance(message.id, str):
            if isinstance(message.string, str) and message.string:
                messages[message.id] = message.string
        elif isinstance(message.string, tuple | list) and any(message.string):
            plurals[message.id[0]] = tuple(form or "" for form in message.string)
    return Translation(
        language=language,
        messages=messages,
        plurals=plurals,
        plural_rule=rule,
        categories=plural_categories(rule),
    )


@dataclass(frozen=True, slots=True)
class Catalogs:
    """The translations of every supported language, loaded once at start-up."""

    translations: Mapping[str, Translation]

    @classmethod
    def load(
        cls,
        directory: Path | None = None,
        languages: Iterable[str] = SUPPORTED_LANGUAGES,
    ) -> Catalogs:
        """Read `<directory>/<lang>/LC_MESSAGES/messages.po` for each language.

        Blocking file I/O: call it while building the app, not on the event loop.
        """
        root = LOCALES_DIRECTORY if directory is None else directory
        translations = {
            language: _read_translation(language, root / language / "LC_MESSAGES" / "messages.po")
            for language in languages
        }
        translations.setdefault(DEFAULT_LANGUAGE, Translation(language=DEFAULT_LANGUAGE))
        return cls(translations=translations)

    @property
    def languages(self) -> tuple[str, ...]:
        """The languages these catalogs can translate into."""
        return tuple(self.translations)

    def translator(self, language: str | None) -> Translator:
        """The translator for `language` ("it", "it-CH", "IT"), English when it isn't loaded."""
        if language is not None:
            found = self.translations.get(language)
            if found is not None:
                return found
            primary = primary_language(language)
            if primary is not None and primary in self.translations:
                return self.translations[primary]
        return self.translations[DEFAULT_LANGUAGE]


# RFC 9110 §12.5.4: language-range (RFC 4647 §2.1) [ OWS ";" OWS "q=" qvalue ].
_LANGUAGE_RANGE: Final = re.compile(r"(?:[a-z]{1,8}(?:-[a-z0-9]{1,8})*|\*)", re.ASCII | re.I)
_QVALUE: Final = re.compile(r"0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?", re.ASCII)
_OWS: Final = " \t"


class _Preference(NamedTuple):
    language: str  # lower-case primary subtag, or "*"
    bare: bool  # the range has no subtags ("it", not "it-CH")
    quality: int  # thousandths: 0..1000
    position: int


def _quality(parameters: list[str]) -> int | None:
    """The q-value of an entry's parameters in thousandths; None when they are malformed."""
    if not parameters:
        return 1000
    if len(parameters) != 1:
        return None
    name, equals, value = parameters[0].strip(_OWS).partition("=")
    value = value.strip(_OWS)
    if not equals or name.strip(_OWS).lower() != "q" or not _QVALUE.fullmatch(value):
        return None
    whole, _, fraction = value.partition(".")
    return int(whole) * 1000 + int((fraction + "000")[:3])


def _preferences(accept_language: str) -> list[_Preference]:
    text = accept_language
    if len(text) > MAX_ACCEPT_LANGUAGE_CHARS:
        # Drop the entry the cut went through, so "fr-FR" never reads as "fr-F".
        text = text[:MAX_ACCEPT_LANGUAGE_CHARS].rpartition(",")[0]
    preferences: list[_Preference] = []
    for position, entry in enumerate(text.split(",")):
        language_range, *parameters = entry.split(";")
        language_range = language_range.strip(_OWS)
        if not _LANGUAGE_RANGE.fullmatch(language_range):
            continue  # empty list elements and garbage alike
        quality = _quality(parameters)
        if quality is None:
            continue
        primary, dash, _ = language_range.partition("-")
        preferences.append(_Preference(primary.lower(), not dash, quality, position))
    return preferences


def negotiate(
    accept_language: str | None, supported: Iterable[str] = SUPPORTED_LANGUAGES
) -> str | None:
    """The supported language an Accept-Language value prefers most, or None.

    Parsed per RFC 9110 §12.5.4: q-values (q=0 means "not this one"), `*` for any language
    not named otherwise, region subtags reduced to their language (`it-CH` is `it`), case
    ignored, malformed entries skipped. Equal q-values keep the header's order; a named
    language beats `*` at the same q. Never raises, whatever the string.
    """
    if not accept_language:
        return None
    choices = tuple(supported)
    preferences = _preferences(accept_language)
    refused = {p.language for p in preferences if p.quality == 0 and p.bare}
    named = {p.language for p in preferences if p.language != "*"}
    wildcard = max(
        (p for p in preferences if p.language == "*"),
        key=lambda p: (p.quality, -p.position),
        default=None,
    )
    best: tuple[int, int, int, int] | None = None
    chosen: str | None = None
    for rank, language in enumerate(choices):
        if language in refused:
            continue
        matches = [p for p in preferences if p.language == language and p.quality > 0]
        if matches:
            top = max(matches, key=lambda p: (p.quality, -p.position))
            key = (-top.quality, 0, top.position, rank)
        elif wildcard is not None and wildcard.quality > 0 and language not in named:
            key = (-wildcard.quality, 1, wildcard.position, rank)
        else:
            continue
        if best is None or key < best:
            best, chosen = key, language
    return chosen


def primary_language(
    language: str | None, supported: Iterable[str] = SUPPORTED_LANGUAGES
) -> str | None:
    """The supported language a tag such as "it", "IT" or "it-CH" names, or None."""
    if not language:
        return None
    primary = language.strip().partition("-")[0].partition("_")[0]
    if not primary.isascii():
        return None
    primary = primary.lower()
    return primary if primary in tuple(supported) else None


def choose_language(
    saved: str | None,
    accept_language: str | None,
    default: str,
    supported: Iterable[str] = SUPPORTED_LANGUAGES,
) -> str:
    """The person's language: the one they saved, else the header's choice, else `default`."""
    choices = tuple(supported)
    return primary_language(saved, choices) or negotiate(accept_language, choices) or default
