"""A named person's own token allowance, on a real server: the file's ``usage.people`` and an
administrator's runtime value replace everyone's allowance for that person only; a member
may neither read nor set one; the admin route and ``mercury-http usage`` list them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.channel_http.test_usage import PEOPLE, SPACE_CONFIG, chat, said_in
from tests.conftest import ALICE, BOB
from tests.support.contract import check_response
from tests.support.ollama_standin import OllamaStandIn
from tests.support.server import RunningServer

pytestmark = [pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]
ALLOWANCES = "/usage/allowances"


def start(
    make_server: Callable[..., RunningServer], tmp_path: Path, extra: str = "", **env: str
) -> RunningServer:
    config = tmp_path / "mercury.yaml"
    config.write_text(SPACE_CONFIG + extra, encoding="utf-8")
    return make_server(
        DIRECTORY_STATIC_PEOPLE=json.dumps(PEOPLE), MERCURY_CONFIG_FILE=str(config), **env
    )


def call(
    server: RunningServer, method: str, path: str, headers: dict[str, str], **body: object
) -> httpx.Response:
    response = httpx.request(
        method, server.url + path, json=body or None, headers=headers, timeout=10
    )
    check_response(response)
    return response


def test_the_file_s_own_allowance_replaces_everyone_s_for_that_person_only(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, tmp_path: Path
) -> None:
    server = start(
        make_server,
        tmp_path,
        "usage:\n  people:\n    people:bob: {day: 1000000}\n",
        MERCURY_USAGE_PERSON_DAY="5",
    )
    # Everyone may use 5 tokens a day; one turn uses more, so a second one is refused...
    assert chat(server, {"text": "hello"}).status_code == 200
    assert chat(server, {"text": "again"}).status_code == 429
    # ...but Bob has his own million: his second and third turns run.
    for text in ("hello", "again", "and again"):
        assert chat(server, {"text": text}, BOB).status_code == 200
    [own] = call(server, "GET", ALLOWANCES, ALICE).json()["allowances"]
    assert own == {
        "person": {"id": "people:bob", "name": "Bob B."},
        "window": "day",
        "tokens": 1_000_000,
        "source": "file",
    }


def test_an_admin_gives_one_person_an_allowance_at_runtime_and_a_member_may_not(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, tmp_path: Path
) -> None:
    server = start(make_server, tmp_path)  # no allowance for anyone
    bob_day = f"{ALLOWANCES}/people:bob/day"
    refused = call(server, "PUT", bob_day, BOB, value=5)
    assert refused.status_code == 403
    assert "Only an administrator" in refused.json()["error"]
    assert call(server, "GET", ALLOWANCES, BOB).status_code == 403
    saved = call(server, "PUT", bob_day, ALICE, value=5)
    assert saved.status_code == 200, saved.text
    assert saved.json()["allowance"] == {
        "person": {"id": "people:bob", "name": None},  # not seen yet under a name
        "window": "day",
        "tokens": 5,
        "source": "person",
    }
    assert chat(server, {"text": "hello"}, BOB).status_code == 200  # nothing used yet
    past = chat(server, {"text": "again"}, BOB)
    assert past.status_code == 429
    assert "You have used your token allowance for today" in past.json()["error"]
    # Bob's only: Alice, and Bob's allowance's other window, are untouched.
    for text in ("hello", "again"):
        assert chat(server, {"text": text}).status_code == 200
    [listed] = call(server, "GET", ALLOWANCES, ALICE).json()["allowances"]
    assert listed["person"] == {"id": "people:bob", "name": "Bob B."}  # seen by now
    assert (listed["window"], listed["tokens"], listed["source"]) == ("day", 5, "person")

    wrong = call(server, "PUT", f"{ALLOWANCES}/people:bob/week", ALICE, value=5)
    assert (
        wrong.status_code == 400 and '"window" must be one of day, month' in wrong.json()["error"]
    )
    negative = call(server, "PUT", bob_day, ALICE, value=-1)
    assert negative.status_code == 400 and "whole number from 0" in negative.json()["error"]
    nobody = call(server, "PUT", f"{ALLOWANCES}/bob/day", ALICE, value=5)
    assert nobody.status_code == 400 and "people:alice" in nobody.json()["error"]

    listing = cli(server, tmp_path, "--allowances", token="alice-token")
    assert listing.returncode == 0, listing.stderr
    assert "Bob B. (people:bob)\tday\t5 tokens\t(person)" in listing.stdout
    assert cli(server, tmp_path, "--allowances", token="bob-token").returncode == 4
    dropped = cli(server, tmp_path, "--drop-allowance", "people:bob", "day", token="alice-token")
    assert dropped.returncode == 0, dropped.stderr
    assert "everyone's allowance" in dropped.stdout
    assert chat(server, {"text": "free again"}, BOB).status_code == 200


def cli(
    server: RunningServer, tmp_path: Path, *args: str, token: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "channel_http", "usage", *args],
        cwd=ROOT,
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path / "home"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "MERCURY_TOKEN": token,
            "MERCURY_SERVER": server.url,
            "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT)),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_one_s_own_allowance_replaces_a_space_s_person_allowance_in_that_space_too(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, tmp_path: Path
) -> None:
    server = start(make_server, tmp_path)
    space = call(server, "PUT", "/spaces/slack:C1/settings/budget.person_day", ALICE, value=5)
    assert space.status_code == 200, space.text
    assert (
        call(server, "PUT", f"{ALLOWANCES}/people:dan/day", ALICE, value=10**6).status_code == 200
    )
    for text in ("first", "second", "third"):  # Dan's own million, in the space too
        assert chat(server, said_in("slack:C1", text)).status_code == 200
    # Erin has only the space's 5 tokens there.
    assert chat(server, said_in("slack:C1", "one", caller="slack:UERIN")).status_code == 200
    assert chat(server, said_in("slack:C1", "two", caller="slack:UERIN")).status_code == 429
