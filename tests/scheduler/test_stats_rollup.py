"""The stats rollup: finished runs, enqueues and dead letters folded into minute buckets and
totals exactly once, young rows left for the next pass, charts read from the buckets only."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from jobyard.core import stats
from jobyard.db.pool import Conn, connect
from jobyard.db.queries import sql
from jobyard.domain.ids import ProjectId, QueueId
from jobyard.domain.stats import BOUNDS_MS, percentile
from jobyard.scheduler.stats_rollup import StatsConfig, StatsRollup
from tests.factories import make_queue
from tests.scheduler.helpers import T0, one


async def add_runs(
    conn: Conn,
    queue: dict[str, Any],
    n: int,
    *,
    outcome: str = "succeeded",
    duration_ms: int = 40,
    wait_s: float = 1.5,
    finished_at: Any = T0,
    status: str = "done",
    attempt: int = 1,
    max_attempts: int = 5,
) -> None:
    """n jobs with one finished run each (set-based, as the dashboard benchmark builds them)."""
    await conn.execute(
        """WITH j AS (
               INSERT INTO jobs (project_id, queue_id, handler, status, run_at, execution_seq,
                                 attempt, max_attempts, finished_at, created_at)
               SELECT %(p)s, %(q)s, 'noop', %(status)s::job_status,
                      %(at)s - make_interval(secs => %(wait)s + %(dur)s / 1000.0), 1,
                      %(attempt)s, %(max)s,
                      CASE WHEN %(status)s IN ('done', 'dead_letter', 'cancelled')
                           THEN %(at)s::timestamptz END,
                      %(at)s - interval '1 minute'
               FROM generate_series(1, %(n)s) RETURNING id, run_at)
           INSERT INTO job_executions (job_id, execution_seq, attempt, outcome, started_at,
                                       finished_at, duration_ms)
           SELECT j.id, 1, %(attempt)s, %(outcome)s::execution_outcome,
                  %(at)s - make_interval(secs => %(dur)s / 1000.0), %(at)s, %(dur)s
           FROM j ORDER BY j.id""",
        {
            "p": queue["project_id"],
            "q": queue["id"],
            "n": n,
            "outcome": outcome,
            "dur": duration_ms,
            "wait": wait_s,
            "at": finished_at,
            "status": status,
            "attempt": attempt,
            "max": max_attempts,
        },
    )


async def test_runs_are_folded_into_minute_buckets_and_totals_once(conn: Conn) -> None:
    q = await make_queue(conn)
    await add_runs(conn, q, 30, duration_ms=40)
    await add_runs(conn, q, 5, outcome="failed", duration_ms=700, status="scheduled")
    await add_runs(conn, q, 2, outcome="failed", status="dead_letter", attempt=5, max_attempts=5)
    result = await stats.fold(conn, now=T0 + timedelta(minutes=1))
    assert result.runs == 37
    assert result.enqueued == 37
    assert result.queue_ids == {q["id"]}
    bucket = await one(conn, "SELECT * FROM queue_stats WHERE queue_id = %s AND bucket = %s",
                       q["id"], T0)  # fmt: skip
    assert (bucket["succeeded"], bucket["failed"], bucket["retried"]) == (30, 7, 5)
    # 30 runs of 40 ms land in (25, 50]; 5 of 700 ms in (500, 1000]; 2 of 40 ms.
    assert bucket["run_hist"][BOUNDS_MS.index(50)] == 32
    assert bucket["run_hist"][BOUNDS_MS.index(1000)] == 5
    assert sum(bucket["run_hist"]) == 37
    # Queue wait is known for the finished jobs' runs (done and dead-lettered): 1.5 s each.
    assert sum(bucket["wait_hist"]) == 32
    assert bucket["wait_hist"][BOUNDS_MS.index(2500)] == 32
    totals = await one(conn, "SELECT * FROM queue_stats_totals WHERE queue_id = %s", q["id"])
    assert (totals["succeeded"], totals["failed"], totals["enqueued"]) == (30, 7, 37)
    assert totals["run_count"] == 37

    again = await stats.fold(conn, now=T0 + timedelta(minutes=1))
    assert (again.runs, again.enqueued) == (0, 0)
    totals = await one(conn, "SELECT * FROM queue_stats_totals WHERE queue_id = %s", q["id"])
    assert totals["succeeded"] == 30


async def test_rows_younger_than_the_lag_wait_for_the_next_pass(conn: Conn) -> None:
    q = await make_queue(conn)
    await add_runs(conn, q, 3, finished_at=T0)
    await add_runs(conn, q, 4, finished_at=T0 + timedelta(seconds=59))
    first = await stats.fold(conn, now=T0 + timedelta(seconds=60), lag_s=2.0)
    assert first.runs == 3
    later = await stats.fold(conn, now=T0 + timedelta(seconds=70), lag_s=2.0)
    assert later.runs == 4


async def test_two_replicas_folding_at_once_count_every_run_once(conn: Conn, db_url: str) -> None:
    q = await make_queue(conn)
    await add_runs(conn, q, 500)
    other = await connect(db_url, autocommit=True)
    try:
        now = T0 + timedelta(minutes=1)
        await asyncio.gather(
            *(stats.fold(c, batch=50, now=now) for c in (conn, other, conn, other))
        )
        await stats.fold(conn, now=now)
    finally:
        await other.close()
    totals = await one(conn, "SELECT * FROM queue_stats_totals WHERE queue_id = %s", q["id"])
    assert (totals["succeeded"], totals["enqueued"]) == (500, 500)


async def test_dead_letters_are_counted(conn: Conn) -> None:
    q = await make_queue(conn)
    await conn.execute(
        """INSERT INTO dead_letter_jobs (project_id, queue_id, handler, payload, reason, attempts,
                                         dead_lettered_at)
           SELECT %s, %s, 'noop', '{}', 'exhausted', 5, %s FROM generate_series(1, 3)""",
        (q["project_id"], q["id"], T0),
    )
    result = await stats.fold(conn, now=T0 + timedelta(minutes=1))
    assert result.dead_lettered == 3


async def test_series_and_percentiles_come_from_the_buckets(conn: Conn) -> None:
    q = await make_queue(conn)
    await add_runs(conn, q, 100, duration_ms=40, finished_at=T0 - timedelta(minutes=10))
    await add_runs(conn, q, 10, duration_ms=4000, finished_at=T0 - timedelta(minutes=5))
    await stats.fold(conn, now=T0)
    chart = await stats.series(
        conn, ProjectId(q["project_id"]), window="1h", queue_id=QueueId(q["id"]), now=T0
    )
    assert len(chart["points"]) == 60
    assert chart["totals"]["succeeded"] == 110
    p50 = chart["totals"]["run_ms"]["p50"]
    assert p50 is not None and 25 < p50 <= 50
    p99 = chart["totals"]["run_ms"]["p99"]
    assert p99 is not None and 2500 < p99 <= 5000
    week = await stats.series(conn, ProjectId(q["project_id"]), window="7d", now=T0)
    assert week["totals"]["succeeded"] == 110


async def test_the_chart_query_never_reads_jobs(conn: Conn) -> None:
    q = await make_queue(conn)
    plan = await conn.execute(
        "EXPLAIN " + sql("stats_series"),
        {"project_id": q["project_id"], "queue_id": None, "range_s": 604800, "step_s": 7200,
         "now": T0, "hourly": True},
    )  # fmt: skip
    text = "\n".join(r["QUERY PLAN"] for r in await plan.fetchall())
    assert " jobs " not in text and "on jobs" not in text, text
    assert "queue_stats" in text


def test_percentile_interpolates_inside_a_bucket() -> None:
    hist = [0] * (len(BOUNDS_MS) + 1)
    hist[BOUNDS_MS.index(50)] = 10  # ten values in (25, 50]
    assert percentile(hist, 0.5) == 37.5
    assert percentile([], 0.5) is None


async def test_the_loop_reports_its_counts(conn: Conn) -> None:
    q = await make_queue(conn)
    await add_runs(conn, q, 4)
    result = await StatsRollup(StatsConfig(interval_s=1)).run_once(
        conn, now=T0 + timedelta(minutes=1)
    )
    assert result.counts["runs"] == 4
