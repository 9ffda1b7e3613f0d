"""``mercury-http --help`` and its usage errors in the terminal's language: the parser's own
texts and argparse's words (``usage:``, ``options``, its errors) come from the catalogs, in
the language the locale names, before any server is asked."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_file

from channel_http.cli.command import main, parser
from channel_http.cli.language import ARGPARSE_WORDS, ENGLISH, argparse_speaking, translator_for
from core.config.settings import SETTINGS
from core.people.catalogs import extract
from core.people.i18n import Translator

pytestmark = [pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parents[2]


def run(locale: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``mercury-http ARGS`` with no server anywhere, the terminal's locale as given."""
    return subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "channel_http", *args],
        cwd=ROOT,
        env={
            "PATH": os.environ["PATH"],
            "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT)),
            "MERCURY_CONFIG_FILE": "",
            **locale,
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


ENGLISH_WORDS = ("usage:", "options:", "show this help message and exit", "positional arguments")


@pytest.mark.parametrize(
    ("locale", "top", "subcommand", "sub"),
    [
        (
            {"LANG": "it_IT.UTF-8"},
            ["uso: mercury-http", "opzioni:", "mostra questo aiuto ed esce", "avvia il server"],
            "mute",
            [
                "uso: mercury-http mute",
                "argomenti posizionali:",
                "Silenzia PERSON in SPACE per DURATION",
                "il motivo, conservato con il silenziamento",
                "Codici di uscita",
            ],
        ),
        (
            # LC_ALL wins over LANG, as gettext reads them.
            {"LANG": "it_IT.UTF-8", "LC_ALL": "de_DE.UTF-8"},
            ["Aufruf: mercury-http", "Optionen:", "diese Hilfe anzeigen und beenden"],
            "chat",
            [
                "Aufruf: mercury-http chat",
                "Schickt eine Nachricht an einen laufenden Mercury-HTTP-Server",
                "die fortzusetzende Unterhaltung",
                "der Server (Standard http://127.0.0.1:4100)",
                "Exit-Status: 0 beantwortet",
            ],
        ),
    ],
    ids=["italian", "german"],
)
def test_help_and_a_subcommands_help_speak_the_terminals_language(
    locale: dict[str, str], top: list[str], subcommand: str, sub: list[str]
) -> None:
    for args, expected in (((("--help",)), top), ((subcommand, "--help"), sub)):
        result = run(locale, *args)
        assert result.returncode == 0, result.stderr
        for text in expected:
            assert text in result.stdout, (text, result.stdout)
        for word in ENGLISH_WORDS:
            assert word not in result.stdout, (word, result.stdout)
        # Option names and identifiers stay as typed.
        assert "--help" in result.stdout


def test_serve_help_lists_the_settings_in_the_terminals_language() -> None:
    """The settings list at the end of ``serve --help`` speaks Italian too; the names of the
    variables, the values and the units stay as typed."""
    result = run({"LANG": "it_IT.UTF-8"}, "serve", "--help")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())  # the list is wrapped to the terminal's width
    for text in (
        "Impostazioni (variabili d'ambiente; ognuna che non sia un segreto si può impostare "
        "anche in mercury.yaml",
        "HTTP_SURFACE_HOST L'indirizzo su cui restare in ascolto. (predefinito: 127.0.0.1)",
        "HTTP_SURFACE_PORT La porta; 0 ne sceglie una libera. (predefinito: 4100)",
        "OPENAI_MODEL Il modello di chat, come lo chiama il server; obbligatorio con "
        "MERCURY_MODEL_PROVIDER=openai. (predefinito: non impostato)",
        "SLACK_BOT_TOKEN Il token del bot dell'app Slack (xoxb-…). (predefinito: non impostato) "
        "Segreto.",
    ):
        assert text in said, (text, result.stdout)
    for english in ("The address to listen on.", "(default:", "Secret.", "Settings ("):
        assert english not in said, (english, result.stdout)
    assert max(len(line) for line in result.stdout.splitlines()) <= 100


def test_every_settings_text_of_serve_help_is_in_the_catalogs() -> None:
    """Each setting's meaning and worded default is a msgid the catalogs' check covers: one
    left unmarked, or untranslated in a language, fails scripts/check."""
    extracted = {message.id for message in extract() if isinstance(message.id, str)}
    for setting in SETTINGS:
        assert setting.doc in extracted, setting.path
        assert setting.default_doc is None or setting.default_doc in extracted, setting.path


def test_a_usage_error_in_italian_names_what_is_missing_in_italian() -> None:
    missing = run({"LANG": "it_IT.UTF-8"}, "mute", "slack:C1")
    assert missing.returncode == 2
    assert missing.stdout == ""
    assert missing.stderr.startswith("uso: mercury-http mute ")
    assert (
        "mercury-http mute: errore: mancano gli argomenti obbligatori: person, duration\n"
    ) in missing.stderr
    unknown = run({"LANG": "it_IT.UTF-8"}, "spaces", "list", "--colour")
    assert unknown.returncode == 2
    assert "mercury-http: errore: argomenti non riconosciuti: --colour\n" in unknown.stderr
    not_a_number = run({"LANG": "it_IT.UTF-8"}, "serve", "--port", "abc")
    assert "serve: errore: argomento --port: valore int non valido: 'abc'" in not_a_number.stderr
    wrong = run({"LANG": "it_IT.UTF-8"}, "usage", "--period", "year")
    assert "errore: argomento --period: scelta non valida: 'year' (scegli tra" in wrong.stderr


def test_a_c_locale_or_none_keeps_the_english_words() -> None:
    for locale in ({"LANG": "C.UTF-8"}, {}):
        result = run(locale, "spaces", "--help")
        assert result.returncode == 0
        assert result.stdout.startswith("usage: mercury-http spaces ")
        assert "options:" in result.stdout
        assert "Without arguments, the spaces you take part in with your role." in result.stdout


def test_argparse_gets_its_own_words_back_after_parsing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LC_ALL", "it_IT.UTF-8")
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert "uso: mercury-http" in capsys.readouterr().out
    other = argparse.ArgumentParser(prog="other")
    assert other.format_help().startswith("usage: other")
    assert "show this help message and exit" in other.format_help()


class Recording:
    """A translator that notes every msgid it is asked for."""

    def __init__(self, inner: Translator) -> None:
        self.inner = inner
        self.asked: set[str] = set()

    @property
    def language(self) -> str:
        return self.inner.language

    def gettext(self, message: str) -> str:
        self.asked.add(message)
        return self.inner.gettext(message)

    def ngettext(self, singular: str, plural: str, n: int) -> str:
        self.asked.add(singular)
        return self.inner.ngettext(singular, plural, n)


def texts(top: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """Every description, epilog and help text of ``top`` and its sub-commands, each with
    where it is."""
    pending = [(top.prog, top)]
    while pending:
        where, current = pending.pop()
        yield f"{where} description", current.description or ""
        yield f"{where} epilog", current.epilog or ""
        for action in current._actions:
            if action.help not in (None, argparse.SUPPRESS):
                yield f"{where} {action.dest}", str(action.help)
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    yield f"{where} {choice.dest}", str(choice.help)
                pending += [(sub.prog, sub) for sub in action.choices.values()]


def test_every_text_of_every_parser_is_translated_and_comes_from_the_catalogs() -> None:
    """A help text written without the catalogs, or one they lack in Italian, fails here: it
    reads the same in both parsers. Every msgid asked is one the catalogs' check covers."""
    english = dict(texts(parser(ENGLISH)))
    recording = Recording(translator_for("it"))
    with argparse_speaking(recording):
        italian = dict(texts(parser(recording)))
    assert english.keys() == italian.keys()
    assert len(english) > 100
    for where, text in english.items():
        if text:
            assert italian[where] != text, f"{where}: {text!r} is not translated"
    extracted = {message.id for message in extract() if message.id}
    keys = {key if isinstance(key, str) else key[0] for key in extracted}
    assert recording.asked - keys == set()
    assert {"options", "show this help message and exit", "run the server"} <= recording.asked


def test_the_argparse_words_are_spelt_as_argparse_spells_them() -> None:
    """A word argparse rewords in a later Python would stay English: this says which."""
    spelt: set[str] = set()
    for _line, message, _comments, _context in extract_from_file(
        "python", argparse.__file__, keywords={"_": None, "ngettext": (1, 2)}
    ):
        first = message if isinstance(message, str) else next(iter(message), None)
        if isinstance(first, str):  # ngettext's pair: the singular
            spelt.add(first)
    ours = {word if isinstance(word, str) else word[0] for word in ARGPARSE_WORDS}
    assert ours - spelt == set()
