from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.clock import ManualClock
from core.spaces import MAX_MUTE, MIN_MUTE, InvalidSpaceId, Mute, MuteError, Mutes, parse_duration
from core.state import Database
from tests.support.state import StateBackend

pytestmark = pytest.mark.anyio

GROUP = "slack:C0123ABC"
OTHER = "discord:123:456"
SPAMMER = "slack:U0SPAM"
NOW = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)


@pytest.fixture
def mutes(db: Database, clock: ManualClock) -> Mutes:
    return Mutes(db, clock=clock)


@pytest.mark.parametrize(
    ("text", "duration"),
    [
        ("10m", timedelta(minutes=10)),
        ("1h", timedelta(hours=1)),
        ("24h", timedelta(hours=24)),
        ("7d", timedelta(days=7)),
        ("1m", MIN_MUTE),
        ("30d", MAX_MUTE),
        ("720h", MAX_MUTE),
        (" 15m ", timedelta(minutes=15)),
    ],
)
def test_a_duration_is_minutes_hours_or_days(text: str, duration: timedelta) -> None:
    assert parse_duration(text) == duration


@pytest.mark.parametrize(
    "text", ["", "10", "m", "0m", "31d", "721h", "1.5h", "-1h", "1w", "10 m", "1H", "1h30m", "٣m"]
)
def test_anything_else_is_refused_with_the_forms_a_duration_takes(text: str) -> None:
    with pytest.raises(MuteError) as refused:
        parse_duration(text)
    assert "10m, 1h, 24h or 7d" in str(refused.value)
    assert "1 minute to 30 days" in str(refused.value)


async def test_a_muted_person_is_muted_under_any_of_their_names(mutes: Mutes) -> None:
    muted = await mutes.mute(GROUP, SPAMMER, timedelta(hours=1), reason="spam", by="slack:U01")
    assert muted == Mute(
        space_id=GROUP,
        target=SPAMMER,
        until=NOW + timedelta(hours=1),
        reason="spam",
        by="slack:U01",
    )
    assert await mutes.is_muted(GROUP, [SPAMMER])
    assert await mutes.is_muted(GROUP, ["people:spammer", SPAMMER])
    assert not await mutes.is_muted(GROUP, ["slack:U0OTHER", "people:other"])
    assert not await mutes.is_muted(GROUP, [])
    assert await mutes.list(GROUP) == [muted]


async def test_a_person_key_can_be_muted_too(mutes: Mutes) -> None:
    await mutes.mute(GROUP, "people:mallory", timedelta(days=1), reason=None, by="slack:U01")
    assert await mutes.is_muted(GROUP, ["slack:U0NEW", "people:mallory"])


async def test_a_mute_expires_on_its_own(mutes: Mutes, clock: ManualClock) -> None:
    await mutes.mute(GROUP, SPAMMER, timedelta(minutes=10), reason="spam", by="slack:U01")
    clock.advance(timedelta(minutes=9, seconds=59))
    assert await mutes.is_muted(GROUP, [SPAMMER])
    clock.advance(timedelta(seconds=1))
    assert not await mutes.is_muted(GROUP, [SPAMMER])
    assert await mutes.list(GROUP) == []
    assert await mutes.unmute(GROUP, SPAMMER) is False


async def test_muting_again_replaces_the_expiry(mutes: Mutes, clock: ManualClock) -> None:
    await mutes.mute(GROUP, SPAMMER, timedelta(days=7), reason="spam", by="slack:U01")
    shorter = await mutes.mute(GROUP, SPAMMER, timedelta(hours=1), reason="calmer", by="slack:U02")
    assert await mutes.list(GROUP) == [shorter]
    clock.advance(timedelta(hours=2))
    assert not await mutes.is_muted(GROUP, [SPAMMER])


async def test_an_unmuted_person_is_heard_again(mutes: Mutes) -> None:
    await mutes.mute(GROUP, SPAMMER, timedelta(hours=1), reason="spam", by="slack:U01")
    assert await mutes.unmute(GROUP, SPAMMER) is True
    assert not await mutes.is_muted(GROUP, [SPAMMER])
    assert await mutes.unmute(GROUP, SPAMMER) is False


async def test_the_list_holds_running_mutes_soonest_to_end_first(
    mutes: Mutes, clock: ManualClock
) -> None:
    await mutes.mute(GROUP, "slack:U0LONG", timedelta(days=2), reason=None, by="slack:U01")
    await mutes.mute(GROUP, "slack:U0SHORT", timedelta(minutes=5), reason=None, by="slack:U01")
    await mutes.mute(GROUP, "slack:U0MID", timedelta(hours=3), reason=None, by="slack:U01")
    assert [m.target for m in await mutes.list(GROUP)] == [
        "slack:U0SHORT",
        "slack:U0MID",
        "slack:U0LONG",
    ]
    clock.advance(timedelta(hours=1))
    assert [m.target for m in await mutes.list(GROUP)] == ["slack:U0MID", "slack:U0LONG"]


async def test_purging_removes_only_mutes_that_ended(mutes: Mutes, clock: ManualClock) -> None:
    await mutes.mute(GROUP, "slack:U0A", timedelta(minutes=5), reason=None, by="slack:U01")
    await mutes.mute(OTHER, "discord:9", timedelta(minutes=5), reason=None, by="discord:1")
    await mutes.mute(GROUP, "slack:U0B", timedelta(hours=5), reason=None, by="slack:U01")
    clock.advance(timedelta(hours=1))
    assert await mutes.purge_expired() == 2
    assert await mutes.purge_expired() == 0
    assert [m.target for m in await mutes.list(GROUP)] == ["slack:U0B"]


async def test_a_mute_holds_in_its_own_space_only(mutes: Mutes) -> None:
    await mutes.mute(GROUP, SPAMMER, timedelta(hours=1), reason="spam", by="slack:U01")
    assert not await mutes.is_muted(OTHER, [SPAMMER])
    assert await mutes.list(OTHER) == []
    assert await mutes.unmute(OTHER, SPAMMER) is False
    assert await mutes.is_muted(GROUP, [SPAMMER])


async def test_deleting_a_space_removes_its_mutes(mutes: Mutes) -> None:
    await mutes.mute(GROUP, SPAMMER, timedelta(hours=1), reason="spam", by="slack:U01")
    await mutes.mute(OTHER, SPAMMER, timedelta(hours=1), reason="spam", by="slack:U01")
    assert await mutes.delete_space(GROUP) == 1
    assert not await mutes.is_muted(GROUP, [SPAMMER])
    assert await mutes.is_muted(OTHER, [SPAMMER])


async def test_a_mute_seen_through_one_instance_holds_on_another(
    state: StateBackend, clock: ManualClock
) -> None:
    await Mutes(await state.open(), clock=clock).mute(
        GROUP, SPAMMER, timedelta(hours=1), reason="spam", by="slack:U01"
    )
    assert await Mutes(await state.open(), clock=clock).is_muted(GROUP, [SPAMMER])


@pytest.mark.parametrize("duration", [timedelta(0), timedelta(seconds=59), timedelta(days=31)])
async def test_a_duration_out_of_range_is_refused_by_the_store_too(
    mutes: Mutes, duration: timedelta
) -> None:
    with pytest.raises(MuteError):
        await mutes.mute(GROUP, SPAMMER, duration, reason=None, by="slack:U01")


@pytest.mark.parametrize(
    "target", ["", "slack U0SPAM", "x" * 201, "slack:U0SPAM\u202e", "slack:\u200bU0SPAM"]
)
async def test_a_target_that_names_nobody_is_refused(mutes: Mutes, target: str) -> None:
    with pytest.raises(MuteError) as refused:
        await mutes.mute(GROUP, target, timedelta(hours=1), reason=None, by="slack:U01")
    assert refused.value.fault == "target"
    assert await mutes.list(GROUP) == []


async def test_a_blank_reason_is_no_reason_and_a_long_one_is_refused(mutes: Mutes) -> None:
    assert (await mutes.mute(GROUP, "slack:U0A", MIN_MUTE, reason="  ", by="x")).reason is None
    kept = await mutes.mute(GROUP, "slack:U0B", MIN_MUTE, reason="r" * 500, by="x")
    assert kept.reason == "r" * 500
    with pytest.raises(MuteError, match="at most 500 characters") as refused:
        await mutes.mute(GROUP, "slack:U0C", MIN_MUTE, reason="r" * 501, by="x")
    assert refused.value.fault == "reason"


@pytest.mark.parametrize("reason", ["spam\u202etxt.exe", "a\x00b", "zero\u200bwidth", "a\u2028b"])
async def test_a_reason_with_control_or_invisible_characters_is_refused(
    mutes: Mutes, reason: str
) -> None:
    with pytest.raises(MuteError, match="invisible") as refused:
        await mutes.mute(GROUP, SPAMMER, MIN_MUTE, reason=reason, by="x")
    assert refused.value.fault == "reason"
    assert await mutes.list(GROUP) == []
    lines = await mutes.mute(GROUP, SPAMMER, MIN_MUTE, reason="one\n\ttwo", by="x")
    assert lines.reason == "one\n\ttwo"


async def test_a_malformed_space_id_is_refused(mutes: Mutes) -> None:
    with pytest.raises(InvalidSpaceId):
        await mutes.mute("nowhere", SPAMMER, MIN_MUTE, reason=None, by="x")
