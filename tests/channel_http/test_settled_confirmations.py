"""GET /confirmations?settled=true: how the caller's own stagings ended (confirmed, chosen,
cancelled, expired), by id, beside the open ones; never a token, never another person's."""

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
from tests.support.contract import check_response
from tests.support.ollama_standin import OllamaStandIn
from tests.support.server import RunningServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def engine(make_server: Callable[..., RunningServer], clock: ManualClock) -> RunningServer:
    return make_server({"plugins": [Counter().plugin()], "clock": clock})


def confirmations(
    server: RunningServer, headers: dict[str, str] = ALICE, **query: str
) -> httpx.Response:
    return httpx.get(server.url + "/confirmations", headers=headers, params=query)


def settled(server: RunningServer, headers: dict[str, str] = ALICE, **query: str) -> list[Any]:
    answer = confirmations(server, headers, settled="true", **query)
    assert answer.status_code == 200, answer.text
    check_response(answer)
    ended: list[Any] = answer.json()["settled"]
    return ended


def answer(server: RunningServer, confirmation: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}/confirmations/{confirmation}", headers=ALICE, json=body)


async def test_confirm_choice_cancel_and_expiry_are_listed_by_id_for_their_owner_only(
    engine: RunningServer, ollama: OllamaStandIn, clock: ManualClock
) -> None:
    confirmed = await stage(engine, ollama, call("bump", by=1), conversation="c1")
    by_token = {"token": confirmed["token"], "conversationId": "c1"}
    assert httpx.post(engine.url + "/confirm", headers=ALICE, json=by_token).json()["resolved"]
    ollama.responder = tool_loop(
        call("wiki_write", path="personal/notes/plan.md", content="first"), answer="Written."
    )
    await post_turn(engine, {"text": "write", "conversationId": "c1"}, ALICE)
    chosen = await stage(
        engine, ollama, call("wiki_write", path="personal/notes/plan.md", content="second")
    )
    assert answer(engine, chosen["confirmationId"], {"choice": 1}).status_code == 200
    cancelled = await stage(engine, ollama, call("bump", by=2), conversation="c2")
    assert answer(engine, cancelled["confirmationId"], {"cancel": True}).status_code == 200
    expired = await stage(engine, ollama, call("bump", by=3), conversation="c2")
    clock.advance(DEFAULT_TTL + timedelta(seconds=1))
    still_open = await stage(engine, ollama, call("bump", by=4), conversation="c2")

    listed = settled(engine)
    assert [(item["id"], item["outcome"], item.get("choice")) for item in listed] == [
        (confirmed["confirmationId"], "confirmed", None),
        (chosen["confirmationId"], "chosen", "Append to the note"),
        (cancelled["confirmationId"], "cancelled", None),
        (expired["confirmationId"], "expired", None),
    ]
    assert listed[0] == {
        "id": confirmed["confirmationId"],
        "conversationId": "c1",
        "summary": "Add 1 to the counter",
        "outcome": "confirmed",
        "settledAt": listed[0]["settledAt"],
    }
    expires_at = datetime.fromisoformat(expired["expiresAt"])
    assert listed[3]["settledAt"] == int(expires_at.timestamp() * 1000)
    assert [item["id"] for item in settled(engine, conversationId="c2")] == [
        cancelled["confirmationId"],
        expired["confirmationId"],
    ]
    # The open one stays where it was; without settled=true the answer is as before.
    body = confirmations(engine, settled="true", conversationId="c2").json()
    assert [item["id"] for item in body["pending"]] == [still_open["confirmationId"]]
    assert "settled" not in confirmations(engine).json()
    text = confirmations(engine, settled="true").text
    for staged in (confirmed, chosen, cancelled, expired):
        assert staged["token"] not in text
    assert settled(engine, BOB) == []


async def test_a_settled_flag_other_than_true_or_false_is_refused_with_a_sentence(
    engine: RunningServer,
) -> None:
    refused = confirmations(engine, settled="yes")
    assert refused.status_code == 400
    assert refused.json() == {"ok": False, "error": "settled is true or false."}
    check_response(refused)
    assert confirmations(engine, settled="false").json() == {"ok": True, "pending": []}
