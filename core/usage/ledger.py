"""The usage ledger: the tokens every model call used, per person, space, model and day.

A model reports what a call cost on its last chunk (Ollama's ``prompt_eval_count`` and
``eval_count``; the OpenAI protocol's ``usage``, with ``prompt_tokens_details.cached_tokens``
where the server keeps a prompt cache). The engine adds them up for the call and hands them
here once, when the call has ended: :meth:`UsageLedger.record` is one upsert that adds to the
day's row (``INSERT … ON CONFLICT … DO UPDATE SET tokens = tokens + excluded.tokens``), so
instances sharing a PostgreSQL store sum into the same rows without reading first, and
nothing is written per token.

A row's key is the UTC day, the person, the space (``""`` for a person's own conversations)
and the model; ``calls`` counts the model calls added to it, and ``person_name`` keeps the
name the person's account last gave (reports show people by name). Reads (:meth:`UsageLedger.rows`,
:meth:`UsageLedger.total`) sum the rows of a period.

Exceptions: the store's own (:class:`~core.state.StateError`); nothing of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Final, Literal, get_args

import msgspec

from core.clock import Clock, system_clock
from core.state import Database, Migration, Schema

__all__ = [
    "GROUPS",
    "PERIODS",
    "Group",
    "LedgerRow",
    "Period",
    "Spent",
    "UsageLedger",
    "period_start",
]

log = logging.getLogger("mercury.usage")

#: The columns a report may be grouped by.
Group = Literal["day", "person", "space", "model"]
GROUPS: Final[tuple[Group, ...]] = get_args(Group)
#: The periods a report covers, ending today (UTC): today, the last 7 or 30 days, this month.
Period = Literal["today", "7d", "30d", "month"]
PERIODS: Final[tuple[Period, ...]] = get_args(Period)

_SCHEMA: Final = Schema(
    "usage",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS usage_days (
    day           TEXT NOT NULL,
    person_key    TEXT NOT NULL,
    space_id      TEXT NOT NULL,
    model         TEXT NOT NULL,
    calls         BIGINT NOT NULL,
    input_tokens  BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cached_tokens BIGINT NOT NULL,
    person_name   TEXT,
    PRIMARY KEY (day, person_key, space_id, model)
);
CREATE INDEX IF NOT EXISTS usage_days_person ON usage_days (person_key, day);
CREATE INDEX IF NOT EXISTS usage_days_space ON usage_days (space_id, day);
""",
        ),
    ),
)

_ADD: Final = (
    "INSERT INTO usage_days (day, person_key, space_id, model, calls, input_tokens, "
    "output_tokens, cached_tokens, person_name) VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?) "
    "ON CONFLICT (day, person_key, space_id, model) DO UPDATE SET "
    "calls = usage_days.calls + 1, "
    "input_tokens = usage_days.input_tokens + excluded.input_tokens, "
    "output_tokens = usage_days.output_tokens + excluded.output_tokens, "
    "cached_tokens = usage_days.cached_tokens + excluded.cached_tokens, "
    "person_name = COALESCE(excluded.person_name, usage_days.person_name)"
)


class Spent(msgspec.Struct, frozen=True, kw_only=True):
    """What one model call used, as its model reported it."""

    person_key: str
    space_id: str | None
    model: str
    input: int
    output: int
    cached: int | None = None
    #: The person's name as their account gives it, kept for reports.
    person_name: str | None = None

    @property
    def tokens(self) -> int:
        """What counts against an allowance: the prompt's tokens and the answer's."""
        return self.input + self.output


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """One line of a report: the group's values (``None`` where not grouped) and its sums."""

    day: str | None
    person_key: str | None
    space_id: str | None
    model: str | None
    calls: int
    input: int
    output: int
    cached: int
    #: The person's name as their account last gave it, when grouped by person.
    person_name: str | None = None


def period_start(period: Period, today: date) -> date:
    """The first day a report over ``period`` covers, ending ``today``."""
    if period == "today":
        return today
    if period == "7d":
        return today - timedelta(days=6)
    if period == "30d":
        return today - timedelta(days=29)
    return today.replace(day=1)


class UsageLedger:
    """The tokens of every model call, kept per person, space, model and day."""

    def __init__(self, db: Database, *, clock: Clock = system_clock) -> None:
        self._db = db
        self._clock = clock
        self._ready = False
        #: Called with each call recorded, once its row is written (the budgets' caches).
        self.listeners: list[Callable[[Spent, date], None]] = []
        #: How many rows were written since the start: one per model call.
        self.writes = 0

    async def ensure_schema(self) -> None:
        if not self._ready:
            await self._db.migrate(_SCHEMA)
            self._ready = True

    def today(self) -> date:
        return self._clock().date()

    async def record(self, spent: Spent) -> None:
        """Add one model call to its day's row: a single upsert."""
        await self.ensure_schema()
        day = self.today()
        await self._db.execute(
            _ADD,
            (
                day.isoformat(),
                spent.person_key,
                spent.space_id or "",
                spent.model,
                spent.input,
                spent.output,
                spent.cached or 0,
                spent.person_name,
            ),
        )
        self.writes += 1
        for listener in self.listeners:
            listener(spent, day)

    async def total(
        self, *, person_key: str | None = None, space_id: str | None = None, since: date
    ) -> int:
        """Input and output tokens of the person's (or the space's) calls since ``since``."""
        await self.ensure_schema()
        column, value = (
            ("person_key", person_key) if person_key is not None else ("space_id", space_id)
        )
        row = await self._db.fetch_one(
            "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM usage_days "  # noqa: S608 - fixed text
            f"WHERE {column} = ? AND day >= ?",
            (value, since.isoformat()),
        )
        return 0 if row is None else int(row[0])

    async def rows(
        self,
        *,
        since: date,
        by: Sequence[Group],
        person_key: str | None = None,
        space_id: str | None = None,
        model: str | None = None,
    ) -> list[LedgerRow]:
        """The sums of the period from ``since`` to today, grouped ``by`` the columns named,
        narrowed to a person, a space (``""``: people's own conversations) or a model."""
        await self.ensure_schema()
        columns = {"day": "day", "person": "person_key", "space": "space_id", "model": "model"}
        grouped = [columns[name] for name in GROUPS if name in by]
        where = ["day >= ?"]
        parameters: list[object] = [since.isoformat()]
        for column, value in (
            ("person_key", person_key),
            ("space_id", space_id),
            ("model", model),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                parameters.append(value)
        select = ", ".join(grouped)
        sql = (
            f"SELECT {select + ', ' if select else ''}SUM(calls), SUM(input_tokens), "  # noqa: S608 - fixed text
            "SUM(output_tokens), SUM(cached_tokens), MAX(person_name) FROM usage_days "
            f"WHERE {' AND '.join(where)}"
        )
        if grouped:
            sql += f" GROUP BY {select} ORDER BY {select}"
        found = []
        for row in await self._db.fetch_all(sql, parameters):
            values = {column: row[i] for i, column in enumerate(grouped)}
            n = len(grouped)
            sums = [row[n], row[n + 1], row[n + 2], row[n + 3]]
            if sums[0] is None:
                continue  # no rows at all: SUM over nothing
            found.append(
                LedgerRow(
                    day=values.get("day"),
                    person_key=values.get("person_key"),
                    space_id=values.get("space_id"),
                    model=values.get("model"),
                    calls=int(sums[0]),
                    input=int(sums[1]),
                    output=int(sums[2]),
                    cached=int(sums[3]),
                    person_name=row[n + 4] if "person_key" in grouped else None,
                )
            )
        return found
