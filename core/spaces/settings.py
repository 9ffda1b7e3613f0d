"""A space's settings an admin changes at runtime, and the one rule of which value is in force.

Eleven settings of a space can be changed while the server runs (#40), each under its key
(:data:`SETTING_KEYS`): ``rate_limit`` (turns per person per window, 1 to 1000),
``trigger.match`` (``mention``, ``prefix`` or ``always``), ``trigger.pattern`` (the trigger
word), ``trigger.media_in_groups``, ``ambient.max_messages``, ``ambient.max_chars``,
``live_answers`` and the token allowances ``budget.person_day``, ``budget.person_month``,
``budget.space_day`` and ``budget.space_month`` (:mod:`core.usage.budgets`; 0 is none).
The value in force (:func:`resolve`) is, in this order:

1. the space's runtime value, kept here in the state store (``space``);
2. the file's value for the space, its ``spaces:`` section (``file``;
   :class:`~core.spaces.config.SpaceConfig` has no ambient bounds);
3. the global setting (``global``).

Removing a runtime value falls back to the next. The router reads the runtime values of a
space once per message (:meth:`SpaceSettings.in_force`: one lookup on the table's key), so a
value set through any instance is the one the next message meets on every instance. A value
is checked (:func:`checked_value`) against the same bounds as the global setting; a stored
value that no longer passes (written by a later version, say) is passed over as if unset.

Exceptions::

    SettingError (ValueError)     a key that is no space setting (``fault`` ``key``) or a value
                                  it can't take (``value``); :attr:`SettingError.params` fill
                                  :data:`REFUSALS` ``[fault or key]``, a sentence in English
    InvalidSpaceId (ValueError)   the space id is malformed (from core.spaces.ids)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Literal, get_args

import msgspec

from core.clock import Clock, system_clock
from core.codes import to_micros
from core.people.i18n import N_
from core.spaces.config import trigger_word
from core.spaces.ids import parse_space_id
from core.spaces.triggers import Trigger
from core.state import Database, Migration, Schema
from core.workspace.files import holds_invisible

if TYPE_CHECKING:
    from core.config.settings import Settings

__all__ = [
    "BOUNDS",
    "MAX_PATTERN_CHARS",
    "REFUSALS",
    "SETTING_KEYS",
    "InForce",
    "Resolved",
    "SettingError",
    "SettingKey",
    "SettingValue",
    "Source",
    "SpaceSettings",
    "checked_value",
    "resolve",
]

log = logging.getLogger(__name__)

SettingKey = Literal[
    "rate_limit",
    "trigger.match",
    "trigger.pattern",
    "trigger.media_in_groups",
    "ambient.max_messages",
    "ambient.max_chars",
    "live_answers",
    "budget.person_day",
    "budget.person_month",
    "budget.space_day",
    "budget.space_month",
]
SETTING_KEYS: Final[tuple[SettingKey, ...]] = get_args(SettingKey)
#: Where a value in force comes from: the space's runtime value, the file, the global setting.
Source = Literal["space", "file", "global"]
SettingValue = int | str | bool
#: The largest token allowance a setting takes (the file's bound too).
MAX_BUDGET: Final = 1_000_000_000_000

#: The whole numbers' bounds, those of the global settings (core/config/settings.py).
BOUNDS: Final[Mapping[SettingKey, tuple[int, int]]] = MappingProxyType(
    {
        "rate_limit": (1, 1000),
        "ambient.max_messages": (0, 500),
        "ambient.max_chars": (0, 100_000),
        # Token allowances (core/usage/budgets.py); 0 is none.
        "budget.person_day": (0, MAX_BUDGET),
        "budget.person_month": (0, MAX_BUDGET),
        "budget.space_day": (0, MAX_BUDGET),
        "budget.space_month": (0, MAX_BUDGET),
    }
)
_BOOLS: Final[frozenset[SettingKey]] = frozenset({"trigger.media_in_groups", "live_answers"})
_MATCHES: Final = ("mention", "prefix", "always")
MAX_PATTERN_CHARS: Final = 64

#: What a refusal says, by its fault (``key``) or the key whose value was refused, with
#: :attr:`SettingError.params`; the routes translate it, the tool tells it as it is.
REFUSALS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "key": N_(
            '"%(key)s" is not a setting of a space; the settings are rate_limit, '
            "trigger.match, trigger.pattern, trigger.media_in_groups, ambient.max_messages, "
            "ambient.max_chars, live_answers, budget.person_day, budget.person_month, "
            "budget.space_day and budget.space_month."
        ),
        "number": N_("%(key)s is a whole number from %(minimum)d to %(maximum)d."),
        "bool": N_("%(key)s is true or false."),
        "trigger.match": N_("trigger.match is mention, prefix or always."),
        "trigger.pattern": N_(
            "trigger.pattern is the trigger word: 1 to %(maximum)d characters, at least one "
            'of them not "@", without control or invisible characters.'
        ),
    }
)

_SCHEMA: Final = Schema(
    "space_settings",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS space_settings (
    space_id   TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    set_by     TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (space_id, key)
);
""",
        ),
    ),
)


class SettingError(ValueError):
    """A setting refused: ``fault`` ``key`` (no such setting) or ``value`` (out of its rule)."""

    def __init__(
        self, fault: Literal["key", "value"], key: str, params: Mapping[str, object]
    ) -> None:
        self.fault: Literal["key", "value"] = fault
        self.key = key
        #: What :attr:`template` is filled with.
        self.params: Mapping[str, object] = MappingProxyType({"key": key[:64], **params})
        super().__init__(self.template % self.params)

    @property
    def template(self) -> str:
        """The refusal's sentence before it is filled, in English (a msgid)."""
        if self.fault == "key":
            return REFUSALS["key"]
        if self.key in BOUNDS:
            return REFUSALS["number"]
        if self.key in _BOOLS:
            return REFUSALS["bool"]
        return REFUSALS[self.key]


def setting_key(key: str) -> SettingKey:
    """``key`` when it names a space setting; :class:`SettingError` (``key``) otherwise."""
    if key not in SETTING_KEYS:
        raise SettingError("key", key, {})
    return key  # type: ignore[return-value]  # checked just above


def checked_value(key: SettingKey, value: object) -> SettingValue:
    """``value`` as ``key`` keeps it; :class:`SettingError` (``value``) when it can't.

    A whole number or ``true``/``false`` may also come as its text (``"5"``, ``"true"``),
    as a command line writes it; a trigger word is trimmed.
    """
    if key in BOUNDS:
        minimum, maximum = BOUNDS[key]
        number = value
        if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
            number = int(value.strip())
        if isinstance(number, bool) or not isinstance(number, int):
            raise SettingError("value", key, {"minimum": minimum, "maximum": maximum})
        if not minimum <= number <= maximum:
            raise SettingError("value", key, {"minimum": minimum, "maximum": maximum})
        return number
    if key in _BOOLS:
        if isinstance(value, str) and value.strip().lower() in {"true", "false"}:
            return value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise SettingError("value", key, {})
        return value
    if key == "trigger.match":
        if not isinstance(value, str) or value.strip() not in _MATCHES:
            raise SettingError("value", key, {})
        return value.strip()
    word = value.strip() if isinstance(value, str) else ""
    if not trigger_word(word) or len(word) > MAX_PATTERN_CHARS or holds_invisible(word):
        raise SettingError("value", key, {"maximum": MAX_PATTERN_CHARS})
    return word


@dataclass(frozen=True, slots=True)
class Resolved:
    """A setting of a space: its value in force and where that comes from."""

    key: SettingKey
    value: SettingValue
    source: Source

    @property
    def bounds(self) -> tuple[int, int] | None:
        """The least and the most a whole number may be; ``None`` for the others."""
        return BOUNDS.get(self.key)


def resolve(
    settings: Settings, space_id: str, runtime: Mapping[str, SettingValue]
) -> dict[SettingKey, Resolved]:
    """Every setting of ``space_id`` in force: ``runtime``'s, else the file's, else global."""
    own = settings.spaces.get(space_id)
    trigger = settings.trigger
    file: dict[SettingKey, SettingValue | None] = {}
    if own is not None:
        file = {
            "rate_limit": own.rate_limit,
            "trigger.match": own.trigger.match,
            "trigger.pattern": own.trigger.pattern,
            "trigger.media_in_groups": own.trigger.media_in_groups,
            "live_answers": own.live_answers,
        }
    overall: dict[SettingKey, SettingValue] = {
        "rate_limit": settings.rate_limit.per_user,
        "trigger.match": trigger.match,
        "trigger.pattern": trigger.pattern or trigger.name,
        "trigger.media_in_groups": trigger.media_in_groups,
        "ambient.max_messages": settings.ambient.max_messages,
        "ambient.max_chars": settings.ambient.max_chars,
        "live_answers": settings.bridges.live_answers,
        "budget.person_day": settings.usage.person_day,
        "budget.person_month": settings.usage.person_month,
        "budget.space_day": settings.usage.space_day,
        "budget.space_month": settings.usage.space_month,
    }
    found: dict[SettingKey, Resolved] = {}
    for key in SETTING_KEYS:
        in_file = file.get(key)
        if key in runtime:
            found[key] = Resolved(key=key, value=runtime[key], source="space")
        elif in_file is not None:
            found[key] = Resolved(key=key, value=in_file, source="file")
        else:
            found[key] = Resolved(key=key, value=overall[key], source="global")
    return found


@dataclass(frozen=True, slots=True)
class InForce:
    """What a message in a space is routed by: its settings in force, typed."""

    rate_limit: int
    trigger: Trigger
    ambient_max_messages: int
    ambient_max_chars: int
    live_answers: bool
    budget_person_day: int = 0
    budget_person_month: int = 0
    budget_space_day: int = 0
    budget_space_month: int = 0

    @classmethod
    def of(cls, resolved: Mapping[SettingKey, Resolved]) -> InForce:
        """The typed values of :func:`resolve`'s answer."""
        value = {key: entry.value for key, entry in resolved.items()}
        match = str(value["trigger.match"])
        return cls(
            rate_limit=int(value["rate_limit"]),
            trigger=Trigger(
                match=match if match in _MATCHES else "mention",  # type: ignore[arg-type]
                pattern=str(value["trigger.pattern"]),
                media_in_groups=bool(value["trigger.media_in_groups"]),
            ),
            ambient_max_messages=int(value["ambient.max_messages"]),
            ambient_max_chars=int(value["ambient.max_chars"]),
            live_answers=bool(value["live_answers"]),
            budget_person_day=int(value["budget.person_day"]),
            budget_person_month=int(value["budget.person_month"]),
            budget_space_day=int(value["budget.space_day"]),
            budget_space_month=int(value["budget.space_month"]),
        )


class SpaceSettings:
    """The runtime settings of every space, in the state store, over ``settings``."""

    def __init__(self, db: Database, settings: Settings, *, clock: Clock = system_clock) -> None:
        self._db = db
        self._settings = settings
        self._clock = clock
        self._ready = False
        #: Called with a space's id when one of its settings changed through this instance.
        self.listeners: list[Callable[[str], None]] = []

    async def ensure_schema(self) -> None:
        """Create the table if needed; done lazily by every call, idempotent."""
        if not self._ready:
            await self._db.migrate(_SCHEMA)
            self._ready = True

    async def runtime(self, space_id: str) -> dict[str, SettingValue]:
        """The space's runtime values by key (one lookup on the table's key); a stored value
        that no longer passes its check is left out, and logged."""
        parse_space_id(space_id)
        await self.ensure_schema()
        rows = await self._db.fetch_all(
            "SELECT key, value FROM space_settings WHERE space_id = ?", (space_id,)
        )
        found: dict[str, SettingValue] = {}
        for row in rows:
            try:
                found[row[0]] = checked_value(setting_key(row[0]), msgspec.json.decode(row[1]))
            except (SettingError, msgspec.DecodeError):
                log.warning(
                    "The runtime setting %s of %s can't be used; the space falls back.",
                    row[0],
                    space_id,
                )
        return found

    async def listing(self, space_id: str) -> dict[SettingKey, Resolved]:
        """Every setting of the space in force, with its source."""
        return resolve(self._settings, space_id, await self.runtime(space_id))

    async def in_force(self, space_id: str) -> InForce:
        """What the space's next message is routed by."""
        return InForce.of(await self.listing(space_id))

    async def set(self, space_id: str, key: str, value: object, *, by: str) -> Resolved:
        """Keep ``value`` as the space's own ``key``; the setting as it now is in force.

        :class:`SettingError` for an unknown key or a value it can't take (nothing kept).
        """
        parse_space_id(space_id)
        known = setting_key(key)
        checked = checked_value(known, value)
        await self.ensure_schema()
        await self._db.execute(
            "INSERT INTO space_settings (space_id, key, value, set_by, updated_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (space_id, key) DO UPDATE SET "
            "value = excluded.value, set_by = excluded.set_by, updated_at = excluded.updated_at",
            (space_id, known, msgspec.json.encode(checked).decode(), by, self._now()),
        )
        self._changed(space_id)
        return (await self.listing(space_id))[known]

    async def delete(self, space_id: str, key: str) -> Resolved:
        """Drop the space's own ``key``; the value it falls back to (the file's or global)."""
        parse_space_id(space_id)
        known = setting_key(key)
        await self.ensure_schema()
        await self._db.execute(
            "DELETE FROM space_settings WHERE space_id = ? AND key = ?", (space_id, known)
        )
        self._changed(space_id)
        return (await self.listing(space_id))[known]

    async def delete_space(self, space_id: str) -> int:
        """Drop every runtime setting of the space; how many there were."""
        parse_space_id(space_id)
        await self.ensure_schema()
        deleted = await self._db.execute(
            "DELETE FROM space_settings WHERE space_id = ?", (space_id,)
        )
        self._changed(space_id)
        return deleted

    def _changed(self, space_id: str) -> None:
        for listener in self.listeners:
            listener(space_id)

    def _now(self) -> int:
        moment: datetime = self._clock()
        return to_micros(moment)
