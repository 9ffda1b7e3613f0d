"""An MCP server's question answered with a Slack button: the Slack stand-in delivers signed
Events API deliveries and button presses to a real server, whose model (the Ollama stand-in)
calls a tool of a real MCP server (the tests' tracker, over streamable HTTP)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.mcp_tracker import McpHttp, Tracker, mcp_server
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.scenes import config_file
from tests.support.server import RunningServer
from tests.support.slack_standin import LiveMessage, SlackStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def tracker() -> Tracker:
    return Tracker()


@pytest.fixture(scope="module")
def mcp_http(tracker: Tracker) -> Iterator[McpHttp]:
    http = McpHttp(mcp_server(tracker))
    http.start()
    yield http
    http.stop()


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    with SlackStandIn() as standin:
        for user, name in (("U1", "Ann"), ("U2", "Ben")):
            standin.add_user(user, name.lower(), display_name=name)
        yield standin


@pytest.fixture
def chat(
    make_server: Callable[..., RunningServer],
    slack: SlackStandIn,
    mcp_http: McpHttp,
    tmp_path: Path,
) -> RunningServer:
    config = config_file(
        tmp_path,
        f"""
spaces:
  "slack:C1":
    admins: [static:alice]
    members: [static:bob]
mcp:
  servers:
    trk:
      url: {mcp_http.url}
      title: Tracker
      trusted: true
""",
    )
    return make_server(MERCURY_CONFIG_FILE=config, **slack.env())


async def test_a_form_question_becomes_slack_buttons_and_the_owners_press_answers_it(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    tracker.calls.clear()
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "trk_archive_issue", "arguments": {"key": "TRK-20"}}]),
        ChatScript.words("Shall I archive it?"),
        ChatScript.words("Archived."),
    )
    delivered = await slack.deliver(
        chat.url + "/webhooks/slack",
        slack.envelope(
            slack.message("C1", "U1", f"<@{slack.bot_user_id}> archive TRK-20", ts="7.1")
        ),
    )
    assert delivered.status == 200

    def choices() -> list[LiveMessage]:
        # The stop button (``s:…``) comes and goes while the answer streams.
        return [
            m
            for m in slack.thread_messages("C1", "7.1")
            if m.buttons and not any(value.startswith("s:") for _, value in m.buttons)
        ]

    await slack.wait_until_async(lambda: choices() != [], timeout=40, what="the choices")
    [message] = choices()
    assert [label for label, _ in message.buttons] == ["Yes", "No", "Decline", "Cancel"]
    assert tracker.calls == []

    yes = message.buttons[0][1]
    pressed = await slack.press(
        chat.url + "/webhooks/slack/interactions", slack.block_actions(message.ts, "U1", yes)
    )
    assert json.loads(pressed.body)["taken"] == 1
    await slack.wait_until_async(
        lambda: tracker.calls == [("archive_issue", {"key": "TRK-20", "confirm": True})],
        timeout=40,
        what="the archived issue",
    )


async def test_a_free_text_question_is_answered_by_the_askers_next_message_in_the_channel(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    tracker.calls.clear()
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "trk_file_issue", "arguments": {"project": "TRK"}}]),
        ChatScript.words("What title, and how many hours?"),
    )
    mention = f"<@{slack.bot_user_id}>"
    url = chat.url + "/webhooks/slack"
    await slack.deliver(
        url, slack.envelope(slack.message("C1", "U1", f"{mention} file an issue", ts="8.1"))
    )

    def choices() -> list[LiveMessage]:
        return [
            m
            for m in slack.thread_messages("C1", "8.1")
            if m.buttons and not any(value.startswith("s:") for _, value in m.buttons)
        ]

    await slack.wait_until_async(lambda: choices() != [], timeout=40, what="the question")
    assert [label for label, _ in choices()[0].buttons] == ["Decline", "Cancel"]
    assert tracker.calls == []

    def said(text: str, thread: str) -> bool:
        return any(text in (m.text or "") for m in slack.thread_messages("C1", thread))

    # The conversation is the channel's (a top-level message's thread holds its answer).
    # Ben's message answers nothing of Ann's question (the staging is hers); then Ann's
    # answer that doesn't fit is refused with a sentence, never reaching the model.
    ollama.enqueue(ChatScript.words("Hi Ben."))
    await slack.deliver(
        url,
        slack.envelope(slack.message("C1", "U2", f"{mention} hello", ts="8.2")),
    )
    await slack.wait_until_async(lambda: said("Hi Ben.", "8.2"), timeout=40, what="Ben's answer")
    await slack.deliver(
        url,
        slack.envelope(
            slack.message("C1", "U1", f"{mention} Title: Slack form\nHours: 0", ts="8.3")
        ),
    )
    await slack.wait_until_async(
        lambda: said("Hours must be at least 1.", "8.3"), timeout=40, what="the refusal"
    )
    assert tracker.calls == []
    ollama.enqueue(ChatScript.words("Filed."))
    await slack.deliver(
        url,
        slack.envelope(
            slack.message("C1", "U1", f"{mention} Title: Slack form\nHours: 2", ts="8.4")
        ),
    )
    await slack.wait_until_async(
        lambda: (
            tracker.calls == [("file_issue", {"project": "TRK", "title": "Slack form", "hours": 2})]
        ),
        timeout=40,
        what="the filed issue",
    )
    await slack.wait_until_async(
        lambda: said("Filed.", "8.4"), timeout=40, what="the model's answer"
    )


async def test_a_free_text_question_is_answered_by_the_askers_reply_in_the_answers_thread(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    tracker.calls.clear()
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "trk_file_issue", "arguments": {"project": "TRK"}}]),
        ChatScript.words("What title, and how many hours?"),
    )
    mention = f"<@{slack.bot_user_id}>"
    url = chat.url + "/webhooks/slack"
    await slack.deliver(
        url, slack.envelope(slack.message("C1", "U1", f"{mention} file an issue", ts="9.1"))
    )

    def said(text: str) -> bool:
        return any(text in (m.text or "") for m in slack.thread_messages("C1", "9.1"))

    await slack.wait_until_async(
        lambda: said("What title, and how many hours?"), timeout=40, what="the question"
    )

    def in_thread(user: str, text: str, ts: str) -> dict[str, object]:
        # Slack names the thread's root and its author on every reply in a thread.
        return slack.message("C1", user, text, ts=ts, thread_ts="9.1", parent_user_id="U1")

    # Ben's reply in Ann's thread answers nothing of her question: it is a turn of his own.
    ollama.enqueue(ChatScript.words("Hi Ben."))
    await slack.deliver(
        url, slack.envelope(in_thread("U2", f"{mention} Title: Ben's\nHours: 3", "9.2"))
    )
    await slack.wait_until_async(lambda: said("Hi Ben."), timeout=40, what="Ben's answer")
    assert tracker.calls == []
    # Ann's reply in the thread of the answer that asked is her answer.
    ollama.enqueue(ChatScript.words("Filed from the thread."))
    await slack.deliver(
        url, slack.envelope(in_thread("U1", f"{mention} Title: Threaded\nHours: 2", "9.3"))
    )
    await slack.wait_until_async(
        lambda: (
            tracker.calls == [("file_issue", {"project": "TRK", "title": "Threaded", "hours": 2})]
        ),
        timeout=40,
        what="the filed issue",
    )
    await slack.wait_until_async(
        lambda: said("Filed from the thread."), timeout=40, what="the model's answer"
    )
