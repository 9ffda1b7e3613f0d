"""Space ids: the memory and settings boundary a chat conversation belongs to.

A space is named by its platform and the platform's own ids, as the bridges make them:

* ``slack:<channel>`` (only a DM's channel, ``D…``, is a direct message: a ``C…`` or ``G…``
  channel, private or a group DM of several people, is a group);
* ``telegram:<chatId>[:<threadId>]`` (a group's chat id is negative; a forum topic is a thread);
* ``discord:<guild>:<channel>[:<thread>]`` (a DM's guild is ``@me``, a group DM's of several
  people ``@group``);
* ``whatsapp:<jid>`` (a group's jid ends in ``@g.us``);
* ``teams:<tenant>:<conversation>`` (a personal chat's conversation id starts with ``a:``; a
  channel's or a group chat's with ``19:``).
* ``matrix:<room id>`` (``matrix:!abc:example.org``), and ``matrix:dm:<room id>`` for a direct
  room (the bot and one person, or marked direct).

Every store keyed by a space checks the id with :func:`parse_space_id` first, so nothing
malformed ever becomes a key. A space's long-term memory, files and wiki live under its
area key (:func:`area_key`), apart from every person's own.

Exceptions::

    InvalidSpaceId (ValueError)   the text is not a space id; the message says what one is
"""

from __future__ import annotations

import re
from typing import Final, Literal

import msgspec

__all__ = [
    "AREA_PREFIX",
    "PLATFORMS",
    "InvalidSpaceId",
    "Platform",
    "SpaceRef",
    "area_key",
    "parse_space_id",
]

Platform = Literal["slack", "telegram", "discord", "whatsapp", "teams", "matrix"]
PLATFORMS: Final[tuple[Platform, ...]] = (
    "slack",
    "telegram",
    "discord",
    "whatsapp",
    "teams",
    "matrix",
)
#: What an area key of a space starts with; a person key never does (``people:``, ``<provider>:``).
AREA_PREFIX: Final = "space:"
MAX_SPACE_ID_CHARS: Final = 200

_PART: Final = r"[A-Za-z0-9_.@+-]{1,64}"
_SHAPES: Final[dict[str, re.Pattern[str]]] = {
    "slack": re.compile(r"slack:(?P<channel>[A-Z0-9]{1,32})"),
    "telegram": re.compile(r"telegram:(?P<chat>-?[0-9]{1,20})(?::(?P<thread>[0-9]{1,20}))?"),
    "discord": re.compile(
        r"discord:(?P<guild>@me|@group|[0-9]{1,24}):(?P<channel>[0-9]{1,24})"
        r"(?::(?P<thread>[0-9]{1,24}))?"
    ),
    "whatsapp": re.compile(rf"whatsapp:(?P<jid>{_PART})"),
    # A Teams conversation id (``a:1Xy…``, ``19:…@thread.tacv2``) without the ``;messageid=``
    # of a channel's thread: the thread is a conversation of its channel's space. No ``/``,
    # ``?`` or ``#``: the id goes into the connector's URL path as it is.
    "teams": re.compile(
        r"teams:(?P<tenant>[A-Za-z0-9-]{1,64}):"
        r"(?P<conversation>[a-z0-9]{1,3}:[A-Za-z0-9_.@:=-]{1,180})"
    ),
    # A room id: ``!`` and an opaque part, then its server (name or IP, a port) where the
    # room version has one (from room version 12 on, none).
    "matrix": re.compile(
        r"matrix:(?P<dm>dm:)?(?P<room>![A-Za-z0-9_.=+-]{1,128}"
        r"(?::(?:[A-Za-z0-9.-]{1,255}|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?)?)"
    ),
}


class InvalidSpaceId(ValueError):
    """The text is not the id of a space."""


class SpaceRef(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed space id."""

    id: str
    platform: Platform
    is_dm: bool


def parse_space_id(text: str) -> SpaceRef:
    """The space ``text`` names; :class:`InvalidSpaceId` when it names none."""
    platform, _, _ = text.partition(":")
    shape = _SHAPES.get(platform)
    found = shape.fullmatch(text) if shape is not None and len(text) <= MAX_SPACE_ID_CHARS else None
    if found is None:
        raise InvalidSpaceId(
            "A space id is a platform and its ids, such as slack:C0123ABC, telegram:-1001234, "
            "discord:<guild>:<channel>, whatsapp:<jid>, teams:<tenant>:<conversation> or "
            "matrix:<room id>."
        )
    if platform == "slack":
        # Slack's one-to-one DMs alone start with D (``channel_type`` "im"); a G… channel is a
        # legacy private channel or a group DM ("mpim"): several people, a group (#34).
        is_dm = found["channel"].startswith("D")
    elif platform == "telegram":
        is_dm = not found["chat"].startswith("-")
    elif platform == "discord":
        is_dm = found["guild"] == "@me"
    elif platform == "teams":
        # Only a personal chat (the bot and one person) has an ``a:`` id; a group chat, a
        # channel or a meeting chat is ``19:…``, and anything else is taken for a group.
        is_dm = found["conversation"].startswith("a:")
    elif platform == "matrix":
        is_dm = found["dm"] is not None
    else:
        is_dm = not found["jid"].endswith("@g.us")
    return SpaceRef(id=text, platform=platform, is_dm=is_dm)  # type: ignore[arg-type]


def area_key(space_id: str) -> str:
    """The key a space's memory, files and wiki are kept under, apart from any person's."""
    return AREA_PREFIX + space_id
