"""Token allowances per person and per space, per day and per month, checked before a turn.

Four allowances, each a number of tokens (input and output, as the ledger counts them; 0 is
none): a person's per day and per month (all their conversations together) and a space's per
day and per month (all its people together). The allowances in force are the space's runtime
settings ``budget.person_day``, ``budget.person_month``, ``budget.space_day`` and
``budget.space_month`` (:mod:`core.spaces.settings`, the same rule as every space setting),
else the file's ``usage.*``; a person's own conversations (no space) have the file's person
allowances.

:meth:`Budgets.check` runs before the model is first asked in a turn, on every surface (the
session manager calls it); a turn already running is never cut. The check must cost next to
nothing: the totals and the space's allowances are cached; this instance's own calls are
added to the cached totals as they are recorded, and a cached value is read again from the
store once it is :attr:`Budgets.ttl_s` old (another instance's calls, another instance's
settings change). A settings change made through this instance drops the space's cached
allowances at once.

Days and months are UTC: a daily allowance renews at 00:00 UTC, a monthly one on the first.
A store that can't answer the check lets the turn through, logged.

Exceptions::

    BudgetExceeded (Exception)   raised by :meth:`Budgets.enforce`; carries the refusal
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Final, Literal

from core.people.i18n import N_
from core.state import StateError

if TYPE_CHECKING:
    from core.config.settings import Settings
    from core.people.i18n import Translator
    from core.spaces.settings import SpaceSettings
    from core.usage.allowances import PersonAllowances
    from core.usage.ledger import Spent, UsageLedger

__all__ = ["BudgetExceeded", "BudgetRefusal", "Budgets", "Limits"]

log = logging.getLogger("mercury.usage")

Scope = Literal["person", "space"]
Window = Literal["day", "month"]

#: What the person is told, by whose allowance and which window ran out.
SENTENCES: Final[dict[tuple[Scope, Window], str]] = {
    # Shown: instead of an answer, when the person's daily token allowance is used up;
    # when is a UTC date and time.
    ("person", "day"): N_("You have used your token allowance for today; it renews at %(when)s."),
    # Shown: instead of an answer, when the person's monthly token allowance is used up.
    ("person", "month"): N_(
        "You have used your token allowance for this month; it renews at %(when)s."
    ),
    # Shown: instead of an answer, when a shared space's daily token allowance is used up.
    ("space", "day"): N_(
        "This space has used its token allowance for today; it renews at %(when)s."
    ),
    # Shown: instead of an answer, when a shared space's monthly token allowance is used up.
    ("space", "month"): N_(
        "This space has used its token allowance for this month; it renews at %(when)s."
    ),
}


@dataclass(frozen=True, slots=True)
class Limits:
    """The allowances in force for a turn (0: none)."""

    person_day: int = 0
    person_month: int = 0
    space_day: int = 0
    space_month: int = 0

    @property
    def any(self) -> bool:
        return bool(self.person_day or self.person_month or self.space_day or self.space_month)


@dataclass(frozen=True, slots=True)
class BudgetRefusal:
    """An allowance used up: whose, for which window, and when it renews."""

    scope: Scope
    window: Window
    key: str
    limit: int
    used: int
    renews_at: datetime

    @property
    def bucket(self) -> str:
        """The notice's bucket: one per allowance and window, told once."""
        return f"budget:{self.scope}:{self.window}:{self.key}:{self.renews_at.date().isoformat()}"

    def seconds_left(self, now: datetime) -> int:
        return max(1, int((self.renews_at - now).total_seconds() + 0.999))

    def text(self, translator: Translator) -> str:
        when = self.renews_at.strftime("%Y-%m-%d %H:%M UTC")
        return translator.gettext(SENTENCES[(self.scope, self.window)]) % {"when": when}


class BudgetExceeded(Exception):
    """A turn refused before the model was asked: an allowance is used up."""

    def __init__(self, refusal: BudgetRefusal) -> None:
        super().__init__(f"{refusal.scope} {refusal.key}: {refusal.window} allowance used")
        self.refusal = refusal


def _renewal(window: Window, today: date) -> datetime:
    if window == "day":
        nxt = today + timedelta(days=1)
    else:
        nxt = (today.replace(day=28) + timedelta(days=4)).replace(day=1)
    return datetime(nxt.year, nxt.month, nxt.day, tzinfo=UTC)


class Budgets:
    """The allowances in force and the check a turn passes before the model is asked."""

    def __init__(
        self,
        ledger: UsageLedger,
        settings: Settings,
        space_settings: SpaceSettings | None = None,
        *,
        allowances: PersonAllowances | None = None,
        ttl_s: float = 2.0,
    ) -> None:
        self._ledger = ledger
        self._settings = settings
        self._space_settings = space_settings
        #: Named people's own allowances (None: only everyone's).
        self.allowances = allowances
        self.ttl_s = ttl_s
        usage = settings.usage
        self._file = Limits(
            usage.person_day, usage.person_month, usage.space_day, usage.space_month
        )
        #: (scope, key, first day) -> [tokens, monotonic time read]
        self._totals: dict[tuple[str, str, date], list[float]] = {}
        #: space id -> (limits, monotonic time read)
        self._limits: dict[str, tuple[Limits, float]] = {}
        #: person key -> (their own allowances: day, month, None where not given; time read)
        self._own: dict[str, tuple[tuple[int | None, int | None], float]] = {}
        ledger.listeners.append(self._spent)
        if space_settings is not None:
            space_settings.listeners.append(self.forget_space)
        if allowances is not None:
            allowances.listeners.append(self.forget_person)

    def forget_person(self, person_key: str) -> None:
        """Drop the person's cached own allowances (changed here)."""
        self._own.pop(person_key, None)

    async def _own_limits(self, person_key: str) -> tuple[int | None, int | None]:
        """The person's own day and month allowances (``None``: everyone's applies)."""
        if self.allowances is None:
            return (None, None)
        cached = self._own.get(person_key)
        now = time.monotonic()
        if cached is not None and now - cached[1] < self.ttl_s:
            return cached[0]
        found = await self.allowances.of(person_key)
        own = (
            found["day"].tokens if "day" in found else None,
            found["month"].tokens if "month" in found else None,
        )
        if len(self._own) > 10_000:
            self._own.clear()  # people nobody asks about any more
        self._own[person_key] = (own, now)
        return own

    def forget_space(self, space_id: str) -> None:
        """Drop the space's cached allowances (its settings changed here)."""
        self._limits.pop(space_id, None)

    async def limits(self, space_id: str | None) -> Limits:
        """The allowances in force for a turn in ``space_id`` (``None``: a person's own)."""
        if space_id is None or self._space_settings is None:
            return self._file
        cached = self._limits.get(space_id)
        now = time.monotonic()
        if cached is not None and now - cached[1] < self.ttl_s:
            return cached[0]
        force = await self._space_settings.in_force(space_id)
        limits = Limits(
            force.budget_person_day,
            force.budget_person_month,
            force.budget_space_day,
            force.budget_space_month,
        )
        self._limits[space_id] = (limits, now)
        return limits

    async def check(self, person_key: str, space_id: str | None) -> BudgetRefusal | None:
        """The first allowance of the person's (or the space's) that is used up, if any.

        A store that can't answer lets the turn through (logged): an allowance is a soft
        bound, and a store's hiccup must not stop everyone's turns.
        """
        try:
            return await self._check(person_key, space_id)
        except StateError as error:
            log.warning("the token allowances could not be checked: %s", error)
            return None

    async def _check(self, person_key: str, space_id: str | None) -> BudgetRefusal | None:
        limits = await self.limits(space_id)
        own_day, own_month = await self._own_limits(person_key)
        if own_day is not None or own_month is not None:
            limits = replace(
                limits,
                person_day=limits.person_day if own_day is None else own_day,
                person_month=limits.person_month if own_month is None else own_month,
            )
        if not limits.any:
            return None
        today = self._ledger.today()
        month = today.replace(day=1)
        checks: list[tuple[Scope, Window, str, int, date]] = [
            ("person", "day", person_key, limits.person_day, today),
            ("person", "month", person_key, limits.person_month, month),
        ]
        if space_id is not None:
            checks += [
                ("space", "day", space_id, limits.space_day, today),
                ("space", "month", space_id, limits.space_month, month),
            ]
        for scope, window, key, limit, since in checks:
            if not limit:
                continue
            used = await self._total(scope, key, since)
            if used >= limit:
                return BudgetRefusal(
                    scope=scope,
                    window=window,
                    key=key,
                    limit=limit,
                    used=used,
                    renews_at=_renewal(window, today),
                )
        return None

    async def enforce(self, person_key: str, space_id: str | None) -> None:
        """:class:`BudgetExceeded` when :meth:`check` finds an allowance used up."""
        refusal = await self.check(person_key, space_id)
        if refusal is not None:
            raise BudgetExceeded(refusal)

    async def _total(self, scope: Scope, key: str, since: date) -> int:
        entry = self._totals.get((scope, key, since))
        now = time.monotonic()
        if entry is not None and now - entry[1] < self.ttl_s:
            return int(entry[0])
        if scope == "person":
            used = await self._ledger.total(person_key=key, since=since)
        else:
            used = await self._ledger.total(space_id=key, since=since)
        if len(self._totals) > 10_000:
            self._totals.clear()  # old days and people nobody asks about any more
        self._totals[(scope, key, since)] = [used, now]
        return used

    def _spent(self, spent: Spent, day: date) -> None:
        """Add a call recorded here to the cached totals it belongs to."""
        month = day.replace(day=1)
        keys = [("person", spent.person_key, day), ("person", spent.person_key, month)]
        if spent.space_id is not None:
            keys += [("space", spent.space_id, day), ("space", spent.space_id, month)]
        for key in keys:
            entry = self._totals.get(key)
            if entry is not None:
                entry[0] += spent.tokens
