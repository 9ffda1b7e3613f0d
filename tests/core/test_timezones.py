from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.people.timezones import (
    MAX_ZONE_NAME_CHARS,
    UnknownTimeZoneError,
    canonical_zone,
    choose_zone,
    stamp,
)

ZONES = sorted(zoneinfo.available_timezones() - {"localtime", "Factory"})


def test_a_lowercase_name_comes_back_as_the_tz_database_spells_it() -> None:
    assert canonical_zone("europe/rome") == "Europe/Rome"
    assert canonical_zone("AMERICA/NEW_YORK") == "America/New_York"
    assert canonical_zone("  Europe/Rome  ") == "Europe/Rome"


def test_utc_and_etc_gmt_zones_are_names_of_zones() -> None:
    assert canonical_zone("UTC") == "UTC"
    assert canonical_zone("utc") == "UTC"
    assert canonical_zone("Etc/GMT-2") == "Etc/GMT-2"
    assert canonical_zone("etc/gmt+5") == "Etc/GMT+5"


@pytest.mark.parametrize(
    "offset", ["+02:00", "-05:30", "UTC+2", "UTC+02:00", "GMT+2:00", "+0200", "2", "Z"]
)
def test_a_fixed_offset_is_not_a_zone_name(offset: str) -> None:
    assert canonical_zone(offset) is None


@pytest.mark.parametrize(
    "name", ["", "   ", "Mars/Olympus_Mons", "Europe", "Europe/", "localtime", "Factory"]
)
def test_an_unknown_or_placeholder_name_is_refused(name: str) -> None:
    assert canonical_zone(name) is None


def test_a_name_longer_than_the_cap_is_refused_without_a_lookup() -> None:
    padded = "Europe/Rome" + " " * MAX_ZONE_NAME_CHARS
    assert canonical_zone(padded) is None


@given(st.text(max_size=200))
def test_canonical_zone_never_raises_and_answers_only_real_canonical_zones(text: str) -> None:
    zone = canonical_zone(text)
    if zone is not None:
        assert zone in ZONES
        assert canonical_zone(zone) == zone


@given(st.sampled_from(ZONES), st.sampled_from([str.lower, str.upper, str.swapcase]))
def test_every_zone_is_found_whatever_its_case(
    zone: str, change_case: Callable[[str], str]
) -> None:
    assert canonical_zone(change_case(zone)) == zone


@given(st.from_regex(r"(UTC|GMT)?[+-][0-9]{1,2}(:?[0-9]{2})?", fullmatch=True))
def test_no_offset_written_with_a_sign_and_digits_is_taken_for_a_zone(offset: str) -> None:
    # GMT+0 and GMT-0 are real (legacy) tz database names; every other such offset isn't.
    assert canonical_zone(offset) in {None, "GMT+0", "GMT-0"}


def test_the_saved_zone_wins_over_the_header_and_the_default() -> None:
    assert choose_zone("Europe/Rome", "America/New_York", "UTC") == "Europe/Rome"


def test_the_header_is_used_when_nothing_is_saved() -> None:
    assert choose_zone(None, "america/new_york", "UTC") == "America/New_York"


def test_an_invalid_header_is_ignored_for_the_default() -> None:
    assert choose_zone(None, "+02:00", "Europe/Berlin") == "Europe/Berlin"
    assert choose_zone(None, None, "Europe/Berlin") == "Europe/Berlin"


def test_an_invalid_saved_zone_falls_through_to_the_header() -> None:
    assert choose_zone("Nowhere/Town", "Asia/Tokyo", "UTC") == "Asia/Tokyo"


def test_a_stamp_carries_the_local_time_weekday_zone_and_offset() -> None:
    when = datetime(2026, 12, 2, 16, 5, 42, tzinfo=UTC)
    assert (
        stamp("Shall we meet?", when, "Europe/Rome")
        == "[2026-12-02 17:05 Wednesday, Europe/Rome (UTC+01:00)] Shall we meet?"
    )


def test_a_stamp_follows_summer_time_and_negative_offsets() -> None:
    when = datetime(2026, 7, 1, 3, 30, tzinfo=UTC)
    assert (
        stamp("hi", when, "Europe/Rome")
        == "[2026-07-01 05:30 Wednesday, Europe/Rome (UTC+02:00)] hi"
    )
    assert (
        stamp("hi", when, "America/New_York")
        == "[2026-06-30 23:30 Tuesday, America/New_York (UTC-04:00)] hi"
    )
    assert stamp("hi", when, "Asia/Kolkata").endswith("Asia/Kolkata (UTC+05:30)] hi")


def test_a_stamp_is_the_same_whatever_zone_the_given_time_is_in() -> None:
    in_utc = datetime(2026, 12, 2, 16, 5, tzinfo=UTC)
    in_tokyo = in_utc.astimezone(timezone(timedelta(hours=9)))
    assert stamp("x", in_utc, "UTC") == stamp("x", in_tokyo, "UTC")
    assert stamp("x", in_utc, "UTC") == "[2026-12-02 16:05 Wednesday, UTC (UTC+00:00)] x"


def test_the_text_is_kept_as_it_is_after_the_stamp() -> None:
    text = "  two lines\nand [brackets]  "
    stamped = stamp(text, datetime(2026, 1, 1, tzinfo=UTC), "UTC")
    assert stamped.endswith("] " + text)


def test_a_naive_time_cannot_be_stamped() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        stamp("x", datetime(2026, 1, 1), "UTC")


def test_a_zone_that_is_not_canonical_cannot_be_stamped() -> None:
    with pytest.raises(UnknownTimeZoneError, match="choose_zone"):
        stamp("x", datetime(2026, 1, 1, tzinfo=UTC), "europe/rome")
    with pytest.raises(UnknownTimeZoneError):
        stamp("x", datetime(2026, 1, 1, tzinfo=UTC), "+02:00")
