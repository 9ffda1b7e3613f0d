"""The trigger engine: whether a message in a space is for the assistant, decided cheaply.

It runs before a bridge normalizes the message (no I/O, one compiled pattern per trigger
word), so the typing indicator starts at once and an untriggered message costs nothing more
than being kept as ambient context.

* A direct message always triggers; so does a reply to one of the assistant's messages.
* ``mention`` (the default): the trigger word stands as a word of its own anywhere in the
  text, with or without a leading ``@``, in any case (``@Mercury``, ``mercury,``; not
  ``mercurial``).
* ``prefix``: the text starts with it. ``always``: every message.
* A file sent without text in a group triggers only under ``always``, with
  ``media_in_groups``, or as a reply to the assistant.

:func:`command_of` finds the two commands that skip the queue and the rate limit: ``stop``
and ``compact``, said to the assistant as the whole message; :func:`without_trigger` is what a
message says once the trigger word is taken out.
"""

from __future__ import annotations

import functools
import re
from typing import Final, Literal

import msgspec

from core.spaces.config import trigger_word

__all__ = ["COMMANDS", "Command", "Trigger", "command_of", "without_trigger"]

Command = Literal["stop", "compact"]
COMMANDS: Final[tuple[Command, ...]] = ("stop", "compact")


class Trigger(msgspec.Struct, frozen=True, kw_only=True):
    """A space's trigger in force (:func:`core.spaces.settings.resolve` says which)."""

    match: Literal["mention", "prefix", "always"]
    pattern: str
    media_in_groups: bool

    def matches(
        self, text: str, *, is_dm: bool, is_reply_to_bot: bool, has_attachments: bool
    ) -> bool:
        """Whether a message with ``text`` is addressed to the assistant."""
        if is_dm or is_reply_to_bot or self.match == "always":
            return True
        if not text.strip():
            return has_attachments and self.media_in_groups
        if self.match == "prefix":
            return _prefix(self.pattern).match(text) is not None
        return _word(self.pattern).search(text) is not None


def command_of(text: str, trigger: Trigger) -> Command | None:
    """``stop`` or ``compact`` when that is all the message says (the trigger word aside)."""
    words = without_trigger(text, trigger).lower().removeprefix("/")
    return words if words in COMMANDS else None  # type: ignore[return-value]  # checked


def without_trigger(text: str, trigger: Trigger) -> str:
    """What the message says with the trigger word taken out and the ends trimmed."""
    return _word(trigger.pattern).sub(" ", text).strip(" \t\n,:;.!")


@functools.lru_cache(maxsize=256)
def _word(pattern: str) -> re.Pattern[str]:
    word = re.escape(trigger_word(pattern))
    return re.compile(rf"(?<![\w@])@?{word}(?!\w)", re.IGNORECASE)


@functools.lru_cache(maxsize=256)
def _prefix(pattern: str) -> re.Pattern[str]:
    word = re.escape(trigger_word(pattern))
    return re.compile(rf"\s*@?{word}(?!\w)", re.IGNORECASE)
