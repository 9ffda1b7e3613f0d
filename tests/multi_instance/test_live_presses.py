"""A button pressed on an answer written by one instance is handled by another (#37).

Two servers on one PostgreSQL, each with its own chat platform of the tests
(tests/support/recording_bridge.py): the platform writes the confirmation's buttons through
instance A and delivers the press to instance B. The confirmation lives in the shared store,
so B confirms it, once; the press delivered to A as well runs nothing there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.live_scenarios import Desk
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.postgres import PostgresServer
from tests.support.recording_bridge import LiveRecordingBridge
from tests.support.server import RunningServer
from tests.support.slack_standin import SlackStandIn

pytestmark = [pytest.mark.timeout(120)]


def test_a_button_on_an_answer_written_by_a_is_handled_once_by_b(
    make_server: Callable[..., RunningServer],
    postgres_server: PostgresServer,
    ollama: OllamaStandIn,
    tmp_path: Path,
) -> None:
    url = postgres_server.create_database()
    desk = Desk()
    booked = desk.booked
    on_a, on_b = LiveRecordingBridge(), LiveRecordingBridge()
    a = make_server(
        {"bridges": [on_a], "plugins": [desk.plugin()]},
        MERCURY_STATE_URL=url,
        MERCURY_DATA_DIR=str(tmp_path / "a"),
    )
    b = make_server(
        {"bridges": [on_b], "plugins": [desk.plugin()]},
        MERCURY_STATE_URL=url,
        MERCURY_DATA_DIR=str(tmp_path / "b"),
    )
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "book", "arguments": {}}]),
        ChatScript.words("Which room?"),
    )
    on_a.post(a, on_a.message("C1", "U1", "@Mercury book a room", thread="3.3"))
    [asked] = on_a.wait_for_answer(1)
    big = asked.buttons[1]

    press = on_b.pressed(asked, "U1", big.action)
    assert on_b.press(b, press).json()["taken"] == 1
    assert on_a.press(a, press).json()["taken"] == 0  # the same press, on the other instance
    [done] = on_b.wait_for_answer(1)
    assert done.text == "Confirmed and done."
    assert done.to.thread_id == "slack:C1:3.3"
    assert booked == ["big"]
    assert [text for _, text in on_b.settled] == ["Chosen: Big room"]
    assert on_a.answered == [] and on_a.settled == []


@pytest.mark.anyio
async def test_a_slack_button_on_an_answer_streamed_by_a_is_pressed_through_b_once(
    make_server: Callable[..., RunningServer],
    postgres_server: PostgresServer,
    ollama: OllamaStandIn,
    tmp_path: Path,
) -> None:
    """The same through Slack's own wire: the Slack stand-in, the real slack_sdk on both."""
    url = postgres_server.create_database()
    desk = Desk()
    booked = desk.booked
    with SlackStandIn() as slack:
        a, b = (
            make_server(
                {"plugins": [desk.plugin()]},
                MERCURY_STATE_URL=url,
                MERCURY_DATA_DIR=str(tmp_path / name),
                **slack.env(),
            )
            for name in ("a", "b")
        )
        ollama.enqueue(
            ChatScript(tool_calls=[{"name": "book", "arguments": {}}]),
            ChatScript.words("Which room?"),
        )
        event = slack.message("C1", "U1", f"<@{slack.bot_user_id}> book a room", ts="3.3")
        assert (await slack.deliver(a.url + "/webhooks/slack", slack.envelope(event))).status == 200

        def buttons() -> list[tuple[str, str]]:
            return [b for m in slack.thread_messages("C1", "3.3") for b in m.buttons]

        await slack.wait_until_async(
            lambda: [label for label, _ in buttons()] == ["Small room", "Big room"],
            timeout=60,
            what="the confirmation's buttons",
        )
        [asked] = slack.thread_messages("C1", "3.3")
        press = slack.block_actions(asked.ts, "U1", buttons()[1][1])
        taken_b = await slack.press(b.url + "/webhooks/slack/interactions", press)
        taken_a = await slack.press(a.url + "/webhooks/slack/interactions", press)
        assert [json.loads(t.body)["taken"] for t in (taken_b, taken_a)] == [1, 0]
        await slack.wait_until_async(
            lambda: any(
                m.visible == "Confirmed and done." for m in slack.thread_messages("C1", "3.3")
            ),
            timeout=60,
            what="the confirmed answer, in the same thread",
        )
        assert booked == ["big"]
        assert asked.buttons == [] and asked.context == ["Chosen: Big room"]
        assert slack.responses == []  # nobody was refused
