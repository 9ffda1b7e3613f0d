"""Telegram's text: lengths in UTF-16 code units as Telegram counts them, a long answer cut
into messages, a live reply's preview, an inline keyboard."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from telegram import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
)

from bridges.pacing import split
from bridges.port import (
    ReplyButton,
)

#: The longest text one ``sendMessage`` takes, in UTF-16 code units as Telegram counts.
MAX_MESSAGE_CHARS: Final = 4096

#: An ``@username`` as Telegram finds one in plain text (an e-mail address is none).
_MENTION: Final = re.compile(r"(?<![\w@])@(?=\w)")
#: U+2060 WORD JOINER: invisible, and breaks Telegram's reading of ``@username``.
_JOINER: Final = "\u2060"


def quiet(text: str) -> str:
    """``text`` with every ``@username`` the model wrote shown but no mention: nobody is
    notified by an answer (Telegram notifies a mentioned member of a group)."""
    return _MENTION.sub("@" + _JOINER, text)


def _keyboard(buttons: Sequence[ReplyButton]) -> InlineKeyboardMarkup | None:
    """One button a row (labels stay whole), ``callback_data`` the action; ``None`` for none."""
    if not buttons:
        return None
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(b.label, callback_data=b.action)] for b in buttons]
    )


def _preview(text: str, status: str | None) -> str:
    """What a live reply shows: the text so far and the status line under it, within a
    message (a preview too long loses the end of its text, never the status)."""
    tail = f"\n\n{status}" if status and text else (status or "")
    room = MAX_MESSAGE_CHARS - _units(tail)
    if _units(text) > room:
        text = text[: _fitting_prefix(text, max(room - 1, 0))] + "…"
    return text + tail


def _units(text: str) -> int:
    """``text``'s length in UTF-16 code units, as Telegram counts."""
    return len(text.encode("utf-16-le")) // 2


def split_text(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """``text`` in parts of at most ``limit`` UTF-16 code units, cut as every platform's
    answer is (:func:`bridges.pacing.split`: at a paragraph, line, sentence or word, never
    inside a grapheme, no part left with a few characters); blank parts are dropped."""
    return [part for part in split(text, limit, units="utf16") if part.strip()]


def _fitting_prefix(text: str, limit: int) -> int:
    """How many characters of ``text`` fit in ``limit`` UTF-16 code units."""
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return index
    return len(text)
