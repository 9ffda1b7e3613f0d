"""The language the command line speaks: the one the server speaks to the person.

A terminal's locale (``LC_ALL``, ``LC_MESSAGES``, ``LANG``, read as gettext reads them) goes
out as ``Accept-Language`` with every request, as a browser sends its own, so the server's
sentences come in it; ``GET /me`` answers with the language the server chose for the person
(the one they saved, else that header, else the server's default) in ``Content-Language``, and
the command's own lines are written in it, from the same catalogs (``core/locales``).

``--help`` and the usage errors come before any server answers, so they speak the locale's
language: the parser's texts are written through its translator, and argparse's own words
(``usage:``, ``options``, "the following arguments are required") through
:func:`argparse_speaking`, from the same catalogs.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Mapping
from typing import Final

import httpx

from core.people.i18n import N_, SUPPORTED_LANGUAGES, Catalogs, N_plural, Translation, Translator

__all__ = [
    "ARGPARSE_WORDS",
    "ENGLISH",
    "accept_language",
    "argparse_speaking",
    "spoken",
    "translator_for",
]

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


#: The texts argparse itself writes that a person of ``mercury-http`` can meet, as argparse
#: spells them (its msgids): marked here so the catalogs hold their translations.
ARGPARSE_WORDS: Final = (
    # Shown: before the command line's synopsis in --help and usage errors (trailing space kept).
    N_("usage: "),
    # Shown: heading of the positional arguments in the command line's --help.
    N_("positional arguments"),
    # Shown: heading of the options in the command line's --help.
    N_("options"),
    N_("show this help message and exit"),
    # Shown: a usage error; %(prog)s is the command (mercury-http chat), %(message)s the problem.
    N_("%(prog)s: error: %(message)s\n"),
    # Shown: a usage error about one argument; %(argument_name)s is the option, such as --port.
    N_("argument %(argument_name)s: %(message)s"),
    N_("unrecognized arguments: %s"),
    N_("the following arguments are required: %s"),
    # Shown: %(type)s is a Python type name, such as int.
    N_("invalid %(type)s value: %(value)r"),
    N_("invalid choice: %(value)r (choose from %(choices)s)"),
    N_("unknown parser %(parser_name)r (choices: %(choices)s)"),
    N_("ambiguous option: %(option)s could match %(matches)s"),
    N_("ignored explicit argument %r"),
    N_("expected one argument"),
    N_("expected at most one argument"),
    N_("expected at least one argument"),
    N_plural("expected %s argument", "expected %s arguments"),
)


@contextlib.contextmanager
def argparse_speaking(tr: Translator) -> Iterator[None]:
    """argparse's own words in ``tr``'s language while parsers are built and parse.

    argparse looks its words up when it writes them, through the ``_`` and ``ngettext`` its
    module took from :mod:`gettext`; those two answer from our catalogs for the time being,
    then get their own back. gettext's ``textdomain``/``bindtextdomain`` would need compiled
    ``.mo`` files (the catalogs are read as ``.po``) and change the domain of every gettext
    user in the process; passing translated texts to argparse reaches ``usage:`` and the
    headings but not the error messages, which have no hook. A word argparse adds in a later
    Python, or one missing here, stays English; a Python whose argparse no longer has those
    names keeps all of them English.
    """
    names = vars(argparse)
    if not (callable(names.get("_")) and callable(names.get("ngettext"))):
        yield
        return
    saved = names["_"], names["ngettext"]
    names["_"], names["ngettext"] = tr.gettext, tr.ngettext
    try:
        yield
    finally:
        names["_"], names["ngettext"] = saved
