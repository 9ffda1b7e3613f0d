"""Pairing end to end (#40): a stranger's direct message through Telegram's own wire (the
Telegram stand-in, python-telegram-bot in a real server), the code it is answered with, and an
approver answering it over ``/pairing``; the model is the Ollama stand-in, whose request log
shows what reached it. Each DM policy: ``pairing`` (the default with a directory),
``allowlist`` and ``open``."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import ALICE, BOB
from tests.support.contract import check_response
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.support.telegram_standin import Chat, TelegramStandIn, User

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

BOT = "@mercury_test_bot"
#: Alice approves (her roles include admin); Bob is known but no approver.
PEOPLE = [
    {"id": "alice", "displayName": "Alice", "roles": ["admin"], "identities": ["static:alice"]},
    {"id": "bob", "displayName": "Bob", "identities": ["static:bob"]},
]
CODE = re.compile(r"\b([A-HJKMNP-Z2-9]{8})\b")
SECRET = "my plan is to rename the wiki"


@pytest.fixture
def start(
    make_server: Callable[..., RunningServer], telegram: TelegramStandIn
) -> Callable[..., RunningServer]:
    def started(**overrides: str) -> RunningServer:
        return make_server(
            MERCURY_CONFIG_FILE="",
            DIRECTORY_STATIC_PEOPLE=json.dumps(PEOPLE),
            **telegram.env(),
            **overrides,
        )

    return started


@pytest.fixture
def stranger(telegram: TelegramStandIn) -> User:
    return telegram.user("Zed", "Stranger", username="zed_stranger")


async def say(telegram: TelegramStandIn, chat: RunningServer, update: dict[str, Any]) -> None:
    with anyio.fail_after(30):
        delivered = await telegram.deliver(update, url=chat.url + "/webhooks/telegram")
    assert delivered.status == 200, delivered.body


async def bot_texts(telegram: TelegramStandIn, chat: Chat, count: int) -> list[str]:
    """The bot's messages in ``chat`` once there are ``count`` of them."""
    with anyio.fail_after(40):
        while len(kept := telegram.sent_messages(chat)) < count:
            await asyncio.sleep(0.05)
    return [str(m.get("text")) for m in kept]


async def settle(seconds: float = 1.5) -> None:
    """Give the pipeline time to do something it must not do (the only sleep-based check)."""
    await asyncio.sleep(seconds)


def pairing(chat: RunningServer, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    response = httpx.request(method, chat.url + path, headers=headers, timeout=30)
    check_response(response)
    return response


async def code_of(telegram: TelegramStandIn, chat: RunningServer, dm: Chat, user: User) -> str:
    await say(telegram, chat, telegram.message(dm, user, SECRET))
    [text] = await bot_texts(telegram, dm, 1)
    found = CODE.search(text)
    assert found is not None, text
    return found[1]


async def test_a_strangers_start_gets_their_code_and_once_let_in_a_greeting_not_a_turn(
    start: Callable[..., RunningServer],
    telegram: TelegramStandIn,
    ollama: OllamaStandIn,
    stranger: User,
) -> None:
    chat = start()
    dm = telegram.private_chat(stranger)
    # Telegram's Start is a stranger's first message: it asks to be let in like any other.
    await say(telegram, chat, telegram.message(dm, stranger, "/start sign-in"))
    found = CODE.search((await bot_texts(telegram, dm, 1))[0])
    assert found is not None
    approved = pairing(chat, "POST", f"/pairing/{found[1]}/approve", ALICE)
    assert approved.status_code == 200, approved.text
    await bot_texts(telegram, dm, 2)  # told they were let in
    await say(telegram, chat, telegram.message(dm, stranger, "/start"))
    assert (await bot_texts(telegram, dm, 3))[2] == "Hello! Write to me here and I'll answer."
    await settle()
    assert ollama.requests == []


async def test_a_strangers_dm_gets_a_code_the_model_sees_nothing_and_approval_lets_them_in(
    start: Callable[..., RunningServer],
    telegram: TelegramStandIn,
    ollama: OllamaStandIn,
    stranger: User,
) -> None:
    chat = start()
    dm = telegram.private_chat(stranger)
    code = await code_of(telegram, chat, dm, stranger)
    [text] = await bot_texts(telegram, dm, 1)
    assert "administrator" in text and "one hour" in text
    await say(telegram, chat, telegram.message(dm, stranger, "hello? anyone?"))
    await settle()
    assert len(telegram.sent_messages(dm)) == 1  # the same code, not sent again at once
    assert ollama.requests == []

    # Bob is known, but no approver.
    for method, path in (("GET", "/pairing"), ("POST", f"/pairing/{code}/approve")):
        refused = pairing(chat, method, path, BOB)
        assert refused.status_code == 403 and refused.json()["ok"] is False
        assert "admin" in refused.json()["error"]
    listed = pairing(chat, "GET", "/pairing", ALICE)
    assert listed.status_code == 200
    [waiting] = listed.json()["pairings"]
    assert waiting["code"] == code and waiting["platform"] == "telegram"
    assert waiting["account"] == str(stranger.id) and waiting["name"] == "Zed Stranger"

    approved = pairing(chat, "POST", f"/pairing/{code.lower()}/approve", ALICE)
    assert approved.status_code == 200, approved.text
    assert approved.json()["approved"] is True and approved.json()["pairing"]["code"] == code
    told = (await bot_texts(telegram, dm, 2))[1]
    assert told == "An administrator gave you access: you can talk to me now."
    assert pairing(chat, "GET", "/pairing", ALICE).json()["pairings"] == []
    again = pairing(chat, "POST", f"/pairing/{code}/approve", ALICE)
    assert again.status_code == 404 and code in again.json()["error"]

    ollama.enqueue(ChatScript.words("Hello Zed."))
    await say(telegram, chat, telegram.message(dm, stranger, "what can you do?"))
    with anyio.fail_after(40):
        while (await bot_texts(telegram, dm, 3))[2] != "Hello Zed.":
            await asyncio.sleep(0.05)
    [request] = ollama.requests
    seen = json.dumps(request["messages"])
    assert "what can you do?" in seen
    assert SECRET not in seen and "anyone?" not in seen

    # An approver lets the account out again: its next message is a stranger's once more.
    account = f"telegram:{stranger.id}"
    for method, path in (("GET", "/pairing/admitted"), ("DELETE", f"/pairing/admitted/{account}")):
        refused = pairing(chat, method, path, BOB)
        assert refused.status_code == 403 and refused.json()["ok"] is False
    [admitted] = pairing(chat, "GET", "/pairing/admitted", ALICE).json()["accounts"]
    assert admitted["account"] == account and admitted["approvedBy"] == "people:alice"
    revoked = pairing(chat, "DELETE", f"/pairing/admitted/{account}", ALICE)
    assert revoked.json() == {"ok": True, "account": account, "revoked": True}
    assert pairing(chat, "DELETE", f"/pairing/admitted/{account}", ALICE).status_code == 404
    await say(telegram, chat, telegram.message(dm, stranger, "still there?"))
    texts = await bot_texts(telegram, dm, 4)
    assert CODE.search(texts[3]) is not None  # a new code, and the model heard nothing
    assert len(ollama.requests) == 1


async def test_a_denied_stranger_is_told_nothing_and_stays_out(
    start: Callable[..., RunningServer], telegram: TelegramStandIn, ollama: OllamaStandIn
) -> None:
    chat = start()
    # Telegram says which language the stranger's app is in: the code is sent in it.
    french = telegram.user("Zoé", language_code="fr-FR")
    dm = telegram.private_chat(french)
    code = await code_of(telegram, chat, dm, french)
    [text] = await bot_texts(telegram, dm, 1)
    assert text.startswith("Cet assistant ne vous connaît pas encore.")
    assert pairing(chat, "POST", f"/pairing/{code}/deny", BOB).status_code == 403
    denied = pairing(chat, "POST", f"/pairing/{code}/deny", ALICE)
    assert denied.status_code == 200
    assert denied.json() == {"ok": True, "code": code, "denied": True}
    assert pairing(chat, "GET", "/pairing", ALICE).json()["pairings"] == []
    assert pairing(chat, "POST", f"/pairing/{code}/approve", ALICE).status_code == 404
    assert pairing(chat, "POST", f"/pairing/{code}/deny", ALICE).status_code == 404
    assert pairing(chat, "POST", "/pairing/not-a-code/deny", ALICE).status_code == 404

    await say(telegram, chat, telegram.message(dm, french, "please?"))
    await settle()
    assert len(telegram.sent_messages(dm)) == 1 and ollama.requests == []


async def test_under_allowlist_a_stranger_gets_no_code_and_in_groups_strangers_stay_unanswered(
    start: Callable[..., RunningServer],
    telegram: TelegramStandIn,
    ollama: OllamaStandIn,
    stranger: User,
) -> None:
    chat = start(TELEGRAM_DM_POLICY="allowlist")
    dm = telegram.private_chat(stranger)
    await say(telegram, chat, telegram.message(dm, stranger, SECRET))
    group = telegram.group("Lobby")
    await say(telegram, chat, telegram.message(group, stranger, f"{BOT} hi"))
    await settle()
    assert telegram.sent_messages(dm) == [] and telegram.sent_messages(group) == []
    assert ollama.requests == []
    assert pairing(chat, "GET", "/pairing", ALICE).json()["pairings"] == []


async def test_under_pairing_a_stranger_in_a_group_gets_no_code(
    start: Callable[..., RunningServer],
    telegram: TelegramStandIn,
    ollama: OllamaStandIn,
    stranger: User,
) -> None:
    chat = start()
    group = telegram.group("Lobby")
    await say(telegram, chat, telegram.message(group, stranger, f"{BOT} let me in"))
    await say(telegram, chat, telegram.message(group, stranger, SECRET))
    await settle()
    assert telegram.sent_messages(group) == [] and ollama.requests == []
    assert pairing(chat, "GET", "/pairing", ALICE).json()["pairings"] == []

    # Nothing they wrote in the group was kept as its ambient talk: once let in, their
    # first turn there shows the model none of it.
    code = await code_of(telegram, chat, telegram.private_chat(stranger), stranger)
    assert pairing(chat, "POST", f"/pairing/{code}/approve", ALICE).status_code == 200
    ollama.enqueue(ChatScript.words("Welcome."))
    await say(telegram, chat, telegram.message(group, stranger, f"{BOT} hello all"))
    with anyio.fail_after(40):
        while not ollama.requests:
            await asyncio.sleep(0.05)
    seen = json.dumps(ollama.requests[0]["messages"])
    assert "hello all" in seen
    assert SECRET not in seen and "let me in" not in seen


async def test_under_open_a_stranger_is_answered(
    start: Callable[..., RunningServer],
    telegram: TelegramStandIn,
    ollama: OllamaStandIn,
    stranger: User,
) -> None:
    chat = start(TELEGRAM_DM_POLICY="open")
    dm = telegram.private_chat(stranger)
    ollama.enqueue(ChatScript.words("Hi there."))
    await say(telegram, chat, telegram.message(dm, stranger, "hello"))
    with anyio.fail_after(40):
        while (await bot_texts(telegram, dm, 1))[0] != "Hi there.":
            await asyncio.sleep(0.05)
    assert pairing(chat, "GET", "/pairing", ALICE).json()["pairings"] == []


async def test_past_the_platforms_bound_a_stranger_is_told_to_try_later_once(
    start: Callable[..., RunningServer],
    telegram: TelegramStandIn,
    ollama: OllamaStandIn,
) -> None:
    chat = start(BRIDGE_PAIRING_MAX_PENDING="2")
    first, second, third = (telegram.user(name) for name in ("Ann", "Ben", "Cat"))
    for user in (first, second):
        await code_of(telegram, chat, telegram.private_chat(user), user)
    late = telegram.private_chat(third)
    await say(telegram, chat, telegram.message(late, third, SECRET))
    [told] = await bot_texts(telegram, late, 1)
    assert told == "Too many requests for access are waiting right now. Try again later."
    await say(telegram, chat, telegram.message(late, third, "and now?"))
    await settle()
    assert len(telegram.sent_messages(late)) == 1  # once, not per message
    waiting = pairing(chat, "GET", "/pairing", ALICE).json()["pairings"]
    assert sorted(p["account"] for p in waiting) == sorted([str(first.id), str(second.id)])
    assert ollama.requests == []
