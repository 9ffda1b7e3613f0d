from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.clock import ManualClock
from core.people.person_settings import InvalidSetting, PersonSettings, SavedSettings
from core.state import Database
from tests.support.state import StateBackend


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def db(state: StateBackend) -> Database:
    return await state.open()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 12, 2, 17, 0, tzinfo=UTC))


@pytest.fixture
def settings(db: Database, clock: ManualClock) -> PersonSettings:
    return PersonSettings(db, clock=clock)


ALICE = "people:alice"
BOB = "people:bob"


@pytest.mark.anyio
async def test_someone_new_has_no_settings(settings: PersonSettings) -> None:
    assert await settings.get(ALICE) == SavedSettings(name=None, language=None, time_zone=None)


@pytest.mark.anyio
async def test_each_setting_is_saved_without_touching_the_others(settings: PersonSettings) -> None:
    assert await settings.set_name(ALICE, "Alice") == "Alice"
    assert await settings.get(ALICE) == SavedSettings(name="Alice")
    assert await settings.set_language(ALICE, "it") == "it"
    assert await settings.set_time_zone(ALICE, "Europe/Rome") == "Europe/Rome"
    assert await settings.get(ALICE) == SavedSettings(
        name="Alice", language="it", time_zone="Europe/Rome"
    )
    await settings.set_name(ALICE, "Ali")
    assert await settings.get(ALICE) == SavedSettings(
        name="Ali", language="it", time_zone="Europe/Rome"
    )


@pytest.mark.anyio
async def test_one_persons_settings_are_not_anothers(settings: PersonSettings) -> None:
    await settings.set_name(ALICE, "Alice")
    await settings.set_time_zone(BOB, "America/New_York")
    assert await settings.get(ALICE) == SavedSettings(name="Alice")
    assert await settings.get(BOB) == SavedSettings(time_zone="America/New_York")
    assert await settings.get("static:alice") == SavedSettings()


@pytest.mark.anyio
async def test_a_time_zone_is_saved_under_its_canonical_name(settings: PersonSettings) -> None:
    assert await settings.set_time_zone(ALICE, "europe/rome") == "Europe/Rome"
    assert (await settings.get(ALICE)).time_zone == "Europe/Rome"


@pytest.mark.anyio
@pytest.mark.parametrize("zone", ["+02:00", "UTC+2", "Mars/Base", "", "x" * 500])
async def test_what_is_not_a_zone_name_is_refused_and_nothing_is_saved(
    settings: PersonSettings, zone: str
) -> None:
    await settings.set_time_zone(ALICE, "Asia/Tokyo")
    with pytest.raises(InvalidSetting) as caught:
        await settings.set_time_zone(ALICE, zone)
    assert caught.value.setting == "time_zone"
    assert caught.value.value == zone
    assert "Europe/Rome" in str(caught.value)
    assert (await settings.get(ALICE)).time_zone == "Asia/Tokyo"


@pytest.mark.anyio
async def test_a_fixed_offset_refusal_says_an_offset_is_not_a_zone(
    settings: PersonSettings,
) -> None:
    with pytest.raises(InvalidSetting, match=r"a fixed offset such as \+02:00 isn't one"):
        await settings.set_time_zone(ALICE, "+02:00")


@pytest.mark.anyio
@pytest.mark.parametrize("language", ["en", "it", "de", "fr", "es"])
async def test_every_language_the_assistant_speaks_can_be_saved(
    settings: PersonSettings, language: str
) -> None:
    assert await settings.set_language(ALICE, language) == language
    assert (await settings.get(ALICE)).language == language


@pytest.mark.anyio
async def test_a_language_code_is_saved_in_lowercase(settings: PersonSettings) -> None:
    assert await settings.set_language(ALICE, " IT ") == "it"


@pytest.mark.anyio
@pytest.mark.parametrize("language", ["pt", "it-IT", "italian", ""])
async def test_another_language_is_refused(settings: PersonSettings, language: str) -> None:
    with pytest.raises(InvalidSetting, match="en, it, de, fr, es") as caught:
        await settings.set_language(ALICE, language)
    assert caught.value.setting == "language"
    assert await settings.get(ALICE) == SavedSettings()


@pytest.mark.anyio
async def test_a_name_is_saved_trimmed_with_single_spaces(settings: PersonSettings) -> None:
    assert await settings.set_name(ALICE, "  Alice \n Liddell ") == "Alice Liddell"
    assert (await settings.get(ALICE)).name == "Alice Liddell"


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["", "   ", "x" * 101])
async def test_an_empty_or_overlong_name_is_refused(settings: PersonSettings, name: str) -> None:
    with pytest.raises(InvalidSetting) as caught:
        await settings.set_name(ALICE, name)
    assert caught.value.setting == "name"


@pytest.mark.anyio
async def test_settings_outlive_the_store_and_the_connection(
    state: StateBackend, clock: ManualClock
) -> None:
    first = await state.open()
    await PersonSettings(first, clock=clock).set_language(ALICE, "de")
    await first.close()
    second = await state.open()
    assert (await PersonSettings(second, clock=clock).get(ALICE)).language == "de"


@pytest.mark.anyio
async def test_every_change_records_when_it_was_made(
    settings: PersonSettings, db: Database, clock: ManualClock
) -> None:
    await settings.set_name(ALICE, "Alice")
    clock.advance(timedelta(hours=1))
    await settings.set_language(ALICE, "fr")
    row = await db.fetch_one(
        "SELECT updated_at FROM person_settings WHERE person_key = ?", (ALICE,)
    )
    assert row is not None
    assert row["updated_at"] == "2026-12-02T18:00:00+00:00"


class _CountingReads:
    """The store, counting the reads that reach it."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    async def fetch_key(self, sql: str, parameters: Any = ()) -> Any:
        self.reads += 1
        return await self._db.fetch_key(sql, parameters)


@pytest.mark.anyio
async def test_requests_of_one_person_arriving_together_share_one_read(
    db: Database, clock: ManualClock
) -> None:
    # A restart under load sends many requests of each person at once; on SQLite each read
    # waits behind the one connection and the busy event loop, so they share one.
    await PersonSettings(db, clock=clock).set_name(ALICE, "Alice")
    counting = _CountingReads(db)
    settings = PersonSettings(counting, clock=clock)  # type: ignore[arg-type]
    got = await asyncio.gather(*(settings.get(ALICE) for _ in range(20)))
    assert {saved.name for saved in got} == {"Alice"}
    assert counting.reads == (20 if db.shared else 1)  # PostgreSQL reads every time
    # A request that arrives after a write reads what was written, not the shared read.
    first = asyncio.ensure_future(settings.get(BOB))
    await settings.set_name(BOB, "Bob")
    assert (await settings.get(BOB)).name == "Bob"
    assert (await first).name in (None, "Bob")
