"""Demo data: an organization, an operator login, a project, queues and some jobs. Idempotent."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from cronsim import CronSim
from psycopg.types.json import Jsonb

from jobyard.db.pool import SyncConn
from jobyard.db.queries import sql
from jobyard.domain.passwords import hash_password

DEMO_EMAIL = "operator@jobyard.test"
DEMO_PASSWORD = "correct-horse-battery-staple"  # noqa: S105 - printed by `make demo` on purpose
DEMO_ORG_SLUG = "demo"
DEMO_PROJECT_SLUG = "default"
# (name, queue, cron, timezone, handler, payload): one in a timezone other than UTC.
DEMO_SCHEDULES: tuple[tuple[str, str, str, str, str, dict[str, object]], ...] = (
    ("weekday-report", "reports", "0 9 * * 1-5", "Europe/Paris", "sleep", {"seconds": 1}),
    ("quarter-hour-ping", "default", "*/15 * * * *", "UTC", "noop", {}),
)


def _next_fire(cron: str, timezone: str) -> datetime:
    """The first fire after now (the scheduler's materializer takes it from there)."""
    return next(CronSim(cron, datetime.now(ZoneInfo(timezone)))).astimezone(UTC)


@dataclass(frozen=True)
class SeedResult:
    org_id: int
    project_id: int
    user_email: str
    # The demo password, or None when the account existed: its password was left as it is.
    user_password: str | None
    queues: dict[str, int]
    jobs_added: int


def _id(conn: SyncConn, name: str, params: dict[str, object]) -> int:
    row = conn.execute(sql(name), params).fetchone()
    assert row is not None
    return int(row["id"])


def seed_demo(conn: SyncConn, *, sample_jobs: bool = True) -> SeedResult:
    with conn.transaction():
        org_id = _id(conn, "seed_org", {"name": "Demo Organization", "slug": DEMO_ORG_SLUG})
        user = conn.execute(
            sql("seed_user"),
            {
                "email": DEMO_EMAIL,
                "password_hash": hash_password(DEMO_PASSWORD),
                "display_name": "Demo Operator",
            },
        ).fetchone()
        assert user is not None
        user_id = int(user["id"])
        conn.execute(sql("seed_member"), {"org_id": org_id, "user_id": user_id, "role": "owner"})
        project_id = _id(
            conn, "seed_project", {"org_id": org_id, "name": "Default", "slug": DEMO_PROJECT_SLUG}
        )
        policy_id = _id(
            conn,
            "seed_retry_policy",
            {
                "project_id": project_id,
                "name": "standard",
                "backoff": "exponential",
                "base_delay_ms": 1000,
                "max_delay_ms": 60_000,
                "max_attempts": 3,
            },
        )
        queues = {
            name: _id(
                conn,
                "seed_queue",
                {
                    "project_id": project_id,
                    "name": name,
                    "priority": prio,
                    "max_concurrency": mc,
                    "retry_policy_id": policy_id,
                },
            )
            for name, prio, mc in (("default", 0, None), ("critical", 10, None), ("reports", -5, 2))
        }
        for name, queue, cron, tz, handler, template in DEMO_SCHEDULES:
            conn.execute(
                sql("seed_schedule"),
                {
                    "project_id": project_id,
                    "queue_id": queues[queue],
                    "name": name,
                    "cron": cron,
                    "timezone": tz,
                    "handler": handler,
                    "payload": Jsonb(template),
                    "next_run_at": _next_fire(cron, tz),
                },
            )
        added = 0
        row = conn.execute(sql("seed_count_jobs"), {"project_id": project_id}).fetchone()
        if sample_jobs and row is not None and row["n"] == 0:
            for queue, handler, payload, n in (
                ("default", "noop", {}, 20),
                ("critical", "sleep", {"seconds": 0.5}, 5),
                ("reports", "sleep", {"seconds": 2}, 4),
                ("default", "fail", {"message": "demo failure"}, 3),
            ):
                cur = conn.execute(
                    sql("seed_jobs"),
                    {
                        "project_id": project_id,
                        "queue_id": queues[queue],
                        "handler": handler,
                        "payload": Jsonb(payload),
                        "max_attempts": 3,
                        "n": n,
                    },
                )
                added += cur.rowcount
    password = DEMO_PASSWORD if user["created"] else None
    return SeedResult(org_id, project_id, DEMO_EMAIL, password, queues, added)


def login_line(result: SeedResult) -> str:
    """The seeded login as the CLI prints it: the password only when the seed set it."""
    if result.user_password is None:
        return f"{result.user_email} (an existing account: its password was left as it is)"
    return f"{result.user_email} / {result.user_password}"
