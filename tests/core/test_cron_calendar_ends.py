"""Fire times at the ends of datetime's calendar (years 1 to 9999): the preview stops at
9999-12-31 with the fire times that exist, and an `after` before year 1 (in UTC or in the
schedule's zone) is a ValidationFailed naming `after`, never an OverflowError."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobyard.core import schedules
from jobyard.core.cron import next_fire, next_fires, parse_cron
from jobyard.db.pool import Conn
from jobyard.domain.errors import ValidationFailed

WEEKDAYS_9AM = "0 9 * * 1-5"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("after", "tz", "expected"),
    [
        (utc(9999, 12, 31, 23), "UTC", []),
        (utc(9999, 12, 30, 10), "UTC", [utc(9999, 12, 31, 9)]),
        # The last fire in a zone west of UTC would be on 10000-01-01 in UTC.
        (utc(9999, 12, 30, 18), "America/Los_Angeles", [utc(9999, 12, 31, 17)]),
        (utc(9999, 12, 31, 18), "America/Los_Angeles", []),
        # `after` itself past 9999-12-31 in UTC, or in the zone.
        (datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))), "UTC", []),
        (utc(9999, 12, 31, 23), "Asia/Kolkata", []),
    ],
)
def test_fire_times_stop_at_the_end_of_the_calendar(
    after: datetime, tz: str, expected: list[datetime]
) -> None:
    assert next_fires(parse_cron(WEEKDAYS_9AM, tz), after, 3) == expected


def test_next_fire_after_the_last_one_says_it_never_fires() -> None:
    with pytest.raises(ValidationFailed) as raised:
        next_fire(parse_cron(WEEKDAYS_9AM, "UTC"), utc(9999, 12, 31, 23))
    assert raised.value.details["field"] == "cron"


@pytest.mark.parametrize(
    ("after", "tz"),
    [
        (datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))), "UTC"),
        (utc(1, 1, 1, 2), "America/New_York"),
    ],
)
def test_an_after_before_year_one_is_a_validation_error(after: datetime, tz: str) -> None:
    with pytest.raises(ValidationFailed) as raised:
        next_fires(parse_cron(WEEKDAYS_9AM, tz), after, 3)
    assert raised.value.details["field"] == "after"
    assert raised.value.message.startswith(f"after: {after.isoformat()} is too early")


def test_the_first_day_of_the_calendar_still_fires() -> None:
    got = next_fires(parse_cron(WEEKDAYS_9AM, "UTC"), utc(1, 1, 1), 2)
    assert got == [utc(1, 1, 1, 9), utc(1, 1, 2, 9)]


async def test_the_api_preview_at_the_end_of_the_calendar_lists_what_exists(conn: Conn) -> None:
    """The API's preview runs the same function from the database's now."""
    got = await schedules.preview(conn, WEEKDAYS_9AM, "UTC", 3, now=utc(9999, 12, 30, 10))
    assert got == [utc(9999, 12, 31, 9)]
