"""Slack's text and Block Kit: escaping, a long answer cut into messages or sections, a
status line, a button."""

from __future__ import annotations

from typing import Any, Final

from bridges.port import (
    ReplyButton,
)

#: Slack truncates a message's text past 40,000 characters and advises under 4,000; we cut
#: at 3,500 so that a few escaped ``&<>`` never push a part over.
MAX_MESSAGE_CHARS: Final = 3_500

#: The most one live reply holds: Slack advises messages under 4,000 characters; a Block Kit
#: section holds 3,000, so a live reply's text goes in as many sections as it needs.
LIVE_MAX_CHARS: Final = 3_900
#: The most a Block Kit section's text holds.
_SECTION_MAX_CHARS: Final = 3_000
#: A button's label, in characters (Block Kit's limit for a button's text).
_LABEL_MAX_CHARS: Final = 75


def _sections(text: str) -> list[dict[str, Any]]:
    """``text`` (escaped here) as ``section`` blocks of at most 3,000 characters each, cut
    after a line or a space, never inside an entity; no character lost."""
    rest = _escape(text)
    parts: list[str] = []
    while len(rest) > _SECTION_MAX_CHARS:
        cut = max(rest.rfind("\n", 0, _SECTION_MAX_CHARS), rest.rfind(" ", 0, _SECTION_MAX_CHARS))
        if cut >= _SECTION_MAX_CHARS // 2:
            cut += 1
        else:
            cut = _SECTION_MAX_CHARS
            entity = rest.rfind("&", cut - 5, cut)
            if entity > 0 and ";" not in rest[entity:cut]:
                cut = entity
        parts.append(rest[:cut])
        rest = rest[cut:]
    parts.append(rest)
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": part}}
        for part in parts
        if part.strip()
    ]


def _context(text: str) -> dict[str, Any]:
    """A line in small print (a status, what a press chose), as plain text."""
    return {"type": "context", "elements": [{"type": "plain_text", "text": text[:2_000]}]}


def _button(button: ReplyButton) -> dict[str, Any]:
    element: dict[str, Any] = {
        "type": "button",
        "text": {"type": "plain_text", "text": button.label[:_LABEL_MAX_CHARS] or "…"},
        "action_id": button.action,
        "value": button.action,
    }
    if button.style != "default":
        element["style"] = button.style
    return element


def split_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """``text`` in parts of at most ``limit`` characters, cut at a paragraph, line or word.

    A word longer than ``limit`` is cut where it must, never inside an ``&amp;``-style entity.
    Empty parts are dropped, so blank text gives no part at all.
    """
    parts: list[str] = []
    rest = text
    while len(rest) > limit:
        window = rest[: limit + 1]  # a separator right after the limit still counts
        for separator in ("\n\n", "\n", " "):
            cut = window.rfind(separator, 0, limit + 1)
            if cut >= limit // 2:
                # Blank lines around a cut would only show as a gap at a message's edge.
                parts.append(rest[:cut].rstrip("\n"))
                rest = rest[cut + len(separator) :].lstrip("\n")
                break
        else:
            cut = limit
            entity = window.rfind("&", max(0, limit - 7), limit)
            if entity > 0 and ";" not in window[entity:limit]:
                cut = entity
            parts.append(rest[:cut])
            rest = rest[cut:]
    parts.append(rest)
    return [part for part in parts if part.strip()]


def _escape(text: str) -> str:
    """Slack's three control characters escaped, so that no text becomes a ping or a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
