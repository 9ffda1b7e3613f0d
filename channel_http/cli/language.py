"""The language the command line speaks: the one the server speaks to the person.

A terminal's locale (``LC_ALL``, ``LC_MESSAGES``, ``LANG``, read as gettext reads them) goes
out as ``Accept-Language`` with every request, as a browser sends its own, so the server's
sentences come in it; ``GET /me`` answers with the language the server chose for the person
(the one they saved, else that header, else the server's default) in ``Content-Language``, and
the command's own lines are written in it, from the same catalogs (``core/locales``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import httpx

from core.people.i18n import SUPPORTED_LANGUAGES, Catalogs, Translation, Translator

__all__ = ["ENGLISH", "accept_language", "spoken", "translator_for"]

#: The command's words as written: English, the default.
ENGLISH: Final[Translator] = Translation(language="en")


def accept_language(environ: Mapping[str, str]) -> str | None:
    """The locale as a language tag (``it_IT.UTF-8`` → ``it-IT``); ``None`` for C or POSIX."""
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = environ.get(name, "").strip()
        if value:
            tag = value.split(".", 1)[0].split("@", 1)[0].replace("_", "-")
            return None if tag in ("C", "POSIX") else tag
    return None


def spoken(client: httpx.Client, fallback: str | None) -> Translator:
    """The translator for the language the server speaks to the caller, asked once.

    When the server can't say (unreachable, the token refused), the locale's language.
    """
    try:
        language = client.get("/me").headers.get("content-language") or fallback
    except httpx.HTTPError:
        language = fallback
    return translator_for(language)


def translator_for(language: str | None) -> Translator:
    """The catalogs' translator for ``language`` (``it``, ``it-IT``); English for any other."""
    primary = (language or "").split("-", 1)[0].strip().lower()
    if primary not in SUPPORTED_LANGUAGES or primary == "en":
        return ENGLISH
    return Catalogs.load(languages=[primary]).translator(primary)
