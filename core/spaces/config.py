"""A space's own configuration from the YAML file's ``spaces:`` section.

::

    spaces:
      "slack:C0123ABC":
        admins: [slack:U01ADMIN, people:alice]   # identities or person keys
        members: [slack:U02BOB]
        rate_limit: 5                            # turns per person per window, this space
        trigger: {match: prefix, pattern: "!m", media_in_groups: true}
        live_answers: false                      # one message per answer, no live edits

Who is an admin or a member comes from here (and from the directory's roles, see
:mod:`core.spaces.members`); whatever is left out falls back to the global settings.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final, Literal

from core.config.kinds import (
    _Group,
    _InvalidValueError,
    _Kind,
    _mapping,
    _must,
    _only_keys,
    _text_list,
)
from core.spaces.ids import InvalidSpaceId, parse_space_id

__all__ = ["SpaceConfig", "SpaceTrigger", "trigger_word"]


def trigger_word(pattern: str) -> str:
    """The word a trigger ``pattern`` matches: trimmed, its leading ``@`` signs taken out
    (``@Mercury`` and ``Mercury`` are one trigger). Empty for ``@`` or ``@@@@``, which would
    match every message: every place a pattern is accepted refuses that."""
    return pattern.strip().lstrip("@").strip()


_SPACE_KEYS: Final = ("admins", "members", "rate_limit", "trigger", "live_answers")
_TRIGGER_KEYS: Final = ("match", "pattern", "media_in_groups")
_MATCHES: Final = ("mention", "prefix", "always")


class SpaceTrigger(_Group, frozen=True, kw_only=True):
    """A space's own trigger; ``None`` for what follows the global ``trigger.*``."""

    match: Literal["mention", "prefix", "always"] | None = None
    pattern: str | None = None
    media_in_groups: bool | None = None


class SpaceConfig(_Group, frozen=True, kw_only=True):
    """What the file says of one space."""

    admins: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    rate_limit: int | None = None
    trigger: SpaceTrigger = SpaceTrigger()
    #: Whether answers are written live here; ``None`` follows ``bridges.live_answers``.
    live_answers: bool | None = None


class _Spaces(_Kind):
    summary = "mapping: space id → `{admins, members, rate_limit, trigger, live_answers}`"

    def from_yaml(self, value: object) -> object:
        spaces = _mapping(value, "", "a mapping from space id to its settings")
        read: dict[str, SpaceConfig] = {}
        for space_id, entry in spaces.items():
            at = f'."{space_id}"'
            try:
                parse_space_id(space_id)
            except InvalidSpaceId as error:
                raise _InvalidValueError(str(error)[0].lower() + str(error)[1:-1], at) from None
            read[space_id] = _space(entry, at)
        return MappingProxyType(read)


def _space(value: object, at: str) -> SpaceConfig:
    entry = _mapping(value if value is not None else {}, at, "a mapping of the space's settings")
    _only_keys(entry, at, _SPACE_KEYS)
    admins = _text_list(entry.get("admins", []), f"{at}.admins", "a list of people")
    members = _text_list(entry.get("members", []), f"{at}.members", "a list of people")
    limit = entry.get("rate_limit")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000
    ):
        raise _InvalidValueError(
            f"must be a whole number from 1 to 1000, not {limit!r}", f"{at}.rate_limit"
        )
    trigger = _mapping(entry.get("trigger", {}), f"{at}.trigger", "a mapping")
    _only_keys(trigger, f"{at}.trigger", _TRIGGER_KEYS)
    match = trigger.get("match")
    if match is not None and match not in _MATCHES:
        raise _InvalidValueError(f"must be one of {', '.join(_MATCHES)}", f"{at}.trigger.match")
    pattern = trigger.get("pattern")
    if pattern is not None and (not isinstance(pattern, str) or not trigger_word(pattern)):
        raise _InvalidValueError(
            'must be a word with a character besides "@"', f"{at}.trigger.pattern"
        )
    media = trigger.get("media_in_groups")
    if media is not None and not isinstance(media, bool):
        raise _InvalidValueError(
            str(_must("true or false", media)), f"{at}.trigger.media_in_groups"
        )
    live = entry.get("live_answers")
    if live is not None and not isinstance(live, bool):
        raise _InvalidValueError(str(_must("true or false", live)), f"{at}.live_answers")
    return SpaceConfig(
        live_answers=live,
        admins=admins,
        members=members,
        rate_limit=limit,
        trigger=SpaceTrigger(
            match=match,
            pattern=pattern.strip() if isinstance(pattern, str) else None,
            media_in_groups=media,
        ),
    )
