"""POST /confirmations/{confirmation}: the owner answers a pending confirmation by its id
(a reloaded page has no token), held to exactly the rules of POST /confirm."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from core.clock import ManualClock
from core.engine.confirmations import DEFAULT_TTL
from tests.channel_http.test_engine import Counter, call, post_turn, stage, tool_loop
from tests.conftest import ALICE, BOB
from tests.support.contract import check_event, check_response
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

GONE = (
    "No confirmation with that id waits for you: it was answered, it expired, or there never "
    "was one."
)


@pytest.fixture
def counter() -> Counter:
    return Counter()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def engine(
    make_server: Callable[..., RunningServer], counter: Counter, clock: ManualClock
) -> RunningServer:
    return make_server({"plugins": [counter.plugin()], "clock": clock})


def listed(server: RunningServer, headers: dict[str, str] = ALICE, **query: str) -> list[Any]:
    answer = httpx.get(server.url + "/confirmations", headers=headers, params=query)
    assert answer.status_code == 200, answer.text
    pending: list[Any] = answer.json()["pending"]
    return pending


def answer(
    server: RunningServer, confirmation: str, body: dict[str, Any], headers: dict[str, str]
) -> httpx.Response:
    return httpx.post(f"{server.url}/confirmations/{confirmation}", headers=headers, json=body)


async def test_the_listing_names_each_staging_and_its_choices_but_never_a_token(
    engine: RunningServer, ollama: OllamaStandIn
) -> None:
    pending = await stage(engine, ollama, call("bump", by=2), conversation="c1")
    await stage(engine, ollama, call("bump", by=3), conversation="c2")
    [first, other] = listed(engine)
    assert first["id"] == pending["confirmationId"]
    assert first["conversationId"] == "c1" and first["summary"] == "Add 2 to the counter"
    assert first["choices"] == [{"label": ""}]
    assert [item["id"] for item in listed(engine, conversationId="c2")] == [other["id"]]
    body = httpx.get(engine.url + "/confirmations", headers=ALICE).text
    assert pending["token"] not in body
    assert listed(engine, BOB) == []


async def test_the_owner_confirms_by_id_and_a_second_answer_is_refused(
    engine: RunningServer, ollama: OllamaStandIn, counter: Counter
) -> None:
    pending = await stage(engine, ollama, call("bump", by=2))
    [item] = listed(engine)
    done = answer(engine, item["id"], {"choice": 0}, ALICE)
    assert done.status_code == 200
    assert done.json() == {"ok": True, "resolved": True, "text": "Confirmed and done."}
    assert done.headers["content-language"] == "en"
    assert counter.runs == [{"person": "static:alice", "by": 2}]
    again = answer(engine, item["id"], {"choice": 0}, ALICE)
    assert (again.status_code, again.json()) == (404, {"ok": False, "error": GONE})
    # Its token died with it, as a token's own use would have killed it.
    token = {"token": pending["token"], "conversationId": "c1"}
    assert httpx.post(engine.url + "/confirm", headers=ALICE, json=token).json() == {
        "ok": True,
        "resolved": False,
    }
    assert counter.runs == [{"person": "static:alice", "by": 2}]


async def test_another_persons_id_is_answered_as_an_unknown_one_and_stays_pending(
    engine: RunningServer, ollama: OllamaStandIn, counter: Counter
) -> None:
    await stage(engine, ollama, call("bump", by=1))
    [item] = listed(engine)
    by_bob = answer(engine, item["id"], {"choice": 0}, BOB)
    unknown = answer(engine, "0" * 32, {"choice": 0}, BOB)
    malformed = answer(engine, "not-an-id", {"cancel": True}, BOB)
    assert by_bob.status_code == unknown.status_code == malformed.status_code == 404
    assert by_bob.json() == unknown.json() == malformed.json() == {"ok": False, "error": GONE}
    assert answer(engine, item["id"], {"cancel": True}, BOB).json()["error"] == GONE
    assert counter.runs == []
    assert [i["id"] for i in listed(engine)] == [item["id"]]
    beyond = answer(engine, item["id"], {"choice": 1}, ALICE)  # a plain staging has one
    assert beyond.status_code == 404
    assert answer(engine, item["id"], {"choice": 0}, ALICE).status_code == 200


async def test_an_expired_confirmation_is_refused_by_id(
    engine: RunningServer, ollama: OllamaStandIn, counter: Counter, clock: ManualClock
) -> None:
    await stage(engine, ollama, call("bump", by=1))
    [item] = listed(engine)
    clock.advance(timedelta(minutes=5, seconds=1))
    late = answer(engine, item["id"], {"choice": 0}, ALICE)
    assert (late.status_code, late.json()["error"]) == (404, GONE)
    assert counter.runs == []


async def test_a_cancel_drops_the_staging_unrun_once(
    engine: RunningServer, ollama: OllamaStandIn, counter: Counter
) -> None:
    pending = await stage(engine, ollama, call("bump", by=1))
    dropped = answer(engine, pending["confirmationId"], {"cancel": True}, ALICE)
    assert dropped.json() == {"ok": True, "resolved": True, "cancelled": True, "text": "Cancelled."}
    assert listed(engine) == []
    again = answer(engine, pending["confirmationId"], {"choice": 0}, ALICE)
    assert again.status_code == 404
    token = {"token": pending["token"], "conversationId": "c1"}
    assert (
        httpx.post(engine.url + "/confirm", headers=ALICE, json=token).json()["resolved"] is False
    )
    assert counter.runs == []
    # In the person's language, as every reply is.
    pending = await stage(engine, ollama, call("bump", by=1))
    italian = {**ALICE, "accept-language": "it"}
    dropped = answer(engine, pending["confirmationId"], {"cancel": True}, italian)
    assert dropped.json()["text"] == "Annullato."
    assert dropped.headers["content-language"] == "it"


async def test_a_chosen_choice_runs_that_choice_and_kills_the_others(
    engine: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = tool_loop(
        call("wiki_write", path="personal/notes/plan.md", content="first"), answer="Written."
    )
    await post_turn(engine, {"text": "write", "conversationId": "c1"}, ALICE)
    pending = await stage(
        engine, ollama, call("wiki_write", path="personal/notes/plan.md", content="second")
    )
    [item] = listed(engine)
    assert [c["label"] for c in item["choices"]] == ["Replace the note", "Append to the note"]
    done = answer(engine, pending["confirmationId"], {"choice": 1}, ALICE)  # Append
    assert done.json()["text"] == "Confirmed and done."
    dead = {"token": pending["choices"][0]["token"], "conversationId": "c1"}
    assert httpx.post(engine.url + "/confirm", headers=ALICE, json=dead).json()["resolved"] is False
    note = httpx.get(
        engine.url + "/wiki/read", headers=ALICE, params={"path": "personal/notes/plan.md"}
    )
    assert note.json()["content"] == "first\nsecond"


async def test_a_hands_back_action_answers_and_resumes_as_after_confirm(
    engine: RunningServer, ollama: OllamaStandIn
) -> None:
    by_token = await stage(engine, ollama, call("bump_and_tell", by=1), conversation="t")
    by_id = await stage(engine, ollama, call("bump_and_tell", by=1), conversation="i")
    confirmed = httpx.post(
        engine.url + "/confirm",
        headers=ALICE,
        json={"token": by_token["token"], "conversationId": "t"},
    )
    chosen = answer(engine, by_id["confirmationId"], {"choice": 0}, ALICE)
    assert chosen.json() == confirmed.json() == {"ok": True, "resolved": True, "resume": True}
    ollama.responder = lambda request: ChatScript.words("It is two now.")
    after_token = await post_turn(engine, {"resume": True, "conversationId": "t"}, ALICE)
    after_id = await post_turn(engine, {"resume": True, "conversationId": "i"}, ALICE)
    assert after_id.names() == after_token.names()
    assert after_id.final == after_token.final == {"text": "It is two now."}
    handed = ollama.requests[-1]["messages"][-1]
    assert handed["role"] == "tool" and "Confirmed by the person" in handed["content"]


async def test_bad_bodies_are_refused_with_a_sentence(
    engine: RunningServer, ollama: OllamaStandIn
) -> None:
    pending = await stage(engine, ollama, call("bump", by=1))
    for body in ({}, {"choice": 0, "cancel": True}, {"cancel": False}, {"choice": "0"}, {"x": 1}):
        refused = answer(engine, pending["confirmationId"], body, ALICE)
        assert refused.status_code == 400, body
        assert refused.json()["ok"] is False and refused.json()["error"].endswith("."), body
    huge = answer(engine, pending["confirmationId"], {"choice": 2**70}, ALICE)
    assert huge.status_code in (400, 404)
    assert len(listed(engine)) == 1


async def test_a_pending_event_says_when_its_staging_expires_by_the_servers_clock(
    engine: RunningServer, ollama: OllamaStandIn, clock: ManualClock
) -> None:
    staged_at = clock()  # months behind the real time: only the server's clock counts
    pending = await stage(engine, ollama, call("bump", by=1))
    check_event("pending", pending)
    expires_at = datetime.fromisoformat(pending["expiresAt"])
    assert pending["expiresAt"].endswith("Z")
    assert staged_at < expires_at <= staged_at + DEFAULT_TTL
    [item] = listed(engine)
    assert item["expiresAt"] == int(expires_at.timestamp() * 1000)  # the same instant
    clock.advance(expires_at - clock() - timedelta(milliseconds=1))
    assert listed(engine) != []
    clock.advance(timedelta(milliseconds=1))
    assert listed(engine) == []


async def test_chats_pending_is_the_turns_pending_with_its_id_and_expiry(
    engine: RunningServer, ollama: OllamaStandIn, counter: Counter
) -> None:
    by_turn = await stage(engine, ollama, call("bump", by=1), conversation="t")
    ollama.responder = tool_loop(call("bump", by=2), answer="Please confirm.")
    chat = httpx.post(
        engine.url + "/chat", headers=ALICE, json={"text": "do it", "conversationId": "c"}
    )
    assert chat.status_code == 200, chat.text
    check_response(chat)
    pending = chat.json()["pending"]
    assert set(pending) == set(by_turn)  # the same fields, through the same encoding
    assert set(pending) >= {"command", "token", "choices", "confirmationId", "expiresAt"}
    [item] = listed(engine, conversationId="c")
    assert pending["confirmationId"] == item["id"]
    assert datetime.fromisoformat(pending["expiresAt"]).timestamp() * 1000 == item["expiresAt"]
    done = answer(engine, pending["confirmationId"], {"choice": 0}, ALICE)
    assert done.json()["text"] == "Confirmed and done."
    assert counter.runs == [{"person": "static:alice", "by": 2}]
