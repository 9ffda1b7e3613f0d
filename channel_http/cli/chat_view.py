"""How ``mercury-http chat`` shows a turn: live on a terminal, plain lines elsewhere, or JSON.

On a terminal (rich): reasoning streams dimmed and folds into one line saying how long the
model thought, each tool call is one line whose spinner settles to ✓ (done), ✗ (failed) or
⏸ (waiting for a confirmation), the answer streams as text and is replaced by its Markdown
rendering once ``final`` arrives; a tool line after ``final`` (memory capture) shows below
the answer. Elsewhere the answer's text is written as it comes and tool lines go to stderr;
``--json`` writes each event as one JSON object a line.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TextIO

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment
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


class _ToolLine:
    """One tool call: a spinner until it settles, then its mark; always one terminal line.

    The detail may be long or hold line breaks (memory capture's is the answer it notes):
    it is shown on one line, cut with an ellipsis at the terminal's width.
    """

    def __init__(self, label: str, detail: str) -> None:
        self.label = label
        self.detail = " ".join(detail.split())
        self.outcome: str | None = None
        self.spinner = Spinner("dots")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.outcome is None:
            frame = self.spinner.render(console.get_time())  # a Text: the spinner has no text
            mark = frame if isinstance(frame, Text) else Text("…")
        else:
            symbol, style = _MARKS.get(self.outcome, ("•", ""))
            mark = Text(symbol, style=style)
        line = Text.assemble(mark, " ", self.label, " ", (self.detail, "dim"))
        line.no_wrap = True
        line.overflow = "ellipsis"
        line.truncate(options.max_width, overflow="ellipsis")
        yield line


class _Bottom:
    """What fits the terminal's height, from the bottom: a long answer streams in view.

    Rich's live region shows the top of what is taller than the terminal, cut with an
    ellipsis; the newest streamed words are at the bottom, so that is the part kept.
    """

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options, pad=False)
        height = max(1, options.size.height - 1)  # the last row is the cursor's
        for line in lines[-height:]:
            yield from line
            yield Segment.line()


@dataclass
class _Reasoning:
    started: float
    text: str = ""
    seconds: float | None = None


@dataclass
class _Shown:
    """What the live region holds until it is printed for good (at ``final`` or the end)."""

    blocks: list[_Reasoning | _ToolLine] = field(default_factory=list)
    text: str = ""
    final: str | None = None
    notes: list[Text] = field(default_factory=list)


class LiveView:
    """The terminal view: a live region for what still moves, printed once when it settles.

    The region (``rich.live.Live``, transient) holds the reasoning, the tool lines and the
    answer as it streams. When ``final`` comes, the region is cleared and its settled form
    (the answer as Markdown) is printed once; what comes after ``final`` (memory capture's
    tool line, a login link) opens a new region below the answer, printed in turn when the
    turn ends. So nothing printed for good is redrawn, and no event order leaves the raw
    stream on the screen.
    """

    def __init__(
        self,
        console: Console,
        *,
        show_reasoning: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console
        self.show_reasoning = show_reasoning
        self.clock = clock
        self.shown = _Shown()
        self.reasoning: dict[str, _Reasoning] = {}
        self.tools: dict[str, _ToolLine] = {}
        self.live: Live | None = None

    def _render(self) -> RenderableType:
        shown = self.shown
        parts: list[RenderableType] = []
        for block in shown.blocks:
            if isinstance(block, _ToolLine):
                parts.append(block)
            elif block.seconds is not None and not self.show_reasoning:
                parts.append(Text(f"▸ {thought_for(block.seconds)}", style="dim"))
            else:
                parts.append(Text(block.text.strip(), style="dim italic"))
        if shown.final is not None:
            if shown.final.strip():
                parts.append(Markdown(shown.final))
        elif shown.text:
            parts.append(Text(shown.text))
        parts.extend(shown.notes)
        return Group(*parts)

    def _refresh(self) -> None:
        if self.live is None:
            self.live = Live(
                _Bottom(self._render()),
                console=self.console,
                refresh_per_second=12,
                transient=True,
            )
            self.live.start()
        else:
            self.live.update(_Bottom(self._render()))

    def _settle(self) -> None:
        """Clear the live region and print what it showed, once, for good."""
        if self.live is not None:
            self.live.stop()
            self.live = None
        shown = self.shown
        if shown.blocks or shown.text or shown.final is not None or shown.notes:
            self.console.print(self._render())
        self.shown = _Shown()

    def event(self, name: str, data: dict[str, Any]) -> None:
        shown = self.shown
        if name == "reasoning":
            block = self.reasoning.get(data["id"])
            if block is None:
                block = self.reasoning[data["id"]] = _Reasoning(started=self.clock())
                shown.blocks.append(block)
            block.text += data["chunk"]
        elif name == "reasoning_end":
            if data["id"] in self.reasoning:
                block = self.reasoning[data["id"]]
                block.seconds = self.clock() - block.started
        elif name == "tool":
            line = _ToolLine(data.get("label", ""), data.get("detail", ""))
            self.tools[data["toolCallId"]] = line
            shown.blocks.append(line)
        elif name == "tool_finish":
            if data["toolCallId"] in self.tools:
                self.tools[data["toolCallId"]].outcome = data["outcome"]
        elif name == "text":
            shown.text += data["chunk"]
        elif name == "final":
            shown.final = data["text"] or shown.text
            self._settle()
            return
        elif name == "login":
            shown.notes.extend(_login_lines(data))
        elif name == "error":
            shown.notes.append(Text(f"✗ {data['message']}", style="bold red"))
        elif name == "pending":
            return  # the prompt that follows the turn shows it
        self._refresh()

    def answer(self, body: dict[str, Any]) -> None:
        self.shown.final = body.get("reply", "")
        if body.get("login"):
            self.shown.notes.extend(_login_lines(body["login"]))
        self._settle()

    def note(self, text: str) -> None:
        self.close()
        self.console.print(Text(text, style="cyan"))

    def close(self) -> None:
        self._settle()
        self.reasoning = {}
        self.tools = {}


def thought_for(seconds: float) -> str:
    """How long the model thought, as a person says it: "Thought for 4.2 s", "for 1 min 5 s"."""
    if seconds < 0.1:
        return "Thought for a moment"
    if seconds < 9.95:
        return f"Thought for {seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"Thought for {whole} s"
    minutes, rest = divmod(whole, 60)
    return f"Thought for {minutes} min {rest} s" if rest else f"Thought for {minutes} min"


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
