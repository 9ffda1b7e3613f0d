"""What ``mercury-http chat`` leaves on the screen: the client in a pseudo-terminal whose output
a terminal emulator (pyte) draws, against a real server and the Ollama stand-in, the final
screen compared line by line. Issue #36: a tool line after ``final`` left the streamed
Markdown on the screen, the rendered answer printed again below it."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pexpect
import pyte
import pytest

from channel_http.cli.chat_view import thought_for
from core.memory.edge import EdgeStore
from tests.support.live_scenarios import Desk
from tests.support.memory_doubles import SlowStore
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer

pytestmark = [pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
ANSWER = ["Room **B12** ", "is *free*.\n\n", "- one\n", "- two"]


class Terminal:
    """The client in a pseudo-terminal, every byte it writes drawn on a pyte screen."""

    def __init__(self, env: Mapping[str, str], *args: str, rows: int = 24, cols: int = 80):
        self.screen = pyte.HistoryScreen(cols, rows, history=1000)
        self.stream = pyte.Stream(self.screen)
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "channel_http", "chat", *args],
            cwd=str(ROOT),
            env=dict(env),
            encoding="utf-8",
            dimensions=(rows, cols),
            timeout=30,
        )
        self.ended = False

    def _pump(self, wait_s: float) -> None:
        try:
            self.stream.feed(self.child.read_nonblocking(65536, timeout=wait_s))
        except pexpect.TIMEOUT:
            pass
        except pexpect.EOF:
            self.ended = True

    def lines(self) -> list[str]:
        """The screen, trailing blanks dropped."""
        shown = [line.rstrip() for line in self.screen.display]
        while shown and not shown[-1]:
            shown.pop()
        return shown

    def scrolled_and_shown(self) -> list[str]:
        """The lines scrolled off the top, then the screen."""
        columns = self.screen.columns
        scrolled = [
            "".join(row[x].data for x in range(columns)).rstrip() for row in self.screen.history.top
        ]
        return scrolled + self.lines()

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in "\n".join(self.screen.display):
            assert not self.ended, f"the client ended without showing {text!r}: {self.lines()}"
            assert time.monotonic() < deadline, f"{text!r} never showed: {self.lines()}"
            self._pump(0.05)

    def type(self, line: str) -> None:
        self.child.sendline(line)

    def resize(self, rows: int, cols: int) -> None:
        """What a terminal window does when dragged: it redraws, then the program is told."""
        self._pump(0)
        self.screen.resize(rows, cols)
        self.child.setwinsize(rows, cols)  # SIGWINCH

    def finish(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while not self.ended:
            assert time.monotonic() < deadline, f"the client never ended: {self.lines()}"
            self._pump(0.1)
        self.child.close()
        status: int = self.child.exitstatus
        return status


def client_env(tmp_path: Path, server: RunningServer) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT)),
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "MERCURY_TOKEN": "alice-token",
        "MERCURY_SERVER": server.url,
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }


def summarizing(answer: ChatScript) -> Callable[[dict[str, Any]], ChatScript]:
    """The model: ``answer`` to a turn, a summary to memory capture's request."""

    def respond(request: dict[str, Any]) -> ChatScript:
        if request.get("stream") is False:
            summary = {"summary": "Alice booked B12.", "facts": [{"topic": "room", "value": "B12"}]}
            return ChatScript(content=[json.dumps(summary)])
        return answer

    return respond


def test_a_tool_after_final_shows_below_the_answer_printed_once(
    tmp_path: Path, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    # Capture after the first turn, slow enough for its spinner to be drawn several times.
    memory = SlowStore(EdgeStore(tmp_path / "edge"), 0.4)
    server = make_server({"memory": memory}, SESSION_CAPTURE_MESSAGE_THRESHOLD="2")
    ollama.responder = summarizing(ChatScript(content=ANSWER, delay_s=0.1))
    terminal = Terminal(client_env(tmp_path, server), "--conversation", "scr-1", "is B12 free?")
    assert terminal.finish() == 0
    assert terminal.lines() == [
        "Conversation scr-1 (continue it with --conversation scr-1)",
        "Room B12 is free.",
        "",
        " • one",
        " • two",
        "✓ Noting something important… is B12 free?",
    ]


def test_a_confirmation_with_choices_leaves_the_tool_line_and_the_prompt(
    tmp_path: Path, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server({"plugins": [Desk().plugin()]})
    ollama.responder = None
    ollama.enqueue(
        ChatScript(
            thinking=["Which ", "room?"],
            tool_calls=[{"name": "book", "arguments": {}}],
            delay_s=0.2,
        )
    )
    ollama.enqueue(ChatScript.words("Which room would you like?"))
    terminal = Terminal(client_env(tmp_path, server), "--conversation", "scr-2", "book a room")
    terminal.wait_for("Choose a number: ")
    shown = terminal.lines()
    assert shown[0] == "Conversation scr-2 (continue it with --conversation scr-2)"
    assert shown[1].startswith("▸ Thought for ") and shown[1].endswith(" s")
    assert shown[2:] == [
        "⏸ Using book… {}",
        "Which room would you like?",
        "",
        "⏸ Waiting for your confirmation: Book a room for Friday",
        "  1) Small room",
        "  2) Big room",
        "  0) Not now",
        "Choose a number:",
    ]
    terminal.type("2")
    assert terminal.finish() == 0
    assert terminal.lines()[2:] == [
        "⏸ Using book… {}",
        "Which room would you like?",
        "",
        "⏸ Waiting for your confirmation: Book a room for Friday",
        "  1) Small room",
        "  2) Big room",
        "  0) Not now",
        "Choose a number: 2",
        "Confirmed and done.",
    ]


def test_a_resize_while_the_answer_streams_leaves_it_once(
    tmp_path: Path, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server()
    words = [f"word{n} " for n in range(60)]
    ollama.enqueue(ChatScript(content=[*words, "\n\n**done**"], delay_s=0.05))
    terminal = Terminal(client_env(tmp_path, server), "--conversation", "scr-3", "talk")
    terminal.wait_for("word20")
    terminal.resize(24, 60)
    terminal.wait_for("word40")
    terminal.resize(30, 100)
    assert terminal.finish() == 0
    shown = terminal.lines()
    text = " ".join(shown[1:])
    assert shown[0] == "Conversation scr-3 (continue it with --conversation scr-3)"
    assert text.split() == [w.strip() for w in words] + ["done"]
    assert "**" not in text


def test_an_answer_taller_than_the_terminal_streams_in_view_and_prints_once(
    tmp_path: Path, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server()
    items = [f"- item {n}\n" for n in range(1, 41)]
    ollama.enqueue(ChatScript(content=items, delay_s=0.05))
    terminal = Terminal(client_env(tmp_path, server), "--conversation", "scr-4", "list")
    terminal.wait_for("item 30")
    # While it streams, the newest lines are in view (rich alone shows the top and "...").
    assert "- item 30" in terminal.lines()
    assert terminal.finish() == 0
    everything = terminal.scrolled_and_shown()
    assert [line for line in everything if "item" in line] == [f" • item {n}" for n in range(1, 41)]


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (0.04, "Thought for a moment"),
        (4.24, "Thought for 4.2 s"),
        (16.4, "Thought for 16 s"),
        (9.97, "Thought for 10 s"),
        (59.7, "Thought for 1 min"),
        (65.2, "Thought for 1 min 5 s"),
    ],
)
def test_the_folded_reasoning_says_how_long_the_model_thought(seconds: float, said: str) -> None:
    assert thought_for(seconds) == said
