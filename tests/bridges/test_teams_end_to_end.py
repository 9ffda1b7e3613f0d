"""Microsoft Teams end to end: the Teams stand-in (token issuer and connector service) posts
activities signed with its own key to a real server, whose Teams bridge (the Agents SDK's
activities and connector client) checks them and answers through the stand-in's connector;
the model is the Ollama stand-in. Triggers and ambient context in a channel thread, a
personal chat, a file in, a confirmation card pressed, a live answer streamed, and every
kind of bad token running nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bridges.deliveries import Deliveries
from bridges.teams import TeamsBridge
from core.clock import system_clock
from core.config.settings import TeamsSettings
from tests.support.live_scenarios import Desk
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.scenes import config_file, settle, system_of, user_contents
from tests.support.server import RunningServer
from tests.support.teams_standin import APP_ID, APP_PASSWORD, TENANT, TeamsStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

CHANNEL = f"teams:{TENANT}:19:general@thread.tacv2"
CONFIG = f"""
spaces:
  "{CHANNEL}":
    admins: [static:alice]
"""


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
def chat(make_server: Callable[..., RunningServer], teams: TeamsStandIn, tmp_path: Path) -> Any:
    config = config_file(tmp_path, CONFIG)
    return make_server(MERCURY_CONFIG_FILE=config, BRIDGE_LIVE_ANSWERS="false", **teams.env())


@pytest.fixture
def desk() -> Desk:
    return Desk()


@pytest.fixture
def live_chat(
    make_server: Callable[..., RunningServer], teams: TeamsStandIn, desk: Desk, tmp_path: Path
) -> RunningServer:
    config = config_file(tmp_path, CONFIG)
    return make_server({"plugins": [desk.plugin()]}, MERCURY_CONFIG_FILE=config, **teams.env())


def hook(chat: RunningServer) -> str:
    return chat.url + "/webhooks/teams"


async def say(teams: TeamsStandIn, chat: RunningServer, activity: dict[str, Any]) -> int:
    """Deliver ``activity`` signed as the Bot Framework does; how many messages it took."""
    delivered = await teams.deliver(hook(chat), activity)
    assert delivered.status == 200, delivered.body
    return int(json.loads(delivered.body)["taken"])


async def test_a_personal_chat_always_runs_and_is_answered_there(
    chat: RunningServer, teams: TeamsStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Hi Dee."))
    asked = teams.activity(teams.personal("dee"), "dee", "hello there", id="501")
    assert await say(teams, chat, asked) == 1
    await teams.wait_until_async(lambda: teams.messages, timeout=40, what="the answer")
    [answer] = teams.messages
    assert (answer.conversation, answer.reply_to, answer.text) == (
        "a:personal-dee",
        "501",
        "Hi Dee.",
    )
    [request] = ollama.requests
    assert f"direct chat (teams:{TENANT}:a:personal-dee)" in system_of(request)
    assert '<caller id="teams:aad-dee" name="Dee"' in user_contents(request)[-1]
    # The bot asked for its own token once, with its credentials, for the Bot Framework.
    assert teams.token_requests[0]["scope"] == "https://api.botframework.com/.default"


async def test_in_a_channel_only_the_mention_runs_in_its_thread_with_the_talk_as_ambient(
    chat: RunningServer, teams: TeamsStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Lunch is at noon."))
    thread = teams.channel("100")
    assert await say(teams, chat, teams.activity(thread, "ann", "who's up for lunch?")) == 1
    said = teams.activity(thread, "ben", "me, ask <at>Cat</at>", mentions=[("cat", "Cat")])
    await say(teams, chat, said)
    asked = teams.activity(thread, "cat", "when is lunch?", mention_bot=True, id="777")
    await say(teams, chat, asked)

    await teams.wait_until_async(lambda: teams.messages, timeout=40, what="the answer")
    [answer] = teams.messages
    assert answer.conversation == "19:general@thread.tacv2;messageid=100"
    assert (answer.reply_to, answer.text) == ("777", "Lunch is at noon.")
    [request] = ollama.requests
    words = user_contents(request)[-1]
    assert "<ambient" in words and "who's up for lunch?" in words
    assert 'author="Ben"' in words and "me, ask @Cat" in words
    assert '<caller id="teams:aad-cat" name="Cat"' in words
    assert words.endswith("@Mercury when is lunch?</caller>")
    assert f"group chat ({CHANNEL})" in system_of(request)
    await settle()
    assert len(ollama.requests) == 1 and len(teams.messages) == 1


async def test_a_group_chat_is_a_space_where_only_the_mention_runs(
    chat: RunningServer, teams: TeamsStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Noted."))
    group = teams.group_chat()  # its tenant only in the channel data, as Teams sends it
    await say(teams, chat, teams.activity(group, "ann", "first!"))
    await say(teams, chat, teams.activity(group, "ann", "who am I here?", mention_bot=True))
    await teams.wait_until_async(lambda: teams.messages, timeout=40, what="the answer")
    [request] = ollama.requests
    assert f"group chat (teams:{TENANT}:19:team-chat@thread.v2)" in system_of(request)
    words = user_contents(request)[-1]
    assert "first!" in words.partition("<caller")[0]  # ambient context, not a turn
    assert '<caller id="teams:aad-ann" name="Ann" role="member">' in words
    assert teams.messages[0].conversation == "19:team-chat@thread.v2"


async def test_an_activity_delivered_again_runs_once(
    chat: RunningServer, teams: TeamsStandIn, ollama: OllamaStandIn
) -> None:
    asked = teams.activity(teams.personal("dee"), "dee", "count me once")
    assert await say(teams, chat, asked) == 1
    assert await say(teams, chat, asked) == 0
    await teams.wait_until_async(lambda: teams.messages, timeout=40, what="the answer")
    await settle()
    assert len(ollama.requests) == 1 and len(teams.messages) == 1


async def test_an_activity_another_instance_took_and_died_holding_is_answered_here_at_once(
    make_server: Callable[..., RunningServer],
    teams: TeamsStandIn,
    ollama: OllamaStandIn,
    tmp_path: Path,
) -> None:
    config = config_file(tmp_path, CONFIG)
    chat = make_server(
        MERCURY_CONFIG_FILE=config,
        BRIDGE_LIVE_ANSWERS="false",
        MERCURY_CONVERSATION_LEASE_S="2",
        **teams.env(),
    )
    ollama.enqueue(ChatScript.words("Taken over."))
    asked = teams.activity(teams.personal("dee"), "dee", "are you there?", id="901")

    async def received_elsewhere() -> None:
        """Another instance on the same store reads the activity, takes it and dies."""
        other = TeamsBridge(
            TeamsSettings(
                enabled=True,
                app_id=APP_ID,
                app_password=APP_PASSWORD,
                tenant_id=None,
                openid_url=teams.url + "/openid",
                token_url=teams.url + "/token",
                service_urls=(teams.url,),
            ),
            bot_name="Mercury",
        )
        await other.share_state(chat.services.db, clock=system_clock)
        headers = {"authorization": f"Bearer {teams.token()}"}
        outcome = await other.receive("POST", {}, headers, json.dumps(asked).encode())
        await other.close()
        [message] = outcome.messages
        assert await Deliveries(chat.services.db, lease_s=0.0, holder="dead").take(message)

    chat.call(received_elsewhere())
    # This instance never heard from the tenant: it finds the delivery and answers it in its
    # conversation, through the connector the other instance learned.
    await teams.wait_until_async(lambda: teams.messages, timeout=40, what="the answer")
    [answer] = teams.messages
    assert (answer.conversation, answer.reply_to, answer.text) == (
        "a:personal-dee",
        "901",
        "Taken over.",
    )
    assert len(ollama.requests) == 1


@pytest.mark.parametrize(
    "token",
    [
        pytest.param({"forged": True}, id="signed-with-another-key"),
        pytest.param({"expires_in": -3600}, id="expired"),
        pytest.param({"audience": "another-app"}, id="for-another-app"),
        pytest.param({"issuer": "https://sts.example"}, id="another-issuer"),
        pytest.param({"service_url": "http://127.0.0.1:9/elsewhere/"}, id="another-service-url"),
    ],
)
async def test_an_activity_whose_token_does_not_check_out_runs_nothing(
    chat: RunningServer, teams: TeamsStandIn, ollama: OllamaStandIn, token: dict[str, Any]
) -> None:
    asked = teams.activity(teams.personal("dee"), "dee", "run me")
    refused = await teams.deliver(hook(chat), asked, token=teams.token(**token))
    assert refused.status == 401
    answer = json.loads(refused.body)
    assert answer["ok"] is False and answer["error"]
    await settle()
    assert ollama.requests == [] and teams.posted == []


async def test_an_activity_without_a_token_runs_nothing(
    chat: RunningServer, teams: TeamsStandIn, ollama: OllamaStandIn
) -> None:
    asked = teams.activity(teams.personal("dee"), "dee", "run me")
    for headers in ({}, {"authorization": "Basic ZGVlOnB3"}, {"authorization": "Bearer x.y.z"}):
        refused = await teams.deliver(hook(chat), asked, headers=headers)
        assert refused.status == 401 and json.loads(refused.body)["ok"] is False
    await settle()
    assert ollama.requests == [] and teams.posted == []


async def test_a_shared_file_comes_into_the_spaces_inbox(
    chat: RunningServer, teams: TeamsStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Got it."))
    shared = teams.add_file("scores.csv", b"name,score\nann,3\n")
    asked = teams.activity(teams.personal("dee"), "dee", "summarize", attachments=[shared])
    await say(teams, chat, asked)
    await teams.wait_until_async(lambda: teams.messages, timeout=40, what="the answer")
    assert teams.downloads == ["scores.csv"]
    words = user_contents(ollama.requests[0])[-1]
    assert "inbox/" in words and "scores.csv" in words
    area = "space%3Ateams%3A" + TENANT + "%3Aa%3Apersonal-dee"
    inbox = Path(chat.services.settings.wiki.vault_path) / "users" / area / "inbox"
    assert [p.read_bytes() for p in inbox.iterdir()] == [b"name,score\nann,3\n"]


async def test_a_file_written_in_a_personal_chat_is_offered_and_uploaded_once_accepted(
    chat: RunningServer, teams: TeamsStandIn, ollama: OllamaStandIn
) -> None:
    seen: list[str] = []

    def respond(request: dict[str, Any]) -> ChatScript:
        if not seen:
            seen.append("asked")
            return ChatScript(
                tool_calls=[
                    {
                        "name": "outbox_write",
                        "arguments": {"filename": "summary.txt", "content": "ann leads"},
                    }
                ]
            )
        return ChatScript.words("Here is the summary.")

    ollama.responder = respond
    await say(teams, chat, teams.activity(teams.personal("dee"), "dee", "summarize"))
    await teams.wait_until_async(
        lambda: len(teams.messages) == 2, timeout=40, what="the answer and the offer"
    )
    answer, offer = teams.messages
    assert answer.text == "Here is the summary."  # no file named: it is offered
    [card] = offer.attachments
    assert card["contentType"] == "application/vnd.microsoft.teams.card.file.consent"
    assert (card["name"], card["content"]["sizeInBytes"]) == ("summary.txt", 9)

    accepted = teams.consent_answer("dee", offer)
    assert await say(teams, chat, accepted) == 0  # an answer to Teams, no turn
    await teams.wait_until_async(lambda: teams.uploads, timeout=20, what="the upload")
    assert teams.uploads == [("summary.txt", b"ann leads", "bytes 0-8/9")]
    await teams.wait_until_async(
        lambda: offer.attachments[0]["contentType"].endswith("file.info"),
        timeout=20,
        what="the card shown as the file",
    )
    assert offer.attachments[0]["contentUrl"].endswith("/summary.txt")
    # Teams sending the acceptance again uploads nothing more.
    await say(teams, chat, accepted)
    await settle()
    assert len(teams.uploads) == 1 and len(ollama.requests) == 2


async def test_a_file_offered_and_declined_is_taken_away(
    chat: RunningServer, teams: TeamsStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(
        ChatScript(
            tool_calls=[
                {"name": "outbox_write", "arguments": {"filename": "a.txt", "content": "x"}}
            ]
        ),
        ChatScript.words("Done."),
    )
    await say(teams, chat, teams.activity(teams.personal("dee"), "dee", "write it"))
    await teams.wait_until_async(lambda: len(teams.messages) == 2, timeout=40, what="the offer")
    offer = teams.messages[1]
    await say(teams, chat, teams.consent_answer("dee", offer, accept=False))
    await teams.wait_until_async(lambda: teams.deleted, timeout=20, what="the card taken away")
    assert teams.deleted == [offer.id] and teams.uploads == []


# -- live answers and buttons (#37) -----------------------------------------------------------


async def test_a_live_answer_streams_in_a_personal_chat_and_ends_equal_to_final(
    live_chat: RunningServer, teams: TeamsStandIn, ollama: OllamaStandIn
) -> None:
    words = [f"word{n} " for n in range(60)]
    ollama.enqueue(ChatScript(content=words, delay_s=0.05))
    await say(teams, live_chat, teams.activity(teams.personal("dee"), "dee", "talk"))
    await teams.wait_until_async(lambda: teams.messages, timeout=40, what="the final message")
    [final] = teams.messages
    assert final.streamed and final.text == "".join(words)
    # (the plain typing indicator the pipeline shows first carries no stream)
    typing = [p for p in teams.of_type("typing") if p.activity.get("entities")]
    infos = [next(e for e in p.activity["entities"] if e["type"] == "streaminfo") for p in typing]
    assert infos[0]["streamType"] == "informative" and typing[0].activity["text"] == "Thinking…"
    assert [i["streamType"] for i in infos[1:]] and all(
        i["streamType"] == "streaming" for i in infos[1:]
    )
    assert len(infos) >= 3  # in several updates, not at once
    assert final.id == typing[0].id  # the final message is the stream's


async def test_a_stream_teams_stops_ends_as_one_message_equal_to_final(
    live_chat: RunningServer, teams: TeamsStandIn, ollama: OllamaStandIn
) -> None:
    teams.stop_streams_after = 1
    words = [f"word{n} " for n in range(60)]
    ollama.enqueue(ChatScript(content=words, delay_s=0.05))
    await say(teams, live_chat, teams.activity(teams.personal("dee"), "dee", "talk"))
    await teams.wait_until_async(lambda: teams.messages, timeout=40, what="the answer")
    [answer] = teams.messages
    assert not answer.streamed and answer.text == "".join(words)


async def test_a_confirmation_is_a_card_only_its_owner_confirms_once(
    live_chat: RunningServer, teams: TeamsStandIn, ollama: OllamaStandIn, desk: Desk
) -> None:
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "book", "arguments": {}}]),
        ChatScript.words("Which room would you like?"),
    )
    thread = teams.channel("300")
    conversation = thread["id"]
    await say(teams, live_chat, teams.activity(thread, "ann", "book a room", mention_bot=True))
    await teams.wait_until_async(lambda: teams.messages, timeout=40, what="the question")
    [asked] = teams.messages
    assert asked.conversation == conversation and asked.text == "Which room would you like?"
    assert [label for label, _ in asked.buttons] == ["Small room", "Big room"]
    (_, small), (_, big) = asked.buttons

    # Another member's press runs nothing; they alone are told, in their personal chat.
    assert await say(teams, live_chat, teams.press(thread, "ben", asked.id, big)) == 1
    await teams.wait_until_async(
        lambda: teams.in_conversation("a:personal-ben"), timeout=20, what="the refusal"
    )
    [refusal] = teams.in_conversation("a:personal-ben")
    assert refusal.text == "This isn't yours to answer."
    assert desk.booked == [] and len(asked.buttons) == 2

    # The owner's press confirms, once; the same activity delivered again runs nothing.
    mine = teams.press(thread, "ann", asked.id, small)
    assert await say(teams, live_chat, mine) == 1
    assert await say(teams, live_chat, mine) == 0
    await teams.wait_until_async(
        lambda: len(teams.in_conversation(conversation)) == 2, timeout=40, what="the booking"
    )
    assert desk.booked == ["small"]
    assert teams.in_conversation(conversation)[1].text == "Confirmed and done."
    assert asked.buttons == [] and asked.notes == ["Chosen: Small room"]
    assert asked.text == "Which room would you like?"  # its text kept
    await settle()
    assert desk.booked == ["small"] and len(ollama.requests) == 2


async def test_a_sign_in_link_asked_in_a_channel_goes_to_the_persons_personal_chat(
    live_chat: RunningServer, teams: TeamsStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "calendar", "arguments": {}}]),
        ChatScript.words("Please sign in first, then ask again."),
    )
    thread = teams.channel("400")
    await say(teams, live_chat, teams.activity(thread, "ann", "my calendar?", mention_bot=True))
    await teams.wait_until_async(
        lambda: len(teams.messages) == 2, timeout=40, what="the link and the answer"
    )
    [private] = teams.in_conversation("a:personal-ann")
    assert private.text == "Sign in to Calendar: https://calendar.example/login?state=s1"
    [opened] = teams.opened
    assert opened["members"] == [{"id": "29:ann"}] and opened["tenantId"] == TENANT
    [answer] = teams.in_conversation(thread["id"])
    assert answer.text == "Please sign in first, then ask again."
