"""Schedules on real PostgreSQL: validation, create/update, and materializing due fires."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobyard.core import schedules
from jobyard.core.schedules import ScheduleFields, materialize_due
from jobyard.db.pool import Conn, connect
from jobyard.domain.enums import OverlapPolicy
from jobyard.domain.errors import Conflict, NotFound, ValidationFailed
from jobyard.domain.ids import ProjectId
from tests.factories import make_project, make_queue

T0 = datetime(2026, 12, 4, 8, 0, 0, tzinfo=UTC)  # a Friday


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


async def new_schedule(
    conn: Conn, queue: dict[str, Any], *, now: datetime = T0, **overrides: Any
) -> dict[str, Any]:
    values: dict[str, Any] = {
        "name": f"s-{overrides.get('cron', 'm')}-{id(overrides)}",
        "queue_id": queue["id"],
        "cron": "* * * * *",
        "handler": "report.build",
        "payload": {"kind": "daily"},
    }
    values.update(overrides)
    return await schedules.create_schedule(
        conn, ProjectId(queue["project_id"]), ScheduleFields.from_mapping(values), now=now
    )


async def jobs_of(conn: Conn, schedule_id: int) -> list[dict[str, Any]]:
    cur = await conn.execute(
        "SELECT * FROM jobs WHERE schedule_id = %s ORDER BY run_at", (schedule_id,)
    )
    return await cur.fetchall()


async def schedule_row(conn: Conn, schedule_id: int) -> dict[str, Any]:
    cur = await conn.execute("SELECT * FROM scheduled_jobs WHERE id = %s", (schedule_id,))
    row = await cur.fetchone()
    assert row is not None
    return row


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"cron": "0 25 * * *"}, "cron"),
        ({"cron": "0 9 * *"}, "cron"),
        ({"timezone": "Europe/Londres"}, "timezone"),
        ({"payload": {"blob": "x" * 70_000}}, "payload"),
        ({"payload": {"bad": {1, 2}}}, "payload"),
        ({"priority": 5000}, "priority"),
        ({"priority": True}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout_ms": -1}, "timeout_ms"),
        ({"overlap": "queue"}, "overlap"),
        ({"enabled": "yes"}, "enabled"),
        ({"name": ""}, "name"),
        ({"handler": "h" * 201}, "handler"),
        ({"queue_id": "one"}, "queue_id"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_schedule_fields_refuse_bad_input_naming_the_field(
    override: dict[str, Any], field: str
) -> None:
    values = {"name": "n", "queue_id": 1, "cron": "* * * * *", "handler": "h", **override}
    with pytest.raises(ValidationFailed) as caught:
        ScheduleFields.from_mapping(values)
    assert caught.value.details["field"] == field
    assert caught.value.message.startswith(field)


def test_missing_required_field_is_named() -> None:
    with pytest.raises(ValidationFailed) as caught:
        ScheduleFields.from_mapping({"name": "n", "queue_id": 1, "handler": "h"})
    assert caught.value.details["field"] == "cron"


async def test_create_sets_the_first_fire_from_the_database_now(conn: Conn) -> None:
    queue = await make_queue(conn)
    row = await new_schedule(conn, queue, cron="0 9 * * 1-5", timezone="Asia/Kolkata")
    # T0 is Friday 08:00Z, after Friday's 03:30Z: the next weekday 09:00 IST is Monday.
    assert row["next_run_at"] == utc(2026, 12, 7, 3, 30)
    assert row["cron"] == "0 9 * * 1-5"
    assert row["overlap"] == "allow"


async def test_create_in_another_projects_queue_is_not_found(conn: Conn) -> None:
    queue = await make_queue(conn)
    other = await make_project(conn)
    values = ScheduleFields.from_mapping(
        {"name": "x", "queue_id": queue["id"], "cron": "* * * * *", "handler": "h"}
    )
    with pytest.raises(NotFound) as caught:
        await schedules.create_schedule(conn, ProjectId(other["id"]), values, now=T0)
    assert caught.value.details["field"] == "queue_id"


async def test_duplicate_schedule_name_is_a_conflict_on_name(conn: Conn) -> None:
    queue = await make_queue(conn)
    await new_schedule(conn, queue, name="nightly")
    with pytest.raises(Conflict) as caught:
        await new_schedule(conn, queue, name="nightly")
    assert caught.value.details["field"] == "name"


async def test_update_recomputes_next_fire_only_when_timing_changes(conn: Conn) -> None:
    queue = await make_queue(conn)
    project = ProjectId(queue["project_id"])
    row = await new_schedule(conn, queue, cron="0 12 * * *")
    assert row["next_run_at"] == utc(2026, 12, 4, 12, 0)
    later = T0 + timedelta(hours=1)
    renamed = await schedules.update_schedule(conn, project, row["id"], {"name": "n2"}, now=later)
    assert renamed["next_run_at"] == utc(2026, 12, 4, 12, 0)
    retimed = await schedules.update_schedule(
        conn, project, row["id"], {"cron": "0 9 * * *", "timezone": "Europe/London"}, now=later
    )
    assert retimed["next_run_at"] == utc(2026, 12, 5, 9, 0)
    disabled = await schedules.update_schedule(conn, project, row["id"], {"enabled": False})
    assert disabled["next_run_at"] is None
    with pytest.raises(ValidationFailed) as caught:
        await schedules.update_schedule(conn, project, row["id"], {"timezone": "Nowhere/City"})
    assert caught.value.details["field"] == "timezone"
    other_queue = await make_queue(conn)
    with pytest.raises(NotFound) as nf:
        await schedules.update_schedule(conn, project, row["id"], {"queue_id": other_queue["id"]})
    assert nf.value.details["field"] == "queue_id"


async def test_preview_uses_the_database_now(conn: Conn) -> None:
    got = await schedules.preview(conn, "0 9 * * 1-5", "Asia/Kolkata", 2, now=T0)
    assert got == [utc(2026, 12, 7, 3, 30), utc(2026, 12, 8, 3, 30)]
    with pytest.raises(ValidationFailed) as caught:
        await schedules.preview(conn, "0 9 * * 1-5", "UTC", 0)
    assert caught.value.details["field"] == "n"


async def test_delete_schedule_keeps_the_jobs_it_fired(conn: Conn) -> None:
    queue = await make_queue(conn)
    row = await new_schedule(conn, queue)
    await materialize_due(conn, now=row["next_run_at"])
    await schedules.delete_schedule(conn, ProjectId(queue["project_id"]), row["id"])
    cur = await conn.execute("SELECT count(*) AS n, max(schedule_id) AS s FROM jobs")
    assert await cur.fetchone() == {"n": 1, "s": None}
    with pytest.raises(NotFound):
        await schedules.get_schedule(conn, ProjectId(queue["project_id"]), row["id"])


# ----------------------------------------------------------------------------- materializing


async def test_due_schedule_fires_one_queued_job_with_its_idempotency_key(
    conn: Conn, db_url: str
) -> None:
    queue = await make_queue(conn)
    row = await new_schedule(conn, queue, cron="*/5 * * * *", priority=7)
    fire_at = row["next_run_at"]
    assert fire_at == utc(2026, 12, 4, 8, 5)
    listener = await connect(db_url, autocommit=True)
    try:
        await listener.execute("LISTEN jobyard_jobs")
        # Not due yet: nothing happens.
        assert (await materialize_due(conn, now=fire_at - timedelta(seconds=1))).fired == 0
        result = await materialize_due(conn, now=fire_at + timedelta(milliseconds=40))
        heard = [n.payload async for n in listener.notifies(timeout=2.0, stop_after=1)]
    finally:
        await listener.close()
    assert result.fired == 1
    assert heard == [str(queue["id"])]
    [job] = await jobs_of(conn, row["id"])
    assert job["status"] == "queued"
    assert job["run_at"] == fire_at
    assert job["idempotency_key"] == f"cron:{row['id']}:2026-12-04T08:05:00Z"
    assert job["priority"] == 7
    assert job["payload"] == {"kind": "daily"}
    assert job["max_attempts"] == 5
    after = await schedule_row(conn, row["id"])
    assert after["next_run_at"] == utc(2026, 12, 4, 8, 10)
    assert after["last_fired_at"] == fire_at
    assert after["last_job_id"] == job["id"]


async def test_schedule_an_hour_in_the_past_fires_once_not_sixty_times(conn: Conn) -> None:
    queue = await make_queue(conn)
    row = await new_schedule(conn, queue, cron="* * * * *")
    now = T0 + timedelta(hours=1, seconds=20)
    await conn.execute("UPDATE scheduled_jobs SET next_run_at = %s WHERE id = %s", (T0, row["id"]))
    # Run passes until nothing is due any more: one fire in total, not one per missed minute.
    fired = []
    for _ in range(100):
        result = await materialize_due(conn, now=now)
        if not result.locked:
            break
        fired.append(result.fired)
    assert fired == [1]
    jobs = await jobs_of(conn, row["id"])
    assert [j["run_at"] for j in jobs] == [T0]
    # The next fire is computed from now, not from the missed fire time.
    assert (await schedule_row(conn, row["id"]))["next_run_at"] == utc(2026, 12, 4, 9, 1)


async def test_overlap_skip_skips_while_the_previous_fire_is_unfinished(conn: Conn) -> None:
    queue = await make_queue(conn)
    row = await new_schedule(conn, queue, cron="* * * * *", overlap=OverlapPolicy.SKIP.value)
    t1 = row["next_run_at"]
    assert (await materialize_due(conn, now=t1)).fired == 1
    [first] = await jobs_of(conn, row["id"])
    skipped = await materialize_due(conn, now=t1 + timedelta(minutes=1))
    assert (skipped.fired, skipped.skipped_overlap) == (0, 1)
    state = await schedule_row(conn, row["id"])
    assert state["next_run_at"] == t1 + timedelta(minutes=2)
    assert state["last_fired_at"] == t1  # a skipped fire records nothing
    await conn.execute(
        "UPDATE jobs SET status = 'done', finished_at = now() WHERE id = %s", (first["id"],)
    )
    assert (await materialize_due(conn, now=t1 + timedelta(minutes=2))).fired == 1
    assert len(await jobs_of(conn, row["id"])) == 2


async def test_overlap_allow_fires_while_the_previous_fire_is_unfinished(conn: Conn) -> None:
    queue = await make_queue(conn)
    row = await new_schedule(conn, queue, cron="* * * * *")
    t1 = row["next_run_at"]
    await materialize_due(conn, now=t1)
    assert (await materialize_due(conn, now=t1 + timedelta(minutes=1))).fired == 1
    assert len(await jobs_of(conn, row["id"])) == 2


async def test_a_rewound_schedule_does_not_enqueue_the_same_fire_twice(conn: Conn) -> None:
    queue = await make_queue(conn)
    row = await new_schedule(conn, queue, cron="* * * * *")
    t1 = row["next_run_at"]
    await materialize_due(conn, now=t1)
    # Someone (or a bug) puts next_run_at back: the idempotency key still refuses the fire.
    await conn.execute("UPDATE scheduled_jobs SET next_run_at = %s WHERE id = %s", (t1, row["id"]))
    again = await materialize_due(conn, now=t1 + timedelta(seconds=1))
    assert (again.fired, again.duplicates) == (0, 1)
    assert len(await jobs_of(conn, row["id"])) == 1
    assert (await schedule_row(conn, row["id"]))["next_run_at"] == t1 + timedelta(minutes=1)


async def test_disabled_schedule_never_fires_and_reenabling_does_not_catch_up(
    conn: Conn,
) -> None:
    queue = await make_queue(conn)
    project = ProjectId(queue["project_id"])
    row = await new_schedule(conn, queue, cron="* * * * *", enabled=False)
    assert row["next_run_at"] is None
    assert (await materialize_due(conn, now=T0 + timedelta(days=1))).locked == 0
    later = T0 + timedelta(days=2, seconds=30)
    enabled = await schedules.update_schedule(
        conn, project, row["id"], {"enabled": True}, now=later
    )
    assert enabled["next_run_at"] == T0 + timedelta(days=2, minutes=1)
    assert await jobs_of(conn, row["id"]) == []


async def test_max_attempts_comes_from_the_schedule_else_the_queue_policy_else_5(
    conn: Conn,
) -> None:
    queue = await make_queue(conn)
    cur = await conn.execute(
        "INSERT INTO retry_policies (project_id, name, max_attempts) VALUES (%s, 'p', 9) RETURNING id",
        (queue["project_id"],),
    )
    policy = await cur.fetchone()
    assert policy is not None
    await conn.execute(
        "UPDATE queues SET retry_policy_id = %s, default_timeout_ms = 1234 WHERE id = %s",
        (policy["id"], queue["id"]),
    )
    own = await new_schedule(conn, queue, name="own", max_attempts=2, timeout_ms=99)
    inherited = await new_schedule(conn, queue, name="inherited")
    await materialize_due(conn, now=own["next_run_at"])
    [a] = await jobs_of(conn, own["id"])
    [b] = await jobs_of(conn, inherited["id"])
    assert (a["max_attempts"], a["timeout_ms"]) == (2, 99)
    assert (b["max_attempts"], b["timeout_ms"]) == (9, 1234)
    plain_queue = await make_queue(conn)
    plain = await new_schedule(conn, plain_queue, name="plain")
    await materialize_due(conn, now=plain["next_run_at"])
    [c] = await jobs_of(conn, plain["id"])
    assert (c["max_attempts"], c["timeout_ms"]) == (5, None)


async def test_two_materializers_racing_fire_each_schedule_once(conn: Conn, db_url: str) -> None:
    queue = await make_queue(conn)
    rows = [await new_schedule(conn, queue, name=f"r{i}", cron="* * * * *") for i in range(40)]
    due = rows[0]["next_run_at"]
    a = await connect(db_url, autocommit=True)
    b = await connect(db_url, autocommit=True)
    try:
        results = await asyncio.gather(
            materialize_due(a, batch=7, now=due), materialize_due(b, batch=7, now=due)
        )
        # Keep going until nothing is due: the racing batches split the schedules.
        while (await materialize_due(a, batch=7, now=due)).locked:
            pass
    finally:
        await a.close()
        await b.close()
    assert sum(r.duplicates for r in results) == 0
    cur = await conn.execute(
        "SELECT count(*) AS n, count(DISTINCT schedule_id) AS s FROM jobs WHERE run_at = %s",
        (due,),
    )
    assert await cur.fetchone() == {"n": 40, "s": 40}


async def test_a_schedule_stored_with_an_invalid_cron_is_parked_not_retried(conn: Conn) -> None:
    queue = await make_queue(conn)
    row = await new_schedule(conn, queue)
    await conn.execute("UPDATE scheduled_jobs SET cron = '99 * * * *' WHERE id = %s", (row["id"],))
    result = await materialize_due(conn, now=row["next_run_at"])
    assert (result.fired, result.parked) == (0, 1)
    assert (await schedule_row(conn, row["id"]))["next_run_at"] is None
    # Fixing it through update revives it.
    fixed = await schedules.update_schedule(
        conn, ProjectId(queue["project_id"]), row["id"], {"cron": "0 * * * *"}, now=T0
    )
    assert fixed["next_run_at"] == utc(2026, 12, 4, 9, 0)


# ----------------------------------------------------------------------------- zones and DST


async def test_weekday_schedule_in_kolkata_materializes_at_0330_utc(conn: Conn) -> None:
    queue = await make_queue(conn)
    row = await new_schedule(conn, queue, cron="0 9 * * 1-5", timezone="Asia/Kolkata")
    fire = row["next_run_at"]
    assert (fire.hour, fire.minute) == (3, 30)
    await materialize_due(conn, now=fire)
    [job] = await jobs_of(conn, row["id"])
    assert job["run_at"] == utc(2026, 12, 7, 3, 30)
    assert (await schedule_row(conn, row["id"]))["next_run_at"] == utc(2026, 12, 8, 3, 30)


async def test_new_york_dst_days_fire_the_gap_once_and_the_repeat_once(conn: Conn) -> None:
    queue = await make_queue(conn)
    gap = await new_schedule(
        conn,
        queue,
        name="gap",
        cron="30 2 * * *",
        timezone="America/New_York",
        now=utc(2026, 3, 8, 6, 0),
    )
    repeat = await new_schedule(
        conn,
        queue,
        name="repeat",
        cron="30 1 * * *",
        timezone="America/New_York",
        now=utc(2026, 11, 1, 4, 0),
    )
    assert gap["next_run_at"] == utc(2026, 3, 8, 7, 0)  # 03:00 EDT, the gap's end
    assert repeat["next_run_at"] == utc(2026, 11, 1, 5, 30)  # 01:30 EDT, first occurrence
    # Walk each day minute by minute through the transition: exactly one fire per day.
    for minute in range(240):
        await materialize_due(conn, now=utc(2026, 3, 8, 6, 0) + timedelta(minutes=minute))
    assert [j["run_at"] for j in await jobs_of(conn, gap["id"])] == [utc(2026, 3, 8, 7, 0)]
    assert (await schedule_row(conn, gap["id"]))["next_run_at"] == utc(2026, 3, 9, 6, 30)
    await schedules.delete_schedule(conn, ProjectId(queue["project_id"]), gap["id"])
    for minute in range(240):
        await materialize_due(conn, now=utc(2026, 11, 1, 4, 0) + timedelta(minutes=minute))
    assert [j["run_at"] for j in await jobs_of(conn, repeat["id"])] == [utc(2026, 11, 1, 5, 30)]
    assert (await schedule_row(conn, repeat["id"]))["next_run_at"] == utc(2026, 11, 2, 6, 30)
