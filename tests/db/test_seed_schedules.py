"""The demo seed: two schedules (one in a timezone other than UTC) with their next fire set,
idempotent, an operator's edits kept."""

from __future__ import annotations

from jobyard.core.cron_words import describe
from jobyard.db.pool import connect_sync
from jobyard.db.seed import seed_demo


def test_the_demo_seeds_two_schedules_one_with_a_timezone(db_url: str) -> None:
    with connect_sync(db_url) as conn:
        seed_demo(conn, sample_jobs=False)
        conn.execute(
            "UPDATE scheduled_jobs SET cron = '0 10 * * 1-5' WHERE name = 'weekday-report'"
        )
        seed_demo(conn, sample_jobs=False)  # again: nothing doubled, the edit kept
        rows = conn.execute(
            "SELECT name, cron, timezone, next_run_at, enabled FROM scheduled_jobs ORDER BY name"
        ).fetchall()
    assert [(r["name"], r["timezone"]) for r in rows] == [
        ("quarter-hour-ping", "UTC"),
        ("weekday-report", "Europe/Paris"),
    ]
    assert all(r["next_run_at"] is not None and r["enabled"] for r in rows)
    assert rows[1]["cron"] == "0 10 * * 1-5"
    assert describe(rows[1]["cron"]) == "At 10:00, Monday through Friday"
    assert describe(rows[0]["cron"]) == "Every 15 minutes"
