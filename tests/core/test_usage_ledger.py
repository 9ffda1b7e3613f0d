"""The usage ledger and the token allowances on each state store: calls add into one row per
day, person, space and model from any connection; the allowances in force are the space's
runtime settings over the file's; the cached check sees this instance's calls at once and a
settings change made here at once, another connection's after its time to live."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from core.clock import ManualClock
from core.config.settings import Settings, load_settings
from core.people.i18n import Catalogs
from core.spaces.settings import SpaceSettings
from core.state import Database
from core.usage import Budgets, Spent, UsageLedger
from tests.support.state import StateBackend, backend_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SPACE = "slack:C1"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 12, 31, 23, 0, tzinfo=UTC))


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(
        {
            "MERCURY_CONFIG_FILE": "",
            "MERCURY_DATA_DIR": str(tmp_path),
            "MERCURY_USAGE_PERSON_DAY": "100",
            "MERCURY_USAGE_PERSON_MONTH": "1000",
        },
        tmp_path,
    )


def spent(person: str = "people:ann", space: str | None = SPACE, tokens: int = 30) -> Spent:
    return Spent(person_key=person, space_id=space, model="m", input=tokens - 5, output=5)


async def test_calls_from_two_connections_add_into_the_same_row(
    state: StateBackend, clock: ManualClock
) -> None:
    first, second = (
        UsageLedger(await state.open(), clock=clock),
        UsageLedger(await state.open(), clock=clock),
    )
    await asyncio.gather(
        *(
            (first if n % 2 else second).record(
                Spent(
                    person_key="people:ann", space_id=None, model="m", input=10, output=2, cached=4
                )
            )
            for n in range(40)
        )
    )
    [row] = await first.rows(since=clock().date(), by=("person", "model"))
    assert (row.calls, row.input, row.output, row.cached) == (40, 400, 80, 160)
    assert first.writes + second.writes == 40
    assert await second.total(person_key="people:ann", since=clock().date()) == 480


async def test_a_used_up_allowance_refuses_and_says_when_it_renews(
    state: StateBackend, clock: ManualClock, settings: Settings
) -> None:
    db: Database = await state.open()
    ledger = UsageLedger(db, clock=clock)
    budgets = Budgets(ledger, settings, SpaceSettings(db, settings, clock=clock))
    assert await budgets.check("people:ann", None) is None
    for _ in range(3):
        await ledger.record(spent(space=None))  # 90 of the day's 100
    assert await budgets.check("people:ann", None) is None
    await ledger.record(spent(space=None, tokens=10))  # counted into the cached total at once
    refusal = await budgets.check("people:ann", None)
    assert refusal is not None and (refusal.scope, refusal.window) == ("person", "day")
    assert refusal.renews_at == datetime(2027, 1, 1, tzinfo=UTC)  # the year rolls over
    italian = Catalogs.load(languages=("it",)).translator("it")
    assert refusal.text(italian) == (
        "Hai esaurito la tua quota di token per oggi; si rinnova il 2027-01-01 00:00 UTC."
    )
    assert await budgets.check("people:bob", None) is None  # another person's own


async def test_a_space_allowance_set_here_is_in_force_at_once_and_elsewhere_after_the_ttl(
    state: StateBackend, clock: ManualClock, settings: Settings
) -> None:
    here_db, there_db = await state.open(), await state.open()
    here_settings = SpaceSettings(here_db, settings, clock=clock)
    here = Budgets(UsageLedger(here_db, clock=clock), settings, here_settings)
    there = Budgets(
        UsageLedger(there_db, clock=clock), settings, SpaceSettings(there_db, settings, clock=clock)
    )
    await here._ledger.record(spent(person="people:bob", tokens=50))
    assert await here.check("people:ann", SPACE) is None
    assert await there.check("people:ann", SPACE) is None  # both have cached "no allowance"
    await here_settings.set(SPACE, "budget.space_day", 50, by="people:admin")
    refusal = await here.check("people:ann", SPACE)  # Bob's tokens count for Ann: shared
    assert refusal is not None and (refusal.scope, refusal.window) == ("space", "day")
    assert await there.check("people:ann", SPACE) is None  # its cache still holds
    there.ttl_s = 0.0  # its time to live passed
    assert await there.check("people:ann", SPACE) is not None
    # A space's own person allowance replaces the file's in that space only.
    await here_settings.delete(SPACE, "budget.space_day")
    await here_settings.set(SPACE, "budget.person_day", 40, by="people:admin")
    assert await here.check("people:bob", SPACE) is not None
    assert await here.check("people:bob", None) is None  # the file's 100 elsewhere
    clock.advance(timedelta(hours=2))  # a new day (and month): nothing used yet
    assert await here.check("people:bob", SPACE) is None


async def test_a_store_that_cant_answer_lets_the_turn_through(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock, settings: Settings
) -> None:
    backend = backend_for(request, "postgresql", tmp_path)
    try:
        db = await backend.open()
        budgets = Budgets(UsageLedger(db, clock=clock), settings)
        await db.close()  # every call now fails as an unreachable server's do
        assert await budgets.check("people:ann", None) is None
    finally:
        await backend.close()


async def stored_calls(db: Database) -> int:
    row = await db.fetch_one("SELECT COALESCE(SUM(calls), 0) FROM usage_days")
    return 0 if row is None else int(row[0])


async def test_calls_wait_in_memory_and_are_written_together_within_the_flush_window(
    state: StateBackend, clock: ManualClock
) -> None:
    db = await state.open()
    ledger = UsageLedger(db, clock=clock, flush_s=0.2)
    await ledger.ensure_schema()
    for n in range(30):  # three people, two models: six rows
        ledger.add(
            Spent(
                person_key=f"people:p{n % 3}", space_id=None, model=f"m{n % 2}", input=7, output=3
            )
        )
    assert await stored_calls(db) == 0  # nothing written on the callers' path
    assert ledger.pending == 30
    # The budget check's read counts what waits here, without writing it.
    assert await ledger.total(person_key="people:p0", since=clock().date()) == 10 * 10
    assert await stored_calls(db) == 0
    with anyio.fail_after(10):
        while ledger.pending:
            await asyncio.sleep(0.02)  # the flush window passes: written, unasked
    assert await stored_calls(db) == 30
    # One statement for the batch: six rows upserted, carrying the thirty calls.
    assert ledger.counts() == {"calls": 30, "rows": 6, "statements": 1}
    assert await ledger.total(person_key="people:p0", since=clock().date()) == 100  # not twice


async def test_a_report_reads_the_calls_still_waiting_and_close_writes_the_rest(
    state: StateBackend, clock: ManualClock
) -> None:
    db = await state.open()
    ledger = UsageLedger(db, clock=clock, flush_s=60.0)  # no flush of its own in the test
    ledger.add(Spent(person_key="people:ann", space_id=SPACE, model="m", input=5, output=1))
    [row] = await ledger.rows(since=clock().date(), by=("person",), person_key="people:ann")
    assert (row.calls, row.input, row.output) == (1, 5, 1)  # read after write, at once
    ledger.add(Spent(person_key="people:ann", space_id=SPACE, model="m", input=5, output=1))
    await ledger.close()  # a shutdown: what waits is written
    other = UsageLedger(await state.open(), clock=clock)
    [row] = await other.rows(since=clock().date(), by=("person",))
    assert row.calls == 2 and ledger.pending == 0
