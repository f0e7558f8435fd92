"""Cron expressions in an IANA timezone: parse, validate, and compute the next fire times. Pure.

Parsing and matching are cronsim's (5 fields, or 6 with a leading seconds field; Debian cron
rules: when both day-of-month and day-of-week are restricted, either may match). This module
adds what cronsim leaves to the caller — one definition of a fire *instant* in a zone with
daylight-saving time:

* The expression is matched against local **wall-clock** time in the schedule's zone. Every wall
  time that matches fires exactly once.
* **Gap** (spring forward; a wall time that does not exist, e.g. 02:30 in America/New_York on
  2026-03-08): it fires once, at the first real instant after the gap (03:00 EDT = 07:00 UTC).
  Several matching wall times inside one gap collapse into that single fire, merged with a fire
  the expression may already have at that instant.
* **Overlap** (fall back; a wall time that happens twice, e.g. 01:30 in America/New_York on
  2026-11-01): it fires once, at its first occurrence (01:30 EDT = 05:30 UTC). The second pass
  through the repeated hour fires nothing.

The consequence for interval schedules in a DST zone: `0 * * * *` skips one real hour in the
autumn and fires once at the end of the spring gap. Use `timezone="UTC"` for a strict real-time
interval. Fire instants are always whole seconds and are returned in UTC.

>>> spec = parse_cron("0 9 * * 1-5", "Asia/Kolkata")
>>> [t.isoformat() for t in next_fires(spec, datetime(2026, 12, 4, tzinfo=UTC), 2)]
['2026-12-04T03:30:00+00:00', '2026-12-07T03:30:00+00:00']
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

from jobyard.domain.errors import ValidationFailed

# cronsim's field names, in 6-field order; a 5-field expression starts at "minute".
CRON_FIELDS = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
_ALLOWED = {
    "second": "0-59",
    "minute": "0-59",
    "hour": "0-23",
    "day-of-month": "1-31, L, LW; the day must exist in the chosen months",
    "month": "1-12 or JAN-DEC",
    "day-of-week": "0-7 or SUN-SAT, with L and #n",
}
MAX_CRON_LENGTH = 200
MAX_TIMEZONE_LENGTH = 64
# Keys zoneinfo resolves but that are not real IANA zones: host-dependent or placeholders.
_NOT_ZONES = frozenset({"localtime", "Factory", "posixrules"})


@dataclass(frozen=True)
class CronSpec:
    """A validated expression and zone. `expr` is normalized (single spaces)."""

    expr: str
    timezone: str
    has_seconds: bool

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


@functools.cache
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones()) - _NOT_ZONES


def parse_timezone(name: object, *, field: str = "timezone") -> ZoneInfo:
    """The zone for an IANA name such as "Europe/London"; ValidationFailed naming `field`."""
    if not isinstance(name, str) or not name:
        raise ValidationFailed(
            f"{field}: give an IANA timezone name such as 'Europe/London'", field=field
        )
    if len(name) > MAX_TIMEZONE_LENGTH or name not in _known_zones():
        raise ValidationFailed(
            f"{field}: unknown timezone {name[:MAX_TIMEZONE_LENGTH]!r} "
            "(use an IANA name such as 'America/New_York' or 'UTC')",
            field=field,
            value=name[:MAX_TIMEZONE_LENGTH],
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationFailed(f"{field}: unknown timezone {name!r}", field=field) from None


def parse_cron(
    expr: object,
    timezone: object = "UTC",
    *,
    seconds: bool | None = None,
    field: str = "cron",
    tz_field: str = "timezone",
) -> CronSpec:
    """Validate a cron expression and zone; raise ValidationFailed naming the bad field.

    5 fields are `minute hour day-of-month month day-of-week`; 6 fields put `second` first.
    `seconds=True` requires 6 fields, `seconds=False` requires 5, None accepts either.
    An expression that can never fire (e.g. `0 0 31 2 *`) is refused too.
    """
    parse_timezone(timezone, field=tz_field)
    if not isinstance(expr, str) or not expr.strip():
        raise ValidationFailed(
            f"{field}: give a cron expression such as '0 9 * * 1-5'", field=field
        )
    if len(expr) > MAX_CRON_LENGTH:
        raise ValidationFailed(f"{field}: longer than {MAX_CRON_LENGTH} characters", field=field)
    parts = expr.split()
    five = f"5 fields ({' '.join(CRON_FIELDS[1:])})"
    six = f"6 fields ({' '.join(CRON_FIELDS)})"
    expected = {None: (5, 6), True: (6,), False: (5,)}[seconds]
    if len(parts) not in expected:
        want = {(5, 6): f"{five}, or 6 with a leading second", (6,): six, (5,): five}[expected]
        raise ValidationFailed(
            f"{field}: expected {want}; got {len(parts)}", field=field, value=expr[:80]
        )
    names = CRON_FIELDS if len(parts) == 6 else CRON_FIELDS[1:]
    probe = datetime(2000, 1, 1)  # naive: cronsim then matches wall-clock time only
    try:
        it = CronSim(" ".join(parts), probe)
    except CronSimError as exc:
        raise _field_error(field, str(exc), parts, names) from None
    except (ValueError, IndexError):
        raise ValidationFailed(f"{field}: cannot parse {expr!r}", field=field) from None
    try:
        next(it)
    except StopIteration:
        raise ValidationFailed(
            f"{field}: {expr!r} never fires (no matching date in 50 years)", field=field
        ) from None
    return CronSpec(" ".join(parts), str(timezone), has_seconds=len(parts) == 6)


def _field_error(field: str, message: str, parts: list[str], names: tuple[str, ...]) -> Exception:
    # cronsim says "Bad minute" / "Bad day-of-month"; name the cron field and show its value.
    bad = message.removeprefix("Bad ").strip()
    if bad in names:
        value = parts[names.index(bad)]
        return ValidationFailed(
            f"{field}: invalid {bad} field {value!r} (allowed: {_ALLOWED[bad]})",
            field=field,
            cron_field=bad,
            value=value,
        )
    return ValidationFailed(f"{field}: {message}", field=field)


def next_fire(spec: CronSpec, after: datetime) -> datetime:
    """The first fire instant strictly after `after` (an aware datetime), in UTC."""
    for instant in _fires(spec, after):
        return instant
    raise ValidationFailed(
        f"cron: {spec.expr!r} never fires after {after.isoformat()}", field="cron"
    )


def next_fires(spec: CronSpec, after: datetime, n: int) -> list[datetime]:
    """The next `n` fire instants strictly after `after`, in UTC, increasing (fewer if the
    expression stops firing within cronsim's 50-year horizon, or the calendar ends at
    9999-12-31 first). ValidationFailed if `after` is before year 1 in UTC or in the zone."""
    if n < 0:
        raise ValidationFailed("n: must not be negative", field="n")
    return list(itertools.islice(_fires(spec, after), n))


def _fires(spec: CronSpec, after: datetime) -> Iterator[datetime]:
    if after.tzinfo is None:
        raise ValueError("after must be timezone-aware")
    zone = spec.zone
    try:
        after_utc = after.astimezone(UTC)
        # Walk wall-clock time from the local wall time of `after`; cronsim sees a naive
        # datetime, so it applies no DST handling of its own. Map each wall time to its instant
        # (rules above).
        wall_start = after_utc.astimezone(zone).replace(tzinfo=None, fold=0)
    except OverflowError:
        # `after`, in UTC or in the zone, falls outside datetime's years 1-9999.
        if after.year == datetime.max.year:
            return  # at the end of the calendar: no fire time after it exists
        where = "" if spec.timezone == "UTC" else f" in UTC and in {spec.timezone}"
        raise ValidationFailed(
            f"after: {after.isoformat()} is too early: fire times start at year 1 "
            f"(0001-01-01){where}; pick a later time",
            field="after",
        ) from None
    walls = CronSim(spec.expr, wall_start)
    last = after_utc
    while True:
        try:
            wall = next(walls)
            instant = _instant(wall, zone)
        except StopIteration:
            return
        except OverflowError:
            return  # the next fire time would be after 9999-12-31: the calendar ends here
        # Skips repeated-hour wall times already passed (after is in the second pass) and
        # gap wall times that collapsed onto an instant already returned.
        if instant > last:
            last = instant
            yield instant


def _instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The instant a local wall time fires: first occurrence if repeated, gap end if missing."""
    utc = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if utc.astimezone(zone).replace(tzinfo=None) == wall:
        return utc
    return _gap_end(wall, zone)


def _gap_end(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first real instant after the gap that swallowed `wall` (binary search on seconds)."""
    before = wall.replace(tzinfo=zone, fold=0).utcoffset() or timedelta(0)
    after = wall.replace(tzinfo=zone, fold=1).utcoffset() or timedelta(0)
    naive_utc = wall.replace(tzinfo=UTC)
    lo = int((naive_utc - after).timestamp())  # still before the gap: local wall < wall
    hi = int((naive_utc - before).timestamp())  # already after the gap: local wall > wall
    while hi - lo > 1:
        mid = (lo + hi) // 2
        local = datetime.fromtimestamp(mid, UTC).astimezone(zone).replace(tzinfo=None)
        if local > wall:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)
