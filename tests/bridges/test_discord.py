"""The Discord bridge against the Discord stand-in, driving the real discord.py client.

The stand-in speaks Discord's REST API and gateway on 127.0.0.1: the bridge logs in, asks
where the gateway is, identifies over a zlib stream, and reads MESSAGE_CREATE dispatches the
test has the stand-in send; its replies, typing and downloads are the stand-in's records.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec
import pytest
from aiohttp import web

from bridges.discord import DiscordBridge
from bridges.port import (
    Attachment,
    BridgeError,
    EgressFile,
    GatewayBridge,
    HeldBridge,
    LiveBridge,
    PlatformUnavailable,
    Pressed,
    Received,
    ReplyButton,
)
from core.config.settings import ConfigurationError, DiscordSettings
from tests.support.discord_standin import (
    ALICE,
    BOB,
    BOT,
    CAROL,
    DM_ALICE,
    ENGINEERS,
    GENERAL,
    GROUP_DM,
    GUILD,
    RANDOM,
    THREAD,
    DiscordStandIn,
    Pressing,
    RestCall,
    User,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

BOT_NAME = "Mercury"
WAIT_S = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def discord_api() -> Iterator[DiscordStandIn]:
    with DiscordStandIn() as standin:
        yield standin


def settings_for(standin: DiscordStandIn, *, token: str | None = None) -> DiscordSettings:
    return DiscordSettings(enabled=True, bot_token=token or standin.token, api_url=standin.api_url)


@dataclass
class Connected:
    """A bridge whose ``run`` holds the stand-in's gateway; what it delivers lands in ``inbox``."""

    bridge: DiscordBridge
    api: DiscordStandIn
    inbox: asyncio.Queue[Received]
    task: asyncio.Task[None]
    presses: asyncio.Queue[Pressed]

    async def next(self) -> Received:
        return await asyncio.wait_for(self.inbox.get(), WAIT_S)

    async def press(self, message_id: int, user: User, **options: str) -> tuple[Pressing, Pressed]:
        """Have ``user`` press a button of the message; what the bridge handed on for it."""
        pressing = self.api.press(message_id, user, **options)
        pressed = await asyncio.wait_for(self.presses.get(), WAIT_S)
        assert pressed.delivery_id == str(pressing.id)
        return pressing, pressed

    async def post(self, channel_id: int, author: User, content: str, **options) -> Received:
        """Have ``author`` post, and return what the bridge handed on for it."""
        payload = self.api.post_message(channel_id, author, content, **options)
        received = await self.next()
        assert received.message_id == payload["id"]
        return received

    async def nothing_more(self) -> None:
        """Nothing else was handed on: a message posted after it arrives first."""
        payload = self.api.post_message(GENERAL, ALICE, "sentinel")
        received = await self.next()
        assert received.message_id == payload["id"], received


@pytest.fixture
async def bridge(discord_api: DiscordStandIn) -> AsyncIterator[DiscordBridge]:
    bridge = DiscordBridge(settings_for(discord_api), bot_name=BOT_NAME)
    try:
        yield bridge
    finally:
        await bridge.close()


def sorting(
    inbox: asyncio.Queue[Received], presses: asyncio.Queue[Pressed]
) -> Callable[[Received | Pressed], Awaitable[None]]:
    """A deliver that puts messages in ``inbox`` and presses in ``presses``."""

    async def deliver(item: Received | Pressed) -> None:
        await (presses.put(item) if isinstance(item, Pressed) else inbox.put(item))

    return deliver


@pytest.fixture
async def connected(discord_api: DiscordStandIn, bridge: DiscordBridge) -> AsyncIterator[Connected]:
    inbox: asyncio.Queue[Received] = asyncio.Queue()
    presses: asyncio.Queue[Pressed] = asyncio.Queue()
    task = asyncio.create_task(bridge.run(sorting(inbox, presses)))
    await discord_api.wait_until_ready_async()
    try:
        yield Connected(bridge=bridge, api=discord_api, inbox=inbox, task=task, presses=presses)
    finally:
        await bridge.close()
        await asyncio.wait_for(task, WAIT_S)


def group_message(message_id: str = "1", *, thread_id: str | None = None) -> Received:
    return Received(
        platform="discord",
        thread_id=thread_id or f"discord:{GUILD}:{GENERAL}",
        delivery_id=message_id,
        message_id=message_id,
        author_id=str(ALICE.id),
        author_name="Alice",
        text="hello",
        is_dm=False,
    )


def dm_message(message_id: str = "1") -> Received:
    return Received(
        platform="discord",
        thread_id=f"discord:@me:{DM_ALICE}",
        delivery_id=message_id,
        message_id=message_id,
        author_id=str(ALICE.id),
        author_name="Alice",
        text="hello",
        is_dm=True,
    )


def is_message_create(call: RestCall) -> bool:
    return call.method == "POST" and call.path.endswith("/messages")


# -- connecting ----------------------------------------------------------------------------


async def test_the_bridge_is_a_gateway_bridge(bridge: DiscordBridge) -> None:
    assert isinstance(bridge, GatewayBridge)
    assert bridge.platform == "discord"


async def test_the_bridge_logs_in_asks_for_the_gateway_and_identifies_with_message_content(
    connected: Connected,
) -> None:
    api = connected.api
    paths = [(c.method, c.path) for c in api.calls]
    assert ("GET", "/users/@me") in paths
    assert ("GET", "/gateway/bot") in paths
    assert all(c.authorization == f"Bot {api.token}" for c in api.calls)
    assert api.gateway_queries == [{"v": "10", "encoding": "json", "compress": "zlib-stream"}]
    (identify,) = api.identifies
    assert identify["token"] is True
    message_content, guild_messages, direct_messages, guilds = 1 << 15, 1 << 9, 1 << 12, 1
    for intent in (message_content, guild_messages, direct_messages, guilds):
        assert identify["intents"] & intent


async def test_a_bridge_without_a_token_is_a_configuration_error() -> None:
    settings = DiscordSettings(enabled=True, bot_token=None, api_url="http://127.0.0.1:9/api/v10")
    with pytest.raises(ConfigurationError, match="DISCORD_BOT_TOKEN"):
        DiscordBridge(settings, bot_name=BOT_NAME)


async def test_close_ends_run_while_it_waits_to_log_in_again(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    discord_api.fail_next(1, status=503)
    task = asyncio.create_task(bridge.run(asyncio.Queue().put))
    await discord_api.wait_for_calls_async(lambda c: c.status == 503)
    await bridge.close()
    await asyncio.wait_for(task, 0.5)
    assert discord_api.identifies == []


async def test_nothing_touches_the_network_before_the_bridge_is_used(
    discord_api: DiscordStandIn,
) -> None:
    bridge = DiscordBridge(settings_for(discord_api), bot_name=BOT_NAME)
    await bridge.close()
    assert discord_api.calls == []


async def test_a_wrong_token_stops_run_with_a_sentence_naming_the_variable(
    discord_api: DiscordStandIn,
) -> None:
    bridge = DiscordBridge(settings_for(discord_api, token="not-the-token"), bot_name=BOT_NAME)
    try:
        with pytest.raises(BridgeError, match="DISCORD_BOT_TOKEN") as caught:
            await asyncio.wait_for(bridge.run(asyncio.Queue().put), WAIT_S)
    finally:
        await bridge.close()
    assert not isinstance(caught.value, PlatformUnavailable)
    assert discord_api.calls[0].status == 401


async def test_an_application_without_the_message_content_intent_is_told_how_to_enable_it() -> None:
    with DiscordStandIn(message_content_enabled=False) as api:
        bridge = DiscordBridge(settings_for(api), bot_name=BOT_NAME)
        try:
            with pytest.raises(BridgeError, match="Message Content Intent"):
                await asyncio.wait_for(bridge.run(asyncio.Queue().put), WAIT_S)
        finally:
            await bridge.close()
        assert api.gateway_closes == [4014]


async def test_a_login_while_discord_answers_503_is_tried_again(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    discord_api.fail_next(1, status=503)
    inbox: asyncio.Queue[Received] = asyncio.Queue()
    task = asyncio.create_task(bridge.run(inbox.put))
    try:
        await discord_api.wait_until_ready_async()
        discord_api.post_message(GENERAL, ALICE, "still there?")
        assert (await asyncio.wait_for(inbox.get(), WAIT_S)).text == "still there?"
    finally:
        await bridge.close()
        await asyncio.wait_for(task, WAIT_S)
    assert [c.status for c in discord_api.calls if c.path == "/users/@me"] == [503, 200]


async def test_the_bridge_resumes_when_the_gateway_asks_it_to_reconnect(
    connected: Connected,
) -> None:
    connected.api.request_reconnect()
    await connected.api.wait_until_async(lambda: connected.api.resumed_count == 1)
    received = await connected.post(GENERAL, ALICE, "after the move")
    assert received.text == "after the move"
    assert len(connected.api.identifies) == 1


async def test_close_ends_run(connected: Connected) -> None:
    await connected.bridge.close()
    await asyncio.wait_for(connected.task, WAIT_S)
    assert connected.task.exception() is None


async def test_cancelling_run_leaves_the_gateway(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    task = asyncio.create_task(bridge.run(asyncio.Queue().put))
    await discord_api.wait_until_ready_async()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await discord_api.wait_until_async(lambda: not discord_api._sessions, what="no connection")


# -- one holder, taken over (#39) ----------------------------------------------------------


async def test_the_bridge_is_a_held_connection_with_no_checkpoint_before_its_first_session(
    bridge: DiscordBridge,
) -> None:
    assert isinstance(bridge, HeldBridge)
    assert bridge.connection_name == "discord"
    assert bridge.checkpoint() is None


async def run_restored(
    api: DiscordStandIn, checkpoint: bytes
) -> tuple[DiscordBridge, asyncio.Queue[Received], asyncio.Task[None]]:
    taker = DiscordBridge(settings_for(api), bot_name=BOT_NAME)
    taker.restore(checkpoint)
    inbox: asyncio.Queue[Received] = asyncio.Queue()
    return taker, inbox, asyncio.create_task(taker.run(inbox.put))


async def test_a_bridge_taking_over_resumes_the_session_and_gets_what_was_sent_meanwhile(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    api = discord_api
    first: asyncio.Queue[Received] = asyncio.Queue()
    holder = asyncio.create_task(bridge.run(first.put))
    await api.wait_until_ready_async()
    posted = api.post_message(GENERAL, ALICE, "before the handover")
    before = await asyncio.wait_for(first.get(), WAIT_S)
    assert before.message_id == posted["id"]
    checkpoint = bridge.checkpoint()
    assert checkpoint is not None
    holder.cancel()  # the lease went elsewhere: the holder lets go
    with pytest.raises(asyncio.CancelledError):
        await holder
    await api.wait_until_async(lambda: not api._sessions, what="no connection")
    meanwhile = api.post_message(GENERAL, BOB, "sent during the gap")

    taker, inbox, task = await run_restored(api, checkpoint)
    try:
        received = await asyncio.wait_for(inbox.get(), WAIT_S)
        assert received.message_id == meanwhile["id"]  # replayed; not what came before
        assert received.message_id != before.message_id
        [resume] = api.resumes
        saved = msgspec.json.decode(checkpoint)
        assert resume["accepted"] and resume["session_id"] == saved["session_id"]
        assert resume["seq"] == saved["sequence"]
        assert len(api.identifies) == 1  # only the first holder's
        later = api.post_message(GENERAL, ALICE, "after it")
        assert (await asyncio.wait_for(inbox.get(), WAIT_S)).message_id == later["id"]
        assert msgspec.json.decode(taker.checkpoint() or b"")["session_id"] == saved["session_id"]
        assert api.most_live_sessions == 1
    finally:
        await taker.close()
        await asyncio.wait_for(task, WAIT_S)


async def test_the_checkpoint_stays_before_a_message_not_yet_handed_on_so_a_taker_gets_it_again(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    api = discord_api
    handed: asyncio.Queue[Received] = asyncio.Queue()
    stuck = asyncio.Event()

    async def deliver(item: Received | Pressed) -> None:
        if isinstance(item, Received) and item.text == "stuck":
            stuck.set()
            await asyncio.Event().wait()  # the instance dies before it took the message
        await handed.put(item)  # type: ignore[arg-type]

    holder = asyncio.create_task(bridge.run(deliver))
    await api.wait_until_ready_async()
    first = api.post_message(GENERAL, ALICE, "first")
    assert (await asyncio.wait_for(handed.get(), WAIT_S)).message_id == first["id"]
    stuck_message = api.post_message(GENERAL, ALICE, "stuck")
    await asyncio.wait_for(stuck.wait(), WAIT_S)
    after = api.post_message(GENERAL, ALICE, "after")
    assert (await asyncio.wait_for(handed.get(), WAIT_S)).message_id == after["id"]
    checkpoint = bridge.checkpoint()
    assert checkpoint is not None
    holder.cancel()
    with pytest.raises(asyncio.CancelledError):
        await holder

    taker, inbox, task = await run_restored(api, checkpoint)
    try:
        again = await asyncio.wait_for(inbox.get(), WAIT_S)
        assert again.message_id == stuck_message["id"]  # replayed: it was never handed on
        also = await asyncio.wait_for(inbox.get(), WAIT_S)
        assert also.message_id == after["id"]  # replayed too: de-duplication drops it
    finally:
        await taker.close()
        await asyncio.wait_for(task, WAIT_S)


async def test_a_session_discord_will_not_resume_is_started_afresh(
    discord_api: DiscordStandIn,
) -> None:
    gone = msgspec.json.encode(
        {"session_id": "ended", "sequence": 41, "gateway": discord_api.gateway_url}
    )
    taker, inbox, task = await run_restored(discord_api, gone)
    try:
        await discord_api.wait_until_ready_async()
        [resume] = discord_api.resumes
        assert resume["session_id"] == "ended" and not resume["accepted"]
        assert len(discord_api.identifies) == 1
        posted = discord_api.post_message(GENERAL, ALICE, "hello again")
        assert (await asyncio.wait_for(inbox.get(), WAIT_S)).message_id == posted["id"]
    finally:
        await taker.close()
        await asyncio.wait_for(task, WAIT_S)


async def test_an_unreadable_checkpoint_starts_a_session_afresh(
    discord_api: DiscordStandIn,
) -> None:
    taker, _, task = await run_restored(discord_api, b"not json")
    try:
        await discord_api.wait_until_ready_async()
        assert discord_api.resumes == [] and len(discord_api.identifies) == 1
    finally:
        await taker.close()
        await asyncio.wait_for(task, WAIT_S)


# -- parsing -------------------------------------------------------------------------------


async def test_a_message_carries_the_time_its_snowflake_says(connected: Connected) -> None:
    # #34: a message's own time is what the stale-message window is checked against.
    received = await connected.post(GENERAL, ALICE, "hello", sent_at=1_262_304_000.0)
    assert received.sent_at == datetime(2010, 1, 1, tzinfo=UTC)


async def test_a_mention_of_the_bot_reads_as_its_name_and_other_mentions_stay_readable(
    connected: Connected,
) -> None:
    received = await connected.post(
        GENERAL,
        ALICE,
        f"<@{BOT.id}> ask <@!{BOB.id}> and <@{CAROL.id}>, <@&{ENGINEERS}> in <#{RANDOM}> "
        "<:party:123456789012345678> then </deploy:987654321098765432>",
        mentions=[BOT, BOB, CAROL],
        role_mentions=[ENGINEERS],
    )
    assert received.text == (
        "@Mercury ask @Bobby and @carol, @engineers in #random :party: then /deploy"
    )


async def test_a_mention_of_someone_discord_did_not_describe_is_still_readable(
    connected: Connected,
) -> None:
    received = await connected.post(GENERAL, ALICE, "ping <@1999999999999999999> <#1888>")
    assert received.text == "ping @unknown-user #unknown-channel"


async def test_a_guild_channel_message_is_a_group_thread_of_its_channel(
    connected: Connected,
) -> None:
    received = await connected.post(GENERAL, BOB, "hello all")
    assert received.platform == "discord"
    assert received.thread_id == f"discord:{GUILD}:{GENERAL}"
    assert received.delivery_id == received.message_id
    assert received.author_id == str(BOB.id)
    assert received.author_name == "Bobby"
    assert received.is_dm is False
    assert received.is_reply_to_bot is False
    info = connected.bridge.parse_thread(received.thread_id)
    assert info.space_id == info.conversation_external_id == received.thread_id
    assert info.is_dm is False


async def test_a_message_in_a_thread_names_the_thread_under_its_parent_channel(
    connected: Connected,
) -> None:
    received = await connected.post(THREAD, ALICE, "in the thread")
    assert received.thread_id == f"discord:{GUILD}:{GENERAL}:{THREAD}"
    assert connected.bridge.parse_thread(received.thread_id).space_id == received.thread_id


async def test_a_thread_the_gateway_never_announced_is_looked_up_once(
    connected: Connected,
) -> None:
    thread = connected.api.create_thread(RANDOM, "new thread")
    first = await connected.post(thread, ALICE, "one")
    second = await connected.post(thread, BOB, "two")
    assert first.thread_id == second.thread_id == f"discord:{GUILD}:{RANDOM}:{thread}"
    lookups = [c for c in connected.api.calls if c.path == f"/channels/{thread}"]
    assert len(lookups) == 1


async def test_a_direct_message_is_a_dm_thread_of_its_own(connected: Connected) -> None:
    received = await connected.post(DM_ALICE, ALICE, "just us")
    assert received.thread_id == f"discord:@me:{DM_ALICE}"
    assert received.is_dm is True
    info = connected.bridge.parse_thread(received.thread_id)
    assert info.is_dm is True
    assert info.space_id == received.thread_id


async def test_a_group_dm_of_several_people_is_a_group_space_and_its_links_go_privately(
    connected: Connected,
) -> None:
    # A DM only while the bot and one person are its only members: Alice, Bob and the bot
    # make a group, however Discord names the channel (discord.py calls it a DMChannel).
    received = await connected.post(GROUP_DM, ALICE, "lunch at noon?")
    assert received.thread_id == f"discord:@group:{GROUP_DM}"
    assert received.is_dm is False
    info = connected.bridge.parse_thread(received.thread_id)
    assert info.is_dm is False and info.space_id == received.thread_id
    _, pressed = await connected.press(await buttons_message(connected, received), BOB)
    assert pressed.thread_id == received.thread_id and pressed.is_dm is False
    # A sign-in link goes to the DM the bot opens with Alice, never into the group DM.
    await connected.bridge.send_private(received, "Sign in: https://example.test/login")
    [opened] = connected.api.matching(lambda c: c.path == "/users/@me/channels")
    assert opened.json == {"recipient_id": ALICE.id}
    links = [c for c in connected.api.sent_messages() if "example.test" in (c.content or "")]
    assert len(links) == 1 and not links[0].path.startswith(f"/channels/{GROUP_DM}/")


async def test_a_group_dm_left_to_one_person_and_the_bot_is_their_dm(
    connected: Connected,
) -> None:
    connected.api.channels[GROUP_DM].recipients = (ALICE,)
    received = await connected.post(GROUP_DM, ALICE, "just us now")
    assert received.thread_id == f"discord:@me:{GROUP_DM}" and received.is_dm is True
    # Judged again before a link goes into it: Bob is back, so the link goes to Alice's DM.
    connected.api.channels[GROUP_DM].recipients = (ALICE, BOB)
    await connected.bridge.send_private(received, "Sign in: https://example.test/login")
    assert not connected.api.sent_messages(GROUP_DM)
    assert connected.api.matching(lambda c: c.path == "/users/@me/channels")


async def test_a_reply_to_the_bot_is_marked_and_a_reply_to_someone_else_is_not(
    connected: Connected,
) -> None:
    asked = await connected.post(GENERAL, ALICE, f"<@{BOT.id}> hi", mentions=[BOT])
    await connected.bridge.send_reply(asked, "Hello Alice.")
    (sent,) = connected.api.sent_messages(GENERAL)
    to_bot = await connected.post(GENERAL, ALICE, "thanks", reply_to=int(sent.answer["id"]))
    to_alice = await connected.post(GENERAL, BOB, "agreed", reply_to=int(asked.message_id))
    assert to_bot.is_reply_to_bot is True
    assert to_alice.is_reply_to_bot is False


async def test_a_reply_whose_message_discord_left_out_is_looked_up(connected: Connected) -> None:
    earlier = connected.api.post_message(DM_ALICE, BOT, "Said before we connected.", announce=False)
    received = await connected.post(
        DM_ALICE, ALICE, "about that", reply_to=int(earlier["id"]), resolve_reply=False
    )
    assert received.is_reply_to_bot is True
    (lookup,) = connected.api.matching(lambda c: c.path.endswith(f"/messages/{earlier['id']}"))
    assert (lookup.method, lookup.status) == ("GET", 200)


async def test_a_reply_to_a_deleted_message_is_no_reply_to_the_bot(connected: Connected) -> None:
    received = await connected.post(GENERAL, ALICE, "about that", reply_to=1234567890123)
    assert received.is_reply_to_bot is False


async def test_the_bots_own_messages_other_bots_webhooks_and_system_messages_are_not_handed_on(
    connected: Connected,
) -> None:
    asked = await connected.post(GENERAL, ALICE, "hi")
    await connected.bridge.send_reply(asked, "An answer the gateway echoes back.")
    other_bot = User(id=1100000000000000099, username="otterbot", bot=True)
    connected.api.post_message(GENERAL, other_bot, f"<@{BOT.id}> beep", mentions=[BOT])
    connected.api.post_message(GENERAL, CAROL, "via a hook", webhook_id=1300000000000000001)
    connected.api.post_message(GENERAL, CAROL, "", message_type=7)  # Carol joined
    connected.api.post_message(GENERAL, CAROL, "")  # no content: the intent withheld it
    await connected.nothing_more()


async def test_attachments_come_with_their_name_type_size_and_cdn_link(
    connected: Connected,
) -> None:
    attachment = connected.api.add_file(GENERAL, "notes.txt", b"some notes", "text/plain")
    received = await connected.post(GENERAL, ALICE, "", attachments=[attachment])
    assert received.text == ""
    (got,) = received.attachments
    assert got == Attachment(
        name="notes.txt", ref=attachment["url"], mime_type="text/plain", size_bytes=10
    )


async def test_a_slow_deliver_does_not_hold_up_the_next_message(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    release = asyncio.Event()
    texts: list[str] = []

    async def deliver(received: Received) -> None:
        if received.text == "slow":
            await release.wait()
        texts.append(received.text)

    task = asyncio.create_task(bridge.run(deliver))
    try:
        await discord_api.wait_until_ready_async()
        discord_api.post_message(GENERAL, ALICE, "slow")
        discord_api.post_message(GENERAL, BOB, "quick")
        await discord_api.wait_until_async(lambda: texts == ["quick"])
        release.set()
        await discord_api.wait_until_async(lambda: texts == ["quick", "slow"])
    finally:
        await bridge.close()
        await asyncio.wait_for(task, WAIT_S)


def handlers_running() -> int:
    """discord.py's message handlers running in this loop (a task each)."""
    return sum(1 for task in asyncio.all_tasks() if task.get_name() == "discord.py: on_message")


async def test_a_burst_while_the_pipeline_is_full_holds_a_bounded_few_and_the_heartbeats_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "bridges.discord")
    room = asyncio.Event()  # a full pipeline, until set
    waiting: list[int] = [0]
    handed: list[str] = []

    async def deliver(item: Received | Pressed) -> None:
        waiting[0] += 1
        try:
            await room.wait()
        finally:
            waiting[0] -= 1
        handed.append(item.text if isinstance(item, Received) else "a press")

    with DiscordStandIn(heartbeat_interval_ms=200) as api:
        bridge = DiscordBridge(settings_for(api), bot_name=BOT_NAME, handling_max=4)
        task = asyncio.create_task(bridge.run(deliver))
        try:
            await api.wait_until_ready_async()
            await api.wait_until_async(lambda: bridge.checkpoint() is not None, timeout=WAIT_S)
            before = msgspec.json.decode(bridge.checkpoint() or b"{}")["sequence"]
            for n in range(40):
                api.post_message(GENERAL, ALICE, f"burst {n}")
            await api.wait_until_async(lambda: waiting[0] == 4, timeout=WAIT_S)
            beats = api.heartbeats
            # The gateway is read on: its heartbeats are sent and acknowledged all along.
            await api.wait_until_async(lambda: api.heartbeats >= beats + 5, timeout=WAIT_S)
            assert handlers_running() == 4 and waiting[0] == 4
            assert len(api.identifies) == 1 and not api.resumes  # the one connection held
            room.set()
            await api.wait_until_async(lambda: len(handed) == 4, timeout=WAIT_S)
            api.post_message(GENERAL, BOB, "after the burst")
            await api.wait_until_async(lambda: len(handed) == 5, timeout=WAIT_S)
            assert sorted(handed[:4]) == [f"burst {n}" for n in range(4)]
            assert handed[4] == "after the burst" and handlers_running() == 0
            # The dropped ones hold the checkpoint back no more than the handed-on ones.
            after = msgspec.json.decode(bridge.checkpoint() or b"{}")["sequence"]
            assert after >= before + 41
        finally:
            await bridge.close()
            await asyncio.wait_for(task, WAIT_S)
    said = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert said[0].endswith("1 more dropped (Discord does not send them again).")
    assert said[1] == (
        "The Discord bridge dropped 35 more messages while it held the most it holds."
    )


async def test_a_thread_id_of_another_platform_is_refused(bridge: DiscordBridge) -> None:
    with pytest.raises(ValueError, match="discord:<guild>:<channel>"):
        bridge.parse_thread("slack:C0123")


# -- downloads -----------------------------------------------------------------------------


async def test_download_fetches_the_file_from_the_cdn_without_the_bot_token(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    payload = discord_api.add_file(GENERAL, "a b.png", b"\x89PNG data", "image/png")
    attachment = Attachment(name="a b.png", ref=payload["url"], size_bytes=payload["size"])
    assert await bridge.download(attachment, max_bytes=1024) == b"\x89PNG data"
    (download,) = discord_api.calls
    assert download.path.startswith("/attachments/")
    assert download.status == 200
    assert download.authorization is None


async def test_download_refuses_a_file_over_the_cap_without_fetching_it(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    payload = discord_api.add_file(GENERAL, "big.bin", b"x" * 2048, "application/octet-stream")
    attachment = Attachment(name="big.bin", ref=payload["url"], size_bytes=2048)
    with pytest.raises(BridgeError, match="over the 1024-byte limit"):
        await bridge.download(attachment, max_bytes=1024)
    assert discord_api.calls == []


async def test_download_stops_at_the_cap_when_the_size_was_not_told(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    payload = discord_api.add_file(GENERAL, "big.bin", b"x" * 200_000, "application/octet-stream")
    attachment = Attachment(name="big.bin", ref=payload["url"])
    with pytest.raises(BridgeError, match="over the 1024-byte limit"):
        await bridge.download(attachment, max_bytes=1024)


async def test_a_cdn_link_with_a_wrong_signature_is_a_bridge_error(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    payload = discord_api.add_file(GENERAL, "a.txt", b"a", "text/plain")
    forged = payload["url"].rsplit("hm=", 1)[0] + "hm=" + "0" * 64
    with pytest.raises(BridgeError, match="404") as caught:
        await bridge.download(Attachment(name="a.txt", ref=forged), max_bytes=1024)
    assert not isinstance(caught.value, PlatformUnavailable)


@contextlib.asynccontextmanager
async def stranger() -> AsyncIterator[tuple[str, list[str]]]:
    """A host that is not Discord's, on 127.0.0.1: its URL, and the paths it was asked."""
    seen: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.Response(body=b"from elsewhere")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}", seen
        finally:
            await runner.cleanup()


async def test_a_link_or_a_redirect_off_discords_hosts_is_not_followed(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    # Adversarial review (#34): the download followed redirects to any host.
    payload = discord_api.add_file(GENERAL, "a.txt", b"a", "text/plain")
    async with stranger() as (url, seen):
        with pytest.raises(BridgeError, match="not on Discord's CDN"):
            await bridge.download(Attachment(name="a.txt", ref=url + "/a.txt"), max_bytes=1024)
        discord_api.cdn_redirect = url + "/elsewhere"
        try:
            with pytest.raises(BridgeError, match=r"not on Discord's CDN \('127.0.0.1'\)"):
                await bridge.download(Attachment(name="a.txt", ref=payload["url"]), max_bytes=1024)
            # A redirect within Discord's own host is followed (here the stand-in's).
            discord_api.cdn_redirect = payload["url"].replace(discord_api.url, "")
            with pytest.raises(BridgeError, match="redirected the download"):
                await bridge.download(Attachment(name="a.txt", ref=payload["url"]), max_bytes=1024)
        finally:
            discord_api.cdn_redirect = None
    assert seen == []
    assert await bridge.download(Attachment(name="a.txt", ref=payload["url"]), max_bytes=9) == b"a"


async def test_a_cdn_that_answers_503_is_platform_unavailable(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    payload = discord_api.add_file(GENERAL, "a.txt", b"a", "text/plain")
    discord_api.fail_next(1, status=503)
    with pytest.raises(PlatformUnavailable, match="503"):
        await bridge.download(Attachment(name="a.txt", ref=payload["url"]), max_bytes=1024)


# -- replies -------------------------------------------------------------------------------


async def test_a_reply_in_a_guild_channel_answers_the_message_as_a_discord_reply(
    connected: Connected,
) -> None:
    asked = await connected.post(GENERAL, ALICE, f"<@{BOT.id}> what time is it?", mentions=[BOT])
    await connected.bridge.send_reply(asked, "Noon.")
    (sent,) = connected.api.sent_messages()
    assert sent.path == f"/channels/{GENERAL}/messages"
    assert sent.content == "Noon."
    assert str(sent.json["message_reference"]["message_id"]) == asked.message_id
    assert sent.json["message_reference"]["fail_if_not_exists"] is False
    assert "everyone" not in sent.json["allowed_mentions"]["parse"]
    assert "roles" not in sent.json["allowed_mentions"]["parse"]


async def test_an_answer_pings_nobody_but_the_person_it_answers(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    asked = group_message(discord_api.post_message(GENERAL, ALICE, "who?", announce=False)["id"])
    text = f"Ask <@{BOB.id}> or <@&77> or @everyone, <@{ALICE.id}>."
    await bridge.send_reply(asked, text)
    reply = await bridge.open_reply(asked, status=None)
    await reply.show(text, None)
    await reply.finish(text + " Done.")
    sent = [*discord_api.sent_messages(), *discord_api.edits()]
    assert len(sent) == 3
    for call in sent:
        allowed = call.json["allowed_mentions"]
        assert allowed["parse"] == [] and allowed.get("roles", []) == []
        assert [int(u) for u in allowed["users"]] == [ALICE.id], allowed


async def test_a_reply_in_a_thread_goes_to_the_thread(connected: Connected) -> None:
    asked = await connected.post(THREAD, ALICE, "in here")
    await connected.bridge.send_reply(asked, "Right here.")
    (sent,) = connected.api.sent_messages()
    assert sent.path == f"/channels/{THREAD}/messages"


async def test_a_reply_in_a_dm_is_a_plain_message(connected: Connected) -> None:
    asked = await connected.post(DM_ALICE, ALICE, "hi")
    await connected.bridge.send_reply(asked, "Hi Alice.")
    (sent,) = connected.api.sent_messages()
    assert sent.path == f"/channels/{DM_ALICE}/messages"
    assert "message_reference" not in sent.json


async def test_a_reply_works_before_run_has_connected(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    await bridge.send_reply(group_message(), "From REST alone.")
    (sent,) = discord_api.sent_messages()
    assert sent.content == "From REST alone."
    assert discord_api.identifies == []


async def test_a_reply_to_a_deleted_message_is_still_sent(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    await bridge.send_reply(group_message("1234567890"), "Still here.")
    (sent,) = discord_api.sent_messages()
    assert sent.content == "Still here."


async def test_text_over_two_thousand_characters_is_split_at_lines_and_only_the_first_replies(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    paragraphs = ["a" * 1500, "b" * 1500, "c" * 100]
    await bridge.send_reply(group_message(), "\n".join(paragraphs))
    sent = discord_api.sent_messages()
    assert [s.content for s in sent] == [
        paragraphs[0] + "\n",  # the line break stays with the part it ends
        paragraphs[1] + "\n" + paragraphs[2],
    ]
    assert "message_reference" in sent[0].json
    assert "message_reference" not in sent[1].json


async def test_a_text_without_a_line_or_space_is_cut_at_two_thousand(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    await bridge.send_reply(group_message(), "x" * 4500)
    assert [len(s.content or "") for s in discord_api.sent_messages()] == [2000, 2000, 500]


async def test_files_go_in_the_same_message_as_the_text(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    files = [
        EgressFile(filename="chart.png", mime_type="image/png", data=b"\x89PNG"),
        EgressFile(filename="data.csv", mime_type="text/csv", data=b"a,b\n1,2\n"),
    ]
    await bridge.send_reply(group_message(), "Here you are.", files)
    (sent,) = discord_api.sent_messages()
    assert sent.content == "Here you are."
    assert [(f.field, f.filename, f.data) for f in sent.files] == [
        ("files[0]", "chart.png", b"\x89PNG"),
        ("files[1]", "data.csv", b"a,b\n1,2\n"),
    ]
    assert [a["filename"] for a in sent.json["attachments"]] == ["chart.png", "data.csv"]


async def test_files_without_text_are_sent_alone(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    files = [EgressFile(filename="a.txt", mime_type="text/plain", data=b"a")]
    await bridge.send_reply(group_message(), "", files)
    (sent,) = discord_api.sent_messages()
    assert sent.content is None
    assert [f.filename for f in sent.files] == ["a.txt"]


async def test_a_long_text_with_files_sends_the_files_with_its_last_part(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    files = [EgressFile(filename="a.txt", mime_type="text/plain", data=b"a")]
    await bridge.send_reply(group_message(), "word " * 600, files)
    sent = discord_api.sent_messages()
    assert len(sent) == 2
    assert sent[0].files == []
    assert [f.filename for f in sent[1].files] == ["a.txt"]


async def test_more_than_ten_files_go_ten_to_a_message(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    files = [
        EgressFile(filename=f"f{i}.txt", mime_type="text/plain", data=str(i).encode())
        for i in range(12)
    ]
    await bridge.send_reply(group_message(), "Twelve files.", files)
    sent = discord_api.sent_messages()
    assert [len(s.files) for s in sent] == [10, 2]
    assert sent[0].content == "Twelve files."
    assert sent[1].content is None


async def test_typing_posts_to_the_channel_of_the_message(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    await bridge.start_typing(group_message(thread_id=f"discord:{GUILD}:{GENERAL}:{THREAD}"))
    (typing,) = discord_api.matching(lambda c: c.path.endswith("/typing"))
    assert (typing.method, typing.path, typing.status) == (
        "POST",
        f"/channels/{THREAD}/typing",
        204,
    )


# -- failures ------------------------------------------------------------------------------


async def test_a_channel_the_bot_may_not_post_in_is_a_bridge_error_naming_the_permissions(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    discord_api.forbidden_channels.add(GENERAL)
    with pytest.raises(BridgeError, match="Send Messages") as caught:
        await bridge.send_reply(group_message(), "Hello?")
    assert not isinstance(caught.value, PlatformUnavailable)
    assert "403" in str(caught.value)


async def test_a_channel_that_is_gone_is_a_bridge_error(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    gone = group_message(thread_id=f"discord:{GUILD}:1777")
    with pytest.raises(BridgeError, match="404") as caught:
        await bridge.send_reply(gone, "Hello?")
    assert not isinstance(caught.value, PlatformUnavailable)


async def test_discord_answering_503_is_platform_unavailable(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    await bridge.start_typing(group_message())  # logged in
    discord_api.fail_next(1, status=503)
    with pytest.raises(PlatformUnavailable, match="503"):
        await bridge.send_reply(group_message(), "Hello?")


async def test_one_500_is_retried_by_discord_py_and_the_reply_lands(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    await bridge.start_typing(group_message())
    discord_api.fail_next(1, status=500)
    await bridge.send_reply(group_message(), "Eventually.")
    creates = discord_api.matching(is_message_create)
    assert [c.status for c in creates] == [500, 200]


async def test_a_short_rate_limit_is_waited_out(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    await bridge.start_typing(group_message())
    discord_api.fail_next(1, status=429, retry_after=0.2)
    await bridge.send_reply(group_message(), "After the wait.")
    assert [c.status for c in discord_api.matching(is_message_create)] == [429, 200]


async def test_a_long_rate_limit_is_platform_unavailable_at_once(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    await bridge.start_typing(group_message())
    discord_api.fail_next(1, status=429, retry_after=120)
    with pytest.raises(PlatformUnavailable, match="rate-limits"):
        await asyncio.wait_for(bridge.send_reply(group_message(), "Hello?"), WAIT_S)


async def test_a_slow_discord_is_platform_unavailable_after_the_request_timeout(
    discord_api: DiscordStandIn,
) -> None:
    bridge = DiscordBridge(settings_for(discord_api), bot_name=BOT_NAME, request_timeout=0.5)
    try:
        await bridge.start_typing(group_message())
        discord_api.delay_s = 3.0
        with pytest.raises(PlatformUnavailable, match=r"within 0\.5 s"):
            await bridge.send_reply(group_message(), "Hello?")
    finally:
        discord_api.delay_s = 0.0
        await bridge.close()


async def test_a_discord_that_cannot_be_reached_is_platform_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = DiscordSettings(
        enabled=True, bot_token="token", api_url=f"http://127.0.0.1:{port}/api/v10"
    )
    bridge = DiscordBridge(settings, bot_name=BOT_NAME)
    try:
        with pytest.raises(PlatformUnavailable, match="could not be reached"):
            await bridge.send_reply(group_message(), "Hello?")
    finally:
        await bridge.close()


# -- live replies (#37) --------------------------------------------------------------------

STOP = ReplyButton(label="Stop", action="s:0123456789abcdef", style="danger")
YES = ReplyButton(label="Yes", action="c:k9m2-x7q4:a1b2c3d4e5", style="primary")
NO = ReplyButton(label="No", action="c:p3n8-w2z6:a1b2c3d4e5")


def is_typing(call: RestCall) -> bool:
    return call.path.endswith("/typing")


def is_edit(call: RestCall) -> bool:
    return call.method == "PATCH" and call.path.startswith("/channels/")


def buttons_of(components: list[dict] | None) -> list[tuple[str, str, int]]:
    """(label, custom_id, style) of every button, row by row."""
    return [
        (b["label"], b["custom_id"], b["style"])
        for row in components or []
        for b in row["components"]
    ]


async def test_the_bridge_is_a_live_bridge_within_discords_edit_limit(
    bridge: DiscordBridge,
) -> None:
    assert isinstance(bridge, LiveBridge)
    limits = bridge.live_limits
    assert limits.max_chars == 2000
    assert limits.edit_interval_s >= 1.0  # 5 edits per 5 s per channel
    assert limits.max_buttons == 5
    assert limits.partial


async def test_a_live_reply_types_while_thinking_then_posts_a_reply_and_edits_it(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    asked = group_message(discord_api.post_message(GENERAL, ALICE, "lunch?", announce=False)["id"])
    reply = await bridge.open_reply(asked, status="Thinking…", buttons=[STOP])
    await reply.show("", "Thinking…")
    assert [c.path for c in discord_api.calls][-1:] == [f"/channels/{GENERAL}/typing"]
    assert discord_api.sent_messages() == []  # nothing to show yet: typing says it

    await reply.show("Lunch is", None)
    (posted,) = discord_api.sent_messages()
    assert posted.content == "Lunch is"
    assert str(posted.json["message_reference"]["message_id"]) == asked.message_id
    assert buttons_of(posted.json["components"]) == [("Stop", STOP.action, 4)]
    message_id = int(posted.answer["id"])

    await reply.show("Lunch is at noon", None)
    await reply.show("Lunch is at noon", None)  # unchanged: no call
    await reply.finish("Lunch is at noon.", [YES, NO])
    edits = discord_api.edits(message_id)
    assert [e.json["content"] for e in edits] == ["Lunch is at noon", "Lunch is at noon."]
    assert buttons_of(edits[-1].json["components"]) == [
        ("Yes", YES.action, 1),
        ("No", NO.action, 2),
    ]
    assert discord_api.messages[message_id]["content"] == "Lunch is at noon."
    assert len(discord_api.sent_messages()) == 1


async def test_a_tool_status_is_posted_as_a_small_line_under_the_text_and_goes_at_the_end(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    reply = await bridge.open_reply(group_message(), status="Thinking…")
    await reply.show("", "Searching the web…")
    (posted,) = discord_api.sent_messages()
    assert posted.content == "-# Searching the web…"
    assert "components" not in posted.json or posted.json["components"] == []
    await reply.show("Found it", "Reading a page…")
    await reply.finish("Found it.")
    assert [e.json["content"] for e in discord_api.edits()] == [
        "Found it\n\n-# Reading a page…",
        "Found it.",
    ]


async def test_a_reply_finished_before_it_showed_anything_is_one_message_with_its_files(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    reply = await bridge.open_reply(dm_message(), status="Thinking…", buttons=[STOP])
    files = [EgressFile(filename="a.txt", mime_type="text/plain", data=b"a")]
    await reply.finish("Done.", [YES], files)
    (posted,) = discord_api.sent_messages()
    assert posted.content == "Done."
    assert buttons_of(posted.json["components"]) == [("Yes", YES.action, 1)]
    assert [f.filename for f in posted.files] == ["a.txt"]
    assert discord_api.edits() == []


async def test_files_of_a_shown_reply_are_attached_by_its_last_edit(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    reply = await bridge.open_reply(dm_message(), status=None)
    await reply.show("Here", None)
    files = [EgressFile(filename="summary.txt", mime_type="text/plain", data=b"ann leads")]
    await reply.finish("Here it is.", (), files)
    (edit,) = discord_api.edits()
    assert [(f.filename, f.data) for f in edit.files] == [("summary.txt", b"ann leads")]
    message = discord_api.messages[int(edit.answer["id"])]
    assert message["content"] == "Here it is."
    assert [a["filename"] for a in message["attachments"]] == ["summary.txt"]


async def test_a_failed_reply_shows_the_errors_sentence_without_buttons(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    reply = await bridge.open_reply(dm_message(), status=None, buttons=[STOP])
    await reply.show("Half an ans", None)
    await reply.fail("The model did not answer; try again.")
    (edit,) = discord_api.edits()
    assert edit.json["content"] == "The model did not answer; try again."
    assert edit.json["components"] == []


async def test_a_long_rate_limit_on_an_edit_is_platform_unavailable_with_its_wait(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    reply = await bridge.open_reply(dm_message(), status=None)
    await reply.show("One", None)
    discord_api.fail_next(1, status=429, retry_after=120, method="PATCH")
    with pytest.raises(PlatformUnavailable) as caught:
        await asyncio.wait_for(reply.show("One two", None), WAIT_S)
    assert caught.value.retry_after_s == 120
    await reply.show("One two three", None)
    assert discord_api.messages[int(discord_api.edits()[-1].answer["id"])]["content"] == (
        "One two three"
    )


async def test_a_private_message_goes_to_the_authors_dm_channel(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    asked = group_message()
    asked = msgspec.structs.replace(asked, author_id=str(BOB.id), author_name="Bobby")
    await bridge.send_private(asked, "Sign in: https://example.test/login")
    [opened] = discord_api.matching(lambda c: c.path == "/users/@me/channels")
    assert opened.json == {"recipient_id": BOB.id}
    (sent,) = discord_api.sent_messages()
    dm_channel = discord_api.channels[int(sent.path.split("/")[2])]
    assert dm_channel.type == 1 and dm_channel.recipients == (BOB,)
    assert sent.content == "Sign in: https://example.test/login"
    assert not discord_api.sent_messages(GENERAL)


async def test_a_private_message_in_a_dm_stays_in_that_dm(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    await bridge.send_private(dm_message(), "Sign in here.")
    (sent,) = discord_api.sent_messages()
    assert sent.path == f"/channels/{DM_ALICE}/messages"


async def test_a_person_who_takes_no_direct_messages_is_a_bridge_error_saying_so(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    discord_api.dms_closed.add(ALICE.id)
    with pytest.raises(BridgeError, match="take no direct messages") as caught:
        await bridge.send_private(group_message(), "Sign in here.")
    assert not isinstance(caught.value, PlatformUnavailable)
    assert discord_api.sent_messages() == []


# -- presses -------------------------------------------------------------------------------


async def buttons_message(connected: Connected, asked: Received) -> int:
    """The bot's reply to ``asked`` with the Yes and No buttons; its id."""
    reply = await connected.bridge.open_reply(asked, status=None)
    await reply.finish("Delete the file?", [YES, NO])
    return int(connected.api.sent_messages()[-1].answer["id"])


async def test_a_press_in_a_channel_is_handed_on_with_its_presser_action_and_message(
    connected: Connected,
) -> None:
    asked = await connected.post(GENERAL, ALICE, f"<@{BOT.id}> delete it", mentions=[BOT])
    message_id = await buttons_message(connected, asked)
    pressing, pressed = await connected.press(message_id, BOB, label="No")
    assert pressed.platform == "discord"
    assert pressed.thread_id == f"discord:{GUILD}:{GENERAL}"
    assert pressed.message_id == str(message_id)
    assert pressed.author_id == str(BOB.id)
    assert pressed.author_name == "Bobby"  # the nickname in the guild, as for messages
    assert pressed.action == NO.action
    assert not pressed.is_dm
    assert pressed.respond == f"{BOT.id}:{pressing.id}:{pressing.token}"
    assert pressed.sent_at is not None
    assert abs((pressed.sent_at - datetime.now(UTC)).total_seconds()) < 60


async def test_a_press_in_a_thread_and_in_a_dm_names_their_threads(connected: Connected) -> None:
    in_thread = await connected.post(THREAD, ALICE, "in here")
    _, pressed = await connected.press(await buttons_message(connected, in_thread), ALICE)
    assert pressed.thread_id == f"discord:{GUILD}:{GENERAL}:{THREAD}"
    assert pressed.author_name == "Alice"
    in_dm = await connected.post(DM_ALICE, ALICE, "hi")
    _, pressed = await connected.press(await buttons_message(connected, in_dm), ALICE)
    assert pressed.thread_id == f"discord:@me:{DM_ALICE}"
    assert pressed.is_dm


async def test_answering_a_press_is_an_ephemeral_message_to_the_presser(
    connected: Connected,
) -> None:
    asked = await connected.post(GENERAL, ALICE, "delete it")
    message_id = await buttons_message(connected, asked)
    pressing, pressed = await connected.press(message_id, BOB, label="Yes")
    await connected.bridge.answer_press(pressed, "This isn't yours to answer.")
    [answer] = connected.api.answers_to(pressing)
    assert (answer.via, answer.type, answer.flags) == ("callback", 4, 64)
    assert answer.content == "This isn't yours to answer."
    # The pressed message is unchanged: its buttons stay for their owner.
    assert len(buttons_of(connected.api.messages[message_id]["components"])) == 2


async def test_settling_a_press_updates_the_pressed_message_and_takes_its_buttons(
    connected: Connected,
) -> None:
    asked = await connected.post(GENERAL, ALICE, "delete it")
    message_id = await buttons_message(connected, asked)
    pressing, pressed = await connected.press(message_id, ALICE, label="Yes")
    await connected.bridge.settle_press(pressed, "Delete the file? Yes.")
    [answer] = connected.api.answers_to(pressing)
    assert (answer.via, answer.type, answer.flags) == ("callback", 7, 0)
    assert answer.components == []
    message = connected.api.messages[message_id]
    assert message["content"] == "Delete the file? Yes."
    assert message["components"] == []


async def test_a_press_not_answered_in_time_is_acknowledged_and_answered_through_its_webhook(
    discord_api: DiscordStandIn,
) -> None:
    bridge = DiscordBridge(settings_for(discord_api), bot_name=BOT_NAME, press_ack_after_s=0.1)
    inbox: asyncio.Queue[Received] = asyncio.Queue()
    presses: asyncio.Queue[Pressed] = asyncio.Queue()
    task = asyncio.create_task(bridge.run(sorting(inbox, presses)))
    try:
        await discord_api.wait_until_ready_async()
        connected = Connected(
            bridge=bridge, api=discord_api, inbox=inbox, task=task, presses=presses
        )
        asked = await connected.post(GENERAL, ALICE, "delete it")
        message_id = await buttons_message(connected, asked)
        pressing, pressed = await connected.press(message_id, ALICE, label="Yes")
        await discord_api.wait_until_async(lambda: pressing.acknowledged, WAIT_S)
        await bridge.answer_press(pressed, "Working on it.")
        await bridge.settle_press(pressed, "Delete the file? Yes.")
        answers = discord_api.answers_to(pressing)
        assert [(a.via, a.type, a.flags) for a in answers] == [
            ("callback", 6, 0),
            ("followup", None, 64),
            ("original", None, 0),
        ]
        assert discord_api.messages[message_id]["content"] == "Delete the file? Yes."
        assert discord_api.messages[message_id]["components"] == []
    finally:
        await bridge.close()
        await asyncio.wait_for(task, WAIT_S)


async def test_a_press_taken_over_by_another_instance_is_answered_from_its_respond_handle(
    connected: Connected, discord_api: DiscordStandIn
) -> None:
    asked = await connected.post(GENERAL, ALICE, "delete it")
    message_id = await buttons_message(connected, asked)
    pressing, pressed = await connected.press(message_id, ALICE, label="No")
    other = DiscordBridge(settings_for(discord_api), bot_name=BOT_NAME)
    try:
        await other.settle_press(pressed, "Delete the file? No.")
        # A second answer (a retry, a race) edits the original instead of failing.
        await other.settle_press(pressed, "Delete the file? No.")
    finally:
        await other.close()
    answers = discord_api.answers_to(pressing)
    assert [(a.via, a.type) for a in answers] == [("callback", 7), ("original", None)]
    assert discord_api.messages[message_id]["components"] == []


async def test_a_press_whose_interaction_expired_is_settled_by_editing_the_message(
    connected: Connected, discord_api: DiscordStandIn
) -> None:
    asked = await connected.post(GENERAL, ALICE, "delete it")
    message_id = await buttons_message(connected, asked)
    discord_api.interaction_window_s = 0.0
    pressing, pressed = await connected.press(message_id, ALICE, label="No")
    other = DiscordBridge(settings_for(discord_api), bot_name=BOT_NAME)
    try:
        await other.settle_press(pressed, "Delete the file? No.")
    finally:
        await other.close()
    assert discord_api.answers_to(pressing) == []
    (edit,) = discord_api.edits(message_id)
    assert edit.json["components"] == []
    assert discord_api.messages[message_id]["content"] == "Delete the file? No."


async def test_a_press_on_a_message_without_our_buttons_or_by_a_bot_is_not_handed_on(
    connected: Connected,
) -> None:
    asked = await connected.post(GENERAL, ALICE, "delete it")
    message_id = await buttons_message(connected, asked)
    other_bot = User(id=1100000000000000099, username="otherbot", bot=True)
    connected.api.press(message_id, other_bot, label="Yes")
    _, pressed = await connected.press(message_id, BOB, label="No")
    assert pressed.author_id == str(BOB.id)  # the bot's press came first and was dropped
    assert connected.presses.empty()


async def test_a_live_reply_right_after_the_typing_indicator_does_not_show_it_again(
    discord_api: DiscordStandIn, bridge: DiscordBridge
) -> None:
    await bridge.start_typing(dm_message())
    reply = await bridge.open_reply(dm_message(), status="Thinking…")
    await reply.finish("Hi.")
    assert len(discord_api.matching(is_typing)) == 1
    await bridge.open_reply(group_message(), status="Thinking…")  # another channel: shown
    assert [c.path for c in discord_api.matching(is_typing)][-1] == f"/channels/{GENERAL}/typing"
