"""The Teams bridge: activities read into the port's messages, thread ids, and the bridge's
checks against the Teams stand-in (its token issuer and connector), through the Agents SDK."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from microsoft_agents.activity import Activity

from bridges.port import (
    Attachment,
    BridgeError,
    EgressFile,
    LiveBridge,
    Pressed,
    Received,
    WebhookBridge,
)
from bridges.teams import TeamsBridge
from bridges.teams.cards import message, with_file_names
from bridges.teams.wire import read_activity, split_thread
from core.config.settings import ConfigurationError, TeamsSettings, read_settings
from core.spaces.ids import InvalidSpaceId, parse_space_id
from tests.support.teams_standin import APP_ID, APP_PASSWORD, TENANT, TeamsStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

BOT = "Mercury"


@pytest.fixture(scope="module")
def teams_server() -> Iterator[TeamsStandIn]:
    with TeamsStandIn() as standin:
        yield standin


@pytest.fixture
def teams(teams_server: TeamsStandIn) -> Iterator[TeamsStandIn]:
    teams_server.reset()
    yield teams_server
    teams_server.reset()


def settings(teams: TeamsStandIn, **overrides: Any) -> TeamsSettings:
    values: dict[str, Any] = {
        "enabled": True,
        "app_id": APP_ID,
        "app_password": APP_PASSWORD,
        "tenant_id": None,
        "openid_url": teams.url + "/openid",
        "token_url": teams.url + "/token",
        "service_urls": (teams.url,),
    }
    return TeamsSettings(**{**values, **overrides})


@pytest.fixture
async def bridge(teams: TeamsStandIn) -> AsyncIterator[TeamsBridge]:
    bridge = TeamsBridge(settings(teams), bot_name=BOT)
    yield bridge
    await bridge.close()


def read(payload: dict[str, Any]) -> Received | Pressed | str:
    return read_activity(Activity.model_validate(payload), bot_name=BOT)


async def receive(
    bridge: TeamsBridge, teams: TeamsStandIn, payload: Any, *, token: str | None = None
) -> Any:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {"authorization": f"Bearer {token or teams.token()}"}
    return await bridge.receive("POST", {}, headers, body)


# -- thread and space ids ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("thread_id", "space_id", "is_dm"),
    [
        (f"teams:{TENANT}:a:1xYz_-9", f"teams:{TENANT}:a:1xYz_-9", True),
        (f"teams:{TENANT}:19:abc@thread.v2", f"teams:{TENANT}:19:abc@thread.v2", False),
        (
            f"teams:{TENANT}:19:gen@thread.tacv2;messageid=1700000000123",
            f"teams:{TENANT}:19:gen@thread.tacv2",
            False,
        ),
    ],
)
def test_a_thread_is_a_conversation_of_its_chats_or_channels_space(
    teams: TeamsStandIn, thread_id: str, space_id: str, is_dm: bool
) -> None:
    bridge = TeamsBridge(settings(teams), bot_name=BOT)
    info = bridge.parse_thread(thread_id)
    assert (info.space_id, info.conversation_external_id, info.is_dm) == (
        space_id,
        thread_id,
        is_dm,
    )
    assert parse_space_id(space_id).is_dm is is_dm


@pytest.mark.parametrize(
    "thread_id",
    [
        "teams:a:1xyz",
        f"teams:{TENANT}:a:1 x",
        f"teams:{TENANT}:a:1/../x",
        f"teams:{TENANT}:19:gen@thread.tacv2;messageid=abc",
        f"teams:{TENANT}:19:" + "x" * 300,
        f"slack:{TENANT}:a:1",
    ],
)
def test_a_thread_id_teams_never_writes_is_refused(thread_id: str) -> None:
    with pytest.raises(ValueError, match="not a Teams thread id"):
        split_thread(thread_id)


def test_a_space_id_of_another_shape_is_no_teams_space() -> None:
    with pytest.raises(InvalidSpaceId):
        parse_space_id(f"teams:{TENANT}:personal")


# -- activities read ---------------------------------------------------------------------------


def test_the_bots_mention_is_written_with_its_name_and_another_persons_with_theirs(
    teams: TeamsStandIn,
) -> None:
    payload = teams.activity(
        teams.channel("5"),
        "ann",
        "ask <at>Ben Li</at> too",
        mention_bot=True,
        mentions=[("ben", "Ben Li")],
    )
    received = read(payload)
    assert isinstance(received, Received)
    assert received.text == "@Mercury ask @Ben Li too"
    assert received.thread_id == f"teams:{TENANT}:19:general@thread.tacv2;messageid=5"
    assert (received.author_id, received.author_name, received.is_dm) == ("aad-ann", "Ann", False)
    assert received.message_id == payload["id"]
    assert received.delivery_id.startswith(payload["id"] + "@")
    assert received.sent_at is not None and received.sent_at.tzinfo is not None


def test_the_same_message_id_in_two_chats_is_two_deliveries(teams: TeamsStandIn) -> None:
    # Teams' message ids are times in milliseconds: two chats may share one.
    one = read(teams.activity(teams.personal("dee"), "dee", "hi", id="1700000000123"))
    two = read(teams.activity(teams.personal("eve"), "eve", "hi", id="1700000000123"))
    again = read(teams.activity(teams.personal("dee"), "dee", "hi", id="1700000000123"))
    assert isinstance(one, Received) and isinstance(two, Received) and isinstance(again, Received)
    assert one.delivery_id != two.delivery_id and one.delivery_id == again.delivery_id


def test_a_personal_chat_is_a_dm_and_a_group_chat_takes_its_tenant_from_the_channel_data(
    teams: TeamsStandIn,
) -> None:
    personal = read(teams.activity(teams.personal("dee"), "dee", "hi"))
    group = read(teams.activity(teams.group_chat(), "dee", "hi"))
    assert isinstance(personal, Received) and personal.is_dm
    assert isinstance(group, Received) and not group.is_dm
    assert group.thread_id == f"teams:{TENANT}:19:team-chat@thread.v2"


def test_a_shared_file_and_a_pasted_image_are_attachments_and_the_html_copy_is_not(
    teams: TeamsStandIn,
) -> None:
    shared = teams.add_file("notes.txt", b"x")
    pasted = {
        "contentType": "image/png",
        "contentUrl": teams.service_url + "v3/attachments/abc/views/original",
    }
    html = {"contentType": "text/html", "content": "<p>hi</p>"}
    received = read(
        teams.activity(teams.personal("dee"), "dee", "", attachments=[shared, pasted, html])
    )
    assert isinstance(received, Received)
    assert received.attachments == (
        Attachment(name="notes.txt", ref=f"direct:{teams.url}/files/notes.txt"),
        Attachment(name="image.png", ref="bearer:" + pasted["contentUrl"], mime_type="image/png"),
    )


def test_a_cards_submit_is_a_press_on_the_message_it_came_from(teams: TeamsStandIn) -> None:
    pressed = read(teams.press(teams.channel("9"), "ann", "4242", "c:tok:0123456789"))
    assert isinstance(pressed, Pressed)
    assert (pressed.action, pressed.message_id, pressed.author_id) == (
        "c:tok:0123456789",
        "4242",
        "aad-ann",
    )
    execute = teams.activity(teams.personal("ann"), "ann", reply_to="77")
    execute |= {
        "type": "invoke",
        "name": "adaptiveCard/action",
        "value": {"action": {"type": "Action.Execute", "data": {"mercuryAction": "s:" + "a" * 16}}},
    }
    assert isinstance(read(execute), Pressed)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"from": {"id": "28:" + APP_ID}}, "own"),
        ({"type": "conversationUpdate"}, "conversationUpdate"),
        ({"text": "   "}, "nothing to read"),
        ({"value": {"other": 1}, "text": ""}, "nothing to read"),
    ],
)
def test_what_is_no_persons_message_is_ignored(
    teams: TeamsStandIn, change: dict[str, Any], why: str
) -> None:
    outcome = read(teams.activity(teams.personal("dee"), "dee", "hi") | change)
    assert isinstance(outcome, str) and why in outcome


# -- the bridge's checks -----------------------------------------------------------------------


async def test_the_bridge_is_a_webhook_and_live_bridge(bridge: TeamsBridge) -> None:
    assert isinstance(bridge, WebhookBridge) and isinstance(bridge, LiveBridge)
    assert bridge.platform == "teams"


def test_the_bridge_without_its_credentials_is_a_configuration_error(teams: TeamsStandIn) -> None:
    with pytest.raises(ConfigurationError, match="TEAMS_APP_ID and TEAMS_APP_PASSWORD"):
        TeamsBridge(settings(teams, app_password=None), bot_name=BOT)


def test_the_bridge_on_without_its_secrets_stops_the_start_in_one_sentence() -> None:
    _, problems = read_settings({"MERCURY_TEAMS": "true", "TEAMS_APP_ID": APP_ID})
    assert problems == [
        "The Microsoft Teams bridge is on but TEAMS_APP_PASSWORD is not set; set it in the "
        "environment, or turn the bridge off."
    ]


async def test_a_checked_activity_is_accepted(bridge: TeamsBridge, teams: TeamsStandIn) -> None:
    outcome = await receive(bridge, teams, teams.activity(teams.personal("dee"), "dee", "hi"))
    assert outcome.verdict == "accepted" and len(outcome.messages) == 1


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"type": ""}', b"[" * 100_000 + b"]" * 100_000, b'{"type": 5}'],
)
async def test_an_unreadable_body_with_a_good_token_is_malformed_never_a_crash(
    bridge: TeamsBridge, teams: TeamsStandIn, body: bytes
) -> None:
    outcome = await receive(bridge, teams, body)
    assert outcome.verdict == "malformed"


async def test_an_unreadable_activity_is_logged_without_a_traceback(
    bridge: TeamsBridge, teams: TeamsStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    odd = teams.activity(teams.personal("dee"), "dee", "hi") | {"timestamp": {"id": 5}}
    conflict = teams.activity(teams.personal("dee"), "dee", "hi") | {
        "channelId": "msteams:one",
        "entities": [{"type": "ProductInfo", "id": "another"}],
    }
    for payload in (odd, conflict, {**odd, "channelId": ""}):
        outcome = await receive(bridge, teams, payload)
        assert outcome.verdict == "malformed"
    assert [r for r in caplog.records if r.exc_info] == []


async def test_a_bad_token_is_forged_before_the_body_is_read(
    bridge: TeamsBridge, teams: TeamsStandIn
) -> None:
    outcome = await receive(bridge, teams, b"not json", token=teams.token(forged=True))
    assert outcome.verdict == "forged"


@pytest.mark.parametrize(
    "service_url",
    [
        "https://attacker.example/amer/",
        "https://smba.trafficmanager.net.attacker.example/",
        "http://smba.trafficmanager.net/amer/",
        "https://evil.trafficmanager.net/",
    ],
)
async def test_a_signed_activity_naming_a_foreign_service_url_is_refused(
    bridge: TeamsBridge, teams: TeamsStandIn, service_url: str
) -> None:
    activity = {**teams.activity(teams.personal("d"), "d", "hi"), "serviceUrl": service_url}
    outcome = await receive(bridge, teams, activity, token=teams.token(service_url=service_url))
    assert outcome.verdict == "forged"
    assert "Bot Framework" in outcome.reason


@pytest.mark.parametrize(
    "service_url",
    ["https://smba.trafficmanager.net/amer/", "https://smba.infra.gov.teams.microsoft.us/"],
)
async def test_an_activity_from_a_bot_framework_service_host_is_taken(
    bridge: TeamsBridge, teams: TeamsStandIn, service_url: str
) -> None:
    activity = {**teams.activity(teams.personal("d"), "d", "hi"), "serviceUrl": service_url}
    outcome = await receive(bridge, teams, activity, token=teams.token(service_url=service_url))
    assert outcome.verdict == "accepted"


async def test_an_activity_of_another_tenant_is_ignored_by_a_single_tenant_bot(
    teams: TeamsStandIn,
) -> None:
    bridge = TeamsBridge(settings(teams, tenant_id="another-tenant"), bot_name=BOT)
    try:
        outcome = await receive(bridge, teams, teams.activity(teams.personal("d"), "d", "hi"))
    finally:
        await bridge.close()
    assert (outcome.verdict, outcome.reason) == ("ignored", "an activity of another tenant")


async def test_a_reply_before_any_activity_of_its_tenant_is_a_bridge_error(
    bridge: TeamsBridge,
) -> None:
    to = Received(
        platform="teams",
        thread_id=f"teams:{TENANT}:a:personal-zed",
        delivery_id="1",
        message_id="1",
        author_id="aad-zed",
        author_name=None,
        text="hi",
        is_dm=True,
    )
    with pytest.raises(BridgeError, match="has not heard from this tenant"):
        await bridge.send_reply(to, "hello")


async def test_a_long_answer_is_split_and_a_file_teams_cant_carry_is_named_in_a_group(
    bridge: TeamsBridge, teams: TeamsStandIn
) -> None:
    outcome = await receive(bridge, teams, teams.activity(teams.group_chat(), "dee", "hi"))
    [to] = outcome.messages
    text = ("A sentence that goes on. " * 400).strip()
    report = EgressFile(filename="report.pdf", mime_type="application/pdf", data=b"%PDF")
    dot = EgressFile(filename="dot.png", mime_type="image/png", data=b"\x89PNG")
    await bridge.send_reply(to, text, [report, dot])
    sent = [m.text for m in teams.messages]
    assert len(sent) == 2 and all(len(part) <= 6_000 for part in sent)
    assert "".join(sent) == with_file_names(text, [report, dot])
    assert sent[-1].endswith("📎 report.pdf")
    [image] = teams.messages[-1].attachments
    assert image["contentUrl"].startswith("data:image/png;base64,")


async def test_in_a_personal_chat_a_file_teams_cant_carry_inline_is_offered(
    bridge: TeamsBridge, teams: TeamsStandIn
) -> None:
    outcome = await receive(bridge, teams, teams.activity(teams.personal("dee"), "dee", "hi"))
    [to] = outcome.messages
    report = EgressFile(filename="report.pdf", mime_type="application/pdf", data=b"%PDF")
    await bridge.send_reply(to, "Here.", [report])
    answer, offer = teams.messages
    assert answer.text == "Here."
    assert [a["contentType"] for a in offer.attachments] == [
        "application/vnd.microsoft.teams.card.file.consent"
    ]


async def test_a_download_refuses_to_send_the_token_off_the_connector(
    bridge: TeamsBridge, teams: TeamsStandIn
) -> None:
    await receive(bridge, teams, teams.activity(teams.personal("dee"), "dee", "hi"))
    elsewhere = Attachment(name="x.png", ref="bearer:https://evil.example/x.png")
    with pytest.raises(BridgeError, match="only to the connector"):
        await bridge.download(elsewhere, 1000)
    inside = Attachment(name="x.txt", ref="direct:http://169.254.169.254/latest/meta-data")
    with pytest.raises(BridgeError, match="only from SharePoint or the connector"):
        await bridge.download(inside, 1000)
    teams.files["big.bin"] = b"x" * 2000
    with pytest.raises(BridgeError, match="-byte limit"):
        await bridge.download(
            Attachment(name="big.bin", ref=f"direct:{teams.url}/files/big.bin"), 1000
        )


def test_a_message_with_buttons_carries_an_adaptive_card_with_submit_actions() -> None:
    from bridges.port import ReplyButton

    activity = message(
        "Pick one",
        buttons=[ReplyButton(label="Yes", action="c:t:1", style="primary")],
    )
    [card] = activity.attachments
    assert card.content_type == "application/vnd.microsoft.card.adaptive"
    [action] = card.content["actions"]
    assert action == {
        "type": "Action.Submit",
        "title": "Yes",
        "data": {"mercuryAction": "c:t:1"},
        "style": "positive",
    }
