"""Displays: what the model shows the person verbatim through the ``present`` tool.

A display is a list, a table or a block of text that reaches the person exactly as given,
after the model's own answer, without the model retyping it. The model either writes the
display (``content``) or names a tool call whose result to show (``toolCallId``): every
tool result the model reads starts with its call's id, so a long list a plugin returned
never passes through the model's output.

The displays of a turn are appended to its ``final`` text, each after a blank line,
blank ones dropped (:func:`with_displays`); they stream as ``text`` deltas just before
``final``, are kept in the conversation's transcript, and never reach what memory
capture summarizes (they are not in the model's messages).

The ``present`` tool itself is a built-in plugin (:mod:`core.tools.builtin_plugins`).

Exception tree: none.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

#: How many recent tool results of a session can be presented by reference.
RESULTS_KEPT: Final = 32


class ToolResults:
    """A session's latest tool results by call id, for presenting by reference."""

    def __init__(self, keep: int = RESULTS_KEPT) -> None:
        self._keep = keep
        self._results: OrderedDict[str, str] = OrderedDict()

    def add(self, tool_call_id: str, result: str) -> None:
        self._results[tool_call_id] = result
        while len(self._results) > self._keep:
            self._results.popitem(last=False)

    def get(self, tool_call_id: str) -> str | None:
        return self._results.get(tool_call_id)

    def __len__(self) -> int:
        return len(self._results)


class Displays:
    """The displays one turn surfaced, in the order the model presented them."""

    def __init__(self, results: ToolResults) -> None:
        self.results = results
        self.shown: list[str] = []

    def show(self, text: str) -> None:
        if text.strip():
            self.shown.append(text)


def with_displays(answer: str, displays: Sequence[str]) -> str:
    """The answer and the displays after it, separated by a blank line, blanks dropped."""
    return "\n\n".join(part for part in (answer, *displays) if part.strip())


def display_chunks(streamed: str, displays: Sequence[str]) -> list[str]:
    """The ``text`` deltas that carry ``displays`` after what already streamed.

    Joined to ``streamed`` they give :func:`with_displays` of the two.
    """
    chunks: list[str] = []
    before = bool(streamed.strip())
    for display in displays:
        if not display.strip():
            continue
        chunks.append("\n\n" + display if before else display)
        before = True
    return chunks


def tool_message(tool_call_id: str, result: str) -> str:
    """A tool result as the model reads it: its call's id first, for ``present``."""
    return f"[toolCallId: {tool_call_id}]\n{result}"
