"""Discord end to end: a real server builds the Discord bridge from its settings, and the bridge
holds the Discord stand-in's gateway through discord.py; people post through the stand-in,
the model is the Ollama stand-in, and the replies are the stand-in's records of the REST calls.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.discord_standin import (
    ALICE,
    BOB,
    BOT,
    CAROL,
    DM_ALICE,
    GENERAL,
    GROUP_DM,
    GUILD,
    THREAD,
    DiscordStandIn,
    RestCall,
)
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.scenes import system_of, user_contents
from tests.support.server import RunningServer

pytestmark = [pytest.mark.timeout(90)]

WAIT_S = 20.0


@pytest.fixture
def discord_api() -> Iterator[DiscordStandIn]:
    with DiscordStandIn() as standin:
        yield standin


@pytest.fixture
def chat(discord_api: DiscordStandIn, make_server: Callable[..., RunningServer]) -> RunningServer:
    # discord_api comes first: it is set up before the server and stopped after it.
    server = make_server(
        MERCURY_DISCORD="true",
        DISCORD_BOT_TOKEN=discord_api.token,
        DISCORD_API_URL=discord_api.api_url,
    )
    discord_api.wait_until_ready(timeout=WAIT_S)
    return server


def replies(api: DiscordStandIn, n: int) -> list[RestCall]:
    """Wait for the bot's ``n`` message creates; all it sent."""
    api.wait_for_calls(
        lambda c: c.method == "POST" and c.path.endswith("/messages") and c.status == 200,
        n,
        timeout=WAIT_S,
    )
    return api.sent_messages()


def final_reply(api: DiscordStandIn, content: str) -> tuple[RestCall, dict[str, Any]]:
    """The bot's one reply once it reads ``content`` (written live, #37): its create and the
    message as it is now."""
    api.wait_until(
        lambda: (
            [api.messages[int(c.answer["id"])]["content"] for c in api.sent_messages()] == [content]
        ),
        WAIT_S,
        what=f"the reply {content!r}",
    )
    [reply] = api.sent_messages()
    return reply, api.messages[int(reply.answer["id"])]


def settle(seconds: float = 1.0) -> None:
    """Give the pipeline time to do something it must not do (the only sleep-based check)."""
    time.sleep(seconds)


def test_in_a_thread_only_the_mention_triggers_and_sees_the_others_as_ambient_context(
    chat: RunningServer, discord_api: DiscordStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Lunch is at noon."))
    discord_api.post_message(THREAD, ALICE, "who's up for lunch?")
    discord_api.post_message(THREAD, BOB, "me, at the usual place")
    asked = discord_api.post_message(THREAD, CAROL, f"<@{BOT.id}> when is lunch?", mentions=[BOT])

    reply, _ = final_reply(discord_api, "Lunch is at noon.")
    assert reply.path == f"/channels/{THREAD}/messages"  # answered in the thread
    assert str(reply.json["message_reference"]["message_id"]) == asked["id"]
    [request] = ollama.requests
    words = user_contents(request)[-1]
    assert "<ambient" in words and "not addressed to you" in words
    assert 'author="Alice"' in words and "who's up for lunch?" in words
    assert 'author="Bobby"' in words and "me, at the usual place" in words
    assert f'<caller id="discord:{CAROL.id}" name="carol"' in words
    assert words.endswith("when is lunch?</caller>")
    assert f"group chat (discord:{GUILD}:{GENERAL}:{THREAD})" in system_of(request)
    [typing] = discord_api.matching(lambda c: c.path.endswith("/typing"))
    assert typing.path == f"/channels/{THREAD}/typing"
    settle()  # the bot's own reply, echoed by the gateway, starts nothing
    assert len(ollama.requests) == 1


def test_a_direct_message_always_triggers(
    chat: RunningServer, discord_api: DiscordStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Hi Alice."))
    discord_api.post_message(DM_ALICE, ALICE, "hello there")
    reply, _ = final_reply(discord_api, "Hi Alice.")
    assert reply.path == f"/channels/{DM_ALICE}/messages"
    assert "message_reference" not in reply.json
    assert f"direct chat (discord:@me:{DM_ALICE})" in system_of(ollama.requests[0])


def test_a_group_dm_of_several_people_is_a_group_chat_where_only_a_mention_runs(
    chat: RunningServer, discord_api: DiscordStandIn, ollama: OllamaStandIn
) -> None:
    discord_api.post_message(GROUP_DM, BOB, "anyone for lunch?")
    ollama.enqueue(ChatScript.words("Noon, as usual."))
    discord_api.post_message(GROUP_DM, ALICE, f"<@{BOT.id}> when is lunch?", mentions=[BOT])
    final_reply(discord_api, "Noon, as usual.")
    [request] = ollama.requests  # Bob's unmentioned line ran nothing, as in a group
    assert f"group chat (discord:@group:{GROUP_DM})" in system_of(request)
    assert "anyone for lunch?" in user_contents(request)[-1]  # ambient context


def test_a_redelivered_message_runs_once_and_a_forged_webhook_runs_nothing(
    chat: RunningServer, discord_api: DiscordStandIn, ollama: OllamaStandIn
) -> None:
    message = discord_api.post_message(DM_ALICE, ALICE, "count me once")
    discord_api.dispatch("MESSAGE_CREATE", message)  # the gateway replays it (a resume)
    replies(discord_api, 1)

    # Discord has no webhook here: whatever posts to one is no bridge's delivery.
    forged = httpx.post(
        chat.url + "/webhooks/discord",
        content=json.dumps({"t": "MESSAGE_CREATE", "d": message}).encode(),
        headers={"content-type": "application/json"},
        timeout=10,
    )
    assert forged.status_code == 404 and forged.json()["ok"] is False
    settle()
    assert len(ollama.requests) == 1
    assert len(discord_api.sent_messages()) == 1


def test_files_come_in_to_the_spaces_inbox_and_go_out_in_the_reply(
    chat: RunningServer, discord_api: DiscordStandIn, ollama: OllamaStandIn
) -> None:
    seen: list[str] = []

    def respond(request: dict[str, Any]) -> ChatScript:
        if not seen:
            seen.append(user_contents(request)[-1])
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
    scores = discord_api.add_file(GENERAL, "scores.csv", b"name,score\nann,3\n", "text/csv")
    discord_api.post_message(
        GENERAL, ALICE, f"<@{BOT.id}> summarize", mentions=[BOT], attachments=[scores]
    )

    reply, message = final_reply(discord_api, "Here is the summary.")
    assert re.search(r"^- inbox/.*scores\.csv$", seen[0], re.MULTILINE), seen[0]
    assert reply.path == f"/channels/{GENERAL}/messages"
    # The file rides in the same message: posted with it, or added by its last edit.
    [carrier] = [c for c in [reply, *discord_api.edits()] if c.files]
    assert [(f.field, f.filename, f.data) for f in carrier.files] == [
        ("files[0]", "summary.txt", b"ann leads")
    ]
    assert [a["filename"] for a in message["attachments"]] == ["summary.txt"]
    [download] = discord_api.matching(lambda c: c.path.startswith("/attachments/"))
    assert download.authorization is None  # the CDN link is signed; no token goes with it
    space = f"space%3Adiscord%3A{GUILD}%3A{GENERAL}"
    inbox = Path(chat.services.settings.wiki.vault_path) / "users" / space / "inbox"
    assert [p.read_bytes() for p in inbox.iterdir()] == [b"name,score\nann,3\n"]


def test_a_stale_message_from_the_gateway_runs_nothing(
    chat: RunningServer, discord_api: DiscordStandIn, ollama: OllamaStandIn
) -> None:
    # Adversarial review (#34): a message's own time was never checked; the gateway's
    # messages pass the same window as the webhooks'.
    discord_api.post_message(DM_ALICE, ALICE, "from 2010", sent_at=1_262_304_000.0)
    ollama.enqueue(ChatScript.words("Hi Alice."))
    discord_api.post_message(DM_ALICE, ALICE, "hello now")
    final_reply(discord_api, "Hi Alice.")
    settle()
    assert len(ollama.requests) == 1
    assert user_contents(ollama.requests[0])[-1].endswith("hello now</caller>")
