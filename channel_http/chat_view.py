"""How ``mercury-http chat`` shows a turn: live on a terminal, plain lines elsewhere, or JSON.

On a terminal (rich): reasoning streams dimmed and folds into one line when it ends, each
tool call is a line whose spinner settles to ✓ (done), ✗ (failed) or ⏸ (waiting for a
confirmation), the answer streams as text and is rendered as Markdown once ``final``
arrives. Elsewhere the answer's text is written as it comes and tool lines go to stderr;
``--json`` writes each event as one JSON object a line.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.spinner import Spinner
from rich.text import Text

__all__ = ["JsonView", "LiveView", "PlainView", "View"]

_MARKS: Final = {"success": ("✓", "green"), "failed": ("✗", "red"), "pending": ("⏸", "yellow")}
LOGIN_WARNING: Final = (
    "Open it yourself: it signs you in to {service} as you. Never share it or paste it into a chat."
)


class View(Protocol):
    """Where a turn's events and the client's own notes are shown."""

    def event(self, name: str, data: dict[str, Any]) -> None: ...

    def answer(self, body: dict[str, Any]) -> None:
        """A ``POST /chat`` answer (reply, files, pending, login) shown at once."""
        ...

    def note(self, text: str) -> None:
        """A line of the client's own (a saved file, how to continue)."""
        ...

    def close(self) -> None: ...


@dataclass
class _ToolLine:
    label: str
    detail: str
    outcome: str | None = None


@dataclass
class _Reasoning:
    text: str = ""
    done: bool = False


@dataclass
class _Turn:
    """What the live view shows, rebuilt into one renderable on each refresh."""

    blocks: list[_Reasoning | _ToolLine] = field(default_factory=list)
    reasoning: dict[str, _Reasoning] = field(default_factory=dict)
    tools: dict[str, _ToolLine] = field(default_factory=dict)
    text: str = ""
    final: str | None = None
    notes: list[Text] = field(default_factory=list)


class LiveView:
    """The terminal view: one ``rich.live.Live`` per turn."""

    def __init__(self, console: Console, *, show_reasoning: bool = False) -> None:
        self.console = console
        self.show_reasoning = show_reasoning
        self.turn = _Turn()
        self.live: Live | None = None

    def _render(self) -> RenderableType:
        turn = self.turn
        parts: list[RenderableType] = []
        for block in turn.blocks:
            if isinstance(block, _Reasoning):
                if block.done and not self.show_reasoning:
                    words = len(block.text.split())
                    parts.append(Text(f"▸ Thought for {words} words", style="dim"))
                else:
                    parts.append(Text(block.text.strip(), style="dim italic"))
            elif block.outcome is None:
                parts.append(
                    Spinner("dots", Text.assemble(block.label, " ", (block.detail, "dim")))
                )
            else:
                mark, style = _MARKS.get(block.outcome, ("•", ""))
                parts.append(
                    Text.assemble((mark, style), " ", block.label, " ", (block.detail, "dim"))
                )
        if turn.final is not None:
            parts.append(Markdown(turn.final))
        elif turn.text:
            parts.append(Text(turn.text))
        parts.extend(turn.notes)
        return Group(*parts)

    def _refresh(self) -> None:
        if self.live is None:
            self.live = Live(
                self._render(), console=self.console, refresh_per_second=12, transient=False
            )
            self.live.start()
        else:
            self.live.update(self._render())

    def event(self, name: str, data: dict[str, Any]) -> None:
        turn = self.turn
        if name == "reasoning":
            block = turn.reasoning.get(data["id"])
            if block is None:
                block = turn.reasoning[data["id"]] = _Reasoning()
                turn.blocks.append(block)
            block.text += data["chunk"]
        elif name == "reasoning_end":
            if data["id"] in turn.reasoning:
                turn.reasoning[data["id"]].done = True
        elif name == "tool":
            line = _ToolLine(data.get("label", ""), data.get("detail", ""))
            turn.tools[data["toolCallId"]] = line
            turn.blocks.append(line)
        elif name == "tool_finish":
            if data["toolCallId"] in turn.tools:
                turn.tools[data["toolCallId"]].outcome = data["outcome"]
        elif name == "text":
            turn.text += data["chunk"]
        elif name == "final":
            turn.final = data["text"]
        elif name == "login":
            turn.notes.extend(_login_lines(data))
        elif name == "error":
            turn.notes.append(Text(f"✗ {data['message']}", style="bold red"))
        elif name == "pending":
            return  # the prompt that follows the turn shows it
        self._refresh()

    def answer(self, body: dict[str, Any]) -> None:
        self.turn.final = body.get("reply", "")
        if body.get("login"):
            self.turn.notes.extend(_login_lines(body["login"]))
        self._refresh()

    def note(self, text: str) -> None:
        self.close()
        self.console.print(Text(text, style="cyan"))

    def close(self) -> None:
        if self.live is not None:
            self.live.update(self._render())
            self.live.stop()
            self.live = None
        self.turn = _Turn()


class PlainView:
    """Plain text for a pipe: the answer on stdout as it streams, the rest on stderr."""

    def __init__(self, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> None:
        self.out = out
        self.err = err
        self.streamed = False

    def event(self, name: str, data: dict[str, Any]) -> None:
        if name == "text":
            self.out.write(data["chunk"])
            self.out.flush()
            self.streamed = True
        elif name == "final":
            if not self.streamed and data["text"]:
                self.out.write(data["text"])
            if self.streamed or data["text"]:
                self.out.write("\n")
            self.out.flush()
            self.streamed = False
        elif name == "tool":
            self.err.write(f"… {data.get('label', '')} {data.get('detail', '')}\n")
        elif name == "tool_finish":
            mark = _MARKS.get(data["outcome"], ("•", ""))[0]
            self.err.write(f"{mark} {data['outcome']}\n")
        elif name == "login":
            for line in _login_lines(data):
                self.out.write(line.plain + "\n")
        elif name == "error":
            self.err.write(f"✗ {data['message']}\n")

    def answer(self, body: dict[str, Any]) -> None:
        if body.get("reply"):
            self.out.write(body["reply"] + "\n")
        if body.get("login"):
            for line in _login_lines(body["login"]):
                self.out.write(line.plain + "\n")
        self.out.flush()

    def note(self, text: str) -> None:
        self.err.write(text + "\n")
        self.err.flush()

    def close(self) -> None:
        self.out.flush()


class JsonView:
    """One JSON object a line: ``{"event", "data"}`` per event, or the ``/chat`` answer."""

    def __init__(self, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> None:
        self.out = out
        self.err = err

    def _write(self, value: dict[str, Any]) -> None:
        self.out.write(json.dumps(value, ensure_ascii=False) + "\n")
        self.out.flush()

    def event(self, name: str, data: dict[str, Any]) -> None:
        self._write({"event": name, "data": data})

    def answer(self, body: dict[str, Any]) -> None:
        self._write(body)

    def note(self, text: str) -> None:
        self.err.write(text + "\n")

    def close(self) -> None:
        self.out.flush()


def _login_lines(data: dict[str, Any]) -> list[Text]:
    service = str(data.get("service", ""))
    return [
        Text.assemble(
            ("🔑 Log in to ", "bold"), (service, "bold"), ": ", (str(data["url"]), "link")
        ),
        Text("   " + LOGIN_WARNING.format(service=service), style="yellow"),
    ]
