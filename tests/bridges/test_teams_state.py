"""Two Teams bridges on one state store answer for each other: a delivery one received and the
other recovered is answered in its conversation, a file one offered is uploaded when its
consent lands on the other, a card one posted keeps its text when pressed on the other.

Two instances are two :class:`TeamsBridge` on connections of their own to one store (SQLite
and PostgreSQL), against the Teams stand-in; the delivery is taken over through
:class:`Deliveries` as a surviving instance does once the receiver's lease lapsed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest

from bridges.deliveries import Deliveries
from bridges.port import BridgeError, EgressFile, Pressed, Received, ReplyButton, SharedStateBridge
from bridges.teams import TeamsBridge
from bridges.teams.state import KEEP_ANSWERS, KEEP_ROUTES, TeamsState
from core.clock import ManualClock
from core.config.settings import TeamsSettings
from tests.support.state import StateBackend
from tests.support.teams_standin import APP_ID, APP_PASSWORD, TENANT, TeamsStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

BOT = "Mercury"
CONSENT = "application/vnd.microsoft.teams.card.file.consent"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def teams_server() -> Iterator[TeamsStandIn]:
    with TeamsStandIn() as standin:
        yield standin


@pytest.fixture
def teams(teams_server: TeamsStandIn) -> Iterator[TeamsStandIn]:
    teams_server.reset()
    yield teams_server
    teams_server.reset()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def settings(teams: TeamsStandIn) -> TeamsSettings:
    return TeamsSettings(
        enabled=True,
        app_id=APP_ID,
        app_password=APP_PASSWORD,
        tenant_id=None,
        openid_url=teams.url + "/openid",
        token_url=teams.url + "/token",
        service_urls=(teams.url,),
    )


@pytest.fixture
async def pair(
    state: StateBackend, teams: TeamsStandIn, clock: ManualClock
) -> AsyncIterator[tuple[TeamsBridge, TeamsBridge]]:
    """Instances A and B of the bridge, each on its own connection to one store."""
    bridges = [TeamsBridge(settings(teams), bot_name=BOT) for _ in range(2)]
    for bridge in bridges:
        assert isinstance(bridge, SharedStateBridge)
        await bridge.share_state(await state.open(), clock=clock)
    yield bridges[0], bridges[1]
    for bridge in bridges:
        await bridge.close()


async def receive(bridge: TeamsBridge, teams: TeamsStandIn, payload: dict[str, Any]) -> Any:
    headers = {"authorization": f"Bearer {teams.token()}"}
    return await bridge.receive("POST", {}, headers, json.dumps(payload).encode())


async def test_a_delivery_recovered_by_another_instance_is_answered_in_its_conversation(
    pair: tuple[TeamsBridge, TeamsBridge],
    teams: TeamsStandIn,
    state: StateBackend,
    clock: ManualClock,
) -> None:
    a, b = pair
    deliveries = []
    for holder in ("a", "b"):
        kept = Deliveries(await state.open(), lease_s=15, clock=clock, holder=holder)
        await kept.ensure_schema()
        deliveries.append(kept)
    outcome = await receive(a, teams, teams.activity(teams.channel("77"), "ann", "hi"))
    [to] = outcome.messages
    assert await deliveries[0].take(to)
    clock.advance(timedelta(seconds=20))  # A died with it in hand: its lease lapsed
    [recovered] = await deliveries[1].stale({"teams"})
    assert isinstance(recovered, Received) and recovered == to

    await b.send_reply(recovered, "The answer.")
    await b.send_private(recovered, "Only for you.")

    [answer] = teams.in_conversation("19:general@thread.tacv2;messageid=77")
    assert (answer.text, answer.reply_to) == ("The answer.", to.message_id)
    [opened] = teams.opened
    assert [member["id"] for member in opened["members"]] == ["29:ann"]
    assert [m.text for m in teams.messages] == ["The answer.", "Only for you."]


async def test_a_file_offered_by_one_instance_is_uploaded_when_its_consent_lands_on_another(
    pair: tuple[TeamsBridge, TeamsBridge], teams: TeamsStandIn
) -> None:
    a, b = pair
    outcome = await receive(a, teams, teams.activity(teams.personal("dee"), "dee", "hi"))
    [to] = outcome.messages
    report = EgressFile(filename="report.pdf", mime_type="application/pdf", data=b"%PDF-1.7 x")
    await a.send_reply(to, "Here.", [report])
    _, offer = teams.messages
    assert [attachment["contentType"] for attachment in offer.attachments] == [CONSENT]

    consent = teams.consent_answer("dee", offer)
    answered = await receive(b, teams, consent)
    assert answered.reason == "a file consent answered"
    await teams.wait_until_async(
        lambda: offer.attachments[0]["contentType"] != CONSENT, timeout=20, what="the file shown"
    )
    [(name, data, _)] = teams.uploads
    assert (name, data) == ("report.pdf", report.data)
    assert offer.attachments[0]["contentType"] == "application/vnd.microsoft.teams.card.file.info"
    # Taken once: the same answer on the instance that offered it uploads nothing again.
    again = await receive(a, teams, consent)
    assert again.reason == "a file consent no instance kept"


async def test_a_card_posted_by_one_instance_keeps_its_text_when_pressed_on_another(
    pair: tuple[TeamsBridge, TeamsBridge], teams: TeamsStandIn
) -> None:
    a, b = pair
    outcome = await receive(a, teams, teams.activity(teams.group_chat(), "ann", "go"))
    [to] = outcome.messages
    reply = await a.open_reply(to, status=None)
    await reply.finish("Send the mail?", [ReplyButton(label="Yes", action="c:tok:1")])
    [card] = teams.messages
    assert card.buttons == [("Yes", "c:tok:1")]

    pressed = await receive(b, teams, teams.press(teams.group_chat(), "ann", card.id, "c:tok:1"))
    [press] = pressed.presses
    assert isinstance(press, Pressed)
    await b.settle_press(press, "Sent.")

    [settled] = teams.messages
    assert (settled.text, settled.buttons, settled.notes) == ("Send the mail?", [], ["Sent."])


async def test_what_is_kept_expires_and_is_deleted(
    pair: tuple[TeamsBridge, TeamsBridge],
    teams: TeamsStandIn,
    state: StateBackend,
    clock: ManualClock,
) -> None:
    a, _ = pair
    outcome = await receive(a, teams, teams.activity(teams.personal("eve"), "eve", "hi"))
    [to] = outcome.messages
    await a.send_reply(to, "Here.", [EgressFile(filename="x.bin", mime_type="a/b", data=b"1")])
    kept = TeamsState(await state.open(), clock=clock)
    assert await kept.get("tenant", TENANT) is not None
    clock.advance(KEEP_ANSWERS + timedelta(seconds=1))
    assert await kept.purge() == 1  # the offer; the routes stay longer
    clock.advance(KEEP_ROUTES)
    assert await kept.get("tenant", TENANT) is None
    assert await kept.purge() == 4  # the conversation's route, the tenant's, eve's account and chat

    # An instance that never heard of the tenant waits for its next activity again.
    late = TeamsBridge(settings(teams), bot_name=BOT)
    await late.share_state(await state.open(), clock=clock)
    try:
        with pytest.raises(BridgeError, match="has not heard from this tenant"):
            await late.send_reply(to, "Too late.")
    finally:
        await late.close()
