"""Slack in Socket Mode end to end (#38): a real server whose Slack bridge holds Socket Mode
connections (slack_sdk's aiohttp client) to the Socket Mode stand-in, answers through the
stand-in's Web API; the model is the Ollama stand-in. Messages, a mention's thread, a button
press, Slack's ``refresh_requested`` mid-stream, a connection dropped before an envelope's
acknowledgement, and an app-level token Slack refuses.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from bridges.port import Pressed, Received
from bridges.slack import SlackSocketBridge, socket_mode
from tests.support.live_scenarios import Desk
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.scenes import config_file, settle
from tests.support.server import RunningServer
from tests.support.slack_socket_standin import SlackSocketStandIn
from tests.support.slack_standin import LiveMessage

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

CONFIG = """
spaces:
  "slack:C1":
    admins: [static:alice]
    members: [static:bob]
"""


@pytest.fixture(scope="module")
def socket_server() -> Iterator[SlackSocketStandIn]:
    with SlackSocketStandIn() as standin:
        yield standin


@pytest.fixture
def slack(socket_server: SlackSocketStandIn) -> Iterator[SlackSocketStandIn]:
    # The server of the test before has closed its connections (or is closing them).
    socket_server.wait_until(
        lambda: socket_server.open_connections == 0, timeout=20, what="no connection left"
    )
    socket_server.reset()
    for user, name in (("U1", "Ann"), ("U2", "Ben"), ("U3", "Cat"), ("U4", "Dee")):
        socket_server.add_user(user, name.lower(), display_name=name)
    yield socket_server
    socket_server.reset()


@pytest.fixture
def chat(
    make_server: Callable[..., RunningServer], slack: SlackSocketStandIn, tmp_path: Path
) -> RunningServer:
    opened = slack.hellos
    server = make_server(
        MERCURY_CONFIG_FILE=config_file(tmp_path, CONFIG),
        BRIDGE_LIVE_ANSWERS="false",
        **slack.env(),
    )
    slack.wait_until(lambda: slack.hellos > opened, timeout=30, what="a Socket Mode connection")
    return server


def mention(slack: SlackSocketStandIn, text: str) -> str:
    return f"<@{slack.bot_user_id}> {text}"


async def replies(slack: SlackSocketStandIn, count: int) -> None:
    await slack.wait_until_async(
        lambda: len(slack.messages) >= count, timeout=40, what=f"{count} posted message(s)"
    )


async def all_acknowledged(slack: SlackSocketStandIn) -> None:
    await slack.wait_until_async(
        lambda: not slack.unacked, timeout=20, what="every envelope acknowledged"
    )


async def test_a_direct_message_comes_over_the_socket_is_acknowledged_and_answered(
    chat: RunningServer, slack: SlackSocketStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Hi Dee."))
    envelope = await slack.send_event(slack.message("D9", "U4", "hello there"))
    await replies(slack, 1)
    [posted] = slack.messages
    assert (posted.channel, posted.thread_ts, posted.text) == ("D9", None, "Hi Dee.")
    await all_acknowledged(slack)
    assert (envelope.sent, envelope.acked) == (1, 1)
    # No webhook in Socket Mode: the route answers as for a bridge that is off.
    async with httpx.AsyncClient() as client:
        answer = await client.post(chat.url + "/webhooks/slack", json={"type": "event_callback"})
    assert answer.status_code == 404 and answer.json()["ok"] is False


async def test_a_mention_in_a_channel_is_answered_in_its_thread_with_the_talk_before_it(
    chat: RunningServer, slack: SlackSocketStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Lunch is at noon."))
    await slack.send_event(slack.message("C1", "U1", "who's up for lunch?"))
    asked = slack.message("C1", "U3", mention(slack, "when is lunch?"), ts="1700000300.000100")
    # The mention comes as app_mention too, and the app gets envelopes it has no use for:
    # acknowledged (or Slack would send them again), nothing run.
    await slack.send_event({**asked, "type": "app_mention"})
    await slack.send("slash_commands", {"command": "/mercury", "text": "hi", "user_id": "U1"})
    await slack.send_event(asked)
    await replies(slack, 1)
    [posted] = slack.messages
    assert (posted.channel, posted.thread_ts, posted.text) == (
        "C1",
        "1700000300.000100",
        "Lunch is at noon.",
    )
    [request] = ollama.requests
    words = [m["content"] for m in request["messages"] if m["role"] == "user"][-1]
    assert "who's up for lunch?" in words and words.endswith("when is lunch?</caller>")
    await all_acknowledged(slack)
    await settle()
    assert len(ollama.requests) == 1 and len(slack.messages) == 1


async def test_refresh_requested_mid_stream_loses_nothing_and_answers_nothing_twice(
    chat: RunningServer, slack: SlackSocketStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(*(ChatScript.words("Noted.") for _ in range(4)))
    opened = slack.opened
    await slack.send_event(slack.message("D1", "U1", "one"))
    await slack.send_event(slack.message("D2", "U2", "two"))
    await slack.refresh()
    # Sent while the bridge replaces its connection: on the new one, or again once the old
    # one is gone unacknowledged.
    await slack.send_event(slack.message("D3", "U3", "three"))
    await slack.send_event(slack.message("D4", "U4", "four"))
    await replies(slack, 4)
    await all_acknowledged(slack)
    await settle()
    assert sorted(m.channel for m in slack.messages) == ["D1", "D2", "D3", "D4"]
    assert len(ollama.requests) == 4
    assert slack.opened > opened  # a new connection through apps.connections.open


async def test_an_envelope_not_acknowledged_before_a_drop_comes_again_and_runs_once(
    chat: RunningServer, slack: SlackSocketStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Once."), ChatScript.words("Twice is nice."))
    dropped = await slack.send_event(slack.message("D5", "U1", "are you there?"), drop_after=True)
    await slack.wait_until_async(lambda: dropped.acked > 0, timeout=30, what="the redelivery")
    assert dropped.sent == 2  # the first acknowledgement (if any) came on a dead connection
    # One sent while no connection is open waits for the next.
    await slack.drop()
    waiting = await slack.send_event(slack.message("D6", "U2", "and now?"))
    await replies(slack, 2)
    await all_acknowledged(slack)
    await settle()
    assert sorted(m.channel for m in slack.messages) == ["D5", "D6"]
    assert len(ollama.requests) == 2 and waiting.acked == 1


@pytest.fixture
def desk() -> Desk:
    return Desk()


@pytest.fixture
def live_chat(
    make_server: Callable[..., RunningServer],
    slack: SlackSocketStandIn,
    desk: Desk,
    tmp_path: Path,
) -> RunningServer:
    opened = slack.hellos
    server = make_server(
        {"plugins": [desk.plugin()]},
        MERCURY_CONFIG_FILE=config_file(tmp_path, CONFIG),
        **slack.env(),
    )
    slack.wait_until(lambda: slack.hellos > opened, timeout=30, what="a Socket Mode connection")
    return server


async def answered(
    slack: SlackSocketStandIn, thread_ts: str, text: str, *, count: int = 1
) -> list[LiveMessage]:
    def done() -> bool:
        messages = slack.thread_messages("C1", thread_ts)
        return (
            len(messages) >= count
            and "".join(m.visible for m in messages) == text
            and all(m.state != "streaming" for m in messages)
            and all(not b[1].startswith("s:") for m in messages for b in m.buttons)
        )

    await slack.wait_until_async(done, timeout=40, what=f"the answer {text[:40]!r}…")
    return slack.thread_messages("C1", thread_ts)


async def test_a_confirmation_pressed_over_the_socket_confirms_once(
    live_chat: RunningServer, slack: SlackSocketStandIn, ollama: OllamaStandIn, desk: Desk
) -> None:
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "book", "arguments": {}}]),
        ChatScript.words("Which room would you like?"),
    )
    await slack.send_event(slack.message("C1", "U1", mention(slack, "book a room"), ts="5.1"))
    [asked] = await answered(slack, "5.1", "Which room would you like?")
    (_, small), _ = asked.buttons
    mine = slack.block_actions(asked.ts, "U1", small)
    await slack.send_press(mine)
    await slack.send_press(mine)  # Slack's second delivery of the same press
    await answered(slack, "5.1", "Which room would you like?Confirmed and done.", count=2)
    await all_acknowledged(slack)
    await settle()
    assert desk.booked == ["small"]
    assert asked.buttons == [] and asked.context == ["Chosen: Small room"]
    assert len(ollama.requests) == 2


async def test_an_app_token_slack_refuses_is_logged_once_and_not_tried_again(
    make_server: Callable[..., RunningServer],
    slack: SlackSocketStandIn,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "mercury.bridges")
    server = make_server(
        MERCURY_CONFIG_FILE=config_file(tmp_path, CONFIG),
        **{**slack.env(), "SLACK_APP_TOKEN": "xapp-1-not-this-app"},
    )
    await slack.wait_until_async(lambda: slack.refused_opens > 0, timeout=30, what="the refusal")
    await settle(1.5)
    assert slack.refused_opens == 1 and slack.opened == 0
    refusals = [r for r in caplog.records if "refused the app-level token" in r.getMessage()]
    assert len(refusals) == 1 and "invalid_auth" in refusals[0].getMessage()
    assert "xapp-1-not-this-app" not in caplog.text
    async with httpx.AsyncClient() as client:  # the server runs on
        assert (await client.get(server.url + "/webhooks/slack")).status_code == 404


async def test_the_bridge_stops_connecting_once_slack_refuses_its_token(
    slack: SlackSocketStandIn,
) -> None:
    # A bot token where the app-level token belongs: Slack answers not_allowed_token_type.
    settings = slack.settings(mode="socket", app_token=slack.bot_token, signing_secret=None)
    bridge = SlackSocketBridge(settings, bot_name="Mercury", first_wait_s=0.01)

    async def deliver(message: Received | Pressed) -> None:
        raise AssertionError(f"nothing comes over a refused connection, not {message}")

    try:
        await asyncio.wait_for(bridge.run(deliver), timeout=20)  # ends by itself
    finally:
        await bridge.close()
    assert slack.refused_opens == 1 and slack.opened == 0


async def test_an_envelope_the_bridge_could_not_take_is_not_acknowledged_and_comes_again(
    slack: SlackSocketStandIn,
) -> None:
    bridge = SlackSocketBridge(
        slack.settings(mode="socket", app_token=slack.app_token, signing_secret=None),
        bot_name="Mercury",
    )
    taken: list[str] = []
    failed: list[str] = []

    async def deliver(message: Received | Pressed) -> None:
        if not failed:  # the state store is down, once
            failed.append(message.delivery_id)
            raise ConnectionError("the state store can't be reached")
        taken.append(message.delivery_id)

    opened = slack.hellos
    running = asyncio.create_task(bridge.run(deliver))
    try:
        await slack.wait_until_async(lambda: slack.hellos > opened, timeout=20, what="a connection")
        envelope = await slack.send_event(slack.message("D7", "U1", "take me"))
        await slack.wait_until_async(lambda: failed, timeout=20, what="the failed take")
        await settle(0.3)
        assert envelope.acked == 0  # never acknowledged before it was taken
        await slack.retry_unacked()  # Slack's retry of an envelope not acknowledged in time
        await all_acknowledged(slack)
        assert taken == failed and envelope.sent == 2
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await bridge.close()


async def test_failed_attempts_to_connect_wait_longer_and_longer_until_slack_says_hello(
    slack: SlackSocketStandIn,
) -> None:
    bridge = SlackSocketBridge(
        slack.settings(mode="socket", app_token=slack.app_token, signing_secret=None),
        bot_name="Mercury",
        first_wait_s=0.2,
        ping_interval_s=0.05,
    )
    slack.fail_next(3, status=500, error="internal_error", method="apps.connections.open")

    async def deliver(message: Received | Pressed) -> None:
        raise AssertionError(f"nothing was sent, not {message}")

    opened = slack.hellos
    running = asyncio.create_task(bridge.run(deliver))
    try:
        await slack.wait_until_async(
            lambda: slack.hellos > opened, timeout=20, what="a connection at last"
        )
        first, second, third = (b - a for a, b in itertools.pairwise(slack.open_times))
        assert first < second < third and third > 2 * first
        # Slack's hello starts the count again: a refresh reconnects without the waits.
        refreshed = time.monotonic()
        await slack.refresh()
        await slack.wait_until_async(lambda: slack.hellos > opened + 1, timeout=20, what="hello")
        assert len(slack.open_times) == 5 and slack.open_times[-1] - refreshed < third
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await bridge.close()


async def test_an_envelope_over_the_frame_limit_is_acknowledged_and_refused_once(
    chat: RunningServer,
    slack: SlackSocketStandIn,
    ollama: OllamaStandIn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "mercury.bridges")
    hellos = slack.hellos
    huge = await slack.send_event(slack.message("D9", "U4", "x" * (5 * 1024 * 1024)))
    await all_acknowledged(slack)
    assert (huge.sent, huge.acked) == (1, 1)
    ollama.enqueue(ChatScript.words("Still here."))
    await slack.send_event(slack.message("D9", "U4", "are you there?"))
    await replies(slack, 1)  # the same connection goes on
    assert [m.text for m in slack.messages] == ["Still here."] and slack.hellos == hellos
    said = [r.getMessage() for r in caplog.records if "over the" in r.getMessage()]
    assert len(said) == 1 and huge.envelope_id in said[0]


async def test_a_connection_that_fails_asks_for_a_new_url_never_the_spent_one(
    make_server: Callable[..., RunningServer], slack: SlackSocketStandIn, tmp_path: Path
) -> None:
    slack.refuse_links = 2
    before = slack.hellos
    make_server(MERCURY_CONFIG_FILE=config_file(tmp_path, CONFIG), **slack.env())
    await slack.wait_until_async(lambda: slack.hellos > before, timeout=40, what="a connection")
    assert slack.refused_links == 2 and slack.spent_urls == 0
    assert slack.opened >= 3  # a new URL for each attempt


async def test_a_full_pipeline_holds_envelopes_back_unacknowledged_until_there_is_room(
    chat: RunningServer, slack: SlackSocketStandIn, ollama: OllamaStandIn
) -> None:
    bridging = chat.services.bridging
    assert bridging is not None
    bridging.pipeline.max_in_flight = 1
    ollama.enqueue(
        ChatScript.words("one two three four five six", delay_s=0.4),
        ChatScript.words("Second."),
        ChatScript.words("Third."),
    )
    first = await slack.send_event(slack.message("D1", "U1", "the slow one"))
    await slack.wait_until_async(lambda: first.acked == 1, timeout=20, what="the first taken")
    later = [await slack.send_event(slack.message(f"D{n}", "U2", f"number {n}")) for n in (2, 3)]
    await asyncio.sleep(1.0)
    assert all(e.acked == 0 for e in later)  # held back while the pipeline is full
    await replies(slack, 3)
    await all_acknowledged(slack)
    assert [e.acked for e in later] == [1, 1]


def listeners_running() -> int:
    """The SDK's message listeners running in this loop: each holds an envelope read from
    the connection and not yet acknowledged."""
    return sum(
        1
        for task in asyncio.all_tasks()
        if getattr(task.get_coro(), "__qualname__", "").endswith(".run_message_listeners")
    )


async def test_a_storm_while_the_pipeline_is_full_is_left_unread_not_queued_in_memory(
    slack: SlackSocketStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "mercury.bridges")
    # Two envelopes taken at once, four read ahead; the pings every 0.1 s would call a
    # connection without a pong for 0.4 s dead.
    bridge = SlackSocketBridge(
        slack.settings(mode="socket", app_token=slack.app_token, signing_secret=None),
        bot_name="Mercury",
        ping_interval_s=0.1,
        read_ahead=4,
        taking_max=2,
    )
    room = asyncio.Event()  # a full pipeline, until set
    delivered: list[str] = []
    waiting: list[int] = [0]

    async def deliver(message: Received | Pressed) -> None:
        waiting[0] += 1
        try:
            await room.wait()
        finally:
            waiting[0] -= 1
        delivered.append(message.text if isinstance(message, Received) else "a press")

    opened = slack.hellos
    running = asyncio.create_task(bridge.run(deliver))
    try:
        await slack.wait_until_async(lambda: slack.hellos > opened, timeout=20, what="a connection")
        storm = [await slack.send_event(slack.message("D1", "U1", f"n{n}")) for n in range(40)]
        await slack.wait_until_async(lambda: bridge.backlog == 6, timeout=20, what="the backlog")
        await settle(1.5)  # the connection is held back far longer than its pongs may lack
        assert bridge.backlog == 6 and waiting[0] == 2 and listeners_running() == 2
        assert not any(e.acked for e in storm)  # the rest stays with Slack, unread
        assert slack.hellos == opened + 1 and slack.opened == 1  # not taken for dead
        room.set()
        await all_acknowledged(slack)
        await slack.wait_until_async(lambda: len(delivered) == 40, timeout=20, what="all")
        assert sorted(delivered) == sorted(f"n{n}" for n in range(40))
        assert all((e.sent, e.acked) == (1, 1) for e in storm)
        assert slack.opened == 1 and bridge.backlog == 0
        said = [r.getMessage() for r in caplog.records if "read no further" in r.getMessage()]
        assert len(said) == 1 and said[0].startswith("6 Slack envelopes wait to be taken")
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await bridge.close()


async def test_a_storm_while_the_pipeline_is_full_stays_with_slack_and_each_is_answered_once(
    chat: RunningServer, slack: SlackSocketStandIn, ollama: OllamaStandIn
) -> None:
    bridging = chat.services.bridging
    assert bridging is not None
    [bridge] = [b for b in bridging.bridges if isinstance(b, SlackSocketBridge)]
    bridging.pipeline.max_in_flight = 2
    ollama.enqueue(
        *(ChatScript.words("Slow.", first_delay_s=4.0) for _ in range(2)),
        *(ChatScript.words("Noted.") for _ in range(60)),
    )
    slow = [await slack.send_event(slack.message(f"D{n}", "U1", "slow")) for n in (1, 2)]
    await slack.wait_until_async(lambda: all(e.acked for e in slow), timeout=20, what="taken")
    storm = [await slack.send_event(slack.message(f"D{n}", "U2", "hi")) for n in range(100, 160)]
    most = socket_mode.READ_AHEAD + socket_mode.TAKING_MAX
    await slack.wait_until_async(lambda: bridge.backlog == most, timeout=20, what="the backlog")
    assert chat.call(_count(listeners_running)) == socket_mode.TAKING_MAX
    assert not any(e.acked for e in storm)  # none taken while the pipeline is full
    await slack.retry_unacked()  # Slack's retry of what was not acknowledged in time
    bridging.pipeline.max_in_flight = 100
    await replies(slack, 62)
    await all_acknowledged(slack)
    await settle(1.0)
    answered = collections.Counter(m.channel for m in slack.messages)
    assert len(slack.messages) == 62 and set(answered.values()) == {1}
    assert all(e.sent == 2 for e in storm)  # each sent again: taken, or dropped as taken


async def _count(count: Callable[[], int]) -> int:
    return count()
