"""How a staging ended, kept by its id (ConfirmationStore.settled), on SQLite and PostgreSQL:
confirmed, chosen, answered, cancelled and expired, per person, forgotten after the retention."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.clock import ManualClock
from core.engine.confirmations import (
    DEFAULT_TTL,
    SETTLED_RETENTION,
    ChoiceRef,
    ConfirmationStore,
    StagedActionSpec,
)
from core.state import Database
from tests.support.state import StateBackend

pytestmark = [pytest.mark.anyio]

SESSION = "alice:c1"
ALICE = "people:alice"
BOB = "people:bob"
ARCHIVE = StagedActionSpec(tool_name="notes", arguments={"path": "a"}, summary="Archive a")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def db(state: StateBackend) -> Database:
    return await state.open()


@pytest.fixture
def store(db: Database, clock: ManualClock) -> ConfirmationStore:
    return ConfirmationStore(db, clock=clock)


def outcomes(settled: list[object]) -> list[tuple[str, str | None]]:
    return [(item.outcome, item.choice) for item in settled]  # type: ignore[attr-defined]


async def test_each_way_a_staging_ends_is_kept_by_its_id_for_its_owner_only(
    store: ConfirmationStore, clock: ManualClock
) -> None:
    plain = await store.stage(SESSION, ALICE, ARCHIVE)
    choices = (("Replace", "replace"), ("Append", "append"))
    several = await store.stage(SESSION, ALICE, ARCHIVE, choices)
    yes_no = (("Yes", "confirm"), ("No", "cancel"))
    refused = await store.stage(SESSION, ALICE, ARCHIVE, yes_no)
    dropped = await store.stage(SESSION, ALICE, ARCHIVE)
    await store.stage(SESSION, ALICE, ARCHIVE, choices, by_reply=True)
    assert await store.take(SESSION, ALICE, plain.token) is not None
    clock.advance(timedelta(seconds=1))
    assert await store.take(SESSION, ALICE, ChoiceRef(several.id, 1)) is not None
    clock.advance(timedelta(seconds=1))
    assert await store.take(SESSION, ALICE, refused.choices[1].token) is not None
    clock.advance(timedelta(seconds=1))
    assert await store.drop(SESSION, ALICE, dropped.id)
    clock.advance(timedelta(seconds=1))
    assert await store.take_reply(SESSION, ALICE) is not None
    settled = await store.settled(ALICE)
    assert outcomes(settled) == [
        ("confirmed", None),
        ("chosen", "Append"),
        ("cancelled", None),
        ("cancelled", None),
        ("answered", None),
    ]
    assert settled[0].id == plain.id and settled[0].summary == "Archive a"
    assert settled[0].session_key == SESSION
    assert settled[0].settled_at < settled[1].settled_at
    # A second answer changes nothing, and another person sees none of it.
    assert await store.take(SESSION, ALICE, plain.token) is None
    assert len(await store.settled(ALICE)) == 5
    assert await store.settled(BOB) == []


async def test_an_expired_staging_is_listed_expired_before_and_after_the_purge(
    store: ConfirmationStore, clock: ManualClock
) -> None:
    staged = await store.stage(SESSION, ALICE, ARCHIVE, (("One", "1"), ("Two", "2")))
    clock.advance(DEFAULT_TTL + timedelta(seconds=1))
    [before] = await store.settled(ALICE)
    assert (before.id, before.outcome, before.settled_at) == (
        staged.id,
        "expired",
        staged.expires_at,
    )
    assert await store.purge_expired() == 2
    assert await store.settled(ALICE) == [before]
    # Found expired when answered: recorded once, whatever answers it later.
    late = await store.stage(SESSION, ALICE, ARCHIVE)
    clock.advance(DEFAULT_TTL + timedelta(seconds=1))
    assert await store.take(SESSION, ALICE, late.token) is None
    assert await store.drop(SESSION, ALICE, late.id) is False
    assert outcomes(await store.settled(ALICE)) == [("expired", None), ("expired", None)]


async def test_outcomes_older_than_the_retention_are_purged(
    store: ConfirmationStore, clock: ManualClock, db: Database
) -> None:
    old = await store.stage(SESSION, ALICE, ARCHIVE)
    assert await store.drop(SESSION, ALICE, old.id)
    clock.advance(SETTLED_RETENTION - timedelta(hours=1))
    recent = await store.stage(SESSION, ALICE, ARCHIVE)
    assert await store.take(SESSION, ALICE, recent.token) is not None
    clock.advance(timedelta(hours=2))
    # Listed no more once past the retention, and gone from the table at the purge.
    assert [item.id for item in await store.settled(ALICE)] == [recent.id]
    await store.purge_expired()
    row = await db.fetch_one("SELECT COUNT(*) AS n FROM confirmation_outcomes")
    assert row is not None and int(row["n"]) == 1
