"""The Telegram bridge drives the real python-telegram-bot against the Telegram stand-in."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from bridges import (
    Attachment,
    BridgeError,
    EgressFile,
    PlatformUnavailable,
    Received,
    WebhookBridge,
    WebhookOutcome,
)
from bridges.port import LiveBridge, Pressed, ReplyButton
from bridges.telegram import MAX_MESSAGE_CHARS, TelegramBridge, split_text
from core.config.settings import ConfigurationError, TelegramSettings
from tests.support.telegram_standin import BOT_TOKEN, Chat, TelegramStandIn

SECRET = "s3cret-webhook_token"
BOT_NAME = "Mercury"

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.fixture(scope="module")
def telegram() -> Iterator[TelegramStandIn]:
    with TelegramStandIn(webhook_secret=SECRET) as standin:
        yield standin


@pytest.fixture(autouse=True)
def fresh(telegram: TelegramStandIn) -> Iterator[None]:
    telegram.reset()
    yield
    telegram.reset()


def settings_for(telegram: TelegramStandIn, **changes: Any) -> TelegramSettings:
    given: dict[str, Any] = {
        "enabled": True,
        "bot_token": telegram.token,
        "webhook_secret": SECRET,
        "api_url": telegram.api_url,
        "file_url": telegram.file_url,
    }
    return TelegramSettings(**{**given, **changes})


@pytest.fixture
async def bridge(telegram: TelegramStandIn) -> AsyncIterator[TelegramBridge]:
    opened = TelegramBridge(settings_for(telegram), bot_name=BOT_NAME, timeout_s=5.0)
    try:
        yield opened
    finally:
        await opened.close()


async def receive(
    bridge: TelegramBridge, telegram: TelegramStandIn, update: dict[str, Any], **options: Any
) -> WebhookOutcome:
    headers, body = telegram.delivery(update, **options)
    with anyio.fail_after(10):
        return await bridge.receive("POST", {}, {k.lower(): v for k, v in headers.items()}, body)


async def one_message(
    bridge: TelegramBridge, telegram: TelegramStandIn, update: dict[str, Any]
) -> Received:
    """The update's one message as the pipeline handles it: received, then completed."""
    outcome = await receive(bridge, telegram, update)
    assert outcome.verdict == "accepted", outcome.reason
    [message] = outcome.messages
    with anyio.fail_after(10):
        return await bridge.complete(message)


# -- the webhook's secret ----------------------------------------------------------------


async def test_the_bridge_is_a_webhook_bridge_for_telegram(bridge: TelegramBridge) -> None:
    assert isinstance(bridge, WebhookBridge)
    assert bridge.platform == "telegram"


async def test_an_update_with_the_right_secret_is_accepted(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    update = telegram.message(telegram.private_chat(alice), alice, "hello")

    outcome = await receive(bridge, telegram, update)

    assert outcome.verdict == "accepted"
    assert outcome.messages[0].text == "hello"


async def test_an_update_nested_too_deeply_is_malformed(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    # Adversarial review (#34): msgspec's RecursionError reached the route as a 500.
    headers, _ = telegram.delivery({"update_id": 1})
    depth = 100_000
    body = b'{"update_id":1,"deep":' + b"[" * depth + b"]" * depth + b"}"
    lowered = {k.lower(): v for k, v in headers.items()}
    outcome = await bridge.receive("POST", {}, lowered, body)
    assert outcome.verdict == "malformed"


async def test_a_message_carries_the_date_telegram_gave_it(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    # #34: a message's own time is what the stale-message window is checked against.
    alice = telegram.user("Alice")
    update = telegram.message(
        telegram.private_chat(alice), alice, "hello", extra={"date": 1_262_304_000}
    )
    message = await one_message(bridge, telegram, update)
    assert message.sent_at == datetime(2010, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "fields",
    [
        {"chat": {"id": -(10**24), "type": "supergroup", "title": "Huge"}},
        {"message_thread_id": -5, "is_topic_message": True},
    ],
    ids=["chat id past 20 digits", "negative topic"],
)
async def test_a_chat_or_topic_that_cant_be_a_space_is_malformed_before_it_is_taken(
    bridge: TelegramBridge, telegram: TelegramStandIn, fields: dict[str, Any]
) -> None:
    # Adversarial review (#34): such an update was accepted, then failed in the pipeline
    # after the answer, with a traceback and the message lost.
    alice = telegram.user("Alice")
    update = telegram.message(telegram.group("Team"), alice, "hello")
    update["message"].update(fields)
    outcome = await receive(bridge, telegram, update)
    assert outcome.verdict == "malformed"
    assert "space id" in outcome.reason


async def test_an_update_without_the_secret_header_is_forged(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    update = telegram.message(telegram.private_chat(alice), alice, "hello")

    outcome = await receive(bridge, telegram, update, secret=None)

    assert (outcome.verdict, outcome.messages) == ("forged", ())


async def test_an_update_with_a_wrong_secret_is_forged(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    update = telegram.message(telegram.private_chat(alice), alice, "hello")

    for wrong in ("guess", SECRET + "x", SECRET[:-1], "", "sécret"):
        outcome = await receive(bridge, telegram, update, secret=wrong)
        assert outcome.verdict == "forged", wrong
    assert SECRET not in outcome.reason


async def test_a_secret_from_before_a_rotation_is_forged(telegram: TelegramStandIn) -> None:
    # Telegram's updates carry no timestamp to go stale by: a secret goes stale when the
    # webhook's secret_token is changed, and the bridge then takes only the new one.
    rotated = TelegramBridge(settings_for(telegram, webhook_secret="new-secret"), bot_name="M")
    try:
        alice = telegram.user("Alice")
        update = telegram.message(telegram.private_chat(alice), alice, "hello")

        outcome = await receive(rotated, telegram, update, secret=SECRET)
        fresh = await receive(rotated, telegram, update, secret="new-secret")
    finally:
        await rotated.close()

    assert (outcome.verdict, fresh.verdict) == ("forged", "accepted")


async def test_telegram_has_no_verification_challenge_so_one_is_malformed(
    bridge: TelegramBridge,
) -> None:
    # setWebhook is a call the operator makes; nothing is ever echoed back to Telegram.
    headers = {"x-telegram-bot-api-secret-token": SECRET}
    body = json.dumps({"type": "url_verification", "challenge": "abc"}).encode()

    outcome = await bridge.receive("POST", {}, headers, body)

    assert (outcome.verdict, outcome.body) == ("malformed", b"")


async def test_a_signed_body_that_is_not_an_update_is_malformed(bridge: TelegramBridge) -> None:
    headers = {"x-telegram-bot-api-secret-token": SECRET}
    for body in (b"{not json", b"[1, 2]", b'{"update_id": "7"}', b""):
        outcome = await bridge.receive("POST", {}, headers, body)
        assert outcome.verdict == "malformed", body
    broken = json.dumps({"update_id": 7, "message": {"message_id": 1}}).encode()
    assert (await bridge.receive("POST", {}, headers, broken)).verdict == "malformed"
    assert (await bridge.receive("GET", {}, headers, b"")).verdict == "malformed"


async def test_a_forged_update_is_refused_before_its_body_is_read(bridge: TelegramBridge) -> None:
    outcome = await bridge.receive("POST", {}, {}, b"{not json")

    assert outcome.verdict == "forged"


# -- what is read, what is ignored -------------------------------------------------------


async def test_an_edit_a_channel_post_and_a_bots_message_are_ignored(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    other_bot = telegram.user("Helper", username="helper_bot", is_bot=True)
    group = telegram.group("Ops")
    original = telegram.message(group, alice, "first")
    updates = [
        telegram.edited(original, "first, edited"),
        telegram.channel_post(telegram.channel("News"), "a post"),
        telegram.message(group, other_bot, "beep"),
        telegram.message(group, telegram.bot, "my own words"),
    ]

    outcomes = [await receive(bridge, telegram, update) for update in updates]

    assert [o.verdict for o in outcomes] == ["ignored"] * 4
    assert all(o.messages == () for o in outcomes)
    assert "edited_message" in outcomes[0].reason
    assert "bot" in outcomes[2].reason


async def test_a_service_message_or_a_sticker_alone_is_ignored(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice, bob = telegram.user("Alice"), telegram.user("Bob")
    group = telegram.group("Ops")
    joined = telegram.message(group, alice, extra={"new_chat_members": [bob.to_json()]})
    sticker = telegram.message(
        group,
        alice,
        extra={
            "sticker": {
                "file_id": "CAACAgI",
                "file_unique_id": "AgADs",
                "type": "regular",
                "width": 512,
                "height": 512,
                "is_animated": False,
                "is_video": False,
            }
        },
    )

    assert (await receive(bridge, telegram, joined)).verdict == "ignored"
    assert (await receive(bridge, telegram, sticker)).verdict == "ignored"


async def test_a_post_forwarded_automatically_from_the_linked_channel_is_ignored(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    service = telegram.user("Telegram")
    update = telegram.message(
        telegram.group("Discussion"), service, "news", extra={"is_automatic_forward": True}
    )

    assert (await receive(bridge, telegram, update)).verdict == "ignored"


async def test_the_delivery_id_is_the_update_id_so_a_redelivery_carries_the_same_one(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    update = telegram.message(telegram.group("Ops"), alice, "hi")

    first = await one_message(bridge, telegram, update)
    again = await one_message(bridge, telegram, update)

    assert first.delivery_id == again.delivery_id == str(update["update_id"])


async def test_the_author_is_the_user_id_and_full_name(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice", "Liddell", username="alice_l")
    update = telegram.message(telegram.group("Ops"), alice, "hi")

    message = await one_message(bridge, telegram, update)

    assert (message.author_id, message.author_name) == (str(alice.id), "Alice Liddell")
    assert message.message_id == str(update["message"]["message_id"])


# -- mentions and replies ----------------------------------------------------------------


async def test_a_mention_of_the_bot_is_written_with_the_bot_name_and_others_stay_readable(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    # The emoji takes two UTF-16 units: the entities' offsets are counted in those.
    text = "🚀👍 @mercury_test_bot ask @bob_the_builder about 𝔘nicode, @MERCURY_TEST_BOT!"
    update = telegram.message(telegram.group("Ops"), alice, text)

    message = await one_message(bridge, telegram, update)

    assert message.text == "🚀👍 @Mercury ask @bob_the_builder about 𝔘nicode, @Mercury!"


async def test_a_text_mention_of_the_bot_is_written_with_the_bot_name(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice, bob = telegram.user("Alice"), telegram.user("Bob")
    update = telegram.message(
        telegram.group("Ops"),
        alice,
        "Merc, ask Bob",
        text_mentions=[("Merc", telegram.bot), ("Bob", bob)],
    )

    message = await one_message(bridge, telegram, update)

    assert message.text == "@Mercury, ask Bob"


async def test_a_message_without_a_mention_is_kept_as_written(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    update = telegram.message(telegram.group("Ops"), alice, "mail me at a@mercury_test_bot.org")

    message = await one_message(bridge, telegram, update)

    assert message.text == "mail me at a@mercury_test_bot.org"
    assert not message.is_reply_to_bot


@pytest.mark.parametrize(
    ("text", "opening"),
    [
        ("/start", ""),
        ("/start sign-in", "sign-in"),
        ("/start@mercury_test_bot sign-in", "sign-in"),
        ("/start@other_bot", None),  # another bot's
        ("/start tell me a joke", None),  # typed words, no deep link's payload
        ("start", None),
    ],
)
async def test_a_start_in_a_private_chat_is_an_opening_with_its_payload(
    bridge: TelegramBridge, telegram: TelegramStandIn, text: str, opening: str | None
) -> None:
    alice = telegram.user("Alice")
    private = await one_message(
        bridge, telegram, telegram.message(telegram.private_chat(alice), alice, text)
    )
    assert private.opening == opening
    grouped = await one_message(
        bridge, telegram, telegram.message(telegram.group("Ops"), alice, text)
    )
    assert grouped.opening is None  # a group's /start is no private chat's opening


async def test_a_reply_to_the_bots_message_is_a_reply_to_the_bot(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice, bob = telegram.user("Alice"), telegram.user("Bob")
    group = telegram.group("Ops")
    asked = await one_message(
        bridge, telegram, telegram.message(group, alice, "@mercury_test_bot?")
    )
    await bridge.send_reply(asked, "An answer.")
    [answer] = telegram.sent_messages(group)
    said = telegram.message(group, bob, "bob here")

    to_bot = telegram.message(group, alice, "thanks", reply_to=answer["message_id"])
    to_bob = telegram.message(group, alice, "hi bob", reply_to=said["message"]["message_id"])

    assert (await one_message(bridge, telegram, to_bot)).is_reply_to_bot
    assert not (await one_message(bridge, telegram, to_bob)).is_reply_to_bot


async def test_a_message_in_a_topic_the_bot_opened_is_not_a_reply_to_the_bot(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    # Telegram makes every message of a topic reply to the topic's opening service message.
    forum = telegram.group("Forum", forum=True)
    topic = telegram.open_topic(forum, "Bot's topic", telegram.bot)
    update = telegram.message(forum, telegram.user("Alice"), "hello", topic=topic)

    message = await one_message(bridge, telegram, update)

    assert not message.is_reply_to_bot


async def test_mentions_are_read_again_once_get_me_answers_after_failing(
    bridge: TelegramBridge, telegram: TelegramStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mercury.bridges.telegram")
    alice = telegram.user("Alice")
    group = telegram.group("Ops")
    telegram.fail_next(2, status=500, method="getMe")  # in the background, then completing

    during = await one_message(
        bridge, telegram, telegram.message(group, alice, "@mercury_test_bot hi")
    )
    after = await one_message(
        bridge, telegram, telegram.message(group, alice, "@mercury_test_bot hi")
    )

    assert during.text == "@mercury_test_bot hi"  # read, not lost, while getMe failed
    assert after.text == "@Mercury hi"
    assert [c.status for c in telegram.calls_to("getMe")] == [500, 500, 200]
    # Said once per failure, without the same sentence nested in itself.
    failed = [r.getMessage() for r in caplog.records if "getMe" in r.getMessage()]
    assert failed and all(line.count("getMe failed") == 1 for line in failed), failed


async def test_an_update_is_answered_without_waiting_for_get_me_and_completed_after(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    # Issue #34: each update waited for getMe under one lock, with the API's full timeout.
    alice = telegram.user("Alice")
    group = telegram.group("Ops")
    telegram.delay_s = 3.0
    update = telegram.message(group, alice, "@mercury_test_bot hi")
    began = time.monotonic()
    outcomes = await asyncio.gather(*(receive(bridge, telegram, update) for _ in range(4)))
    answered_s = time.monotonic() - began
    assert answered_s < telegram.delay_s / 2  # nothing waited for Telegram's getMe
    [message] = outcomes[0].messages
    assert message.text == "@mercury_test_bot hi"  # the username isn't known yet
    with anyio.fail_after(10):
        completed = await bridge.complete(message)
    assert completed.text == "@Mercury hi"
    assert len(telegram.calls_to("getMe")) == 1


# -- threads -----------------------------------------------------------------------------


async def test_a_private_chat_is_a_dm_and_a_group_is_not(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    private = telegram.private_chat(alice)
    supergroup, group = telegram.group("Ops"), telegram.group("Old", supergroup=False)

    dm = await one_message(bridge, telegram, telegram.message(private, alice, "hi"))
    in_supergroup = await one_message(bridge, telegram, telegram.message(supergroup, alice, "hi"))
    in_group = await one_message(bridge, telegram, telegram.message(group, alice, "hi"))

    assert (dm.thread_id, dm.is_dm) == (f"telegram:{alice.id}", True)
    assert (in_supergroup.thread_id, in_supergroup.is_dm) == (f"telegram:{supergroup.id}", False)
    assert in_group.thread_id == f"telegram:{group.id}"
    thread = bridge.parse_thread(dm.thread_id)
    assert (thread.space_id, thread.conversation_external_id, thread.is_dm) == (
        dm.thread_id,
        dm.thread_id,
        True,
    )
    assert not bridge.parse_thread(in_supergroup.thread_id).is_dm


async def test_a_forum_topic_is_a_thread_and_a_space_of_its_own(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    forum = telegram.group("Forum", forum=True)
    topic = telegram.open_topic(forum, "Releases", alice)

    in_topic = await one_message(
        bridge, telegram, telegram.message(forum, alice, "hi", topic=topic)
    )
    in_general = await one_message(bridge, telegram, telegram.message(forum, alice, "hi"))

    assert in_topic.thread_id == f"telegram:{forum.id}:{topic}"
    assert in_general.thread_id == f"telegram:{forum.id}"
    thread = bridge.parse_thread(in_topic.thread_id)
    assert (thread.space_id, thread.conversation_external_id, thread.is_dm) == (
        in_topic.thread_id,
        in_topic.thread_id,
        False,
    )


async def test_a_thread_of_another_platform_is_refused(bridge: TelegramBridge) -> None:
    for foreign in ("slack:C123", "telegram:abc", "telegram:-100:x", ""):
        with pytest.raises(ValueError, match="telegram"):
            bridge.parse_thread(foreign)


# -- attachments -------------------------------------------------------------------------


async def test_each_kind_of_media_is_an_attachment_and_a_caption_is_the_text(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    group = telegram.group("Ops")
    media = {
        "document": telegram.add_file(b"%PDF", file_name="plan.pdf", mime_type="application/pdf"),
        "photo": telegram.add_file(b"\xff\xd8" + b"j" * 300, kind="photo"),
        "voice": telegram.add_file(b"OggS", kind="voice", mime_type="audio/ogg"),
        "audio": telegram.add_file(
            b"ID3", kind="audio", file_name="song.mp3", mime_type="audio/mpeg"
        ),
        "video": telegram.add_file(b"mp4", kind="video", mime_type="video/mp4"),
    }
    found: dict[str, Received] = {}
    for kind, stored in media.items():
        update = telegram.message(group, alice, caption="look @mercury_test_bot", **{kind: stored})
        found[kind] = await one_message(bridge, telegram, update)

    assert {m.text for m in found.values()} == {"look @Mercury"}
    attachments = {kind: m.attachments for kind, m in found.items()}
    assert attachments["document"] == (
        Attachment(
            name="plan.pdf",
            ref=media["document"].file_id,
            mime_type="application/pdf",
            size_bytes=4,
        ),
    )
    # The largest of the photo's sizes, not its thumbnail.
    assert attachments["photo"] == (
        Attachment(
            name="photo.jpg", ref=media["photo"].file_id, mime_type="image/jpeg", size_bytes=302
        ),
    )
    assert attachments["voice"][0].name == "voice.ogg"
    assert attachments["audio"][0].name == "song.mp3"
    assert (attachments["video"][0].name, attachments["video"][0].ref) == (
        "video.mp4",
        media["video"].file_id,
    )


async def test_a_file_without_a_caption_is_still_read(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    doc = telegram.add_file(b"a,b\n1,2\n", file_name="data.csv", mime_type="text/csv")
    update = telegram.message(telegram.private_chat(alice), alice, document=doc)

    message = await one_message(bridge, telegram, update)

    assert (message.text, message.attachments[0].name) == ("", "data.csv")


# -- downloads ---------------------------------------------------------------------------


async def test_a_document_downloads_through_get_file_with_the_bots_token(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    doc = telegram.add_file(b"the quarterly plan", file_name="plan.txt", mime_type="text/plain")
    message = await one_message(
        bridge, telegram, telegram.message(telegram.private_chat(alice), alice, document=doc)
    )

    with anyio.fail_after(10):
        data = await bridge.download(message.attachments[0], max_bytes=1024)

    assert data == b"the quarterly plan"
    assert [c.params["file_id"] for c in telegram.calls_to("getFile")] == [doc.file_id]
    assert telegram.downloads == [doc.path]


async def test_a_file_larger_than_the_cap_is_refused_without_asking_telegram(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    doc = telegram.add_file(b"x" * 2048, file_name="big.bin")
    attachment = Attachment(name="big.bin", ref=doc.file_id, size_bytes=2048)

    with pytest.raises(BridgeError, match=r"big\.bin.*2048 bytes.*1024-byte limit"):
        await bridge.download(attachment, max_bytes=1024)

    assert telegram.calls_to("getFile") == []
    assert telegram.downloads == []


async def test_a_file_get_file_says_is_too_large_is_refused_before_downloading(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    doc = telegram.add_file(b"x" * 2048, file_name="big.bin")
    attachment = Attachment(name="big.bin", ref=doc.file_id)  # the message told no size

    with pytest.raises(BridgeError, match="1024-byte limit"):
        await bridge.download(attachment, max_bytes=1024)

    assert len(telegram.calls_to("getFile")) == 1
    assert telegram.downloads == []


async def test_a_file_of_untold_size_is_cut_off_at_the_cap(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    doc = telegram.add_file(b"x" * 200_000, file_name="big.bin", declared_size=None)
    attachment = Attachment(name="big.bin", ref=doc.file_id)

    with pytest.raises(BridgeError, match="limit") as refused:
        await bridge.download(attachment, max_bytes=1024)

    assert not isinstance(refused.value, PlatformUnavailable)
    assert telegram.downloads == [doc.path]


async def test_a_file_over_the_bot_apis_download_limit_is_refused_with_its_reason(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    doc = telegram.add_file(b"x" * 100, file_name="huge.mkv", declared_size=None)
    telegram.download_limit = 50  # 20 MB in the cloud
    try:
        with pytest.raises(BridgeError, match="getFile: File is too big"):
            await bridge.download(Attachment(name="huge.mkv", ref=doc.file_id), max_bytes=1000)
    finally:
        telegram.download_limit = 20 * 1024 * 1024


async def test_a_download_that_telegram_fails_is_platform_unavailable(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    doc = telegram.add_file(b"data", file_name="a.txt")
    telegram.fail_next(1, status=502, method="getFile")

    with pytest.raises(PlatformUnavailable, match="getFile"):
        await bridge.download(Attachment(name="a.txt", ref=doc.file_id), max_bytes=100)


async def test_a_file_id_telegram_does_not_know_is_a_bridge_error(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    with pytest.raises(BridgeError, match="Invalid file_id"):
        await bridge.download(Attachment(name="gone.txt", ref="nope"), max_bytes=100)


# -- replies -----------------------------------------------------------------------------


def test_a_long_answer_never_leaves_a_message_of_one_emoji() -> None:
    text = "word " * 819 + "\U0001f389"  # 4,096 characters, 4,097 UTF-16 units
    parts = split_text(text)
    assert "".join(parts) == text
    assert all(len(part) >= 8 for part in parts), [p[-12:] for p in parts]


async def test_an_answer_notifies_nobody_the_model_wrote_an_at_username_for(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    group = telegram.group("Ops")
    message = await one_message(
        bridge, telegram, telegram.message(group, alice, "@mercury_test_bot who?")
    )
    await bridge.send_reply(message, "Ask @bob_example or @carol_ex, mail ann@example.com.")
    reply = await bridge.open_reply(message, status="Thinking…")
    await reply.show("Ask @bob_example", None)
    await reply.finish("Ask @bob_example.")
    texts = [
        c.params["text"] for c in telegram.calls if c.method in ("sendMessage", "editMessageText")
    ]
    assert len(texts) == 3
    for text in texts:
        assert not re.search(r"(?<![\w@])@[A-Za-z0-9_]{3,}", text), text
    assert texts[0].replace("\u2060", "") == "Ask @bob_example or @carol_ex, mail ann@example.com."


async def test_a_reply_in_a_group_answers_the_triggering_message(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    group = telegram.group("Ops")
    message = await one_message(
        bridge, telegram, telegram.message(group, alice, "@mercury_test_bot status?")
    )

    await bridge.send_reply(message, "All green.")

    [call] = telegram.calls_to("sendMessage")
    assert call.params["chat_id"] == group.id
    assert call.params["text"] == "All green."
    assert call.params["reply_parameters"]["message_id"] == int(message.message_id)
    assert "message_thread_id" not in call.params
    [sent] = telegram.sent_messages(group)
    assert sent["reply_to_message"]["message_id"] == int(message.message_id)


async def test_a_reply_in_a_dm_is_a_plain_message(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    chat = telegram.private_chat(alice)
    message = await one_message(bridge, telegram, telegram.message(chat, alice, "hello"))

    await bridge.send_reply(message, "Hello, Alice.")

    [call] = telegram.calls_to("sendMessage")
    assert (call.params["chat_id"], call.params["text"]) == (alice.id, "Hello, Alice.")
    assert "reply_parameters" not in call.params


async def test_a_reply_in_a_topic_goes_to_the_topic_with_its_files(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    forum = telegram.group("Forum", forum=True)
    topic = telegram.open_topic(forum, "Reports", alice)
    message = await one_message(
        bridge, telegram, telegram.message(forum, alice, "@mercury_test_bot report", topic=topic)
    )
    files = [
        EgressFile(filename="report.csv", mime_type="text/csv", data=b"a,b\n1,2\n"),
        EgressFile(filename="chart.png", mime_type="image/png", data=b"\x89PNG fake"),
    ]

    await bridge.send_reply(message, "Here it is.", files)

    [text] = telegram.calls_to("sendMessage")
    assert (text.params["message_thread_id"], text.params["text"]) == (topic, "Here it is.")
    documents = telegram.calls_to("sendDocument")
    assert [d.params["message_thread_id"] for d in documents] == [topic, topic]
    assert [d.params["chat_id"] for d in documents] == [forum.id, forum.id]
    uploads = [d.files["document"] for d in documents]
    assert [(u.filename, u.content_type, u.data) for u in uploads] == [
        ("report.csv", "text/csv", b"a,b\n1,2\n"),
        ("chart.png", "image/png", b"\x89PNG fake"),
    ]
    # Text first, then the files: the order the chat shows them in.
    assert [c.method for c in telegram.calls if c.method.startswith("send")] == [
        "sendMessage",
        "sendDocument",
        "sendDocument",
    ]


async def test_files_alone_go_out_without_an_empty_message(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    message = await one_message(
        bridge, telegram, telegram.message(telegram.private_chat(alice), alice, "the file?")
    )

    await bridge.send_reply(
        message, "  ", [EgressFile(filename="a.txt", mime_type="text/plain", data=b"a")]
    )

    assert telegram.calls_to("sendMessage") == []
    assert len(telegram.calls_to("sendDocument")) == 1


async def test_a_long_reply_is_split_within_telegrams_limit_at_line_breaks(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    group = telegram.group("Ops")
    message = await one_message(
        bridge, telegram, telegram.message(group, alice, "@mercury_test_bot")
    )
    paragraph = "🚀 " + "word " * 150 + "\n"  # emoji count twice against the limit
    text = paragraph * 20

    await bridge.send_reply(message, text)

    calls = telegram.calls_to("sendMessage")
    assert len(calls) > 1
    assert all(c.status == 200 for c in calls)
    assert "".join(c.params["text"] for c in calls) == text
    assert all(c.params["text"].endswith("\n") for c in calls)
    assert "reply_parameters" in calls[0].params
    assert all("reply_parameters" not in c.params for c in calls[1:])


async def test_a_reply_whose_message_was_deleted_still_goes_out(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    group = telegram.group("Ops")
    message = await one_message(
        bridge, telegram, telegram.message(group, alice, "@mercury_test_bot")
    )
    gone = Received(**{**_fields(message), "message_id": "999999"})

    await bridge.send_reply(gone, "Still here.")

    [call] = telegram.calls_to("sendMessage")
    assert call.status == 200


async def test_typing_is_a_chat_action_in_the_chat_and_its_topic(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    alice = telegram.user("Alice")
    forum = telegram.group("Forum", forum=True)
    topic = telegram.open_topic(forum, "Talk", alice)
    in_topic = await one_message(
        bridge, telegram, telegram.message(forum, alice, "hi", topic=topic)
    )
    in_dm = await one_message(
        bridge, telegram, telegram.message(telegram.private_chat(alice), alice, "hi")
    )

    await bridge.start_typing(in_topic)
    await bridge.start_typing(in_dm)

    calls = telegram.calls_to("sendChatAction")
    assert [(c.params["chat_id"], c.params.get("message_thread_id")) for c in calls] == [
        (forum.id, topic),
        (alice.id, None),
    ]
    assert {c.params["action"] for c in calls} == {"typing"}


def test_split_text_keeps_short_text_whole_and_counts_utf16_units() -> None:
    assert split_text("hello") == ["hello"]
    assert split_text("") == []
    assert split_text("   \n ") == []
    emoji = "😀" * MAX_MESSAGE_CHARS  # two units each: twice the limit
    parts = split_text(emoji)
    assert [len(p) for p in parts] == [MAX_MESSAGE_CHARS // 2, MAX_MESSAGE_CHARS // 2]
    assert split_text("aaaa bbbb cccc", limit=9) == ["aaaa ", "bbbb cccc"]
    assert split_text("aaaa bbbb cccc", limit=7) == ["aaaa ", "bbbb ", "cccc"]
    assert split_text("x" * 10, limit=4) == ["xxxx", "xxxx", "xx"]


# -- failures ----------------------------------------------------------------------------


async def dm_message(bridge: TelegramBridge, telegram: TelegramStandIn) -> Received:
    alice = telegram.user("Alice")
    return await one_message(
        bridge, telegram, telegram.message(telegram.private_chat(alice), alice, "hi")
    )


async def test_a_server_error_is_platform_unavailable_and_is_not_retried(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message = await dm_message(bridge, telegram)
    telegram.fail_next(5, status=500, method="sendMessage")

    with pytest.raises(PlatformUnavailable, match=r"sendMessage.*Internal Server Error"):
        await bridge.send_reply(message, "hello")

    assert len(telegram.calls_to("sendMessage")) == 1


async def test_flood_control_is_platform_unavailable_with_the_wait_telegram_asks_for(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message = await dm_message(bridge, telegram)
    telegram.fail_next(1, status=429, retry_after=17, method="sendChatAction")

    with pytest.raises(PlatformUnavailable, match="rate limited; retry after 17 s"):
        await bridge.start_typing(message)

    assert len(telegram.calls_to("sendChatAction")) == 1


async def test_a_slow_telegram_times_out_as_platform_unavailable(
    telegram: TelegramStandIn,
) -> None:
    impatient = TelegramBridge(settings_for(telegram), bot_name=BOT_NAME, timeout_s=0.3)
    try:
        message = await dm_message(impatient, telegram)
        telegram.delay_s = 3.0
        with anyio.fail_after(10), pytest.raises(PlatformUnavailable, match="timed out"):
            await impatient.send_reply(message, "hello")
    finally:
        telegram.delay_s = 0.0
        await impatient.close()


async def test_an_unreachable_telegram_is_platform_unavailable(telegram: TelegramStandIn) -> None:
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{spare.getsockname()[1]}"
    cut_off = TelegramBridge(
        settings_for(telegram, api_url=f"{closed}/bot", file_url=f"{closed}/file/bot"),
        bot_name=BOT_NAME,
    )
    try:
        alice = telegram.user("Alice")
        message = await one_message(
            cut_off, telegram, telegram.message(telegram.private_chat(alice), alice, "hi")
        )
        with anyio.fail_after(10), pytest.raises(PlatformUnavailable, match="getMe"):
            await cut_off.send_reply(message, "hello")
    finally:
        await cut_off.close()


async def test_a_chat_telegram_does_not_know_is_a_bridge_error_with_its_description(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message = await dm_message(bridge, telegram)
    elsewhere = Received(**{**_fields(message), "thread_id": "telegram:424242", "is_dm": True})

    with pytest.raises(BridgeError, match="sendMessage: Chat not found") as refused:
        await bridge.send_reply(elsewhere, "hello")

    assert not isinstance(refused.value, PlatformUnavailable)


async def test_a_bot_blocked_by_the_user_is_a_bridge_error(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message = await dm_message(bridge, telegram)
    telegram.fail_next(
        1, status=403, description="Forbidden: bot was blocked by the user", method="sendMessage"
    )

    with pytest.raises(BridgeError, match="bot was blocked by the user") as refused:
        await bridge.send_reply(message, "hello")

    assert not isinstance(refused.value, PlatformUnavailable)


async def test_a_file_over_the_upload_limit_is_a_bridge_error(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message = await dm_message(bridge, telegram)
    telegram.upload_limit = 10  # 50 MB in the cloud
    try:
        with pytest.raises(
            BridgeError, match="sendDocument refused a file as too large"
        ) as refused:
            await bridge.send_reply(
                message,
                "",
                [
                    EgressFile(
                        filename="big.bin", mime_type="application/octet-stream", data=b"x" * 100
                    )
                ],
            )
    finally:
        telegram.upload_limit = 50 * 1024 * 1024
    assert not isinstance(refused.value, PlatformUnavailable)


async def test_a_wrong_token_is_a_bridge_error_that_never_shows_the_token(
    telegram: TelegramStandIn,
) -> None:
    wrong_token = "7000000001:AAwrong-token-000000000000000000"
    wrong = TelegramBridge(settings_for(telegram, bot_token=wrong_token), bot_name=BOT_NAME)
    try:
        message = await dm_message(wrong, telegram)
        with pytest.raises(BridgeError, match="TELEGRAM_BOT_TOKEN") as refused:
            await wrong.send_reply(message, "hello")
    finally:
        await wrong.close()

    assert wrong_token not in str(refused.value)
    assert not isinstance(refused.value, PlatformUnavailable)
    assert [c.status for c in telegram.calls_to("getMe")][-1] == 401


async def test_the_token_never_reaches_the_log(
    bridge: TelegramBridge, telegram: TelegramStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    message = await dm_message(bridge, telegram)
    doc = telegram.add_file(b"abc", file_name="a.txt")
    telegram.fail_next(1, status=500, method="sendMessage")

    await bridge.start_typing(message)
    await bridge.download(Attachment(name="a.txt", ref=doc.file_id), max_bytes=10)
    with pytest.raises(PlatformUnavailable):
        await bridge.send_reply(message, "hello")

    assert "sendChatAction" in caplog.text  # httpx's request lines were logged, redacted
    assert BOT_TOKEN not in caplog.text
    assert BOT_TOKEN.partition(":")[2] not in caplog.text


async def test_a_bridge_without_its_secrets_is_refused(telegram: TelegramStandIn) -> None:
    with pytest.raises(ConfigurationError, match="TELEGRAM_WEBHOOK_SECRET"):
        TelegramBridge(settings_for(telegram, webhook_secret=None), bot_name=BOT_NAME)


async def test_closing_a_bridge_that_never_called_telegram_calls_nothing(
    telegram: TelegramStandIn,
) -> None:
    idle = TelegramBridge(settings_for(telegram), bot_name=BOT_NAME)

    await idle.close()

    assert telegram.calls == []


def _fields(message: Received) -> dict[str, Any]:
    return {name: getattr(message, name) for name in message.__struct_fields__}


# -- live answers and buttons (#37) --------------------------------------------------------

STOP = ReplyButton(label="Stop", action="s:0123456789abcdef", style="danger")
YES = ReplyButton(label="Yes", action="c:k9m2-x7q4:0a1b2c3d4e", style="primary")
NO = ReplyButton(label="No", action="c:p3n8-w2r6:0a1b2c3d4e")


async def group_message(
    bridge: TelegramBridge, telegram: TelegramStandIn, *, forum: bool = False
) -> tuple[Received, Chat, int | None]:
    """A mention in a group (in a forum topic when ``forum``), read by the bridge."""
    ann = telegram.user("Ann", "Example")
    group = telegram.group("Team", forum=forum)
    topic = telegram.open_topic(group, "Releases", ann) if forum else None
    update = telegram.message(group, ann, "@mercury_test_bot hi", topic=topic)
    return await one_message(bridge, telegram, update), group, topic


def bot_messages(telegram: TelegramStandIn, chat: Chat) -> list[dict[str, Any]]:
    return telegram.sent_messages(chat)


async def test_the_bridge_is_a_live_bridge_within_telegrams_limits(bridge: TelegramBridge) -> None:
    assert isinstance(bridge, LiveBridge)
    limits = bridge.live_limits
    assert (limits.max_chars, limits.edit_interval_s, limits.partial) == (4096, 1.0, True)
    assert 2 <= limits.max_buttons <= 100


async def test_a_private_reply_is_a_draft_with_telegrams_stop_then_the_final_message(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message = await dm_message(bridge, telegram)
    chat_id = int(message.author_id)

    reply = await bridge.open_reply(message, status="Thinking…", buttons=[STOP])
    await reply.show("Hello", None)
    await reply.show("Hello", None)  # nothing new: no call
    await reply.show("Hello wor", "Searching the web…")
    await reply.finish("Hello world.")

    drafts = [(d["chat_id"], d["text"], d.get("can_stop")) for d in telegram.drafts]
    assert drafts == [
        (chat_id, "Thinking…", True),
        (chat_id, "Hello", True),
        (chat_id, "Hello wor\n\nSearching the web…", True),
    ]
    assert len({d["draft_id"] for d in telegram.drafts}) == 1
    assert all(d["draft_id"] != 0 for d in telegram.drafts)
    [final] = telegram.calls_to("sendMessage")
    assert (final.params["chat_id"], final.params["text"]) == (chat_id, "Hello world.")
    assert "reply_markup" not in final.params and "reply_parameters" not in final.params
    assert telegram.calls_to("editMessageText") == []


async def test_a_private_reply_without_a_status_shows_telegrams_thinking_placeholder(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message = await dm_message(bridge, telegram)

    await bridge.open_reply(message, status=None)

    [draft] = telegram.drafts
    assert draft["text"] == "" and "can_stop" not in draft


async def test_a_group_reply_types_then_posts_in_its_topic_then_edits_and_ends_as_final(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message, forum, topic = await group_message(bridge, telegram, forum=True)

    reply = await bridge.open_reply(message, status="Thinking…", buttons=[STOP])
    [typing] = telegram.calls_to("sendChatAction")
    assert (typing.params["chat_id"], typing.params["message_thread_id"]) == (forum.id, topic)
    assert telegram.calls_to("sendMessage") == []  # no "Thinking…" message left in a group
    await reply.show("", None)
    assert telegram.calls_to("sendMessage") == []
    await reply.show("The build", "Reading the log…")
    await reply.show("The build is green", None)
    await reply.finish("The build is green since noon.")

    [posted] = telegram.calls_to("sendMessage")
    assert posted.params["text"] == "The build\n\nReading the log…"
    assert posted.params["message_thread_id"] == topic
    assert posted.params["reply_parameters"]["message_id"] == int(message.message_id)
    assert posted.params["reply_markup"]["inline_keyboard"] == [
        [{"text": "Stop", "callback_data": STOP.action}]
    ]
    edits = [c.params["text"] for c in telegram.calls_to("editMessageText")]
    assert edits == ["The build is green", "The build is green since noon."]
    [kept] = bot_messages(telegram, forum)
    assert kept["text"] == "The build is green since noon."
    assert "reply_markup" not in kept  # the stop button went with the last edit
    assert telegram.drafts == []


async def test_an_edit_telegram_finds_unchanged_is_done_not_an_error(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message, group, _ = await group_message(bridge, telegram)
    reply = await bridge.open_reply(message, status=None)
    await reply.show("Same words.", None)

    await reply.finish("Same words.")

    [edit] = telegram.calls_to("editMessageText")
    assert edit.status == 400  # Telegram's "message is not modified"
    assert [m["text"] for m in bot_messages(telegram, group)] == ["Same words."]


async def test_buttons_are_an_inline_keyboard_one_choice_a_row_under_the_final_text(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message, group, _ = await group_message(bridge, telegram)
    reply = await bridge.open_reply(message, status="Thinking…", buttons=[STOP])

    await reply.finish("Delete 3 files? This needs your confirmation.", buttons=[YES, NO])

    [kept] = bot_messages(telegram, group)
    assert kept["reply_markup"]["inline_keyboard"] == [
        [{"text": "Yes", "callback_data": YES.action}],
        [{"text": "No", "callback_data": NO.action}],
    ]
    assert kept["reply_to_message"]["message_id"] == int(message.message_id)


async def test_a_final_text_past_the_limit_goes_on_in_new_messages_with_nothing_lost(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message, group, _ = await group_message(bridge, telegram)
    reply = await bridge.open_reply(message, status=None)
    await reply.show("word " * 100, None)
    text = "word " * 1500 + "end"

    await reply.finish(text, buttons=[YES, NO])

    kept = bot_messages(telegram, group)
    assert len(kept) == 2
    assert "".join(m["text"] for m in kept) == text
    assert all(len(m["text"]) <= MAX_MESSAGE_CHARS for m in kept)
    assert "reply_markup" not in kept[0] and len(kept[1]["reply_markup"]["inline_keyboard"]) == 2


async def test_a_preview_past_the_limit_is_cut_and_keeps_its_status(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message = await dm_message(bridge, telegram)
    reply = await bridge.open_reply(message, status=None)

    await reply.show("😀" * 3000, "Writing…")  # 6,000 UTF-16 units

    shown = telegram.drafts[-1]["text"]
    assert shown.endswith("…\n\nWriting…")
    assert len(shown.encode("utf-16-le")) // 2 <= MAX_MESSAGE_CHARS


async def test_files_follow_the_final_message_in_its_topic(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message, _, topic = await group_message(bridge, telegram, forum=True)
    reply = await bridge.open_reply(message, status=None)
    report = EgressFile(filename="report.txt", mime_type="text/plain", data=b"all green")

    await reply.finish("Here is the report.", files=[report])

    assert [c.method for c in telegram.calls][-2:] == ["sendMessage", "sendDocument"]
    [document] = telegram.calls_to("sendDocument")
    assert document.params["message_thread_id"] == topic
    assert document.files["document"].data == b"all green"


async def test_files_alone_remove_the_status_message(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message, group, _ = await group_message(bridge, telegram)
    reply = await bridge.open_reply(message, status=None)
    await reply.show("", "Writing a file…")
    report = EgressFile(filename="report.txt", mime_type="text/plain", data=b"x")

    await reply.finish("", files=[report])

    assert [m.get("document", {}).get("file_name") for m in bot_messages(telegram, group)] == [
        "report.txt"
    ]


async def test_a_failure_replaces_the_partial_text_with_its_sentence(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message, group, _ = await group_message(bridge, telegram)
    reply = await bridge.open_reply(message, status="Thinking…", buttons=[STOP])
    await reply.show("The answer is", None)

    await reply.fail("The model could not be reached; try again later.")

    [kept] = bot_messages(telegram, group)
    assert kept["text"] == "The model could not be reached; try again later."
    assert "reply_markup" not in kept


async def test_a_failure_before_any_text_in_a_private_chat_is_a_message(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message = await dm_message(bridge, telegram)
    reply = await bridge.open_reply(message, status="Thinking…")

    await reply.fail("Something went wrong.")

    [sent] = telegram.calls_to("sendMessage")
    assert sent.params["text"] == "Something went wrong."


@pytest.mark.parametrize("method", ["editMessageText", "sendMessageDraft"])
async def test_a_429_while_writing_is_platform_unavailable_with_telegrams_wait(
    bridge: TelegramBridge, telegram: TelegramStandIn, method: str
) -> None:
    if method == "sendMessageDraft":
        message = await dm_message(bridge, telegram)
    else:
        message, _, _ = await group_message(bridge, telegram)
    reply = await bridge.open_reply(message, status=None)
    await reply.show("one", None)
    telegram.fail_next(1, status=429, retry_after=7, method=method)

    with pytest.raises(PlatformUnavailable) as caught:
        await reply.show("one two", None)
    await reply.show("one two", None)  # the pacer's next try: the text is not lost

    assert caught.value.retry_after_s == 7
    refused, retried = telegram.calls_to(method)[-2:]
    assert (refused.status, retried.status, retried.params["text"]) == (429, 200, "one two")


async def test_flood_control_on_a_reply_tells_the_wait_to_the_caller(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message = await dm_message(bridge, telegram)
    telegram.fail_next(1, status=429, retry_after=4, method="sendMessage")

    with pytest.raises(PlatformUnavailable) as caught:
        await bridge.send_reply(message, "hello")

    assert caught.value.retry_after_s == 4


async def test_a_private_message_goes_to_the_persons_chat_with_the_bot_not_the_group(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message, group, _ = await group_message(bridge, telegram)
    person = int(message.author_id)
    telegram.private_chat(telegram_user(telegram, person))

    await bridge.send_private(message, "Sign in: https://example.com/login/abc")

    [sent] = telegram.calls_to("sendMessage")
    assert (sent.params["chat_id"], sent.params["text"]) == (
        person,
        "Sign in: https://example.com/login/abc",
    )
    assert bot_messages(telegram, group) == []


async def test_a_private_message_to_someone_who_never_started_the_bot_says_so(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message, group, _ = await group_message(bridge, telegram)

    with pytest.raises(BridgeError, match="haven't started a chat with the bot") as caught:
        await bridge.send_private(message, "Sign in: https://example.com/login/abc")

    assert not isinstance(caught.value, PlatformUnavailable)
    assert "example.com" not in str(caught.value)
    assert bot_messages(telegram, group) == []


def telegram_user(telegram: TelegramStandIn, user_id: int) -> Any:
    return telegram._users[user_id]


# -- presses -------------------------------------------------------------------------------


async def pending_in_group(
    bridge: TelegramBridge, telegram: TelegramStandIn, *, forum: bool = False
) -> tuple[Received, Chat, dict[str, Any]]:
    message, group, _ = await group_message(bridge, telegram, forum=forum)
    reply = await bridge.open_reply(message, status=None)
    await reply.finish("Delete 3 files? This needs your confirmation.", buttons=[YES, NO])
    [kept] = bot_messages(telegram, group)
    return message, group, kept


async def one_press(
    bridge: TelegramBridge, telegram: TelegramStandIn, update: dict[str, Any]
) -> Pressed:
    outcome = await receive(bridge, telegram, update)
    assert outcome.verdict == "accepted", outcome.reason
    assert outcome.messages == ()
    [press] = outcome.presses
    return press


async def test_a_press_is_read_into_who_pressed_which_action_on_which_message(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message, forum, kept = await pending_in_group(bridge, telegram, forum=True)
    ben = telegram.user("Ben", "Example")
    update = telegram.press(kept, ben, NO.action)

    press = await one_press(bridge, telegram, update)

    assert press == Pressed(
        platform="telegram",
        thread_id=message.thread_id,
        delivery_id=update["callback_query"]["id"],
        message_id=str(kept["message_id"]),
        author_id=str(ben.id),
        author_name="Ben Example",
        action=NO.action,
        is_dm=False,
        respond=update["callback_query"]["id"],
    )
    assert press.thread_id == f"telegram:{forum.id}:{kept['message_thread_id']}"


async def test_a_press_in_a_private_chat_is_a_dm_and_a_redelivery_has_the_same_id(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message = await dm_message(bridge, telegram)
    reply = await bridge.open_reply(message, status=None)
    await reply.finish("Proceed?", buttons=[YES, NO])
    dm = telegram._chats[int(message.author_id)]
    [kept] = bot_messages(telegram, dm)
    update = telegram.press(kept, telegram_user(telegram, dm.id))

    first = await one_press(bridge, telegram, update)
    again = await one_press(bridge, telegram, update)

    assert first.is_dm and first.thread_id == f"telegram:{dm.id}"
    assert first.action == YES.action
    assert again.delivery_id == first.delivery_id


async def test_a_press_with_a_wrong_or_no_secret_is_forged(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    _, _, kept = await pending_in_group(bridge, telegram)
    update = telegram.press(kept, telegram.user("Mallory"))

    for secret in ("guess", None):
        outcome = await receive(bridge, telegram, update, secret=secret)
        assert (outcome.verdict, outcome.presses) == ("forged", ())


@pytest.mark.parametrize(
    ("change", "verdict"),
    [
        (lambda q: q.pop("data"), "malformed"),
        (lambda q: q.update(data=""), "malformed"),
        (lambda q: q.update(data="c:" + "x" * 70), "malformed"),
        (lambda q: q.update(data=7), "malformed"),
        (lambda q: q.pop("from"), "malformed"),
        (lambda q: q["message"].update(message_thread_id=-5, is_topic_message=True), "malformed"),
        (lambda q: q.update(message="nonsense"), "malformed"),
        (lambda q: (q.pop("message"), q.update(inline_message_id="AAA")), "ignored"),
        (
            lambda q: q.update(message={"chat": q["message"]["chat"], "message_id": 1, "date": 0}),
            "ignored",
        ),
    ],
    ids=[
        "no data",
        "empty data",
        "data past 64 bytes",
        "data not a string",
        "no presser",
        "negative topic",
        "message not an object",
        "inline message",
        "inaccessible message",
    ],
)
async def test_a_press_that_cant_be_read_is_refused_and_runs_nothing(
    bridge: TelegramBridge, telegram: TelegramStandIn, change: Any, verdict: str
) -> None:
    _, _, kept = await pending_in_group(bridge, telegram)
    update = telegram.press(kept, telegram.user("Ann"))
    change(update["callback_query"])

    outcome = await receive(bridge, telegram, update)

    assert (outcome.verdict, outcome.presses, outcome.messages) == (verdict, (), ())


async def test_answering_a_press_is_an_alert_only_the_presser_sees(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    _, group, kept = await pending_in_group(bridge, telegram)
    press = await one_press(bridge, telegram, telegram.press(kept, telegram.user("Ben")))

    await bridge.answer_press(press, "This isn't yours to answer.")

    assert telegram.answers == [
        {
            "callback_query_id": press.respond,
            "text": "This isn't yours to answer.",
            "show_alert": True,
        }
    ]
    [still] = bot_messages(telegram, group)
    assert still == kept  # the message is untouched
    assert telegram.calls_to("sendMessage")[1:] == []


async def test_settling_a_press_removes_the_keyboard_and_says_what_was_chosen(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message, group, kept = await pending_in_group(bridge, telegram)
    ann = telegram_user(telegram, int(message.author_id))
    press = await one_press(bridge, telegram, telegram.press(kept, ann, YES.action))

    await bridge.settle_press(press, "Yes, chosen by Ann Example.")

    [settled] = bot_messages(telegram, group)
    assert settled["text"] == (
        "Delete 3 files? This needs your confirmation.\n\nYes, chosen by Ann Example."
    )
    assert "reply_markup" not in settled
    assert [a["callback_query_id"] for a in telegram.answers] == [press.respond]


async def test_settling_a_press_this_bridge_never_saw_still_removes_the_keyboard(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    # Another instance posted the message; the press names the message and its chat.
    _, group, kept = await pending_in_group(bridge, telegram)
    other = TelegramBridge(settings_for(telegram), bot_name=BOT_NAME, timeout_s=5.0)
    try:
        press = await one_press(other, telegram, telegram.press(kept, telegram.user("Ann")))
        await other.settle_press(press, "Yes, chosen by Ann.")
    finally:
        await other.close()

    [settled] = bot_messages(telegram, group)
    assert "reply_markup" not in settled
    assert settled["text"].endswith("Yes, chosen by Ann.")


async def test_a_drafts_stop_button_is_a_press_of_its_stop_action_by_its_person(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    message = await dm_message(bridge, telegram)
    await bridge.open_reply(message, status="Thinking…", buttons=[STOP])
    dm = telegram._chats[int(message.author_id)]
    [draft] = telegram.drafts

    press = await one_press(bridge, telegram, telegram.stop_draft(dm, draft["draft_id"]))
    unknown = await receive(bridge, telegram, telegram.stop_draft(dm, draft["draft_id"] + 1))

    assert (press.action, press.author_id, press.is_dm) == (STOP.action, str(dm.id), True)
    assert press.thread_id == message.thread_id
    assert unknown.verdict == "ignored"


async def test_a_finish_tried_again_after_a_429_sends_nothing_twice(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    # The pacer tries the same finish again when Telegram says "later": what went out
    # before the 429 must not go out again.
    message = await dm_message(bridge, telegram)
    dm = telegram._chats[int(message.author_id)]
    reply = await bridge.open_reply(message, status=None)
    text = "word " * 1500 + "end"
    report = EgressFile(filename="report.txt", mime_type="text/plain", data=b"x")
    telegram.fail_next(1, status=429, retry_after=1, method="sendDocument")

    with pytest.raises(PlatformUnavailable):
        await reply.finish(text, files=[report])
    await reply.finish(text, files=[report])

    kept = bot_messages(telegram, dm)
    assert "".join(m.get("text", "") for m in kept) == text
    assert [m["document"]["file_name"] for m in kept if "document" in m] == ["report.txt"]


async def test_a_drafts_status_is_sent_again_before_telegram_lets_it_go_and_stops_at_the_end(
    telegram: TelegramStandIn,
) -> None:
    quick = TelegramBridge(settings_for(telegram), bot_name=BOT_NAME, draft_refresh_s=0.3)
    try:
        message = await dm_message(quick, telegram)
        reply = await quick.open_reply(message, status="Searching the web…")
        await anyio.sleep(1.0)
        refreshed = len(telegram.drafts)
        await reply.finish("Found it.")
        await anyio.sleep(0.8)
    finally:
        await quick.close()

    assert refreshed >= 3
    assert {d["text"] for d in telegram.drafts} == {"Searching the web…"}
    assert len(telegram.drafts) == refreshed
    assert telegram.calls[-1].method == "sendMessage"


async def test_a_group_shows_typing_until_its_message_is_posted(
    telegram: TelegramStandIn,
) -> None:
    quick = TelegramBridge(settings_for(telegram), bot_name=BOT_NAME, typing_refresh_s=0.3)
    try:
        message, _, _ = await group_message(quick, telegram)
        reply = await quick.open_reply(message, status="Thinking…")
        await anyio.sleep(1.0)
        typed = len(telegram.calls_to("sendChatAction"))
        await reply.show("The first words", None)
        await anyio.sleep(0.8)
        after = len(telegram.calls_to("sendChatAction"))
        await reply.finish("The first words and the rest.")
    finally:
        await quick.close()

    assert typed >= 3 and after == typed


async def test_an_answer_to_a_press_past_telegrams_alert_limit_is_cut_not_refused(
    bridge: TelegramBridge, telegram: TelegramStandIn
) -> None:
    _, _, kept = await pending_in_group(bridge, telegram)
    press = await one_press(bridge, telegram, telegram.press(kept, telegram.user("Ben")))

    await bridge.answer_press(press, "Nein. " * 60)

    [answer] = telegram.answers
    assert len(answer["text"]) == 200 and answer["text"].endswith("…")
