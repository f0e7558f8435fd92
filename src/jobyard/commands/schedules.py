"""`jobyard schedules preview EXPR`: the next fire times of a cron expression."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from jobyard.commands.common import fail, out, typer_app
from jobyard.commands.guide_files import see
from jobyard.core.cron import next_fires, parse_cron
from jobyard.domain.errors import ValidationFailed

schedules_app = typer_app("Cron schedules: preview fire times.")


@schedules_app.command("preview")
def schedules_preview(
    expr: Annotated[str, typer.Argument(help='Cron expression, e.g. "0 9 * * 1-5".')],
    tz: Annotated[str, typer.Option("--tz", help="IANA timezone, e.g. Asia/Kolkata.")] = "UTC",
    n: Annotated[int, typer.Option("-n", min=1, max=100, help="How many fire times.")] = 5,
    seconds: Annotated[
        bool, typer.Option("--seconds", help="The expression has a leading seconds field.")
    ] = False,
    after: Annotated[
        str | None, typer.Option("--after", help="Start after this ISO time (default: now).")
    ] = None,
) -> None:
    """Print the next N fire times of a cron expression (local time and UTC)."""
    try:
        spec = parse_cron(expr, tz, seconds=True if seconds else None)
        start = _parse_after(after)
        fires = next_fires(spec, start, n)
    except ValidationFailed as exc:
        raise fail(exc.message, see("SCHEDULER", "for the cron syntax and DST rules")) from None
    zone = spec.zone
    for fire in fires:
        local = fire.astimezone(zone)
        out.print(
            f"{local:%Y-%m-%d %a %H:%M:%S} {local.tzname()} ({local:%z})"
            f"  =  {fire:%Y-%m-%dT%H:%M:%S}Z"
        )
    if len(fires) < n:
        out.print(
            f"({len(fires)} of {n}: no later fire time within 50 years, "
            "or before the calendar ends at 9999-12-31)",
            highlight=False,
        )


def _parse_after(after: str | None) -> datetime:
    if after is None:
        return datetime.now(UTC)  # a preview only; the scheduler itself uses the database clock
    try:
        value = datetime.fromisoformat(after.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationFailed(f"--after: not an ISO 8601 time: {after!r}", field="after") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
