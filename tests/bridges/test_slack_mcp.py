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
