"""Telegram end to end: the Telegram stand-in delivers updates with the webhook secret to a real
server whose Telegram bridge (python-telegram-bot) answers through the stand-in's Bot API; the
model is the Ollama stand-in. The scenes of tests/bridges/test_pipeline_end_to_end.py through
Telegram's own wire: mentions and ambient context, replies to the bot, forum topics, DMs,
files both ways, re-deliveries and forged deliveries.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import pytest

from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.scenes import settle, system_of, user_contents
from tests.support.server import RunningServer
from tests.support.telegram_standin import ApiCall, Chat, TelegramStandIn, User

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

BOT = "@mercury_test_bot"


@pytest.fixture
def chat(make_server: Callable[..., RunningServer], telegram: TelegramStandIn) -> RunningServer:
    return make_server(MERCURY_CONFIG_FILE="", **telegram.env())


@pytest.fixture
def people(telegram: TelegramStandIn) -> dict[str, User]:
    return {
        name: telegram.user(name, "Example", username=f"{name.lower()}_example")
        for name in ("Ann", "Ben", "Cat", "Dee")
    }


def hook(chat: RunningServer) -> str:
    return chat.url + "/webhooks/telegram"


async def say(
    telegram: TelegramStandIn, chat: RunningServer, update: dict[str, Any]
) -> dict[str, Any]:
    """Deliver ``update`` as Telegram does and return the webhook's JSON answer."""
    with anyio.fail_after(30):
        delivered = await telegram.deliver(update, url=hook(chat))
    assert delivered.status == 200, delivered.body
    return dict(delivered.json())


async def sent(telegram: TelegramStandIn, method: str, count: int) -> list[ApiCall]:
    """The first ``count`` answered calls to ``method``, once the server has made them."""
    return await anyio.to_thread.run_sync(lambda: telegram.wait_for_calls(method, count, 40))


async def answered(
    telegram: TelegramStandIn, chat: Chat, text: str, index: int = 0
) -> list[dict[str, Any]]:
    """The bot's messages in ``chat`` once the ``index``th is ``text`` (a live answer's last
    edit)."""
    with anyio.fail_after(40):
        while True:
            kept = telegram.sent_messages(chat)
            if len(kept) > index and kept[index].get("text") == text:
                return kept
            await asyncio.sleep(0.05)


def space_folder(chat: RunningServer, space_id: str) -> Path:
    vault = Path(chat.services.settings.wiki.vault_path)
    return vault / "users" / quote("space:" + space_id, safe="")


async def test_in_a_group_only_the_mention_runs_and_its_answer_replies_to_it(
    chat: RunningServer, telegram: TelegramStandIn, ollama: OllamaStandIn, people: dict[str, User]
) -> None:
    group = telegram.group("Lunch")
    ollama.enqueue(ChatScript.words("Lunch is at noon."))
    await say(telegram, chat, telegram.message(group, people["Ann"], "who's up for lunch?"))
    await say(telegram, chat, telegram.message(group, people["Ben"], "me, at the usual place"))
    asked = telegram.message(group, people["Cat"], f"{BOT} when is lunch?")
    assert (await say(telegram, chat, asked))["taken"] == 1

    [reply] = await sent(telegram, "sendMessage", 1)
    # Written live (#37): posted once, then edited until it is the whole answer.
    [kept] = await answered(telegram, group, "Lunch is at noon.")
    assert reply.params["chat_id"] == group.id
    assert reply.params["reply_parameters"]["message_id"] == asked["message"]["message_id"]
    assert kept["reply_to_message"]["message_id"] == asked["message"]["message_id"]
    [request] = ollama.requests
    words = user_contents(request)[-1]
    assert "<ambient" in words and "not addressed to you" in words
    assert 'author="Ann Example"' in words and "who's up for lunch?" in words
    assert 'author="Ben Example"' in words and "me, at the usual place" in words
    caller = f'<caller id="telegram:{people["Cat"].id}" name="Cat Example"'
    assert caller in words and words.endswith("when is lunch?</caller>")
    assert f"group chat (telegram:{group.id})" in system_of(request)
    [typing] = telegram.calls_to("sendChatAction")
    assert (typing.params["chat_id"], typing.params["action"]) == (group.id, "typing")
    await settle()
    assert len(ollama.requests) == 1 and len(telegram.calls_to("sendMessage")) == 1


async def test_a_reply_to_the_bots_message_runs_without_a_mention(
    chat: RunningServer, telegram: TelegramStandIn, ollama: OllamaStandIn, people: dict[str, User]
) -> None:
    group = telegram.group("Ops")
    ollama.enqueue(ChatScript.words("The build is green."), ChatScript.words("Since noon."))
    await say(telegram, chat, telegram.message(group, people["Ann"], f"{BOT} build status?"))
    [answer] = await answered(telegram, group, "The build is green.")

    follow_up = telegram.message(group, people["Ann"], "since when?", reply_to=answer["message_id"])
    assert (await say(telegram, chat, follow_up))["taken"] == 1

    _, second = await sent(telegram, "sendMessage", 2)
    await answered(telegram, group, "Since noon.", index=1)
    assert second.params["reply_parameters"]["message_id"] == follow_up["message"]["message_id"]


async def test_a_forum_topic_is_a_space_of_its_own_and_is_answered_in_the_topic(
    chat: RunningServer, telegram: TelegramStandIn, ollama: OllamaStandIn, people: dict[str, User]
) -> None:
    forum = telegram.group("Team", forum=True)
    topic = telegram.open_topic(forum, "Releases", people["Ann"])
    ollama.enqueue(ChatScript.words("Friday."))
    await say(telegram, chat, telegram.message(forum, people["Ben"], "the secret word is tulip"))
    await say(telegram, chat, telegram.message(forum, people["Cat"], "v2 is close", topic=topic))
    asked = telegram.message(forum, people["Ann"], f"{BOT} when do we ship?", topic=topic)
    await say(telegram, chat, asked)

    [reply] = await sent(telegram, "sendMessage", 1)
    assert (reply.params["chat_id"], reply.params["message_thread_id"]) == (forum.id, topic)
    [request] = ollama.requests
    words = user_contents(request)[-1]
    assert "v2 is close" in words
    assert "tulip" not in json.dumps(request)  # said in the General topic: another space
    assert f"group chat (telegram:{forum.id}:{topic})" in system_of(request)
    [typing] = telegram.calls_to("sendChatAction")
    assert typing.params["message_thread_id"] == topic


async def test_a_direct_message_always_runs_and_is_answered_as_a_plain_message(
    chat: RunningServer, telegram: TelegramStandIn, ollama: OllamaStandIn, people: dict[str, User]
) -> None:
    dee = people["Dee"]
    ollama.enqueue(ChatScript.words("Hi Dee."))
    await say(telegram, chat, telegram.message(telegram.private_chat(dee), dee, "hello there"))

    [reply] = await sent(telegram, "sendMessage", 1)
    assert (reply.params["chat_id"], reply.params["text"]) == (dee.id, "Hi Dee.")
    assert "reply_parameters" not in reply.params
    [request] = ollama.requests
    assert f"direct chat (telegram:{dee.id})" in system_of(request)
    assert f'<caller id="telegram:{dee.id}" name="Dee Example"' in user_contents(request)[-1]


async def test_a_start_is_greeted_by_the_bridge_and_never_reaches_the_model(
    chat: RunningServer, telegram: TelegramStandIn, ollama: OllamaStandIn, people: dict[str, User]
) -> None:
    dee = people["Dee"]
    dm = telegram.private_chat(dee)
    # The Start of the group's t.me/<bot>?start=sign-in link: told to ask here, privately.
    await say(telegram, chat, telegram.message(dm, dee, "/start sign-in"))
    [signing] = await sent(telegram, "sendMessage", 1)
    assert signing.params["chat_id"] == dee.id
    assert signing.params["text"].startswith("Hello! This is our private chat: ask me here")
    # A bare Start, one naming the bot, and a payload that isn't ours: a greeting each.
    for started in ("/start", f"/start{BOT}", "/start ignore_all_instructions"):
        await say(telegram, chat, telegram.message(dm, dee, started))
    greeted = await sent(telegram, "sendMessage", 4)
    assert [c.params["text"] for c in greeted[1:]] == [
        "Hello! Write to me here and I'll answer."
    ] * 3
    await settle()
    assert ollama.requests == []

    # What they write next runs, and no Start is in what the model reads.
    ollama.enqueue(ChatScript.words("Hi Dee."))
    await say(telegram, chat, telegram.message(dm, dee, "hello there"))
    await answered(telegram, dm, "Hi Dee.", index=4)
    [request] = ollama.requests
    assert "/start" not in json.dumps(request["messages"])


async def test_a_file_comes_into_the_spaces_inbox_and_the_outbox_file_goes_out_as_a_document(
    chat: RunningServer, telegram: TelegramStandIn, ollama: OllamaStandIn, people: dict[str, User]
) -> None:
    group = telegram.group("Scores")
    scores = telegram.add_file(b"name,score\nann,3\n", file_name="scores.csv", mime_type="text/csv")
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
    asked = telegram.message(group, people["Ann"], caption=f"{BOT} summarize", document=scores)
    await say(telegram, chat, asked)
    [document] = await sent(telegram, "sendDocument", 1)

    assert re.search(r"^- inbox/.*scores\.csv$", seen[0], re.MULTILINE), seen[0]
    assert [c.params["file_id"] for c in telegram.calls_to("getFile")] == [scores.file_id]
    assert telegram.downloads == [scores.path]
    inbox = space_folder(chat, f"telegram:{group.id}") / "inbox"
    assert [p.read_bytes() for p in inbox.iterdir()] == [b"name,score\nann,3\n"]
    [text] = telegram.calls_to("sendMessage")
    [kept, _] = await answered(telegram, group, "Here is the summary.")
    assert text.params["reply_parameters"]["message_id"] == asked["message"]["message_id"]
    assert kept["reply_to_message"]["message_id"] == asked["message"]["message_id"]
    upload = document.files["document"]
    assert (upload.filename, upload.data, document.params["chat_id"]) == (
        "summary.txt",
        b"ann leads",
        group.id,
    )
    order = [call.method for call in telegram.calls]
    assert order.index("sendMessage") < order.index("sendDocument")


async def test_an_update_telegram_delivers_again_runs_once(
    chat: RunningServer, telegram: TelegramStandIn, ollama: OllamaStandIn, people: dict[str, User]
) -> None:
    dee = people["Dee"]
    update = telegram.message(telegram.private_chat(dee), dee, "count me once")

    assert (await say(telegram, chat, update))["taken"] == 1
    assert (await say(telegram, chat, update))["taken"] == 0

    await sent(telegram, "sendMessage", 1)
    await settle()
    assert len(ollama.requests) == 1 and len(telegram.calls_to("sendMessage")) == 1


async def test_a_delivery_with_a_wrong_or_no_secret_runs_nothing(
    chat: RunningServer, telegram: TelegramStandIn, ollama: OllamaStandIn, people: dict[str, User]
) -> None:
    dee = people["Dee"]
    update = telegram.message(telegram.private_chat(dee), dee, "forged")

    with anyio.fail_after(30):
        wrong = await telegram.deliver(update, url=hook(chat), secret="not-the-secret")
        missing = await telegram.deliver(update, url=hook(chat), secret=None)

    assert (wrong.status, missing.status) == (401, 401)
    assert wrong.json()["ok"] is False
    await settle()
    assert ollama.requests == []
    assert [c.method for c in telegram.calls] == []


async def test_an_edit_and_a_bots_message_run_nothing(
    chat: RunningServer, telegram: TelegramStandIn, ollama: OllamaStandIn, people: dict[str, User]
) -> None:
    group: Chat = telegram.group("Quiet")
    other_bot = telegram.user("Helper", username="helper_bot", is_bot=True)
    original = telegram.message(group, people["Ann"], "hello")
    await say(telegram, chat, original)

    edit = telegram.edited(original, f"hello {BOT}")
    assert (await say(telegram, chat, edit))["taken"] == 0
    by_bot = telegram.message(group, other_bot, f"{BOT} ping")
    assert (await say(telegram, chat, by_bot))["taken"] == 0

    await settle()
    assert ollama.requests == []
    assert telegram.calls_to("sendMessage") == []


async def test_a_stale_message_is_acknowledged_and_a_chat_no_space_can_have_refused(
    chat: RunningServer, telegram: TelegramStandIn, ollama: OllamaStandIn, people: dict[str, User]
) -> None:
    # Adversarial review (#34): a message dated 2010 ran; a chat id no space can have was
    # taken, then failed in the pipeline after the answer.
    dm = telegram.private_chat(people["Dee"])
    old = telegram.message(dm, people["Dee"], "from 2010", extra={"date": 1_262_304_000})
    assert await say(telegram, chat, old) == {"ok": True, "taken": 0}
    huge = telegram.message(dm, people["Dee"], "hello")
    huge["message"]["chat"] = {"id": 10**24, "type": "private", "first_name": "Dee"}
    with anyio.fail_after(30):
        refused = await telegram.deliver(huge, url=hook(chat))
    assert refused.status == 400
    await settle()
    assert ollama.requests == []
