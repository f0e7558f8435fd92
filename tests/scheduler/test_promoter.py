"""The promoter: due scheduled jobs → queued, in bounded SKIP LOCKED batches, once each."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta

from jobyard.core.maintenance import promote_due
from jobyard.db.pool import Conn, connect
from jobyard.db.queries import sql
from jobyard.scheduler.promoter import PROMOTE_SLACK_S, Promoter, PromoterConfig
from tests.factories import make_queue
from tests.scheduler.helpers import T0, all_rows, plan_nodes


async def add_scheduled(conn: Conn, queue: dict[str, object], n: int, *, due: bool) -> None:
    run_at = T0 - timedelta(seconds=5) if due else T0 + timedelta(hours=1)
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, run_at)
           SELECT %s, %s, 'noop', 'scheduled', %s - g * interval '1 ms'
           FROM generate_series(1, %s) g""",
        (queue["project_id"], queue["id"], run_at, n),
    )


async def counts(conn: Conn) -> dict[str, int]:
    rows = await all_rows(conn, "SELECT status::text, count(*) AS n FROM jobs GROUP BY 1")
    return {r["status"]: r["n"] for r in rows}


async def test_promoter_moves_a_5000_job_backlog_in_bounded_passes(conn: Conn) -> None:
    queue = await make_queue(conn)
    await add_scheduled(conn, queue, 5000, due=True)
    await add_scheduled(conn, queue, 100, due=False)
    # One statement never moves more than `batch` rows.
    assert (await promote_due(conn, batch=500, now=T0)).promoted == 500
    promoter = Promoter(PromoterConfig(interval_s=1, batch=500, max_batches=4))
    passes = []
    while True:
        result = await promoter.run_once(conn, now=T0)
        passes.append(result.counts["promoted"])
        if not result.more:
            break
    # 4 500 left: two capped passes of 4 × 500, then one of 500 that drains it.
    assert passes == [2000, 2000, 500]
    assert await counts(conn) == {"queued": 5000, "scheduled": 100}


async def test_promoter_leaves_jobs_that_are_not_due(conn: Conn) -> None:
    queue = await make_queue(conn)
    await add_scheduled(conn, queue, 10, due=False)
    assert (await promote_due(conn, now=T0)).promoted == 0
    assert (await promote_due(conn, now=T0 + timedelta(hours=2))).promoted == 10


async def test_a_job_behind_the_position_waits_for_the_full_pass(conn: Conn) -> None:
    """A job due before the position (its enqueue committed long after its run_at, or a pass
    skipped it while another session held its row) is not seen by a positioned pass; the next
    full pass promotes it. Jobs due since the position are promoted at once."""
    queue = await make_queue(conn)
    promoter = Promoter(PromoterConfig(interval_s=1, full_every_s=3600))
    assert (await promoter.run_once(conn, now=T0)).counts["promoted"] == 0  # full, nothing due
    behind = await add_one_scheduled(conn, queue, T0 - timedelta(seconds=PROMOTE_SLACK_S + 1))
    recent = await add_one_scheduled(conn, queue, T0 + timedelta(seconds=1))
    second = await promoter.run_once(conn, now=T0 + timedelta(seconds=2))
    assert second.counts["promoted"] == 1
    assert (await status_of(conn, recent), await status_of(conn, behind)) == (
        "queued",
        "scheduled",
    )
    promoter.position.next_full_at = 0.0  # the full pass is due
    third = await promoter.run_once(conn, now=T0 + timedelta(seconds=3))
    assert third.counts["promoted"] == 1
    assert await status_of(conn, behind) == "queued"


async def add_one_scheduled(conn: Conn, queue: dict[str, object], run_at: datetime) -> int:
    cur = await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, run_at)
           VALUES (%s, %s, 'noop', 'scheduled', %s) RETURNING id""",
        (queue["project_id"], queue["id"], run_at),
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row["id"])


async def status_of(conn: Conn, job_id: int) -> str:
    rows = await all_rows(conn, "SELECT status::text FROM jobs WHERE id = %s", job_id)
    return str(rows[0]["status"])


async def test_two_promoters_racing_promote_each_job_once(conn: Conn, db_url: str) -> None:
    queue = await make_queue(conn)
    await add_scheduled(conn, queue, 5000, due=True)
    a = await connect(db_url, autocommit=True)
    b = await connect(db_url, autocommit=True)
    try:
        pa = Promoter(PromoterConfig(interval_s=1, batch=97, max_batches=1000))
        pb = Promoter(PromoterConfig(interval_s=1, batch=97, max_batches=1000))
        ra, rb = await asyncio.gather(pa.run_once(a, now=T0), pb.run_once(b, now=T0))
    finally:
        await a.close()
        await b.close()
    # Each job changed state exactly once: the two counts add up to the backlog, no more.
    assert ra.counts["promoted"] + rb.counts["promoted"] == 5000
    assert await counts(conn) == {"queued": 5000}


async def test_promotion_notifies_each_promoted_queue_once(conn: Conn, db_url: str) -> None:
    queues = [await make_queue(conn) for _ in range(3)]
    for q in queues:
        await add_scheduled(conn, q, 50, due=True)
    listener = await connect(db_url, autocommit=True)
    try:
        await listener.execute("LISTEN jobyard_jobs")
        result = await promote_due(conn, batch=1000, now=T0)
        heard = [n.payload async for n in listener.notifies(timeout=1.0)]
    finally:
        await listener.close()
    assert (result.promoted, result.queues) == (150, 3)
    assert sorted(heard) == sorted(str(q["id"]) for q in queues)


async def test_promote_plan_reads_the_scheduled_index_without_sorting(conn: Conn) -> None:
    queue = await make_queue(conn)
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, finished_at)
           SELECT %s, %s, 'noop', 'done', now() FROM generate_series(1, 20000)""",
        (queue["project_id"], queue["id"]),
    )
    # Twenty batches due: the plan that matters is the one for a large backlog, where sorting every
    # due row to take a batch would cost the most. With two batches due (as before) a bitmap scan
    # plus a top-N sort of 2,000 rows was close enough in cost that the planner chose it in one CI
    # run out of many.
    await add_scheduled(conn, queue, 20000, due=True)
    await conn.execute("ANALYZE jobs")
    cur = await conn.execute(
        "EXPLAIN (FORMAT JSON) " + sql("job_promote_due"),  # type: ignore[operator]
        {"batch": 1000, "now": T0, "since": None},
    )
    row = await cur.fetchone()
    assert row is not None
    plan = row["QUERY PLAN"]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    nodes = plan_nodes(plan[0]["Plan"])
    assert any(n.get("Index Name") == "jobs_due_idx" for n in nodes), nodes
    assert "Sort" not in [n["Node Type"] for n in nodes]
