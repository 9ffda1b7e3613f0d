"""A named person's own token allowance, per day and per month, in the file and at runtime.

Everyone has the person allowance of the file (``usage.person_day``, ``usage.person_month``),
or in a space that space's (``budget.person_day``, ``budget.person_month``). One person may
have their own instead, each window on its own; the value in force (:meth:`PersonAllowances.of`)
is, in this order:

1. the value an administrator set at runtime, kept here in the state store (``person``);
2. the file's ``usage.people`` entry for the person (``file``);
3. none of their own: everyone's allowance applies to them.

Their own replaces everyone's for that person only, in their own conversations and in every
space (a space's shared allowances, ``budget.space_*``, still hold); 0 is none (no bound).
People are named by their key, as ``GET /usage`` shows them: ``people:alice`` with a
directory, the account (``static:alice``, ``slack:U123``) without one. A value set through
any instance is read by the others after the budgets' time to live; the listeners (the
budgets' cache) hear of a change made here at once.

Exceptions::

    AllowanceError (ValueError)   a window that is none (``window``), a value out of bounds
                                  (``value``) or a malformed person key (``person``);
                                  :attr:`AllowanceError.params` fill :data:`REFUSALS`
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Literal, get_args

from core.clock import Clock, system_clock
from core.codes import to_micros
from core.config.kinds import MAX_ALLOWANCE, PERSON_KEY
from core.people.i18n import N_
from core.state import Database, Migration, Schema

if TYPE_CHECKING:
    from core.config.settings import Settings

__all__ = [
    "REFUSALS",
    "WINDOWS",
    "Allowance",
    "AllowanceError",
    "AllowanceWindow",
    "PersonAllowances",
]

AllowanceWindow = Literal["day", "month"]
WINDOWS: Final[tuple[AllowanceWindow, ...]] = get_args(AllowanceWindow)

#: What a refusal says, by its fault, filled with :attr:`AllowanceError.params`.
REFUSALS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "window": N_('The field "%(field)s" must be one of %(choices)s, not "%(value)s".'),
        "value": N_("%(key)s is a whole number from %(minimum)d to %(maximum)d."),
        # Shown: to an administrator who named someone by something that is no person's key.
        "person": N_(
            '"%(person)s" is not a person\'s key; name the person as GET /usage shows '
            "them, such as people:alice."
        ),
    }
)

_SCHEMA: Final = Schema(
    "person_allowances",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS person_allowances (
    person_key TEXT NOT NULL,
    per        TEXT NOT NULL,
    tokens     BIGINT NOT NULL,
    set_by     TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (person_key, per)
);
""",
        ),
    ),
)


class AllowanceError(ValueError):
    """An allowance refused: its window, its value or the person's key."""

    def __init__(self, fault: Literal["window", "value", "person"], **params: object) -> None:
        self.fault: Literal["window", "value", "person"] = fault
        self.params: Mapping[str, object] = MappingProxyType(params)
        super().__init__(self.template % self.params)

    @property
    def template(self) -> str:
        """The refusal's sentence before it is filled, in English (a msgid)."""
        return REFUSALS[self.fault]


@dataclass(frozen=True, slots=True)
class Allowance:
    """A person's own allowance for a window: its tokens (0: none) and where it comes from."""

    person_key: str
    window: AllowanceWindow
    tokens: int
    source: Literal["person", "file"]


def checked_person(person_key: str) -> str:
    """``person_key`` when it has a person key's shape; :class:`AllowanceError` otherwise."""
    if not PERSON_KEY.fullmatch(person_key):
        raise AllowanceError("person", person=person_key[:64])
    return person_key


def checked_window(window: str) -> AllowanceWindow:
    if window not in WINDOWS:
        raise AllowanceError("window", field="window", choices="day, month", value=window[:64])
    return window  # type: ignore[return-value]  # checked just above


def checked_tokens(window: AllowanceWindow, value: object) -> int:
    """``value`` as a number of tokens (also as its text, as a command line writes it)."""
    number = value
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        number = int(value.strip())
    if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= MAX_ALLOWANCE:
        raise AllowanceError("value", key=window, minimum=0, maximum=MAX_ALLOWANCE)
    return number


class PersonAllowances:
    """Named people's own allowances: the file's and those set at runtime, the latter first."""

    def __init__(self, db: Database, settings: Settings, *, clock: Clock = system_clock) -> None:
        self._db = db
        self._file = settings.usage.people
        self._clock = clock
        self._ready = False
        #: Called with the person's key when their allowance changed through this instance.
        self.listeners: list[Callable[[str], None]] = []

    async def ensure_schema(self) -> None:
        if not self._ready:
            await self._db.migrate(_SCHEMA)
            self._ready = True

    def _from_file(self, person_key: str) -> dict[AllowanceWindow, Allowance]:
        given = self._file.get(person_key)
        if given is None:
            return {}
        found: dict[AllowanceWindow, Allowance] = {}
        if given.day is not None:
            found["day"] = Allowance(person_key, "day", given.day, "file")
        if given.month is not None:
            found["month"] = Allowance(person_key, "month", given.month, "file")
        return found

    async def of(self, person_key: str) -> dict[AllowanceWindow, Allowance]:
        """The person's own allowances in force, by window (none: everyone's apply)."""
        await self.ensure_schema()
        found = self._from_file(person_key)
        rows = await self._db.fetch_all(
            "SELECT per, tokens FROM person_allowances WHERE person_key = ?", (person_key,)
        )
        for row in rows:
            if row[0] in WINDOWS:
                found[row[0]] = Allowance(person_key, row[0], int(row[1]), "person")
        return found

    async def listing(self) -> list[Allowance]:
        """Every named person's own allowances in force, by person key and window."""
        await self.ensure_schema()
        found: dict[tuple[str, str], Allowance] = {}
        for person_key in self._file:
            for window, allowance in self._from_file(person_key).items():
                found[(person_key, window)] = allowance
        for row in await self._db.fetch_all(
            "SELECT person_key, per, tokens FROM person_allowances"
        ):
            if row[1] in WINDOWS:
                found[(row[0], row[1])] = Allowance(row[0], row[1], int(row[2]), "person")
        return [found[key] for key in sorted(found)]

    async def set(self, person_key: str, window: str, value: object, *, by: str) -> Allowance:
        """Give the person their own allowance for ``window``, in force from the next turn."""
        checked_person(person_key)
        known = checked_window(window)
        tokens = checked_tokens(known, value)
        await self.ensure_schema()
        await self._db.execute(
            "INSERT INTO person_allowances (person_key, per, tokens, set_by, updated_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (person_key, per) DO UPDATE SET "
            "tokens = excluded.tokens, set_by = excluded.set_by, updated_at = excluded.updated_at",
            (person_key, known, tokens, by, to_micros(self._clock())),
        )
        self._changed(person_key)
        return Allowance(person_key, known, tokens, "person")

    async def delete(self, person_key: str, window: str) -> Allowance | None:
        """Drop the runtime value of ``window``; answers what remains in force (the file's)."""
        checked_person(person_key)
        known = checked_window(window)
        await self.ensure_schema()
        await self._db.execute(
            "DELETE FROM person_allowances WHERE person_key = ? AND per = ?",
            (person_key, known),
        )
        self._changed(person_key)
        return self._from_file(person_key).get(known)

    def _changed(self, person_key: str) -> None:
        for listener in self.listeners:
            listener(person_key)
