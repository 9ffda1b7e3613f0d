"""The space commands of ``mercury-http`` (#40) against a real server: who may do what is the
server's rule, seen from the command line as from the routes; confirmations asked on a real
terminal (pexpect), refused without one unless ``--yes``; ``--json`` for scripts."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pexpect
import pytest

from core.spaces.ids import parse_space_id
from tests.conftest import ALICE, TOKENS
from tests.support.server import RunningServer

pytestmark = [pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
SPACE = "slack:C1"
CONFIG = """
spaces:
  "slack:C1":
    admins: [static:alice]
    members: [static:bob]
    rate_limit: 7
"""
PEOPLE = [
    {"id": "alice", "displayName": "Alice", "roles": ["admin"], "identities": ["static:alice"]},
    {"id": "bob", "displayName": "Bob", "identities": ["static:bob", "slack:UBOB"]},
    {"id": "carol", "displayName": "Carol", "identities": ["static:carol"]},
]


@pytest.fixture
def server(make_server: Callable[..., RunningServer], tmp_path: Path) -> RunningServer:
    config = tmp_path / "mercury.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    tokens = {**TOKENS, "carol-token": {"id": "carol", "displayName": "Carol"}}
    running = make_server(
        None,
        MERCURY_CONFIG_FILE=str(config),
        AUTH_STATIC_TOKENS=json.dumps(tokens),
        DIRECTORY_STATIC_PEOPLE=json.dumps(PEOPLE),
    )
    stores = running.services.space_stores
    running.call(stores.spaces.open(parse_space_id(SPACE), title="#general"))
    return running


def env_of(tmp_path: Path, server: RunningServer, token: str) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "MERCURY_TOKEN": token,
        "MERCURY_SERVER": server.url,
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT)),
    }


Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(tmp_path: Path, server: RunningServer) -> Run:
    """``mercury-http ARGS`` as a script runs it (pipes, no terminal), as ``token``'s owner;
    ``lang`` is the terminal's locale (``LANG``)."""

    def run(
        *args: str,
        token: str = "alice-token",  # noqa: S107
        lang: str = "C.UTF-8",
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "channel_http", *args],
            cwd=ROOT,
            env={**env_of(tmp_path, server, token), "LANG": lang},
            input="",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return run


def test_preferences_over_the_command_line_with_the_rest_of_the_line_as_the_value(cli: Run) -> None:
    saved = cli("prefs", "set", SPACE, "tone", "short", "and", "friendly")
    assert saved.returncode == 0, saved.stderr
    assert saved.stdout.strip() == "Added tone = short and friendly"
    assert cli("prefs", "get", SPACE, "tone").stdout.strip() == "short and friendly"
    listed = cli("prefs", "list", SPACE, "--json")
    answer = json.loads(listed.stdout)
    assert [(p["key"], p["value"]) for p in answer["preferences"]] == [
        ("tone", "short and friendly")
    ]
    # Deleting asks first: without a terminal, only with --yes.
    unasked = cli("prefs", "delete", SPACE, "tone")
    assert unasked.returncode == 2 and "--yes" in unasked.stderr
    assert cli("prefs", "get", SPACE, "tone").returncode == 0
    deleted = cli("prefs", "delete", "--yes", SPACE, "tone")
    assert deleted.returncode == 0 and deleted.stdout.strip() == "Deleted tone."
    gone = cli("prefs", "get", SPACE, "tone")
    assert gone.returncode == 2 and gone.stderr.strip()


def test_the_permission_matrix_is_the_servers_admin_member_outsider(cli: Run) -> None:
    assert cli("prefs", "set", SPACE, "tone", "formal").returncode == 0
    # A member reads the preferences but can't change them or mute.
    assert cli("prefs", "list", SPACE, token="bob-token").returncode == 0
    refused = cli("prefs", "set", SPACE, "tone", "casual", token="bob-token")
    assert refused.returncode == 4
    assert refused.stderr.strip().endswith(".") and "Traceback" not in refused.stderr
    muting = cli("mute", "--yes", SPACE, "static:carol", "1h", token="bob-token")
    assert muting.returncode == 4
    # An outsider gets nothing of the space.
    outsider = cli("prefs", "list", SPACE, token="carol-token")
    assert outsider.returncode in (2, 4) and outsider.stdout == ""
    assert cli("prefs", "get", SPACE, "tone").stdout.strip() == "formal"


def test_a_mute_shows_the_reminder_then_needs_a_yes_on_the_terminal(
    tmp_path: Path, server: RunningServer, cli: Run
) -> None:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "channel_http", "mute", SPACE, "slack:UBOB", "1h", "--reason", "spam"],
        cwd=str(ROOT),
        env=env_of(tmp_path, server, "alice-token"),
        encoding="utf-8",
        timeout=60,
    )
    child.expect(r"Mute\? \[y/N\]")
    reminder = child.before
    assert "mute" in reminder.lower()  # the server's notice, shown before the question
    assert "confirm set to true" not in reminder  # the API's way to confirm: not this one's
    child.sendline("n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2
    assert cli("mutes", SPACE).stdout.strip() == "Nobody is muted in this space."

    child = pexpect.spawn(
        sys.executable,
        ["-m", "channel_http", "mute", SPACE, "slack:UBOB", "1h", "--reason", "spam"],
        cwd=str(ROOT),
        env=env_of(tmp_path, server, "alice-token"),
        encoding="utf-8",
        timeout=60,
    )
    child.expect(r"Mute\? \[y/N\]")
    child.sendline("y")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "Muted " in child.before
    # The time in this computer's zone, to the minute, not the server's ISO stamp.
    assert re.search(r"until \d{4}-\d\d-\d\d \d\d:\d\d \S+\.", child.before), child.before
    assert "+00:00" not in child.before
    listed = cli("mutes", SPACE, "--json")
    (mute,) = json.loads(listed.stdout)["mutes"]
    assert mute["person"] == "people:bob" and mute["reason"] == "spam"
    # Lifted under another of Bob's names.
    lifted = cli("unmute", SPACE, "static:bob")
    assert lifted.returncode == 0, lifted.stderr
    assert json.loads(cli("mutes", SPACE, "--json").stdout)["mutes"] == []


def test_a_mute_without_a_terminal_needs_yes_and_an_admin_cant_be_muted(cli: Run) -> None:
    unasked = cli("mute", SPACE, "static:bob", "10m")
    assert unasked.returncode == 2 and "--yes" in unasked.stderr
    assert json.loads(cli("mutes", SPACE, "--json").stdout)["mutes"] == []
    admin = cli("mute", "--yes", SPACE, "static:alice", "10m")
    assert admin.returncode == 4 and admin.stderr.strip()
    muted = cli("mute", "--yes", "--json", SPACE, "static:bob", "10m")
    assert muted.returncode == 0, muted.stderr
    assert json.loads(muted.stdout)["mute"]["person"] == "people:bob"


def test_spaces_list_show_and_delete_with_a_confirmation(cli: Run) -> None:
    listed = cli("spaces")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split("\t")[:2] == [SPACE, "admin"]
    assert json.loads(cli("spaces", "list", "--json").stdout)["spaces"][0]["role"] == "admin"
    assert cli("spaces", token="carol-token").stdout.strip() == "You take part in no space yet."
    refused = cli("spaces", "delete", SPACE, token="bob-token")
    assert refused.returncode == 2  # no terminal to ask on: nothing sent
    refused = cli("spaces", "delete", "--yes", SPACE, token="bob-token")
    assert refused.returncode == 4
    forgot = cli("spaces", "delete", "--yes", SPACE)
    assert forgot.returncode == 0 and forgot.stdout.strip() == f"Forgot the space {SPACE}."


def test_usage_and_connection_problems_are_one_sentence(
    tmp_path: Path, server: RunningServer
) -> None:
    env = env_of(tmp_path, server, "alice-token")
    env["MERCURY_SERVER"] = "http://127.0.0.1:9"
    unreachable = subprocess.run(
        [sys.executable, "-m", "channel_http", "spaces"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unreachable.returncode == 1 and "can't be reached" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr
    del env["MERCURY_TOKEN"]
    env["MERCURY_SERVER"] = server.url
    tokenless = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "channel_http", "mutes", SPACE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert tokenless.returncode == 2 and "No token" in tokenless.stderr


def test_pairing_requests_are_listed_approved_and_denied_by_an_approver_only(
    server: RunningServer, cli: Run
) -> None:
    pairing = server.services.space_stores.pairing
    asked = [
        server.call(pairing.ask("telegram", account, name=name, language="en", reach="{}"))
        for account, name in (("7", "Dora"), ("8", "Eve"))
    ]
    dora, eve = (a.request.code for a in asked if a.request is not None)
    assert cli("pairing", token="bob-token").returncode == 4  # no approver
    listed = cli("pairing", "list")
    assert listed.returncode == 0, listed.stderr
    lines = sorted(listed.stdout.splitlines())
    assert [line.split("\t")[:3] for line in lines] == sorted(
        [[dora, "telegram", "Dora (7)"], [eve, "telegram", "Eve (8)"]]
    )
    approved = cli("pairing", "approve", dora.lower(), "--json")
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["approved"] is True
    assert cli("pairing", "deny", eve).stdout.strip() == f"Denied {eve}."
    assert cli("pairing").stdout.strip() == "Nobody is waiting."
    again = cli("pairing", "approve", eve)
    assert again.returncode == 2 and again.stderr.strip()

    # An approved account is listed, and revoked by an approver only, once.
    admitted = cli("pairing", "admitted")
    assert admitted.returncode == 0, admitted.stderr
    assert admitted.stdout.split("\t")[:2] == ["telegram:7", "Dora"]
    assert cli("pairing", "revoke", "telegram:7", token="bob-token").returncode == 4
    revoked = cli("pairing", "revoke", "telegram:7")
    assert revoked.returncode == 0 and revoked.stdout.strip() == "Revoked telegram:7."
    assert not server.call(pairing.is_admitted("telegram:7"))
    assert cli("pairing", "admitted").stdout.strip() == "Nobody was let in."
    assert cli("pairing", "revoke", "telegram:7").returncode == 2


def test_settings_list_set_typed_as_the_setting_is_and_unset_back_to_the_file(cli: Run) -> None:
    listed = cli("settings", SPACE, "--json")
    assert listed.returncode == 0, listed.stderr
    settings = {s["key"]: s for s in json.loads(listed.stdout)["settings"]}
    assert (settings["rate_limit"]["value"], settings["rate_limit"]["source"]) == (7, "file")
    assert cli("settings", SPACE, "rate_limit").stdout.split("\t")[0] == "rate_limit = 7"
    # Words typed as the setting is: a number, a truth value; text stays text.
    assert cli("settings", SPACE, "rate_limit", "5").returncode == 0
    assert cli("settings", SPACE, "live_answers", "off").returncode == 0
    now = {s["key"]: s for s in json.loads(cli("settings", SPACE, "--json").stdout)["settings"]}
    assert (now["rate_limit"]["value"], now["rate_limit"]["source"]) == (5, "space")
    assert (now["live_answers"]["value"], now["live_answers"]["source"]) == (False, "space")
    # Refusals are the server's sentences; a member can read but not set.
    wrong = cli("settings", SPACE, "rate_limit", "5000")
    assert wrong.returncode == 2 and wrong.stderr.strip().endswith(".")
    unknown = cli("settings", SPACE, "colour", "blue")
    assert unknown.returncode == 2 and "rate_limit" in unknown.stderr
    assert cli("settings", SPACE, token="bob-token").returncode == 0
    assert cli("settings", SPACE, "rate_limit", "9", token="bob-token").returncode == 4
    unset = cli("settings", SPACE, "rate_limit", "--unset")
    assert unset.returncode == 0, unset.stderr
    assert unset.stdout.strip() == "rate_limit = 7\t(file)"
    # As the help writes it: --unset KEY.
    assert cli("settings", SPACE, "rate_limit", "6").returncode == 0
    unset = cli("settings", SPACE, "--unset", "rate_limit")
    assert unset.returncode == 0, unset.stderr
    assert unset.stdout.strip() == "rate_limit = 7\t(file)"


def test_spaces_show_names_the_members_with_their_roles(cli: Run) -> None:
    shown = cli("spaces", "show", SPACE)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"{SPACE}  #general"
    assert "your role: admin" in lines[1]
    members = {line.strip() for line in lines if line.startswith("  ")}
    assert "Alice (people:alice)\tadmin" in members
    assert "Bob (people:bob)\tmember" in members
    assert cli("spaces", "show", SPACE, token="carol-token").returncode in (2, 4)


def test_the_commands_speak_the_language_the_server_speaks_to_the_person(
    server: RunningServer, cli: Run
) -> None:
    italian = "it_IT.UTF-8"
    assert cli("mutes", SPACE, lang=italian).stdout.strip() == (
        "Nessuno è silenziato in questo spazio."
    )
    muted = cli("mute", "--yes", SPACE, "static:bob", "1h", lang=italian)
    assert muted.returncode == 0, muted.stderr
    assert re.search(r"^Non è ancora cambiato nulla\. ", muted.stdout, re.M)  # the server's notice
    assert re.search(r"^people:bob silenziato fino al \d{4}-\d\d-\d\d", muted.stdout, re.M)
    listed = cli("mutes", SPACE, lang=italian).stdout
    assert "\tfino al " in listed and "\tda people:alice" in listed, listed
    shown = cli("spaces", "show", SPACE, lang=italian).stdout.splitlines()
    assert "piattaforma: slack, il tuo ruolo: admin" in shown
    assert "2 membri:" in shown and "  Bob (people:bob)\tmembro" in shown
    refused = cli("prefs", "delete", SPACE, "tone", lang=italian)
    assert refused.returncode == 2
    assert "Non c'è un terminale su cui chiedere: aggiungi --yes" in refused.stderr
    # --json stays the server's answer, whatever the language.
    english = json.loads(cli("mutes", SPACE, "--json").stdout)
    assert json.loads(cli("mutes", SPACE, "--json", lang=italian).stdout) == english

    # A language the person saved wins over the terminal's, as on the server.
    saved = httpx.patch(server.url + "/me", headers=ALICE, json={"language": "de"})
    assert saved.status_code == 200
    try:
        assert cli("pairing", lang=italian).stdout.strip() == "Niemand wartet."
        unmuted = cli("unmute", SPACE, "static:bob", lang=italian)
        assert unmuted.stdout.strip() == "static:bob ist nicht mehr stummgeschaltet."
        usage = cli("usage", lang=italian).stdout.splitlines()
        assert usage[0].endswith(" (UTC)") and " bis " in usage[0]
        assert usage[-1] == "gesamt\t0 Eingabe, 0 Ausgabe, 0 im Cache, 0 Aufrufe"
        setting = cli("settings", SPACE, "rate_limit", lang=italian).stdout.strip()
        assert setting == "rate_limit = 7\t(Datei)"
        # The command's own refusals too.
        unknown = cli("settings", SPACE, "colour", "blue", lang=italian)
        assert unknown.returncode == 2
        assert "Es gibt keine Einstellung colour; die Einstellungen: " in unknown.stderr
    finally:
        httpx.patch(server.url + "/me", headers=ALICE, json={"language": None})


def test_every_line_the_space_commands_write_goes_through_the_catalogs() -> None:
    """A line of words written without the catalogs stays English in every language: each
    text the commands say, ask or refuse with is a gettext call (data and punctuation aside)."""
    source = (ROOT / "channel_http" / "cli" / "admin.py").read_text(encoding="utf-8")
    untranslated: list[str] = []

    def words_outside_the_catalogs(node: ast.AST) -> None:
        if isinstance(node, ast.Call | ast.Subscript):
            return  # a gettext call, or data: a value looked up, a helper's own lines
        if isinstance(node, ast.Dict):  # a translation's placeholders: their values alone
            for value in node.values:
                words_outside_the_catalogs(value)
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.search(r"[A-Za-z]{2,}", node.value):
                untranslated.append(f"line {node.lineno}: {node.value!r}")
            return
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FormattedValue | ast.expr_context):
                words_outside_the_catalogs(child)
            elif isinstance(child, ast.FormattedValue):
                words_outside_the_catalogs(child.value)

    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
        if name in ("say", "confirm", "ChatProblem", "print") and node.args:
            words_outside_the_catalogs(node.args[0])
    for function in ast.walk(ast.parse(source)):
        if isinstance(function, ast.FunctionDef) and function.name in ("_setting_line", "_tokens"):
            for returned in ast.walk(function):
                if isinstance(returned, ast.Return) and returned.value is not None:
                    words_outside_the_catalogs(returned.value)
    assert untranslated == []
