"""Retention: old finished jobs (with executions and logs), heartbeats, expired tokens and
rate-limit windows go in bounded batches; dead letters stay; the claim stays as it was."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest

from jobyard.core.maintenance import prune_retention
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.db.queries import sql
from jobyard.scheduler.retention import Retention, RetentionConfig
from tests.factories import make_queue, make_worker
from tests.scheduler.helpers import T0, all_rows, one, plan_nodes

WEEK = 7 * 86400.0
DAY = 86400.0


async def add_finished(
    conn: Conn, queue: dict[str, Any], n: int, *, status: str, finished_days_ago: float
) -> list[int]:
    rows = await all_rows(
        conn,
        """INSERT INTO jobs (project_id, queue_id, handler, status, finished_at, run_at)
           SELECT %s, %s, 'noop', %s::job_status, %s, %s FROM generate_series(1, %s)
           RETURNING id""",
        queue["project_id"],
        queue["id"],
        status,
        T0 - timedelta(days=finished_days_ago),
        T0 - timedelta(days=finished_days_ago, minutes=1),
        n,
    )
    return [r["id"] for r in rows]


async def count(conn: Conn, table: str) -> int:
    return int((await one(conn, f"SELECT count(*) AS n FROM {table}"))["n"])


async def test_old_finished_jobs_go_with_their_executions_and_logs(conn: Conn) -> None:
    queue = await make_queue(conn)
    old_done = await add_finished(conn, queue, 3, status="done", finished_days_ago=8)
    old_dead = await add_finished(conn, queue, 2, status="dead_letter", finished_days_ago=30)
    await add_finished(conn, queue, 1, status="cancelled", finished_days_ago=8)
    recent = await add_finished(conn, queue, 4, status="done", finished_days_ago=6)
    for job_id in old_done + recent:
        await conn.execute(
            """INSERT INTO job_executions (job_id, execution_seq, attempt, outcome, started_at,
                                           finished_at)
               VALUES (%s, 1, 1, 'succeeded', now(), now())""",
            (job_id,),
        )
        await conn.execute(
            "INSERT INTO job_logs (job_id, execution_seq, message) VALUES (%s, 1, 'hi')", (job_id,)
        )
    # A dead letter refers to an old job: the letter stays (job_id nulled), only a user deletes it.
    await conn.execute(
        """INSERT INTO dead_letter_jobs (project_id, queue_id, job_id, handler, payload, reason,
                                         attempts)
           VALUES (%s, %s, %s, 'noop', '{}', 'exhausted', 5)""",
        (queue["project_id"], queue["id"], old_dead[0]),
    )
    # Unfinished jobs are never pruned, however old.
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, run_at, created_at)
           VALUES (%s, %s, 'noop', 'queued', %s, %s), (%s, %s, 'noop', 'scheduled', %s, %s)""",
        (queue["project_id"], queue["id"], T0 - timedelta(days=60), T0 - timedelta(days=60)) * 2,
    )

    result = await prune_retention(conn, jobs_age_s=WEEK, heartbeats_age_s=DAY, now=T0)

    assert result.jobs == 6
    remaining = await all_rows(conn, "SELECT id, status::text FROM jobs ORDER BY id")
    assert sorted(r["id"] for r in remaining if r["status"] == "done") == recent
    assert {r["status"] for r in remaining} == {"done", "queued", "scheduled"}
    assert await count(conn, "job_executions") == len(recent)
    assert await count(conn, "job_logs") == len(recent)
    letter = await one(conn, "SELECT job_id FROM dead_letter_jobs")
    assert letter == {"job_id": None}


async def test_old_heartbeats_expired_tokens_and_old_rate_windows_go(conn: Conn) -> None:
    queue = await make_queue(conn)
    worker = await make_worker(conn, project_id=queue["project_id"])
    await conn.execute(
        """INSERT INTO worker_heartbeats (worker_id, beat_at)
           SELECT %s, %s - g * interval '1 hour' FROM generate_series(0, 47) g""",
        (worker["id"], T0),
    )
    user = await one(
        conn,
        "INSERT INTO users (email, password_hash) VALUES ('a@b.c', 'x') RETURNING id",
    )
    await conn.execute(
        """INSERT INTO refresh_tokens (user_id, family_id, token_hash, expires_at)
           VALUES (%s, gen_random_uuid(), sha256('1'), %s),
                  (%s, gen_random_uuid(), sha256('2'), %s)""",
        (user["id"], T0 - timedelta(seconds=1), user["id"], T0 + timedelta(days=1)),
    )
    await conn.execute(
        """INSERT INTO rate_limit_counters (bucket, window_start, hits)
           VALUES ('auth:1.2.3.4', %s, 3), ('auth:1.2.3.4', %s, 1)""",
        (T0 - timedelta(days=2), T0 - timedelta(minutes=5)),
    )
    result = await prune_retention(conn, jobs_age_s=WEEK, heartbeats_age_s=DAY, now=T0)
    # Heartbeats at T0-0h … T0-24h are within a day (25 of 48); the rest go.
    assert (result.heartbeats, result.refresh_tokens, result.rate_limits) == (23, 1, 1)
    assert await count(conn, "worker_heartbeats") == 25
    assert await count(conn, "refresh_tokens") == 1
    assert await count(conn, "rate_limit_counters") == 1


async def test_retention_deletes_in_bounded_batches_and_stops_at_the_pass_cap(
    conn: Conn,
) -> None:
    queue = await make_queue(conn)
    await add_finished(conn, queue, 1050, status="done", finished_days_ago=10)
    # One statement never deletes more than `batch` rows.
    assert (
        await run.execute(conn, "retention_delete_jobs", {"batch": 100, "age_s": WEEK, "now": T0})
        == 100
    )
    capped = await prune_retention(
        conn, jobs_age_s=WEEK, heartbeats_age_s=DAY, batch=100, max_batches=4, now=T0
    )
    assert (capped.jobs, capped.batches, capped.more) == (400, 4, True)
    service = Retention(RetentionConfig(batch=100, max_batches=1000))
    rest = await service.run_once(conn, now=T0)
    # 550 left: 5 full batches and a short one, then one short batch per other table.
    assert rest.counts["jobs"] == 550
    assert rest.more is False
    assert await count(conn, "jobs") == 0


def _blocks(node: dict[str, Any]) -> int:
    return int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))


def _explain_claim_stats(plan: dict[str, Any]) -> dict[str, Any]:
    nodes = plan_nodes(plan["Plan"])
    # The ready partition's claim index that returned the jobs (migration 0012).
    picked = max(
        (n for n in nodes if str(n.get("Index Name", "")).endswith("_claim_idx")),
        key=lambda n: n["Actual Rows"],
    )
    return {
        # The nodes that ran: the suspect probe (LIMIT 0 without solo) never runs, and may be
        # planned as a sort of the few suspects of the ready set (migration 0012).
        "shape": [n["Node Type"] for n in nodes if n.get("Actual Loops", 1) > 0],
        "index": picked["Index Name"],
        "rows": picked["Actual Rows"],
        # The index scan's own pages: the SubPlan that locks each candidate's jobs row by key
        # (migration 0012) reads the primary key, which is as deep as the table once was large;
        # EXPLAIN counts it in the partition that ran it but lists it under the first one.
        "buffers": _blocks(picked)
        - sum(_blocks(n) for n in nodes if n.get("Parent Relationship") == "SubPlan"),
        "ms": plan.get("Execution Time"),
    }


async def _claim_plan(conn: Conn, queue_id: int, worker_id: int) -> dict[str, Any]:
    """EXPLAIN ANALYZE the real claim inside a transaction that is rolled back."""
    params = {
        "queue_id": queue_id,
        "worker_id": worker_id,
        "n": 10,
        "lease_s": 30.0,
        "start": True,
        "solo": False,
        "limited": False,
        "now": None,
    }
    await conn.execute("BEGIN")
    try:
        cur = await conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql("job_claim_batch"),  # type: ignore[operator]
            params,
        )
        row = await cur.fetchone()
    finally:
        await conn.execute("ROLLBACK")
    assert row is not None
    plan = row["QUERY PLAN"]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return _explain_claim_stats(plan[0])


@pytest.mark.slow
# Its 200,000-row UPDATE holds an xid for a minute on a loaded host, which holds every
# database's horizon: with the tests that watch it (docs/TESTING.md).
@pytest.mark.xdist_group("horizon")
async def test_pruning_200k_done_jobs_leaves_the_claim_plan_unchanged(conn: Conn) -> None:
    """The claim index is partial (status = 'queued'), so finished rows never belong to it;
    retention keeps the table itself bounded. Compare plan shape, rows and buffers (not time)."""
    queue = await make_queue(conn)
    worker = await make_worker(conn, project_id=queue["project_id"])
    # Steady state: 20,000 recent finished jobs (inside the retention window) and 1,000
    # claimable jobs queued after them.
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, run_at, finished_at)
           SELECT %s, %s, 'noop', 'done', now() - interval '1 day', now() - interval '1 day'
           FROM generate_series(1, 20000) g""",
        (queue["project_id"], queue["id"]),
    )
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, run_at)
           SELECT %s, %s, 'noop', 'queued', now() + g * interval '1 ms'
           FROM generate_series(1, 1000) g""",
        (queue["project_id"], queue["id"]),
    )
    await conn.execute("VACUUM ANALYZE jobs, job_ready")
    baseline = await _claim_plan(conn, queue["id"], worker["id"])

    # 200,000 jobs that really went through the claim index: queued, then finished 8 days ago.
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, run_at)
           SELECT %s, %s, 'noop', 'queued', now() - interval '9 days' + g * interval '1 ms'
           FROM generate_series(1, 200000) g""",
        (queue["project_id"], queue["id"]),
    )
    await conn.execute(
        """UPDATE jobs SET status = 'done', finished_at = now() - interval '8 days'
           WHERE status = 'queued' AND run_at < now() - interval '2 days'"""
    )
    await conn.execute("ANALYZE jobs")
    loaded = await _claim_plan(conn, queue["id"], worker["id"])

    started = time.perf_counter()
    result = await prune_retention(
        conn, jobs_age_s=WEEK, heartbeats_age_s=DAY, batch=5000, max_batches=1000
    )
    prune_s = time.perf_counter() - started  # recorded in docs, never asserted
    assert result.jobs == 200_000
    assert result.batches == 41 + 5  # 40 full batches and an empty one, then 1 per other table
    # What autovacuum does after a large delete; retention relies on it, as any DELETE does.
    await conn.execute("VACUUM ANALYZE jobs, job_ready")
    pruned = await _claim_plan(conn, queue["id"], worker["id"])

    print(f"\nclaim plan baseline={baseline} loaded={loaded} pruned={pruned} prune_s={prune_s:.1f}")
    assert pruned["shape"] == baseline["shape"]
    assert pruned["index"] == baseline["index"]
    assert pruned["index"].startswith("job_ready_") and pruned["index"].endswith("_claim_idx")
    assert "Sort" not in pruned["shape"]
    assert pruned["rows"] == baseline["rows"] == 10
    # Same pages touched, within a couple for index-root/page-split noise.
    assert pruned["buffers"] <= baseline["buffers"] + 3, (baseline, pruned)
    assert await count(conn, "jobs") == 21_000


async def _worker_gone(
    conn: Conn, project_id: int, name: str, status: str, stopped_days_ago: float | None
) -> int:
    stopped = None if stopped_days_ago is None else T0 - timedelta(days=stopped_days_ago)
    row = await one(
        conn,
        """INSERT INTO workers (project_id, name, concurrency, status, started_at,
                                last_heartbeat_at, stopped_at)
           VALUES (%s, %s, 4, %s::worker_status, %s, %s, %s) RETURNING id""",
        project_id,
        name,
        status,
        T0 - timedelta(days=30),
        stopped or T0,
        stopped,
    )
    await conn.execute(
        "INSERT INTO worker_heartbeats (worker_id, beat_at, in_flight, capacity)"
        " VALUES (%s, %s, 0, 4)",
        # Recent, so the heartbeat prune leaves it: only the worker's deletion removes it.
        (row["id"], T0 - timedelta(hours=1)),
    )
    return int(row["id"])


async def test_retention_deletes_long_gone_workers_that_hold_nothing(conn: Conn) -> None:
    queue = await make_queue(conn)
    p = queue["project_id"]
    old_stopped = await _worker_gone(conn, p, "old-stopped", "stopped", 15)
    old_dead = await _worker_gone(conn, p, "old-dead", "dead", 20)
    holding = await _worker_gone(conn, p, "dead-holding", "dead", 20)
    recent = await _worker_gone(conn, p, "recent", "stopped", 1)
    active = await _worker_gone(conn, p, "active", "active", None)
    # What the old dead worker ran stays, with its worker_id nulled; the job a dead worker
    # still holds waits for the reaper, so that worker stays.
    ran = await one(
        conn,
        """INSERT INTO jobs (project_id, queue_id, handler, status, worker_id, execution_seq,
                             attempt, finished_at)
           VALUES (%s, %s, 'noop', 'done', %s, 1, 1, %s) RETURNING id""",
        p,
        queue["id"],
        old_dead,
        T0 - timedelta(days=1),
    )
    await conn.execute(
        """INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, outcome,
                                       started_at, finished_at)
           VALUES (%s, 1, 1, %s, 'succeeded', %s, %s)""",
        (ran["id"], old_dead, T0 - timedelta(days=1), T0 - timedelta(days=1)),
    )
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, worker_id, execution_seq,
                            attempt, lock_expires_at, claimed_at, started_at)
           VALUES (%s, %s, 'noop', 'running', %s, 1, 1, %s, %s, %s)""",
        (p, queue["id"], holding, T0, T0, T0),
    )
    result = await Retention(RetentionConfig(workers_age_s=14 * DAY)).run_once(conn, now=T0)
    assert result.counts["workers"] == 2
    left = await all_rows(conn, "SELECT id FROM workers ORDER BY id")
    assert [r["id"] for r in left] == [holding, recent, active]
    assert old_stopped not in [r["id"] for r in left]
    assert await one(conn, "SELECT worker_id FROM jobs WHERE id = %s", ran["id"]) == {
        "worker_id": None
    }
    assert await one(conn, "SELECT worker_id FROM job_executions WHERE job_id = %s", ran["id"]) == {
        "worker_id": None
    }
    beats = await all_rows(conn, "SELECT worker_id FROM worker_heartbeats ORDER BY worker_id")
    assert [r["worker_id"] for r in beats] == [holding, recent, active]


async def test_retention_deletes_old_batches_none_of_whose_jobs_is_left(conn: Conn) -> None:
    queue = await make_queue(conn)

    async def batch(days_ago: float, jobs: int) -> int:
        row = await one(
            conn,
            "INSERT INTO job_batches (project_id, queue_id, size, created_at)"
            " VALUES (%s, %s, 1, %s) RETURNING id",
            queue["project_id"],
            queue["id"],
            T0 - timedelta(days=days_ago),
        )
        for _ in range(jobs):
            await conn.execute(
                "INSERT INTO jobs (project_id, queue_id, handler, status, batch_id, finished_at)"
                " VALUES (%s, %s, 'noop', 'done', %s, %s)",
                (queue["project_id"], queue["id"], row["id"], T0 - timedelta(days=1)),
            )
        return int(row["id"])

    emptied = await batch(10, 0)
    with_a_job = await batch(10, 1)
    recent = await batch(1, 0)
    result = await Retention(RetentionConfig(batches_age_s=WEEK)).run_once(conn, now=T0)
    assert result.counts["batches"] == 1
    left = await all_rows(conn, "SELECT id FROM job_batches ORDER BY id")
    assert [r["id"] for r in left] == [with_a_job, recent]
    assert emptied not in [r["id"] for r in left]
    # The job kept its batch.
    assert await one(conn, "SELECT count(*) AS n FROM jobs WHERE batch_id = %s", with_a_job) == {
        "n": 1
    }


async def test_the_prunes_find_a_workers_and_a_batchs_jobs_through_an_index(conn: Conn) -> None:
    """What deleting a worker runs (workers_null_refs) and the batch prune's probe, on 20,000
    jobs: the worker's jobs found through what it ran (job_executions_worker_idx) and updated by
    key, the batch's through jobs_batch_idx; neither scans jobs."""
    queue = await make_queue(conn)
    worker = await make_worker(conn, project_id=queue["project_id"])
    b = await one(
        conn,
        "INSERT INTO job_batches (project_id, queue_id, size) VALUES (%s, %s, 1) RETURNING id",
        queue["project_id"],
        queue["id"],
    )
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, worker_id, batch_id,
                             finished_at)
           SELECT %s, %s, 'noop', 'done', CASE WHEN g = 1 THEN %s END,
                  CASE WHEN g = 2 THEN %s::bigint END, now()
           FROM generate_series(1, 20000) g""",
        (queue["project_id"], queue["id"], worker["id"], b["id"]),
    )
    await conn.execute("ANALYZE jobs")

    async def planned(query: str, params: dict[str, Any], key: str) -> set[str]:
        """The `key` ("Index Name", "Relation Name") of every node of the query's plan."""
        cur = await conn.execute("EXPLAIN (FORMAT JSON) " + query, params)  # type: ignore[arg-type]
        row = await cur.fetchone()
        assert row is not None
        plan = row["QUERY PLAN"]
        plan = json.loads(plan) if isinstance(plan, str) else plan
        return {n[key] for n in plan_nodes(plan[0]["Plan"]) if key in n}

    async def indexes(query: str, params: dict[str, Any]) -> set[str]:
        return await planned(query, params, "Index Name")

    async def relations(query: str, params: dict[str, Any]) -> set[str]:
        return await planned(query, params, "Relation Name")

    ran = await one(conn, "SELECT id FROM jobs WHERE worker_id = %s", worker["id"])
    await conn.execute(
        """INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, outcome,
                                       started_at, finished_at)
           VALUES (%s, 1, 1, %s, 'succeeded', now(), now())""",
        (ran["id"], worker["id"]),
    )
    scans = "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'jobs'"
    async with conn.transaction():
        before = await one(conn, scans)
        await conn.execute("DELETE FROM workers WHERE id = %s", (worker["id"],))
        # This transaction's own counters: the null-out did not read jobs sequentially.
        assert await one(conn, scans) == before
    assert await one(conn, "SELECT worker_id FROM jobs WHERE id = %s", ran["id"]) == {
        "worker_id": None
    }
    params = {"batch": 5000, "age_s": WEEK, "now": None}
    assert "jobs_batch_idx" in await indexes(sql("retention_delete_batches"), params)
    # The worker prune's "holds no job" probe reads the held set (job_held), never jobs.
    probe = await relations(sql("retention_delete_workers"), {**params, "batch": 100})
    assert any(r.startswith("job_held") for r in probe) and "jobs" not in probe, probe
