from __future__ import annotations

from datetime import timedelta

import pytest

from core.clock import ManualClock
from core.rate_limit import InvalidRateLimitError, RateDecision, RateLimiter, bucket_key

MINUTE = timedelta(minutes=1)
ALICE = bucket_key("people:alice", "people:alice")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def limiter(clock: ManualClock) -> RateLimiter:
    return RateLimiter(3, MINUTE, clock=clock)


def test_a_bucket_key_is_the_space_then_the_person() -> None:
    assert bucket_key("slack:C123", "slack:U456") == "slack:C123:slack:U456"


def test_requests_under_the_limit_are_allowed_and_count_down(limiter: RateLimiter) -> None:
    decisions = [limiter.check(ALICE) for _ in range(3)]
    assert decisions == [
        RateDecision(allowed=True, retry_after_s=0, remaining=2),
        RateDecision(allowed=True, retry_after_s=0, remaining=1),
        RateDecision(allowed=True, retry_after_s=0, remaining=0),
    ]


def test_the_request_over_the_limit_is_refused(limiter: RateLimiter) -> None:
    for _ in range(3):
        limiter.check(ALICE)
    decision = limiter.check(ALICE)
    assert not decision.allowed
    assert decision.remaining == 0
    assert decision.retry_after_s >= 1


def test_the_window_slides_one_request_at_a_time(limiter: RateLimiter, clock: ManualClock) -> None:
    limiter.check(ALICE)
    clock.advance(timedelta(seconds=20))
    limiter.check(ALICE)
    clock.advance(timedelta(seconds=20))
    limiter.check(ALICE)
    clock.advance(timedelta(seconds=19))
    assert not limiter.check(ALICE).allowed
    # The first request leaves the window at 60 s; only one slot opens.
    clock.advance(timedelta(seconds=1))
    assert limiter.check(ALICE).allowed
    assert not limiter.check(ALICE).allowed
    clock.advance(timedelta(seconds=20))
    assert limiter.check(ALICE).allowed


def test_retry_after_is_the_seconds_until_the_oldest_request_leaves_rounded_up(
    limiter: RateLimiter, clock: ManualClock
) -> None:
    for _ in range(3):
        limiter.check(ALICE)
    clock.advance(timedelta(seconds=15, milliseconds=300))
    assert limiter.check(ALICE).retry_after_s == 45
    clock.advance(timedelta(seconds=44, milliseconds=600))
    assert limiter.check(ALICE).retry_after_s == 1
    clock.advance(timedelta(milliseconds=100))
    assert limiter.check(ALICE).allowed


def test_retry_after_points_at_the_request_that_frees_room(
    limiter: RateLimiter, clock: ManualClock
) -> None:
    limiter.check(ALICE)
    clock.advance(timedelta(seconds=10))
    limiter.check(ALICE)
    limiter.check(ALICE)
    assert limiter.check(ALICE).retry_after_s == 50


def test_refused_requests_are_not_counted(limiter: RateLimiter, clock: ManualClock) -> None:
    for _ in range(3):
        limiter.check(ALICE)
    for _ in range(20):
        clock.advance(timedelta(seconds=1))
        assert not limiter.check(ALICE).allowed
    clock.advance(timedelta(seconds=40))
    # Had the refusals been recorded, the bucket would still be full.
    assert [limiter.check(ALICE).allowed for _ in range(4)] == [True, True, True, False]


def test_each_person_and_each_space_has_its_own_bucket(limiter: RateLimiter) -> None:
    for _ in range(3):
        limiter.check(ALICE)
    assert not limiter.check(ALICE).allowed
    assert limiter.check(bucket_key("people:bob", "people:bob")).allowed
    assert limiter.check(bucket_key("slack:C1", "people:alice")).allowed
    assert limiter.check(bucket_key("slack:C2", "people:alice")).allowed


def test_an_override_replaces_the_limit_for_that_check(limiter: RateLimiter) -> None:
    assert limiter.check(ALICE, override=5).remaining == 4
    for _ in range(4):
        assert limiter.check(ALICE, override=5).allowed
    assert not limiter.check(ALICE, override=5).allowed
    assert not limiter.check(ALICE).allowed


def test_a_lowered_override_waits_for_enough_requests_to_leave(
    limiter: RateLimiter, clock: ManualClock
) -> None:
    for second in range(5):
        limiter.check(ALICE, override=5)
        if second < 4:
            clock.advance(timedelta(seconds=10))
    # Requests at 0, 10, 20, 30 and 40 s; with a limit of 2, the one at 30 s must leave.
    decision = limiter.check(ALICE, override=2)
    assert not decision.allowed
    assert decision.retry_after_s == 50


def test_limits_and_windows_that_cannot_work_are_refused(clock: ManualClock) -> None:
    with pytest.raises(InvalidRateLimitError, match="at least 1"):
        RateLimiter(0, MINUTE, clock=clock)
    with pytest.raises(InvalidRateLimitError, match="positive"):
        RateLimiter(3, timedelta(0), clock=clock)
    with pytest.raises(InvalidRateLimitError, match="override"):
        RateLimiter(3, MINUTE, clock=clock).check(ALICE, override=0)


def test_cleanup_forgets_only_buckets_whose_window_has_passed(
    limiter: RateLimiter, clock: ManualClock
) -> None:
    limiter.check("space:old")
    limiter.check("space:older")
    clock.advance(timedelta(seconds=30))
    limiter.check("space:fresh")
    clock.advance(timedelta(seconds=30))
    assert limiter.bucket_count == 3
    assert limiter.cleanup() == 2
    assert limiter.bucket_count == 1
    assert limiter.check("space:fresh").remaining == 1
    assert limiter.cleanup() == 0


def test_a_bucket_never_holds_more_than_its_limit(limiter: RateLimiter, clock: ManualClock) -> None:
    for _ in range(10_000):
        limiter.check(ALICE)
        clock.advance(timedelta(milliseconds=1))
    assert len(limiter._buckets[ALICE]) == 3


def test_clear_forgets_every_bucket(limiter: RateLimiter) -> None:
    for _ in range(3):
        limiter.check(ALICE)
    limiter.clear()
    assert limiter.bucket_count == 0
    assert limiter.check(ALICE).allowed
