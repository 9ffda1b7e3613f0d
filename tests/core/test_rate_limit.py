from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from core.clock import ManualClock
from core.rate_limit import InvalidRateLimitError, RateDecision, RateLimiter, bucket_key
from core.state import Database
from tests.support.state import StateBackend

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


@pytest.fixture
def limiter(db: Database, clock: ManualClock) -> RateLimiter:
    return RateLimiter(db, 3, MINUTE, clock=clock)


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
    with pytest.raises(InvalidRateLimitError, match="at least 1"):
        RateLimiter(db, 0, MINUTE, clock=clock)
    with pytest.raises(InvalidRateLimitError, match="positive"):
        RateLimiter(db, 3, timedelta(0), clock=clock)
    with pytest.raises(InvalidRateLimitError, match="override"):
        await RateLimiter(db, 3, MINUTE, clock=clock).check(ALICE, override=0)


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
async def test_a_bucket_never_holds_more_than_its_limit(
    limiter: RateLimiter, db: Database, clock: ManualClock
) -> None:
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
    first = RateLimiter(await state.open(), 3, MINUTE, clock=clock)
    second = RateLimiter(await state.open(), 3, MINUTE, clock=clock)
    assert (await first.check(ALICE)).remaining == 2
    assert (await second.check(ALICE)).remaining == 1
    assert (await first.check(ALICE)).remaining == 0
    assert not (await second.check(ALICE)).allowed
    assert not (await first.check(ALICE)).allowed


@pytest.mark.anyio
async def test_racing_checks_on_two_instances_let_exactly_the_limit_through(
    state: StateBackend, clock: ManualClock
) -> None:
    instances = [RateLimiter(await state.open(), 3, MINUTE, clock=clock) for _ in range(2)]
    decisions = await asyncio.gather(*(instances[i % 2].check(ALICE) for i in range(12)))
    assert sum(decision.allowed for decision in decisions) == 3
    assert sorted(d.remaining for d in decisions if d.allowed) == [0, 1, 2]
