"""Wiki routes, /me, languages, time zones, opening turns, admission and account linking."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import ALICE, BOB, TOKENS
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.support.sse import Received, turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def post_turn(
    server: RunningServer, body: dict[str, Any], headers: dict[str, str]
) -> Received:
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            return await turn(client, body, headers)


def write_note(server: RunningServer, person_key: str, name: str, text: str) -> None:
    server.call(server.services.vault.write_note(person_key, f"personal/notes/{name}", text))


# ---------------------------------------------------------------------- wiki


def test_the_wiki_routes_show_each_caller_only_the_shared_notes_and_their_own(
    server: RunningServer,
) -> None:
    write_note(server, "static:alice", "secret.md", "alice's pomegranate")
    curated = server.services.settings.wiki.vault_path / "curated" / "team.md"
    curated.write_text("Team pomegranate rules\n")
    alice = httpx.get(server.url + "/wiki/list", headers=ALICE).json()["files"]
    bob = httpx.get(server.url + "/wiki/list", headers=BOB).json()["files"]
    assert alice == ["curated/team.md", "personal/notes/secret.md"]
    assert bob == ["curated/team.md"]
    read = httpx.get(
        server.url + "/wiki/read", headers=ALICE, params={"path": "personal/notes/secret.md"}
    )
    assert read.json() == {"ok": True, "content": "alice's pomegranate"}
    as_bob = httpx.get(
        server.url + "/wiki/read", headers=BOB, params={"path": "personal/notes/secret.md"}
    )
    assert as_bob.status_code == 404
    assert as_bob.json() == {"ok": False, "error": "Not found."}
    grep_bob = httpx.get(server.url + "/wiki/grep", headers=BOB, params={"pattern": "POMEGRANATE"})
    assert grep_bob.json()["matches"] == [
        {"path": "curated/team.md", "line": 1, "text": "Team pomegranate rules"}
    ]
    grep_alice = httpx.get(
        server.url + "/wiki/grep", headers=ALICE, params={"pattern": "pomegranate"}
    )
    assert {m["path"] for m in grep_alice.json()["matches"]} == {
        "curated/team.md",
        "personal/notes/secret.md",
    }


@pytest.mark.parametrize(
    "path",
    [
        "../users/static%3Aalice/notes/secret.md",
        "personal/../../users/static%3Aalice/notes/secret.md",
        "/etc/passwd",
        "curated/%2e%2e/x.md",
        "personal\\notes\\secret.md",
        "personal/notes/secret.md\x00.md",
        "users/static%3Abob/notes/secret.md",
        "personal/notes/../../../../etc/hosts",
    ],
)
def test_paths_escaping_the_callers_view_read_as_missing(server: RunningServer, path: str) -> None:
    write_note(server, "static:alice", "secret.md", "alice only")
    response = httpx.get(server.url + "/wiki/read", headers=BOB, params={"path": path})
    assert response.status_code == 404


def test_wiki_queries_are_required_and_patterns_checked(server: RunningServer) -> None:
    assert httpx.get(server.url + "/wiki/read", headers=ALICE).json() == {
        "ok": False,
        "error": 'The query parameter "path" is required.',
    }
    assert httpx.get(server.url + "/wiki/grep", headers=ALICE).status_code == 400
    bad = httpx.get(server.url + "/wiki/grep", headers=ALICE, params={"pattern": "(unclosed"})
    assert bad.status_code == 400
    assert bad.json()["error"].startswith("The pattern is not a valid regular expression")


def test_a_catastrophic_pattern_is_answered_fast(server: RunningServer) -> None:
    write_note(server, "static:alice", "long.md", ("a" * 5000 + "\n") * 100)
    started = time.monotonic()
    response = httpx.get(
        server.url + "/wiki/grep", headers=ALICE, params={"pattern": "(a+)+$b"}, timeout=10
    )
    assert response.status_code == 200
    assert time.monotonic() - started < 1.0


async def test_wiki_tools_keep_the_callers_apart(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    pending = [
        ChatScript(
            tool_calls=[
                {
                    "name": "wiki_write",
                    "arguments": {"path": "personal/notes/e2e.md", "content": "alice-77"},
                }
            ]
        ),
    ]
    ollama.responder = lambda request: pending.pop(0) if pending else ChatScript.words("ok")
    await post_turn(server, {"text": "note it"}, ALICE)
    assert (
        server.services.settings.wiki.vault_path / "users" / "static%3Aalice" / "notes" / "e2e.md"
    ).read_text() == "alice-77"
    pending.append(
        ChatScript(tool_calls=[{"name": "wiki_grep", "arguments": {"pattern": "alice-77"}}])
    )
    await post_turn(server, {"text": "find it"}, BOB)
    told = ollama.requests[-1]["messages"][-1]
    assert told["role"] == "tool" and "e2e.md" not in told["content"]


# ------------------------------------------------------------ /me and zones


def test_me_is_null_until_known_then_patch_canonicalizes_the_zone(server: RunningServer) -> None:
    assert httpx.get(server.url + "/me", headers=ALICE).json() == {
        "ok": True,
        "name": None,
        "language": None,
        "timeZone": None,
        "displayName": "Alice",
        "approver": False,
    }
    saved = httpx.patch(server.url + "/me", headers=ALICE, json={"timeZone": "europe/rome"})
    assert saved.json() == {"ok": True, "timeZone": "Europe/Rome"}
    assert httpx.get(server.url + "/me", headers=ALICE).json()["timeZone"] == "Europe/Rome"
    assert httpx.get(server.url + "/me", headers=BOB).json()["timeZone"] is None


def test_patch_me_saves_a_shipped_language_which_then_speaks_to_the_caller(
    server: RunningServer,
) -> None:
    saved = httpx.patch(server.url + "/me", headers=ALICE, json={"language": " IT "})
    assert saved.json() == {"ok": True, "language": "it"}
    assert httpx.get(server.url + "/me", headers=ALICE).json()["language"] == "it"
    assert httpx.get(server.url + "/me", headers=BOB).json()["language"] is None
    refused = httpx.patch(server.url + "/me", headers=ALICE, json={"timeZone": "Mars/Olympus"})
    assert refused.headers["content-language"] == "it"
    both = httpx.patch(
        server.url + "/me", headers=ALICE, json={"language": "de", "timeZone": "europe/berlin"}
    )
    assert both.json() == {"ok": True, "timeZone": "Europe/Berlin", "language": "de"}


def test_patch_me_with_null_forgets_the_saved_language_and_zone(server: RunningServer) -> None:
    both = {"language": "it", "timeZone": "Europe/Rome"}
    assert httpx.patch(server.url + "/me", headers=ALICE, json=both).status_code == 200
    refusal = {**ALICE, "accept-language": "de"}  # a 400 says which language it speaks
    italian = httpx.patch(server.url + "/me", headers=refusal, json={})
    assert italian.headers["content-language"] == "it"  # the saved language wins
    cleared = httpx.patch(server.url + "/me", headers=ALICE, json={"language": None})
    assert cleared.json() == {"ok": True, "language": None}
    after = httpx.get(server.url + "/me", headers=ALICE).json()
    assert after["language"] is None and after["timeZone"] == "Europe/Rome"
    german = httpx.patch(server.url + "/me", headers=refusal, json={})
    assert german.headers["content-language"] == "de"  # Accept-Language, once none is saved
    cleared = httpx.patch(server.url + "/me", headers=ALICE, json={"timeZone": None})
    assert cleared.json() == {"ok": True, "timeZone": None}
    assert httpx.get(server.url + "/me", headers=ALICE).json()["timeZone"] is None
    # Clearing what was never saved is no error either.
    assert httpx.patch(server.url + "/me", headers=BOB, json={"timeZone": None}).status_code == 200


@pytest.mark.parametrize("language", ["pt", "english", "", "en-US", "xx"])
def test_patch_me_refuses_a_language_that_is_not_shipped_and_saves_nothing(
    server: RunningServer, language: str
) -> None:
    response = httpx.patch(
        server.url + "/me", headers=ALICE, json={"language": language, "timeZone": "Asia/Tokyo"}
    )
    assert response.status_code == 400
    assert response.json()["ok"] is False
    assert "en, it, de, fr, es" in response.json()["error"]
    assert httpx.get(server.url + "/me", headers=ALICE).json() == {
        "ok": True,
        "name": None,
        "language": None,
        "timeZone": None,
        "displayName": "Alice",
        "approver": False,
    }


@pytest.mark.parametrize(
    "body", [{"timeZone": "+02:00"}, {"timeZone": "Mars/Olympus"}, {}, {"timeZone": 3}]
)
def test_patch_me_refuses_what_is_not_a_zone_name(
    server: RunningServer, body: dict[str, Any]
) -> None:
    response = httpx.patch(server.url + "/me", headers=ALICE, json=body)
    assert response.status_code == 400
    assert response.json()["ok"] is False


async def test_the_model_reads_the_local_time_in_the_saved_zone_then_the_header_then_the_default(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    await post_turn(server, {"text": "hi"}, ALICE)
    assert ", UTC (UTC+00:00)] hi" in ollama.requests[-1]["messages"][-1]["content"]
    await post_turn(server, {"text": "hi"}, {**ALICE, "x-time-zone": "Asia/Tokyo"})
    assert ", Asia/Tokyo (UTC+09:00)] hi" in ollama.requests[-1]["messages"][-1]["content"]
    await post_turn(server, {"text": "hi"}, {**ALICE, "x-time-zone": "Not/AZone"})
    assert ", UTC (UTC+00:00)] hi" in ollama.requests[-1]["messages"][-1]["content"]
    httpx.patch(server.url + "/me", headers=ALICE, json={"timeZone": "America/New_York"})
    await post_turn(server, {"text": "hi"}, {**ALICE, "x-time-zone": "Asia/Tokyo"})
    assert ", America/New_York (UTC-0" in ollama.requests[-1]["messages"][-1]["content"]


# ------------------------------------------------------------------ language


async def test_the_language_follows_the_saved_choice_then_accept_language_then_the_default(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server(MERCURY_DEFAULT_LANGUAGE="de")
    bad = httpx.post(server.url + "/turn", headers=ALICE, json={})
    assert bad.headers["content-language"] == "de"
    italian = httpx.post(
        server.url + "/turn",
        headers={**ALICE, "accept-language": "fr;q=0.5, it-CH, en;q=0.1"},
        json={},
    )
    assert italian.headers["content-language"] == "it"
    assert italian.json()["error"] != bad.json()["error"]
    ollama.responder = lambda request: (
        ChatScript(tool_calls=[{"name": "set_language", "arguments": {"value": "es"}}])
        if request["messages"][-1]["role"] == "user"
        else ChatScript.words("Vale.")
    )
    first = await post_turn(
        server, {"text": "habla español", "conversationId": "c"}, {**ALICE, "accept-language": "it"}
    )
    assert first.headers["content-language"] == "it"  # a choice made in a turn counts from the next
    ollama.responder = None
    after = await post_turn(
        server, {"text": "hola", "conversationId": "c"}, {**ALICE, "accept-language": "it"}
    )
    assert after.headers["content-language"] == "es"
    assert "'es'" in ollama.requests[-1]["messages"][0]["content"]
    assert httpx.get(server.url + "/me", headers=ALICE).json()["language"] == "es"


async def test_model_errors_are_worded_in_the_callers_language(
    make_server: Callable[..., RunningServer],
) -> None:
    server = make_server(OLLAMA_HOST="http://127.0.0.1:9")
    got = await post_turn(server, {"text": "hi"}, {**ALICE, "accept-language": "it"})
    message = got.of("error")[0]["message"]
    assert "llama3.2" in message and "http://127.0.0.1:9" in message
    assert "can't be reached" not in message


# ------------------------------------------------------------------- opening


async def test_an_opening_turn_introduces_the_assistant_to_someone_it_does_not_know(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Hi, I'm Mercury. How should I call you?"))
    got = await post_turn(
        server, {"opening": True, "conversationId": "welcome", "text": "ignored"}, ALICE
    )
    assert got.final["text"] == "Hi, I'm Mercury. How should I call you?"
    assert "ignored" not in json.dumps(ollama.requests[-1]["messages"])
    ollama.responder = lambda request: (
        ChatScript(tool_calls=[{"name": "set_name", "arguments": {"value": "Ali"}}])
        if request["messages"][-1]["role"] == "user"
        else ChatScript.words("Nice to meet you, Ali.")
    )
    await post_turn(server, {"text": "Call me Ali", "conversationId": "welcome"}, ALICE)
    assert httpx.get(server.url + "/me", headers=ALICE).json()["name"] == "Ali"
    before = len(ollama.requests)
    known = await post_turn(server, {"opening": True, "conversationId": "again"}, ALICE)
    assert known.names() == ["final"] and known.final == {"text": ""}
    assert len(ollama.requests) == before


# ----------------------------------------------------------------- admission

PEOPLE = [
    {"id": "alice", "displayName": "Alice A.", "roles": ["staff"], "identities": ["static:alice"]},
]


def test_a_directory_refuses_strangers_with_403_before_the_body(
    make_server: Callable[..., RunningServer],
) -> None:
    server = make_server(DIRECTORY_STATIC_PEOPLE=json.dumps(PEOPLE))
    assert httpx.get(server.url + "/me", headers=ALICE).status_code == 200
    for method, path in [
        ("POST", "/turn"),
        ("GET", "/me"),
        ("GET", "/wiki/list"),
        ("POST", "/confirm"),
    ]:
        refused = httpx.request(
            method,
            server.url + path,
            headers={**BOB, "accept-language": "fr"},
            content=b"{not json",
        )
        assert refused.status_code == 403
        body = refused.json()
        assert body["ok"] is False and body["reason"] == "unknown"
        assert refused.headers["content-language"] == "fr"
        assert refused.headers["access-control-allow-origin"] == "*"


def test_an_open_instance_admits_strangers(make_server: Callable[..., RunningServer]) -> None:
    server = make_server(DIRECTORY_STATIC_PEOPLE=json.dumps(PEOPLE), MERCURY_ACCESS_UNKNOWN="allow")
    assert httpx.get(server.url + "/me", headers=BOB).status_code == 200


def test_a_known_person_is_keyed_by_the_directory(
    make_server: Callable[..., RunningServer],
) -> None:
    server = make_server(DIRECTORY_STATIC_PEOPLE=json.dumps(PEOPLE))
    httpx.patch(server.url + "/me", headers=ALICE, json={"timeZone": "Europe/Rome"})
    saved = server.call(server.services.person_settings.get("people:alice"))
    assert saved.time_zone == "Europe/Rome"


# ------------------------------------------------------------------- linking


async def test_two_accounts_link_with_a_code_sent_twice_and_then_share_everything(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    tokens = {**TOKENS, "phone-token": {"id": "alice-phone", "displayName": "Alice's phone"}}
    server = make_server(AUTH_STATIC_TOKENS=json.dumps(tokens))
    phone = {"authorization": "Bearer phone-token"}
    write_note(server, "static:alice", "plan.md", "the plan")
    await post_turn(server, {"text": "remember the plan", "conversationId": "desk"}, ALICE)
    issued = httpx.post(server.url + "/link", headers=ALICE)
    assert issued.headers["cache-control"] == "no-store"
    code = issued.json()["code"]
    assert len(code) == 14 and issued.json()["expiresAt"]
    before = len(ollama.requests)
    preview = await post_turn(server, {"text": code}, phone)
    assert preview.final["text"].startswith("This will link this account to Alice")
    assert "Send the same code again" in preview.final["text"]
    linked = await post_turn(server, {"text": code}, phone)
    assert linked.final["text"] == "Linked: this account is now Alice."
    assert len(ollama.requests) == before  # codes never reach the model
    assert code not in json.dumps(ollama.requests)
    assert httpx.get(server.url + "/wiki/list", headers=phone).json()["files"] == [
        "personal/notes/plan.md"
    ]
    assert "static:alice:desk" in server.services.manager.sessions
    again = await post_turn(server, {"text": code}, phone)
    assert again.final["text"].startswith("That code isn't valid")


async def test_a_link_code_sent_from_its_own_account_is_refused(server: RunningServer) -> None:
    code = httpx.post(server.url + "/link", headers=ALICE).json()["code"]
    own = await post_turn(server, {"text": code}, ALICE)
    assert own.final["text"] == "That code is for linking another account to this one."
