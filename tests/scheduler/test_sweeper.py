"""The dead-worker sweep: silent workers are marked dead and their jobs come back at once."""

from __future__ import annotations

from datetime import timedelta

from jobyard.core.maintenance import sweep_dead_workers
from jobyard.db.pool import Conn
from jobyard.scheduler.sweeper import Sweeper, SweeperConfig
from tests.factories import make_queue
from tests.scheduler.helpers import T0, execution, job, make_held_job, make_worker_at, one


async def test_silent_worker_is_marked_dead_and_its_jobs_come_back(conn: Conn) -> None:
    queue = await make_queue(conn)
    project = queue["project_id"]
    silent = await make_worker_at(conn, project, last_heartbeat_at=T0 - timedelta(seconds=91))
    alive = await make_worker_at(conn, project, last_heartbeat_at=T0 - timedelta(seconds=5))
    draining = await make_worker_at(
        conn, project, last_heartbeat_at=T0 - timedelta(seconds=200), status="draining"
    )
    stopped = await make_worker_at(
        conn, project, last_heartbeat_at=T0 - timedelta(hours=1), status="stopped"
    )
    # The silent worker's lease has not even expired: the sweep takes it back anyway.
    lost = await make_held_job(
        conn, queue, silent, lock_expires_at=T0 + timedelta(seconds=20), attempt=3
    )
    kept = await make_held_job(conn, queue, alive, lock_expires_at=T0 + timedelta(seconds=20))

    result = await sweep_dead_workers(conn, sweep_after_s=90, now=T0)

    assert sorted(result.workers) == sorted([silent["id"], draining["id"]])
    assert (result.jobs.requeued, result.jobs.job_ids) == (1, (lost["id"],))
    for w, status in (
        (silent, "dead"),
        (draining, "dead"),
        (alive, "active"),
        (stopped, "stopped"),
    ):
        row = await one(conn, "SELECT status::text, stopped_at FROM workers WHERE id = %s", w["id"])
        assert row["status"] == status, w
    assert (await one(conn, "SELECT stopped_at FROM workers WHERE id = %s", silent["id"]))[
        "stopped_at"
    ] == T0
    back = await job(conn, lost["id"])
    assert (back["status"], back["attempt"], back["lease_lost_count"], back["worker_id"]) == (
        "queued",
        2,
        1,
        None,
    )
    ex = await execution(conn, lost["id"])
    assert (ex["outcome"], ex["attempt_charged"], ex["error"]) == (
        "lease_lost",
        False,
        "worker declared dead (no heartbeat)",
    )
    assert (await job(conn, kept["id"]))["status"] == "running"


async def test_sweep_leaves_workers_within_the_limit(conn: Conn) -> None:
    queue = await make_queue(conn)
    await make_worker_at(conn, queue["project_id"], last_heartbeat_at=T0 - timedelta(seconds=90))
    assert (await sweep_dead_workers(conn, sweep_after_s=90, now=T0)).workers == ()


async def test_a_dead_workers_poison_pill_is_dead_lettered(conn: Conn) -> None:
    queue = await make_queue(conn)
    silent = await make_worker_at(
        conn, queue["project_id"], last_heartbeat_at=T0 - timedelta(minutes=5)
    )
    held = await make_held_job(
        conn,
        queue,
        silent,
        lock_expires_at=T0 - timedelta(minutes=4),
        lease_lost_count=2,
        solo_deaths=2,
    )
    result = await sweep_dead_workers(conn, sweep_after_s=90, poison_threshold=3, now=T0)
    assert result.jobs.dead_lettered == 1
    assert (await job(conn, held["id"]))["status"] == "dead_letter"


async def test_sweeper_service_holds_off_after_start_then_sweeps(conn: Conn) -> None:
    queue = await make_queue(conn)
    silent = await make_worker_at(
        conn, queue["project_id"], last_heartbeat_at=T0 - timedelta(minutes=5)
    )
    sweeper = Sweeper(SweeperConfig(sweep_after_s=90, lease_s=30))
    assert (await sweeper.run_once(conn, now=T0)).counts["held_off"] == 1
    result = await sweeper.run_once(conn, now=T0 + timedelta(seconds=31))
    assert result.counts["workers_dead"] == 1
    row = await one(conn, "SELECT status::text FROM workers WHERE id = %s", silent["id"])
    assert row["status"] == "dead"
