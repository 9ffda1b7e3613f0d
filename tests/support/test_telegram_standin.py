"""The Telegram stand-in answers as the Bot API does, to raw HTTP, and delivers like Telegram."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest
from aiohttp import web

from tests.support.telegram_standin import BOT_TOKEN, TelegramStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.fixture(scope="module")
def telegram() -> Iterator[TelegramStandIn]:
    with TelegramStandIn(webhook_secret="secret") as standin:
        yield standin


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


async def test_a_wrong_token_is_401_and_a_malformed_one_or_an_unknown_method_404(
    telegram: TelegramStandIn, http: httpx.AsyncClient
) -> None:
    wrong = await http.post(f"{telegram.url}/bot7000000001:AAwrong/getMe")
    malformed = await http.post(f"{telegram.url}/botnot-a-token/getMe")
    unknown = await http.post(f"{telegram.url}/bot{BOT_TOKEN}/getNothing")

    assert (wrong.status_code, wrong.json()) == (
        401,
        {"ok": False, "error_code": 401, "description": "Unauthorized"},
    )
    assert (malformed.status_code, malformed.json()["description"]) == (404, "Not Found")
    assert (unknown.status_code, unknown.json()["description"]) == (404, "Not Found")


async def test_a_call_takes_json_form_or_query_parameters_alike(
    telegram: TelegramStandIn, http: httpx.AsyncClient
) -> None:
    alice = telegram.user("Alice")
    chat = telegram.private_chat(alice)
    base = f"{telegram.url}/bot{BOT_TOKEN}/sendMessage"

    by_json = await http.post(base, json={"chat_id": chat.id, "text": "one"})
    by_form = await http.post(base, data={"chat_id": str(chat.id), "text": "two"})
    by_query = await http.get(base, params={"chat_id": chat.id, "text": "three"})

    assert [r.json()["result"]["text"] for r in (by_json, by_form, by_query)] == [
        "one",
        "two",
        "three",
    ]
    assert [c.params["chat_id"] for c in telegram.calls_to("sendMessage")][-3:] == [chat.id] * 3


async def test_a_reply_to_a_missing_message_is_refused_as_telegram_refuses_it(
    telegram: TelegramStandIn, http: httpx.AsyncClient
) -> None:
    alice = telegram.user("Alice")
    chat = telegram.private_chat(alice)
    base = f"{telegram.url}/bot{BOT_TOKEN}/sendMessage"

    refused = await http.post(
        base, json={"chat_id": chat.id, "text": "x", "reply_parameters": {"message_id": 99}}
    )
    too_long = await http.post(base, json={"chat_id": chat.id, "text": "x" * 4097})

    assert refused.json() == {
        "ok": False,
        "error_code": 400,
        "description": "Bad Request: message to be replied not found",
    }
    assert too_long.json()["description"] == "Bad Request: message is too long"


async def test_flood_control_answers_429_with_retry_after(
    telegram: TelegramStandIn, http: httpx.AsyncClient
) -> None:
    telegram.fail_next(1, status=429, retry_after=7)

    answer = await http.post(f"{telegram.url}/bot{BOT_TOKEN}/getMe")
    after = await http.post(f"{telegram.url}/bot{BOT_TOKEN}/getMe")

    assert (answer.status_code, answer.json()["parameters"]) == (429, {"retry_after": 7})
    assert after.json()["result"]["username"] == "mercury_test_bot"


async def test_a_file_downloads_only_with_the_bots_token(
    telegram: TelegramStandIn, http: httpx.AsyncClient
) -> None:
    stored = telegram.add_file(b"contents", file_name="a.txt")
    found = await http.post(
        f"{telegram.url}/bot{BOT_TOKEN}/getFile", json={"file_id": stored.file_id}
    )
    path = found.json()["result"]["file_path"]

    good = await http.get(f"{telegram.file_url}{BOT_TOKEN}/{path}")
    bad = await http.get(f"{telegram.file_url}7000000001:AAwrong/{path}")

    assert (good.status_code, good.content) == (200, b"contents")
    assert bad.status_code == 401


async def test_an_update_goes_to_the_webhook_with_the_secret_and_can_go_again(
    telegram: TelegramStandIn, http: httpx.AsyncClient
) -> None:
    seen: list[tuple[str | None, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        seen.append((request.headers.get("X-Telegram-Bot-Api-Secret-Token"), await request.json()))
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/webhooks/telegram", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/webhooks/telegram"
        await http.post(
            f"{telegram.url}/bot{BOT_TOKEN}/setWebhook", json={"url": url, "secret_token": "s2"}
        )
        alice = telegram.user("Alice")
        update = telegram.message(telegram.private_chat(alice), alice, "hi")
        with anyio.fail_after(10):
            statuses = [
                await telegram.deliver(update),
                await telegram.deliver(update),
                await telegram.deliver(update, secret="wrong"),
                await telegram.deliver(update, secret=None),
            ]
    finally:
        await runner.cleanup()
        telegram.webhook_secret = "secret"

    assert [d.status for d in statuses] == [200] * 4
    assert [secret for secret, _ in seen] == ["s2", "s2", "wrong", None]
    assert {body["update_id"] for _, body in seen} == {update["update_id"]}


async def test_an_edit_keeps_the_text_and_keyboard_and_one_that_changes_nothing_is_refused(
    telegram: TelegramStandIn, http: httpx.AsyncClient
) -> None:
    group = telegram.group("Ops")
    api = f"{telegram.url}/bot{BOT_TOKEN}"
    keyboard = {"inline_keyboard": [[{"text": "Stop", "callback_data": "s:1"}]]}
    sent = await http.post(
        f"{api}/sendMessage", json={"chat_id": group.id, "text": "a", "reply_markup": keyboard}
    )
    message_id = sent.json()["result"]["message_id"]
    edit = {"chat_id": group.id, "message_id": message_id, "text": "a b", "reply_markup": keyboard}

    changed = await http.post(f"{api}/editMessageText", json=edit)
    same = await http.post(f"{api}/editMessageText", json=edit)
    bare = await http.post(f"{api}/editMessageText", json={**edit, "reply_markup": None})
    missing = await http.post(f"{api}/editMessageText", json={**edit, "message_id": 999})
    too_long_data = await http.post(
        f"{api}/editMessageReplyMarkup",
        json={
            "chat_id": group.id,
            "message_id": message_id,
            "reply_markup": {"inline_keyboard": [[{"text": "x", "callback_data": "x" * 65}]]},
        },
    )

    assert changed.json()["result"]["reply_markup"] == keyboard
    assert (same.status_code, same.json()["description"][:36]) == (
        400,
        "Bad Request: message is not modified",
    )
    assert "reply_markup" not in bare.json()["result"]  # an edit without one removes it
    assert missing.json()["description"] == "Bad Request: message to edit not found"
    assert too_long_data.json()["description"] == "Bad Request: BUTTON_DATA_INVALID"
    assert telegram.message_now(group, message_id)["text"] == "a b"


async def test_a_draft_goes_to_a_private_chat_only(
    telegram: TelegramStandIn, http: httpx.AsyncClient
) -> None:
    alice = telegram.user("Alice")
    dm = telegram.private_chat(alice)
    group = telegram.group("Ops")
    api = f"{telegram.url}/bot{BOT_TOKEN}/sendMessageDraft"

    shown = await http.post(api, json={"chat_id": dm.id, "draft_id": 5, "text": ""})
    zero = await http.post(api, json={"chat_id": dm.id, "draft_id": 0, "text": "x"})
    in_group = await http.post(api, json={"chat_id": group.id, "draft_id": 5, "text": "x"})

    assert shown.json() == {"ok": True, "result": True}
    assert zero.status_code == in_group.status_code == 400
    assert telegram.drafts[-1] == {"chat_id": dm.id, "draft_id": 5, "text": ""}


async def test_a_callback_query_is_answered_once_and_a_stranger_cant_be_written_to_first(
    telegram: TelegramStandIn, http: httpx.AsyncClient
) -> None:
    group = telegram.group("Ops")
    stranger = telegram.user("Ben")
    api = f"{telegram.url}/bot{BOT_TOKEN}"
    keyboard = {"inline_keyboard": [[{"text": "Yes", "callback_data": "c:1"}]]}
    sent = await http.post(
        f"{api}/sendMessage", json={"chat_id": group.id, "text": "?", "reply_markup": keyboard}
    )
    update = telegram.press(sent.json()["result"], stranger)
    query = {"callback_query_id": update["callback_query"]["id"], "text": "No", "show_alert": True}

    first = await http.post(f"{api}/answerCallbackQuery", json=query)
    second = await http.post(f"{api}/answerCallbackQuery", json=query)
    private = await http.post(f"{api}/sendMessage", json={"chat_id": stranger.id, "text": "hi"})

    assert update["callback_query"]["data"] == "c:1"
    assert update["callback_query"]["from"]["id"] == stranger.id
    assert (first.json()["result"], second.status_code) == (True, 400)
    assert telegram.answers[-1]["show_alert"] is True
    assert (private.status_code, private.json()["description"]) == (
        403,
        "Forbidden: bot can't initiate conversation with a user",
    )
