"""Cron parsing and fire times in IANA zones, including real 2026 DST transitions. Pure."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from jobyard.core.cron import next_fire, next_fires, parse_cron
from jobyard.domain.errors import ValidationFailed


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def fires(expr: str, tz: str, after: datetime, n: int) -> list[datetime]:
    return next_fires(parse_cron(expr, tz), after, n)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("expr", "cron_field", "value"),
    [
        ("61 * * * *", "minute", "61"),
        ("* 24 * * *", "hour", "24"),
        ("* * 0 * *", "day-of-month", "0"),
        ("* * * 13 *", "month", "13"),
        ("* * * * 8", "day-of-week", "8"),
        ("60 * * * * *", "second", "60"),
        ("*/0 * * * *", "minute", "*/0"),
        ("0 0 31 2 *", "day-of-month", "31"),  # February never has a 31st
        ("x * * * *", "minute", "x"),
    ],
)
def test_invalid_cron_names_the_field_and_the_cron_field(
    expr: str, cron_field: str, value: str
) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_cron(expr, "UTC")
    err = caught.value
    assert err.details["field"] == "cron"
    assert err.details["cron_field"] == cron_field
    assert err.details["value"] == value
    assert err.message.startswith("cron: invalid " + cron_field)


@pytest.mark.parametrize("expr", ["", "   ", "* * * *", "* * * * * * *", 42, None])
def test_wrong_shape_cron_is_refused_with_the_field_named(expr: object) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_cron(expr, "UTC")
    assert caught.value.details["field"] == "cron"
    assert "Traceback" not in caught.value.message


@pytest.mark.parametrize(
    "tz",
    ["Mars/Olympus", "America/New_york", "", "../etc/passwd", "/etc/localtime", "localtime", 5],
)
def test_unknown_timezone_names_the_timezone_field(tz: object) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_cron("0 9 * * *", tz)
    assert caught.value.details["field"] == "timezone"
    assert caught.value.message.startswith("timezone:")


def test_seconds_flag_requires_six_fields_and_its_absence_accepts_both() -> None:
    assert parse_cron("*/10 * * * * *", seconds=True).has_seconds
    assert not parse_cron("0 9 * * *").has_seconds
    assert parse_cron("0 0 9 * * *").has_seconds
    with pytest.raises(ValidationFailed, match="expected 6 fields"):
        parse_cron("0 9 * * *", seconds=True)
    with pytest.raises(ValidationFailed, match="expected 5 fields"):
        parse_cron("0 0 9 * * *", seconds=False)


def test_expression_is_normalized() -> None:
    assert parse_cron("  0   9 *\t* 1-5 ").expr == "0 9 * * 1-5"


# ----------------------------------------------------------------------------- fire times


def test_weekday_nine_am_in_kolkata_fires_at_0330_utc_and_skips_the_weekend() -> None:
    # 2026-12-04 is a Friday.
    got = fires("0 9 * * 1-5", "Asia/Kolkata", utc(2026, 12, 4), 3)
    assert got == [utc(2026, 12, 4, 3, 30), utc(2026, 12, 7, 3, 30), utc(2026, 12, 8, 3, 30)]


def test_next_fire_is_strictly_after_and_in_utc() -> None:
    spec = parse_cron("0 9 * * *", "Europe/Paris")
    first = next_fire(spec, utc(2026, 6, 1))
    assert first == utc(2026, 6, 1, 7, 0)
    assert first.tzinfo is UTC
    assert next_fire(spec, first) == utc(2026, 6, 2, 7, 0)
    # Microseconds past a fire time do not fire it again.
    assert next_fire(spec, first + timedelta(microseconds=1)) == utc(2026, 6, 2, 7, 0)


def test_seconds_field_fires_every_n_seconds() -> None:
    got = fires("*/20 * * * * *", "UTC", utc(2026, 1, 1, 0, 0, 5), 4)
    assert got == [
        utc(2026, 1, 1, 0, 0, 20),
        utc(2026, 1, 1, 0, 0, 40),
        utc(2026, 1, 1, 0, 1, 0),
        utc(2026, 1, 1, 0, 1, 20),
    ]


def test_aware_after_is_required() -> None:
    with pytest.raises(ValueError, match="aware"):
        next_fire(parse_cron("* * * * *"), datetime(2026, 1, 1))


# ----------------------------------------------------------------------------- DST: New York


def test_new_york_spring_gap_fires_once_at_the_first_instant_after_the_gap() -> None:
    # 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist that day.
    got = fires("30 2 * * *", "America/New_York", utc(2026, 3, 7), 3)
    assert got == [
        utc(2026, 3, 7, 7, 30),  # 02:30 EST
        utc(2026, 3, 8, 7, 0),  # 03:00 EDT: the gap's end, once
        utc(2026, 3, 9, 6, 30),  # 02:30 EDT
    ]


def test_new_york_spring_gap_collapses_many_wall_times_into_one_fire() -> None:
    # Every 15 minutes: 02:00, 02:15, 02:30, 02:45 all fall in the gap → one fire at 03:00 EDT.
    got = fires("*/15 * * * *", "America/New_York", utc(2026, 3, 8, 6, 30), 4)
    assert got == [
        utc(2026, 3, 8, 6, 45),  # 01:45 EST
        utc(2026, 3, 8, 7, 0),  # 03:00 EDT (gap collapsed, merged with the real 03:00)
        utc(2026, 3, 8, 7, 15),  # 03:15 EDT
        utc(2026, 3, 8, 7, 30),
    ]
    assert len(set(got)) == len(got)


def test_new_york_fall_back_repeated_time_fires_once_at_its_first_occurrence() -> None:
    # 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 happens twice (05:30Z and 06:30Z).
    got = fires("30 1 * * *", "America/New_York", utc(2026, 10, 31), 3)
    assert got == [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]
    assert utc(2026, 11, 1, 6, 30) not in got


def test_new_york_fall_back_repeated_hour_does_not_fire_twice_for_intervals() -> None:
    got = fires("*/30 * * * *", "America/New_York", utc(2026, 11, 1, 4, 0), 5)
    assert got == [
        utc(2026, 11, 1, 4, 30),  # 00:30 EDT
        utc(2026, 11, 1, 5, 0),  # 01:00 EDT
        utc(2026, 11, 1, 5, 30),  # 01:30 EDT
        utc(2026, 11, 1, 7, 0),  # 02:00 EST — the second 01:00/01:30 fire nothing
        utc(2026, 11, 1, 7, 30),
    ]


def test_starting_inside_the_second_pass_of_the_repeated_hour_waits_for_new_wall_times() -> None:
    # 06:10Z is 01:10 EST (second pass); 01:30 already fired at 05:30Z.
    assert next_fire(parse_cron("*/30 * * * *", "America/New_York"), utc(2026, 11, 1, 6, 10)) == (
        utc(2026, 11, 1, 7, 0)
    )
    every_second = parse_cron("* * * * * *", "America/New_York")
    assert next_fire(every_second, utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 1, 7, 0)


# ----------------------------------------------------------------------------- DST: London


def test_london_spring_gap_fires_once_at_0200_bst() -> None:
    # 2026-03-29: 01:00 GMT jumps to 02:00 BST; 01:30 does not exist.
    got = fires("30 1 * * *", "Europe/London", utc(2026, 3, 28), 3)
    assert got == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]


def test_london_fall_back_repeated_time_fires_once_at_the_bst_occurrence() -> None:
    # 2026-10-25: 02:00 BST falls back to 01:00 GMT; 01:30 happens at 00:30Z and 01:30Z.
    got = fires("30 1 * * *", "Europe/London", utc(2026, 10, 24), 3)
    assert got == [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]


def test_six_field_expression_follows_the_same_dst_rules() -> None:
    got = fires("15 30 2 * * *", "America/New_York", utc(2026, 3, 7), 3)
    assert got == [utc(2026, 3, 7, 7, 30, 15), utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30, 15)]


def test_half_hour_dst_zone_gap_end_is_found_exactly() -> None:
    # Lord Howe moves by 30 minutes: 2026-10-04 02:00 → 02:30 local (15:30Z on the 3rd).
    got = fires("15 2 * * *", "Australia/Lord_Howe", utc(2026, 10, 3, 12), 1)
    assert got == [utc(2026, 10, 3, 15, 30)]


# ----------------------------------------------------------------------------- properties

EXPRS = ["* * * * *", "*/7 * * * *", "0 */3 * * *", "30 1 * * *", "0 0 * * 0", "*/13 * * * * *"]
ZONES = ["UTC", "America/New_York", "Europe/London", "Asia/Kolkata", "Australia/Lord_Howe"]


@settings(max_examples=200, deadline=None)
@given(
    expr=st.sampled_from(EXPRS),
    tz=st.sampled_from(ZONES),
    start=st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2028, 1, 1)),
)
def test_fires_are_increasing_strictly_after_and_each_matches_a_wall_time(
    expr: str, tz: str, start: datetime
) -> None:
    after = start.replace(tzinfo=UTC)
    spec = parse_cron(expr, tz)
    got = next_fires(spec, after, 5)
    assert len(got) == 5
    assert got[0] > after
    assert all(a < b for a, b in itertools.pairwise(got))
    zone = ZoneInfo(tz)
    for fire in got:
        wall = fire.astimezone(zone).replace(tzinfo=None)
        # Either the wall time itself matches, or the fire is a gap's end (offset changed
        # in the second before it).
        matches = next(CronSim(spec.expr, wall - timedelta(seconds=1))) == wall
        gap_end = (fire - timedelta(seconds=1)).astimezone(zone).utcoffset() != (
            fire.astimezone(zone).utcoffset()
        )
        assert matches or gap_end, (expr, tz, fire)


@settings(max_examples=200, deadline=None)
@given(
    expr=st.sampled_from(EXPRS),
    start=st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2028, 1, 1)),
)
def test_in_utc_the_fires_are_exactly_cronsims(expr: str, start: datetime) -> None:
    after = start.replace(tzinfo=UTC, microsecond=0)
    ours = next_fires(parse_cron(expr, "UTC"), after, 5)
    it = CronSim(expr, after)
    theirs = [next(it) for _ in range(5)]
    assert ours == theirs
