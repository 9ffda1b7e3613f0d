"""Live answers and buttons end to end (#37): a real server, the Ollama stand-in, and the
tests' own platform writing answers live (tests/support/recording_bridge.py).

Each platform's own end-to-end test shows the same through its SDK and stand-in; these show
the pipeline's rules once: paced updates that end exactly at ``final``, splitting, 429s,
confirmation buttons and who may press them, private sign-in links, the stop button, and
the setting that turns it all off.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from bridges.live import stop_action
from bridges.port import LiveLimits
from core.tools import LoginRequired, Plugin, Tool, ToolCallContext
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.recording_bridge import LiveMessage, LiveRecordingBridge
from tests.support.server import RunningServer

pytestmark = [pytest.mark.timeout(90)]

CONFIG = """
spaces:
  "slack:C1":
    admins: [slack:UADMIN]
  "slack:C5":
    live_answers: false
"""


class Desk:
    """A plugin with a confirm-required tool of two choices, counting its runs."""

    def __init__(self) -> None:
        self.booked: list[str] = []

    def plugin(self) -> Plugin:
        def rooms(context: ToolCallContext, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
            return [("Small room", "small"), ("Big room", "big")]

        async def book(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
            self.booked.append(str(arguments.get("size")))
            return f"booked the {arguments.get('size')} room"

        async def calendar(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
            raise LoginRequired("Calendar", "https://calendar.example/login?state=s1")

        return Plugin(
            name="desk",
            api_version=4,
            tools=(
                Tool(
                    name="book",
                    description="Book a room.",
                    parameters={"type": "object", "properties": {"size": {"type": "string"}}},
                    run=book,
                    confirm=True,
                    summary=lambda context, arguments: "Book a room for Friday",
                    choices=rooms,
                    choice_argument="size",
                ),
                Tool(
                    name="calendar",
                    description="Read the calendar.",
                    parameters={"type": "object", "properties": {}},
                    run=calendar,
                ),
            ),
        )


@pytest.fixture
def bridge() -> LiveRecordingBridge:
    return LiveRecordingBridge()


@pytest.fixture
def desk() -> Desk:
    return Desk()


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "mercury.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return str(path)


@pytest.fixture
def chat(
    make_server: Callable[..., RunningServer],
    bridge: LiveRecordingBridge,
    desk: Desk,
    config: str,
) -> RunningServer:
    return make_server(
        {"bridges": [bridge], "plugins": [desk.plugin()]}, MERCURY_CONFIG_FILE=config
    )


def shows(bridge: LiveRecordingBridge, number: int) -> list[str]:
    return [c.text for c in bridge.calls_to(number) if c.kind == "show"]


def finished_text(messages: list[LiveMessage]) -> str:
    return "".join(m.text for m in messages)


def test_an_answer_arrives_in_several_paced_updates_that_end_exactly_at_final(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    words = [f"word{n} " for n in range(30)]
    ollama.enqueue(ChatScript(content=words, delay_s=0.05))
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury tell me", thread="7.1"))
    [message] = bridge.wait_for_answer(1)
    assert message.state == "finished" and message.text == "".join(words)
    assert message.to.thread_id == "slack:C1:7.1"
    calls = bridge.calls_to(1)
    assert calls[0].kind == "open" and calls[0].status == "Thinking…"
    assert [b.action for b in calls[0].buttons] == [stop_action("space:slack:C1:slack:C1:7.1")]
    texts = shows(bridge, 1)
    assert len([t for t in texts if t]) >= 3, texts  # written as it came, not at once
    assert all("".join(words).startswith(t) for t in texts)  # only ever grows
    assert calls[-1].kind == "finish" and calls[-1].buttons == ()
    # Never faster than the platform's interval (a little slack for the clock).
    times = [c.at for c in calls]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= bridge.limits.edit_interval_s * 0.9, gaps
    assert bridge.replies == []  # no second, single message


def test_a_long_answer_splits_at_the_limit_with_nothing_lost_or_repeated(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, desk: Desk
) -> None:
    bridge = LiveRecordingBridge(limits=LiveLimits(max_chars=120, edit_interval_s=0.05))
    chat = make_server({"bridges": [bridge], "plugins": [desk.plugin()]})
    sentence = "The quick brown fox jumps over the lazy dog. "
    text = "".join(
        f"{sentence * 2}\n\n" if n % 3 == 0 else sentence for n in range(9)
    ).strip()  # about three limits long
    assert len(text) > 3 * 120
    ollama.enqueue(ChatScript.words(text, delay_s=0.005))
    bridge.post(chat, bridge.message("D9", "U4", "a long one"))
    bridge.wait_for("the whole answer", lambda: finished_text(bridge.live) == text)
    messages = bridge.wait_for_answer(4)
    assert finished_text(messages) == text
    assert all(0 < len(m.text) <= 120 for m in messages)
    assert all(m.state == "finished" for m in messages)
    # Cut at boundaries: every message but the last ends with a space or a line break.
    assert all(m.text[-1].isspace() for m in messages[:-1])


def test_a_429_mid_answer_delays_but_loses_nothing(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    words = [f"w{n} " for n in range(20)]
    ollama.enqueue(ChatScript(content=words, delay_s=0.03))
    bridge.unavailable = [0.5, None]
    bridge.post(chat, bridge.message("D9", "U4", "go"))
    [message] = bridge.wait_for_answer(1)
    assert bridge.refused == 2
    assert message.text == "".join(words)
    calls = bridge.calls_to(1)
    assert max(b.at - a.at for a, b in itertools.pairwise(calls)) >= 0.45
