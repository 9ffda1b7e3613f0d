"""The usage ledger: the tokens every model call used, per person, space, model and day.

A model reports what a call cost on its last chunk (Ollama's ``prompt_eval_count`` and
``eval_count``; the OpenAI protocol's ``usage``, with ``prompt_tokens_details.cached_tokens``
where the server keeps a prompt cache), or on a whole answer (:class:`~core.model.Completion`,
a memory capture's summary). The engine hands each call here once, when it has ended:
:meth:`UsageLedger.add` costs the turn a dictionary update and nothing else: no store
round trip on a turn's path, nothing per token.

Write-behind: the calls added are summed in memory by row (day, person, space, model) and
written by a flush in the background, at most :attr:`UsageLedger.flush_s` after the first
call of the batch was added (sooner once ``max_rows`` rows wait), and on :meth:`close`. A
flush is one statement per up to :data:`BATCH_ROWS` rows, each row an upsert that adds to
the day's row (``INSERT … VALUES (…), (…) ON CONFLICT … DO UPDATE SET tokens = tokens +
excluded.tokens``), rows in key order (two instances' batches never lock each other in
turn), so instances sharing a PostgreSQL store sum into the same rows without reading
first. A flush that fails puts its rows back and is tried again at the next beat.

Reads stay right: :meth:`UsageLedger.rows` (the reports) flushes this instance's waiting
rows first, so a person reads their own last turn at once; another instance's show once it
has flushed (at most ``flush_s``). :meth:`UsageLedger.total` (the budget check's read) adds
the rows still waiting here to the store's sum without writing. The listeners (the budgets'
cached totals) hear of each call as it is added. A crash (a kill, a lost machine; not a
SIGTERM, which flushes) loses at most the calls of the last ``flush_s``.

A row's key is the UTC day, the person, the space (``""`` for a person's own conversations)
and the model; ``calls`` counts the model calls added to it, and ``person_name`` keeps the
name the person's account last gave (reports show people by name). Reads (:meth:`UsageLedger.rows`,
:meth:`UsageLedger.total`) sum the rows of a period.

Exceptions: the store's own (:class:`~core.state.StateError`); nothing of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Final, Literal, get_args

import msgspec

from core.clock import Clock, system_clock
from core.state import Database, Migration, Schema, StateError

__all__ = [
    "BATCH_ROWS",
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

#: The most rows one statement writes (9 parameters a row, well under SQLite's bound).
BATCH_ROWS: Final = 200
_COLUMNS: Final = (
    "INSERT INTO usage_days (day, person_key, space_id, model, calls, input_tokens, "
    "output_tokens, cached_tokens, person_name) VALUES "
)
_ROW: Final = "(?, ?, ?, ?, ?, ?, ?, ?, ?)"
_ON_CONFLICT: Final = (
    " ON CONFLICT (day, person_key, space_id, model) DO UPDATE SET "
    "calls = usage_days.calls + excluded.calls, "
    "input_tokens = usage_days.input_tokens + excluded.input_tokens, "
    "output_tokens = usage_days.output_tokens + excluded.output_tokens, "
    "cached_tokens = usage_days.cached_tokens + excluded.cached_tokens, "
    "person_name = COALESCE(excluded.person_name, usage_days.person_name)"
)

#: A waiting row's key: day (ISO), person, space (``""``: a person's own), model.
_Key = tuple[str, str, str, str]


@dataclass(slots=True)
class _Waiting:
    """A row's sums not yet written."""

    calls: int
    input: int
    output: int
    cached: int
    person_name: str | None

    def values(self) -> tuple[object, ...]:
        return (self.calls, self.input, self.output, self.cached, self.person_name)

    def merge(self, other: _Waiting) -> None:
        self.calls += other.calls
        self.input += other.input
        self.output += other.output
        self.cached += other.cached
        self.person_name = other.person_name or self.person_name


def _retrieved(task: asyncio.Task[None]) -> None:
    """Mark a flush's failure as seen: its caller may have left; the rows wait again."""
    if not task.cancelled():
        task.exception()


def _upsert(rows: int) -> str:
    """The statement adding ``rows`` rows at once, each to its day's row."""
    return _COLUMNS + ", ".join([_ROW] * rows) + _ON_CONFLICT


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

    def __init__(
        self,
        db: Database,
        *,
        clock: Clock = system_clock,
        flush_s: float = 0.25,
        max_rows: int = 500,
    ) -> None:
        self._db = db
        self._clock = clock
        self._ready = False
        #: The longest a call added waits before its row is written.
        self.flush_s = flush_s
        self._max_rows = max_rows
        #: Called with each call as it is added (the budgets' caches).
        self.listeners: list[Callable[[Spent, date], None]] = []
        #: Rows added and not yet written.
        self._waiting: dict[_Key, _Waiting] = {}
        #: The rows of the flush under way, counted by :meth:`total` until they are written.
        self._writing: dict[_Key, _Waiting] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        #: Model calls added (each exactly once, whatever its batch).
        self.calls = 0
        #: Model calls written to the store: each call's tokens are in exactly one written row.
        self.writes = 0
        #: Rows upserted (a row sums the calls of one day, person, space and model in a batch).
        self.rows_written = 0
        #: Statements run to write them (one per batch of up to :data:`BATCH_ROWS` rows).
        self.statements = 0

    async def ensure_schema(self) -> None:
        if not self._ready:
            await self._db.migrate(_SCHEMA)
            self._ready = True

    def today(self) -> date:
        return self._clock().date()

    @property
    def pending(self) -> int:
        """Model calls added and not yet written."""
        return sum(row.calls for rows in (self._waiting, self._writing) for row in rows.values())

    def counts(self) -> dict[str, int]:
        """What was written since the start: model calls, rows upserted, statements run."""
        return {"calls": self.writes, "rows": self.rows_written, "statements": self.statements}

    def add(self, spent: Spent) -> None:
        """Count one model call: summed into its waiting row, written by the next flush.

        Costs the caller no store round trip; call it from the event loop's thread.
        """
        day = self.today()
        key = (day.isoformat(), spent.person_key, spent.space_id or "", spent.model)
        row = _Waiting(1, spent.input, spent.output, spent.cached or 0, spent.person_name)
        waiting = self._waiting.get(key)
        if waiting is None:
            self._waiting[key] = row
        else:
            waiting.merge(row)
        self.calls += 1
        for listener in self.listeners:
            listener(spent, day)
        if len(self._waiting) >= self._max_rows:
            self._start_flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.flush_s, self._start_flush)

    async def record(self, spent: Spent) -> None:
        """Add one model call and write it at once (a flush of its own): for scripts and
        tests that want it in the store before going on; the engine calls :meth:`add`."""
        self.add(spent)
        await self.flush()

    def _start_flush(self) -> None:
        self._timer = None
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush_in_background())

    async def _flush_in_background(self) -> None:
        retry_s = self.flush_s
        try:
            await self.flush()
        except StateError as error:
            log.warning(
                "%d model calls' usage not written yet (tried again shortly): %s",
                self.pending,
                error,
            )
            retry_s = max(self.flush_s, 1.0)
        except Exception:
            log.exception("writing the usage ledger failed")
            retry_s = max(self.flush_s, 1.0)
        if self._waiting and self._timer is None:
            # Calls added while this flush ran (or that it put back): their own beat.
            self._timer = asyncio.get_running_loop().call_later(retry_s, self._start_flush)

    async def flush(self) -> None:
        """Write every row waiting now; rows a failed write held wait again (and it raises).

        Shielded: a caller cancelled meanwhile (a report's client leaving) never leaves a
        statement half-awaited, whose rows could then be put back and written twice.
        """
        task = asyncio.get_running_loop().create_task(self._flush())
        task.add_done_callback(_retrieved)
        await asyncio.shield(task)

    async def _flush(self) -> None:
        async with self._lock:
            if not self._waiting:
                return
            await self.ensure_schema()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._writing, self._waiting = self._waiting, {}
            keys = sorted(self._writing)  # one order on every instance: no lock cycles
            try:
                for first in range(0, len(keys), BATCH_ROWS):
                    batch = keys[first : first + BATCH_ROWS]
                    parameters: list[object] = []
                    for key in batch:
                        parameters += [*key, *self._writing[key].values()]
                    await self._db.execute(_upsert(len(batch)), parameters)
                    self.statements += 1
                    self.rows_written += len(batch)
                    for key in batch:
                        self.writes += self._writing.pop(key).calls
            finally:
                # What wasn't written waits again, summed with what came meanwhile.
                for key, row in self._writing.items():
                    later = self._waiting.get(key)
                    if later is not None:
                        row.merge(later)
                    self._waiting[key] = row
                self._writing = {}

    async def close(self) -> None:
        """Write what waits (a shutdown); calls the store can't take now are logged, lost."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is not None:
            with contextlib.suppress(Exception):
                await self._flushing
        try:
            await self.flush()
        except StateError as error:
            log.warning("%d model calls' usage lost at shutdown: %s", self.pending, error)

    def _unwritten(self, column: int, value: str, since: date) -> int:
        """Input and output tokens of the calls waiting here for the person (column 1) or
        the space (column 2) since ``since``."""
        first = since.isoformat()
        return sum(
            row.input + row.output
            for rows in (self._waiting, self._writing)
            for key, row in rows.items()
            if key[column] == value and key[0] >= first
        )

    async def total(
        self, *, person_key: str | None = None, space_id: str | None = None, since: date
    ) -> int:
        """Input and output tokens of the person's (or the space's) calls since ``since``:
        the store's sum and the calls still waiting here (no write on the way)."""
        await self.ensure_schema()
        column, value = (
            ("person_key", person_key) if person_key is not None else ("space_id", space_id)
        )
        index, key = (1, person_key) if person_key is not None else (2, space_id or "")
        row = await self._db.fetch_one(
            "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM usage_days "  # noqa: S608 - fixed text
            f"WHERE {column} = ? AND day >= ?",
            (value, since.isoformat()),
        )
        return (0 if row is None else int(row[0])) + self._unwritten(index, key, since)

    async def names(self, person_keys: Sequence[str]) -> dict[str, str]:
        """The names the people's accounts last gave, for those the ledger has seen."""
        if not person_keys:
            return {}
        await self.flush()
        marks = ", ".join("?" * len(person_keys))
        found = await self._db.fetch_all(
            f"SELECT person_key, MAX(person_name) FROM usage_days WHERE person_key IN ({marks}) "  # noqa: S608 - fixed text
            "GROUP BY person_key",
            list(person_keys),
        )
        return {row[0]: row[1] for row in found if row[1]}

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
        narrowed to a person, a space (``""``: people's own conversations) or a model.

        The rows waiting here are written first: a report reads this instance's calls."""
        await self.flush()
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
