"""Slack end to end: the Slack stand-in delivers signed Events API deliveries to a real server
whose Slack bridge (slack_sdk) answers through the stand-in's Web API; the model is the Ollama
stand-in. The same scenes as tests/bridges/test_pipeline_end_to_end.py, through Slack's own
wire: triggers and ambient context, threads, DMs, files both ways, retries and forgeries.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridges.deliveries import Deliveries
from bridges.port import ReplyButton
from bridges.slack import LIVE_MAX_CHARS
from tests.support.live_scenarios import LOGIN_URL, Desk
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.scenes import config_file, settle, system_of, user_contents
from tests.support.server import RunningServer
from tests.support.slack_standin import LiveMessage, SlackStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

CONFIG = """
spaces:
  "slack:C1":
    admins: [static:alice]
    members: [static:bob]
"""


@pytest.fixture(scope="module")
def slack_server() -> Iterator[SlackStandIn]:
    with SlackStandIn() as standin:
        yield standin


@pytest.fixture
def slack(slack_server: SlackStandIn) -> Iterator[SlackStandIn]:
    slack_server.reset()
    for user, name in (("U1", "Ann"), ("U2", "Ben"), ("U3", "Cat"), ("U4", "Dee")):
        slack_server.add_user(user, name.lower(), display_name=name)
    yield slack_server
    slack_server.reset()


@pytest.fixture
def chat(
    make_server: Callable[..., RunningServer], slack: SlackStandIn, tmp_path: Path
) -> RunningServer:
    config = config_file(tmp_path, CONFIG)
    # The single message of before: these scenes read what chat.postMessage sent (live
    # answers have their own scenes).
    return make_server(MERCURY_CONFIG_FILE=config, BRIDGE_LIVE_ANSWERS="false", **slack.env())


def hook(chat: RunningServer) -> str:
    return chat.url + "/webhooks/slack"


def mention(slack: SlackStandIn, text: str) -> str:
    return f"<@{slack.bot_user_id}> {text}"


async def say(slack: SlackStandIn, chat: RunningServer, event: dict[str, Any]) -> dict[str, Any]:
    """Deliver ``event`` as Slack does and return the webhook's JSON answer."""
    delivered = await slack.deliver(hook(chat), slack.envelope(event))
    assert delivered.status == 200, delivered.body
    return dict(json.loads(delivered.body))


async def replies(slack: SlackStandIn, count: int) -> None:
    await slack.wait_until_async(
        lambda: len(slack.messages) >= count, timeout=40, what=f"{count} posted message(s)"
    )


async def test_in_a_channel_only_the_mention_runs_and_its_answer_is_threaded_under_it(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Lunch is at noon."))
    await say(slack, chat, slack.message("C1", "U1", "who's up for lunch?"))
    await say(slack, chat, slack.message("C1", "U2", "me, at the usual place"))
    asked = slack.message("C1", "U3", mention(slack, "when is lunch?"), ts="1700000300.000100")
    await say(slack, chat, asked)

    await replies(slack, 1)
    [posted] = slack.messages
    assert (posted.channel, posted.thread_ts, posted.text) == (
        "C1",
        "1700000300.000100",
        "Lunch is at noon.",
    )
    [request] = ollama.requests
    words = user_contents(request)[-1]
    assert "<ambient" in words and "not addressed to you" in words
    assert 'author="Ann"' in words and "who's up for lunch?" in words
    assert 'author="Ben"' in words and "me, at the usual place" in words
    assert '<caller id="slack:U3" name="Cat"' in words and words.endswith("when is lunch?</caller>")
    assert "group chat (slack:C1)" in system_of(request)
    await settle()
    assert len(ollama.requests) == 1 and len(slack.messages) == 1


async def test_a_mention_inside_a_thread_is_answered_in_that_thread(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Yes, in the thread."))
    event = slack.message(
        "C1",
        "U1",
        mention(slack, "still here?"),
        ts="1700000400.000200",
        thread_ts="1700000400.000100",
    )
    await say(slack, chat, event)
    await replies(slack, 1)
    assert slack.messages[0].thread_ts == "1700000400.000100"


async def test_a_mention_slack_delivers_as_app_mention_and_as_message_runs_once(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    message = slack.message("C1", "U1", mention(slack, "once please"))
    app_mention = {**message, "type": "app_mention"}
    app_mention.pop("channel_type")
    assert (await say(slack, chat, app_mention))["taken"] == 0
    assert (await say(slack, chat, message))["taken"] == 1
    await replies(slack, 1)
    await settle()
    assert len(ollama.requests) == 1 and len(slack.messages) == 1


async def test_a_direct_message_always_runs_and_is_answered_unthreaded(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Hi Dee."))
    await say(slack, chat, slack.message("D9", "U4", "hello there"))
    await replies(slack, 1)
    [posted] = slack.messages
    assert (posted.channel, posted.thread_ts, posted.text) == ("D9", None, "Hi Dee.")
    assert "direct chat (slack:D9)" in system_of(ollama.requests[0])
    assert '<caller id="slack:U4" name="Dee"' in user_contents(ollama.requests[0])[-1]


@pytest.mark.parametrize("channel_type", ["group", "private_channel", "mpim"])
async def test_a_g_channel_is_a_group_where_only_a_mention_runs_and_nobody_is_admin_by_speaking(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn, channel_type: str
) -> None:
    # Issue #34: a legacy private channel (or a group DM) was taken for a DM: every message
    # ran, and whoever spoke first became its admin.
    ollama.enqueue(ChatScript.words("Noted."))
    await say(slack, chat, slack.message("G7", "U1", "first!", channel_type=channel_type))
    asked = slack.message(
        "G7",
        "U1",
        mention(slack, "who am I here?"),
        ts="1700000500.000100",
        channel_type=channel_type,
    )
    await say(slack, chat, asked)
    await replies(slack, 1)
    await settle()
    [request] = ollama.requests
    assert "group chat (slack:G7)" in system_of(request)
    words = user_contents(request)[-1]
    assert "first!" in words.partition("<caller")[0]  # ambient context, not a turn
    assert '<caller id="slack:U1" name="Ann" role="member">' in words
    [posted] = slack.messages
    assert (posted.channel, posted.thread_ts) == ("G7", "1700000500.000100")


async def test_a_file_comes_into_the_spaces_inbox_and_the_outbox_file_goes_out_by_upload(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    shared = slack.add_file("scores.csv", b"name,score\nann,3\n", mimetype="text/csv")
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
    event = slack.message(
        "C1", "U1", mention(slack, "summarize"), ts="1700000500.000100", files=[shared]
    )
    await say(slack, chat, event)
    await slack.wait_until_async(lambda: len(slack.uploads) >= 1, timeout=40, what="the upload")

    assert re.search(r"^- inbox/.*scores\.csv$", seen[0], re.MULTILINE), seen[0]
    assert [d.authorized for d in slack.downloads] == [True]
    inbox = Path(chat.services.settings.wiki.vault_path) / "users" / "space%3Aslack%3AC1"
    assert [p.read_bytes() for p in (inbox / "inbox").iterdir()] == [b"name,score\nann,3\n"]
    [posted] = slack.messages
    assert (posted.text, posted.thread_ts) == ("Here is the summary.", "1700000500.000100")
    assert [(u.filename, u.data, u.channel_id, u.thread_ts) for u in slack.uploads] == [
        ("summary.txt", b"ann leads", "C1", "1700000500.000100")
    ]
    order = [call.method for call in slack.calls]
    assert order.index("chat.postMessage") < order.index("files.completeUploadExternal")


async def test_an_event_slack_delivers_again_runs_once(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    envelope = slack.envelope(slack.message("D9", "U4", "count me once"))
    first = await slack.deliver(hook(chat), envelope)
    again = await slack.redeliver()
    assert json.loads(first.body)["taken"] == 1
    assert again.status == 200 and json.loads(again.body)["taken"] == 0
    await replies(slack, 1)
    await settle()
    assert len(ollama.requests) == 1 and len(slack.messages) == 1


async def test_a_forged_or_stale_delivery_runs_nothing(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    event = slack.message("D9", "U4", "run me")
    forged = await slack.deliver(hook(chat), slack.envelope(event), secret="not-the-secret")
    stale = await slack.deliver(
        hook(chat), slack.envelope(event), timestamp=int(time.time()) - 6 * 60
    )
    unsigned = await slack.deliver(
        hook(chat), slack.envelope(event), headers={"content-type": "application/json"}
    )
    for refused in (forged, stale, unsigned):
        assert refused.status == 401
        assert json.loads(refused.body)["ok"] is False
    await settle()
    assert ollama.requests == [] and slack.messages == []


async def test_a_stale_event_is_acknowledged_and_runs_nothing(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    # Adversarial review (#34): a message's own time was never checked.
    envelope = slack.envelope(slack.message("D9", "U4", "from 2010"))
    envelope["event_time"] = 1_262_304_000
    stale = await slack.deliver(hook(chat), envelope)
    assert stale.status == 200 and json.loads(stale.body) == {"ok": True, "taken": 0}
    await settle()
    assert ollama.requests == [] and slack.messages == []


async def test_repeated_non_ascii_or_deeply_nested_deliveries_are_refused_not_a_500(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    # Adversarial review (#34): a second X-Slack-Signature won over the first; a non-ASCII
    # signature and a signed body nested 100,000 deep answered 500 with a traceback.
    body, headers = slack.signed(slack.envelope(slack.message("D9", "U4", "run me")))
    forged = {**headers, "x-slack-signature": "v0=" + "0" * 64}
    async with httpx.AsyncClient(timeout=10) as client:
        twice = await client.post(
            hook(chat),
            content=body,
            headers=[*forged.items(), ("x-slack-signature", headers["x-slack-signature"])],
        )
        non_ascii = await client.post(
            hook(chat),
            content=body,
            headers=[
                *((k, v) for k, v in headers.items() if k != "x-slack-signature"),
                ("x-slack-signature", "v0=\xe9".encode("latin-1")),
            ],
        )
        depth = 100_000
        deep, deep_headers = slack.signed(
            b'{"type":"event_callback","x":' + b"[" * depth + b"]" * depth + b"}"
        )
        nested = await client.post(hook(chat), content=deep, headers=deep_headers)
    assert twice.status_code == 400 and "x-slack-signature" in twice.json()["error"]
    assert non_ascii.status_code == 401 and non_ascii.json()["ok"] is False
    assert nested.status_code == 400 and nested.json()["ok"] is False
    await settle()
    assert ollama.requests == [] and slack.messages == []


async def test_deliveries_are_acknowledged_without_waiting_for_a_slow_slack(
    chat: RunningServer, slack: SlackStandIn
) -> None:
    # Issue #34: after a start the bridge asked auth.test under one lock with the API's full
    # timeout, and users.info for each unknown author, before answering: with Slack slow,
    # four deliveries were acknowledged at 17, 33, 49 and 65 s (Slack retries after 3 s).
    slack.delay_s = 20.0
    events = [
        slack.envelope(
            slack.message("C1", f"UNEW{n}", f"hello from {n}"),
            # Half name no bot user: the bot's id is then asked in the background too.
            authorizations=None if n % 2 else [],
        )
        for n in range(8)
    ]
    began = time.monotonic()

    async def one(envelope: dict[str, Any]) -> float:
        delivered = await slack.deliver(hook(chat), envelope, timeout=60)
        assert delivered.status == 200, delivered.body
        assert json.loads(delivered.body)["taken"] == 1
        return time.monotonic() - began

    acknowledged = await asyncio.gather(*(one(envelope) for envelope in events))
    # Every one long before Slack answers a single call (a quarter of its delay: generous).
    assert max(acknowledged) < slack.delay_s / 4, acknowledged
    await slack.wait_until_async(
        lambda: bool(slack.calls_of("users.info")), timeout=10, what="a name looked up"
    )


async def test_slacks_url_verification_is_answered_with_the_challenge(
    chat: RunningServer, slack: SlackStandIn
) -> None:
    answered = await slack.deliver(hook(chat), slack.url_verification("c0ffee"))
    assert (answered.status, answered.body) == (200, b"c0ffee")
    assert answered.content_type.startswith("text/plain")


# -- live answers and buttons (#37) ---------------------------------------------------------


@pytest.fixture
def desk() -> Desk:
    return Desk(login_url=LOGIN_URL + "&x=<y>")


@pytest.fixture
def live_chat(
    make_server: Callable[..., RunningServer], slack: SlackStandIn, desk: Desk, tmp_path: Path
) -> RunningServer:
    config = config_file(tmp_path, CONFIG)
    return make_server({"plugins": [desk.plugin()]}, MERCURY_CONFIG_FILE=config, **slack.env())


def interactions(chat: RunningServer) -> str:
    return chat.url + "/webhooks/slack/interactions"


async def answered(
    slack: SlackStandIn, thread_ts: str, text: str, *, count: int = 1
) -> list[LiveMessage]:
    """The bot's messages in ``thread_ts`` once they read ``text`` together, their buttons
    settled (the stop button gone)."""

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


async def test_a_live_answer_streams_into_the_thread_and_ends_equal_to_final(
    live_chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    words = [f"word{n} " for n in range(80)]
    ollama.enqueue(ChatScript(content=words, delay_s=0.05))
    await say(slack, live_chat, slack.message("C1", "U1", mention(slack, "talk"), ts="1.1"))
    [message] = await answered(slack, "1.1", "".join(words))
    assert message.state == "stopped"
    appends = slack.calls_of("chat.appendStream")
    assert len(appends) >= 2  # in several updates, not at once
    assert "".join(a.params["markdown_text"] for a in appends) in "".join(words)
    [start] = slack.calls_of("chat.startStream")
    assert (start.params["recipient_user_id"], start.params["thread_ts"]) == ("U1", "1.1")
    assert slack.statuses[0].status == "Thinking…"
    assert slack.messages == []  # no single message besides


async def test_a_long_live_answer_splits_at_slacks_limit_with_nothing_lost_or_repeated(
    live_chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    sentence = "The quick brown fox jumps over the lazy dog & its <friends>. "
    text = "".join(f"{sentence * 3}\n\n" if n % 5 == 0 else sentence for n in range(140)).strip()
    assert len(text) > 2 * LIVE_MAX_CHARS
    ollama.enqueue(ChatScript.words(text, coalesce=40))
    await say(slack, live_chat, slack.message("C1", "U1", mention(slack, "a long one"), ts="2.1"))
    messages = await answered(slack, "2.1", text, count=3)
    assert all(0 < len(m.visible) <= LIVE_MAX_CHARS for m in messages)


async def test_a_429_mid_answer_delays_it_but_loses_nothing(
    live_chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    words = [f"w{n} " for n in range(40)]
    ollama.enqueue(ChatScript(content=words, delay_s=0.04))
    slack.fail_next(1, status=429, error="ratelimited", retry_after=1, method="chat.appendStream")
    await say(slack, live_chat, slack.message("C1", "U1", mention(slack, "go"), ts="3.1"))
    await answered(slack, "3.1", "".join(words))
    assert len(slack.calls_of("chat.appendStream")) >= 2


async def test_a_workspace_without_streaming_gets_the_answer_posted_and_edited(
    live_chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    slack.streaming_error = "unknown_method"
    words = [f"w{n} " for n in range(30)]
    ollama.enqueue(ChatScript(content=words, delay_s=0.05))
    await say(slack, live_chat, slack.message("C1", "U1", mention(slack, "go"), ts="4.1"))
    [message] = await answered(slack, "4.1", "".join(words))
    assert message.changes >= 2 and len(slack.messages) == 1


async def test_a_confirmation_is_two_buttons_only_its_owner_confirms_once(
    live_chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn, desk: Desk
) -> None:
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "book", "arguments": {}}]),
        ChatScript.words("Which room would you like?"),
    )
    await say(slack, live_chat, slack.message("C1", "U1", mention(slack, "book a room"), ts="5.1"))
    [asked] = await answered(slack, "5.1", "Which room would you like?")
    assert [label for label, _ in asked.buttons] == ["Small room", "Big room"]
    (_, small), (_, big) = asked.buttons

    # Another member's press runs nothing: they alone are told, through the response URL.
    refused = await slack.press(interactions(live_chat), slack.block_actions(asked.ts, "U2", big))
    assert refused.status == 200
    await slack.wait_until_async(lambda: slack.responses, timeout=20, what="the refusal")
    [refusal] = slack.responses
    assert refusal.body == {
        "text": "This isn't yours to answer.",
        "response_type": "ephemeral",
        "replace_original": False,
    }
    assert desk.booked == [] and len(asked.buttons) == 2

    # The owner's press confirms, once; Slack's retry of it runs nothing.
    mine = slack.block_actions(asked.ts, "U1", small)
    # (a press on the message as another screen still shows it, buttons and all)
    again = slack.block_actions(asked.ts, "U1", big)
    assert json.loads((await slack.press(interactions(live_chat), mine)).body)["taken"] == 1
    assert json.loads((await slack.press(interactions(live_chat), mine)).body)["taken"] == 0
    await answered(slack, "5.1", "Which room would you like?Confirmed and done.", count=2)
    assert desk.booked == ["small"]
    assert asked.buttons == [] and asked.context == ["Chosen: Small room"]
    assert asked.sections == "Which room would you like?"  # its text kept

    # A second press (a new one) changes nothing and is answered privately.
    await slack.press(interactions(live_chat), again)
    await slack.wait_until_async(lambda: len(slack.responses) == 2, timeout=20, what="the answer")
    assert slack.responses[-1].body["text"] == "Already answered or expired."
    await settle()
    assert desk.booked == ["small"] and len(slack.thread_messages("C1", "5.1")) == 2
    assert len(ollama.requests) == 2  # the confirmation never asked the model


async def test_a_press_slack_did_not_sign_runs_nothing(
    live_chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn, desk: Desk
) -> None:
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "book", "arguments": {}}]),
        ChatScript.words("Which room?"),
    )
    await say(slack, live_chat, slack.message("C1", "U1", mention(slack, "book"), ts="6.1"))
    [asked] = await answered(slack, "6.1", "Which room?")
    body, headers = slack.signed_form(
        slack.block_actions(asked.ts, "U1", asked.buttons[0][1]), secret="someone-elses"
    )
    async with httpx.AsyncClient() as client:
        forged = await client.post(interactions(live_chat), content=body, headers=headers)
    assert forged.status_code == 401 and forged.json()["ok"] is False
    await settle()
    assert desk.booked == [] and slack.responses == [] and len(asked.buttons) == 2


async def test_a_sign_in_link_goes_to_its_person_alone_as_an_ephemeral_message(
    live_chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "calendar", "arguments": {}}]),
        ChatScript.words("Please sign in first, then ask again."),
    )
    await say(slack, live_chat, slack.message("C1", "U1", mention(slack, "my calendar?"), ts="7.1"))
    await answered(slack, "7.1", "Please sign in first, then ask again.")
    [private] = slack.ephemerals
    assert (private.channel, private.user, private.thread_ts) == ("C1", "U1", "7.1")
    assert private.text == (
        "Sign in to Calendar: https://calendar.example/login?state=s1&amp;x=&lt;y&gt;"
    )
    assert all("calendar.example" not in m.text for m in slack.live.values())


async def test_the_stop_button_cancels_the_turn_and_the_model_request_for_its_author_only(
    live_chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=["Very ", "long"], delay_s=30.0))
    await say(slack, live_chat, slack.message("C1", "U1", mention(slack, "an essay"), ts="8.1"))
    await slack.wait_until_async(
        lambda: any(m.visible == "Very " for m in slack.thread_messages("C1", "8.1")),
        timeout=30,
        what="the first words",
    )
    [message] = slack.thread_messages("C1", "8.1")
    [(label, stop)] = message.buttons
    assert label == "Stop" and stop.startswith("s:")

    await slack.press(interactions(live_chat), slack.block_actions(message.ts, "U2", stop))
    await slack.wait_until_async(lambda: slack.responses, timeout=20, what="the refusal")
    assert slack.responses[-1].body["text"] == (
        "Only the person who asked, or an admin of this space, can stop this turn."
    )
    assert ollama.open_streams == 1

    await slack.press(interactions(live_chat), slack.block_actions(message.ts, "U1", stop))
    await answered(slack, "8.1", "Stopped.")
    assert slack.responses[-1].body["text"] == "Stopped."
    await asyncio.to_thread(ollama.wait_for_closed, 1, timeout=20)


async def test_with_live_answers_off_the_answer_is_the_single_message_of_before(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=[f"w{n} " for n in range(10)], delay_s=0.02))
    await say(slack, chat, slack.message("C1", "U1", mention(slack, "hi"), ts="9.1"))
    await replies(slack, 1)
    [posted] = slack.messages
    assert posted.text.strip() == "".join(f"w{n} " for n in range(10)).strip()
    assert slack.calls_of("chat.startStream") == slack.calls_of("chat.update") == []
    assert slack.live[posted.ts].blocks == []  # plain text, as before


async def test_an_answer_cut_short_on_a_dead_instance_is_written_on_in_its_message_not_twice(
    make_server: Callable[..., RunningServer],
    slack: SlackStandIn,
    ollama: OllamaStandIn,
    tmp_path: Path,
) -> None:
    chat = make_server(
        MERCURY_CONFIG_FILE=config_file(tmp_path, CONFIG),
        MERCURY_CONVERSATION_LEASE_S="2",
        **slack.env(),
    )
    [bridge] = [b for b in chat.services.bridging.bridges if b.platform == "slack"]
    event = slack.message("C1", "U1", mention(slack, "tell me"), ts="10.1")
    body, headers = slack.signed(slack.envelope(event, event_id="EvCut"))
    outcome = chat.call(
        bridge.receive("POST", {}, {k.lower(): v for k, v in headers.items()}, body)
    )
    [message] = outcome.messages
    # Another instance took the delivery, streamed its answer's first words and died: its
    # lease lapses, this instance takes the delivery over and runs it again.
    dead = Deliveries(chat.services.db, lease_s=2.0, holder="dead-instance")
    assert chat.call(dead.take(message))
    stop = ReplyButton(label="Stop", action="s:" + "x" * 16, style="danger")
    cut = chat.call(bridge.open_reply(message, status="Thinking…", buttons=(stop,)))
    chat.call(cut.show("The first", None))
    ts = bridge.reply_ref(cut)
    chat.call(dead.posted(message, ts))
    assert [m.state for m in slack.thread_messages("C1", "10.1")] == ["streaming"]

    words = "The first words, then the whole answer written by the run that took it over."
    ollama.enqueue(ChatScript.words(words, delay_s=0.01))
    [whole] = await answered(slack, "10.1", words)
    assert whole.ts == ts  # the half-written message became the answer: none besides
    assert slack.messages == [] and len(ollama.requests) == 1
