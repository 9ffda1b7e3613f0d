from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from core.clock import ManualClock
from core.rate_limits import (
    InvalidRateLimitError,
    MemoryRateLimiter,
    RateDecision,
    RateLimiter,
    SharedRateLimiter,
    bucket_key,
    rate_limiter,
)
from core.state import Database
from tests.support.state import StateBackend, backend_for

MINUTE = timedelta(minutes=1)
ALICE = bucket_key("people:alice", "people:alice")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def db(state: StateBackend) -> Database:
    return await state.open()


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def limiter(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> AsyncIterator[RateLimiter]:
    """Each adapter: in this process, and in the state store on each backend."""
    if request.param == "memory":
        yield MemoryRateLimiter(3, MINUTE, clock=clock)
        return
    backend = backend_for(request, request.param, tmp_path)
    yield SharedRateLimiter(await backend.open(), 3, MINUTE, clock=clock)
    await backend.close()


def test_a_bucket_key_is_the_space_then_the_person() -> None:
    assert bucket_key("slack:C123", "slack:U456") == "slack:C123:slack:U456"


@pytest.mark.anyio
async def test_requests_under_the_limit_are_allowed_and_count_down(limiter: RateLimiter) -> None:
    decisions = [await limiter.check(ALICE) for _ in range(3)]
    assert decisions == [
        RateDecision(allowed=True, retry_after_s=0, remaining=2),
        RateDecision(allowed=True, retry_after_s=0, remaining=1),
        RateDecision(allowed=True, retry_after_s=0, remaining=0),
    ]


@pytest.mark.anyio
async def test_the_request_over_the_limit_is_refused(limiter: RateLimiter) -> None:
    for _ in range(3):
        await limiter.check(ALICE)
    decision = await limiter.check(ALICE)
    assert not decision.allowed
    assert decision.remaining == 0
    assert decision.retry_after_s >= 1


@pytest.mark.anyio
async def test_the_window_slides_one_request_at_a_time(
    limiter: RateLimiter, clock: ManualClock
) -> None:
    await limiter.check(ALICE)
    clock.advance(timedelta(seconds=20))
    await limiter.check(ALICE)
    clock.advance(timedelta(seconds=20))
    await limiter.check(ALICE)
    clock.advance(timedelta(seconds=19))
    assert not (await limiter.check(ALICE)).allowed
    # The first request leaves the window at 60 s; only one slot opens.
    clock.advance(timedelta(seconds=1))
    assert (await limiter.check(ALICE)).allowed
    assert not (await limiter.check(ALICE)).allowed
    clock.advance(timedelta(seconds=20))
    assert (await limiter.check(ALICE)).allowed


@pytest.mark.anyio
async def test_retry_after_is_the_seconds_until_the_oldest_request_leaves_rounded_up(
    limiter: RateLimiter, clock: ManualClock
) -> None:
    for _ in range(3):
        await limiter.check(ALICE)
    clock.advance(timedelta(seconds=15, milliseconds=300))
    assert (await limiter.check(ALICE)).retry_after_s == 45
    clock.advance(timedelta(seconds=44, milliseconds=600))
    assert (await limiter.check(ALICE)).retry_after_s == 1
    clock.advance(timedelta(milliseconds=100))
    assert (await limiter.check(ALICE)).allowed


@pytest.mark.anyio
async def test_retry_after_points_at_the_request_that_frees_room(
    limiter: RateLimiter, clock: ManualClock
) -> None:
    await limiter.check(ALICE)
    clock.advance(timedelta(seconds=10))
    await limiter.check(ALICE)
    await limiter.check(ALICE)
    assert (await limiter.check(ALICE)).retry_after_s == 50


@pytest.mark.anyio
async def test_refused_requests_are_not_counted(limiter: RateLimiter, clock: ManualClock) -> None:
    for _ in range(3):
        await limiter.check(ALICE)
    for _ in range(20):
        clock.advance(timedelta(seconds=1))
        assert not (await limiter.check(ALICE)).allowed
    clock.advance(timedelta(seconds=40))
    # Had the refusals been recorded, the bucket would still be full.
    assert [(await limiter.check(ALICE)).allowed for _ in range(4)] == [True, True, True, False]


@pytest.mark.anyio
async def test_each_person_and_each_space_has_its_own_bucket(limiter: RateLimiter) -> None:
    for _ in range(3):
        await limiter.check(ALICE)
    assert not (await limiter.check(ALICE)).allowed
    assert (await limiter.check(bucket_key("people:bob", "people:bob"))).allowed
    assert (await limiter.check(bucket_key("slack:C1", "people:alice"))).allowed
    assert (await limiter.check(bucket_key("slack:C2", "people:alice"))).allowed


@pytest.mark.anyio
async def test_an_override_replaces_the_limit_for_that_check(limiter: RateLimiter) -> None:
    assert (await limiter.check(ALICE, override=5)).remaining == 4
    for _ in range(4):
        assert (await limiter.check(ALICE, override=5)).allowed
    assert not (await limiter.check(ALICE, override=5)).allowed
    assert not (await limiter.check(ALICE)).allowed


@pytest.mark.anyio
async def test_a_lowered_override_waits_for_enough_requests_to_leave(
    limiter: RateLimiter, clock: ManualClock
) -> None:
    for second in range(5):
        await limiter.check(ALICE, override=5)
        if second < 4:
            clock.advance(timedelta(seconds=10))
    # Requests at 0, 10, 20, 30 and 40 s; with a limit of 2, the one at 30 s must leave.
    decision = await limiter.check(ALICE, override=2)
    assert not decision.allowed
    assert decision.retry_after_s == 50


@pytest.mark.anyio
async def test_limits_and_windows_that_cannot_work_are_refused(
    db: Database, clock: ManualClock
) -> None:
    for make in (
        lambda limit, window: SharedRateLimiter(db, limit, window, clock=clock),
        lambda limit, window: MemoryRateLimiter(limit, window, clock=clock),
    ):
        with pytest.raises(InvalidRateLimitError, match="at least 1"):
            make(0, MINUTE)
        with pytest.raises(InvalidRateLimitError, match="positive"):
            make(3, timedelta(0))
        with pytest.raises(InvalidRateLimitError, match="override"):
            await make(3, MINUTE).check(ALICE, override=0)


@pytest.mark.anyio
async def test_cleanup_forgets_only_buckets_whose_window_has_passed(
    limiter: RateLimiter, clock: ManualClock
) -> None:
    await limiter.check("space:old")
    await limiter.check("space:older")
    clock.advance(timedelta(seconds=30))
    await limiter.check("space:fresh")
    clock.advance(timedelta(seconds=30))
    assert await limiter.bucket_count() == 3
    assert await limiter.cleanup() == 2
    assert await limiter.bucket_count() == 1
    assert (await limiter.check("space:fresh")).remaining == 1
    assert await limiter.cleanup() == 0


@pytest.mark.anyio
async def test_a_bucket_in_the_store_never_holds_more_than_its_limit(
    db: Database, clock: ManualClock
) -> None:
    limiter = SharedRateLimiter(db, 3, MINUTE, clock=clock)
    for _ in range(200):
        await limiter.check(ALICE)
        clock.advance(timedelta(milliseconds=1))
    row = await db.fetch_one("SELECT COUNT(*) FROM rate_stamps WHERE bucket = ?", (ALICE,))
    assert row is not None
    assert row[0] == 3


@pytest.mark.anyio
async def test_clear_forgets_every_bucket(limiter: RateLimiter) -> None:
    for _ in range(3):
        await limiter.check(ALICE)
    await limiter.clear()
    assert await limiter.bucket_count() == 0
    assert (await limiter.check(ALICE)).allowed


@pytest.mark.anyio
async def test_a_persons_limit_counts_across_instances(
    state: StateBackend, clock: ManualClock
) -> None:
    first = SharedRateLimiter(await state.open(), 3, MINUTE, clock=clock)
    second = SharedRateLimiter(await state.open(), 3, MINUTE, clock=clock)
    assert (await first.check(ALICE)).remaining == 2
    assert (await second.check(ALICE)).remaining == 1
    assert (await first.check(ALICE)).remaining == 0
    assert not (await second.check(ALICE)).allowed
    assert not (await first.check(ALICE)).allowed


@pytest.mark.anyio
async def test_racing_checks_on_two_instances_let_exactly_the_limit_through(
    state: StateBackend, clock: ManualClock
) -> None:
    instances = [SharedRateLimiter(await state.open(), 3, MINUTE, clock=clock) for _ in range(2)]
    decisions = await asyncio.gather(*(instances[i % 2].check(ALICE) for i in range(12)))
    assert sum(decision.allowed for decision in decisions) == 3
    assert sorted(d.remaining for d in decisions if d.allowed) == [0, 1, 2]


@pytest.mark.anyio
async def test_racing_checks_let_exactly_the_limit_through(limiter: RateLimiter) -> None:
    decisions = await asyncio.gather(*(limiter.check(ALICE) for _ in range(12)))
    assert sum(decision.allowed for decision in decisions) == 3
    assert sorted(d.remaining for d in decisions if d.allowed) == [0, 1, 2]


@pytest.mark.anyio
async def test_an_instance_of_its_own_keeps_the_limit_in_memory_a_shared_store_keeps_it_there(
    state: StateBackend, clock: ManualClock
) -> None:
    db = await state.open()
    limiter = rate_limiter(db, 3, MINUTE, clock=clock)
    await limiter.ensure_schema()
    await limiter.check(ALICE)
    tables = await _rate_tables(db)
    if state.name == "postgresql":
        assert isinstance(limiter, SharedRateLimiter)
        assert tables == 1
    else:
        # Nothing of the limit touches this instance's SQLite file: a turn's start pays no
        # database round trip for it.
        assert isinstance(limiter, MemoryRateLimiter)
        assert tables == 0


async def _rate_tables(db: Database) -> int:
    if db.dialect == "postgresql":
        sql = "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'rate_stamps'"
    else:
        sql = "SELECT COUNT(*) FROM sqlite_master WHERE name = 'rate_stamps'"
    row = await db.fetch_one(sql)
    assert row is not None
    return int(row[0])
