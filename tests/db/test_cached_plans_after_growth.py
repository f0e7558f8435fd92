"""The engine's path reads the history tables by key once they have grown, with plans made
while they were small.

PL/pgSQL keeps a trigger's statement plans for the session, and psycopg's prepared statements
keep a generic plan: each is replanned only when a table it names (for a trigger, also the table
of its transition tables) is invalidated by an ANALYZE, a VACUUM that changes its size, or DDL.
`jobs` churns, so autovacuum keeps visiting it; the history tables — batches, dependencies,
runs, worker references, dead letters — only grow, and under a held horizon autovacuum may not
reach them for many minutes (docs/BENCHMARKS.md, migration 0033).

One session runs the engine's path — batch enqueue with callbacks, a workflow, singles with a
parent, claims of a plain and a limited queue, heartbeats, completions, a retryable failure put
back by `run_now`, a dead-lettered parent whose child the failure policy cancels, a cancel, the
reaper — seven times on small tables, so that every statement is planned and its plan kept.
Then the history grows by `GROWN` finished jobs with their rows in every history table, none of
those tables analyzed (autovacuum is off for every table), `jobs` is analyzed as autovacuum
would, and the same path runs once more with every plan logged, nested ones included
(auto_explain). No plan may read a history table whole: a sequential scan of one, or a scan
whose filter threw away a large part of it, fails the test.

docs/TESTING.md records what failed with the mechanism broken.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobyard.core import actions, claim, enqueue, lease, transitions, workflows
from jobyard.core.claim import queues_by_names
from jobyard.core.maintenance import reap_expired_leases
from jobyard.db.pool import Conn
from jobyard.domain.ids import JobId, ProjectId, WorkerId
from jobyard.domain.models import ClaimedJob, QueueRef
from jobyard.domain.schemas import (
    BatchCreate,
    BatchItem,
    CallbackSpec,
    JobCreate,
    WorkflowCreate,
    WorkflowStep,
)
from tests.db.nested_plans import NestedPlans
from tests.factories import make_queue, make_worker

GROWN = 20_000
WARM_ROUNDS = 7
# The history tables a finished job leaves rows in: what grows without bound until retention.
GROWN_TABLES = (
    "jobs",
    "job_batches",
    "job_dependencies",
    "job_executions",
    "job_worker_refs",
    "dead_letter_jobs",
)
# A by-key read of a round's few dozen jobs throws away a handful of rows; a pass over a grown
# table throws away thousands.
MAX_REMOVED = GROWN // 10


async def _claim_all(conn: Conn, queue: QueueRef, worker: WorkerId) -> list[ClaimedJob]:
    return await claim.claim_batch(conn, queue, worker, 100, lease_s=30.0, start=True)


async def _round(
    conn: Conn, project: ProjectId, plain: QueueRef, limited: QueueRef, worker: WorkerId
) -> None:
    """The engine's path once: every trigger statement of enqueue, claim and finish runs."""
    items = [BatchItem(handler="noop") for _ in range(10)]
    on_complete = CallbackSpec(handler="after_batch", queue=plain.name)
    await enqueue.enqueue_batch(
        conn, project, BatchCreate(queue=plain.name, jobs=items, on_complete=on_complete)
    )
    await enqueue.enqueue_batch(conn, project, BatchCreate(queue=limited.name, jobs=items[:5]))
    steps = [
        WorkflowStep(key="a", queue=plain.name, handler="noop"),
        WorkflowStep(key="b", queue=plain.name, handler="noop", after=["a"]),
        WorkflowStep(key="c", queue=plain.name, handler="noop", after=["a", "b"]),
    ]
    await workflows.enqueue_workflow(conn, project, WorkflowCreate(steps=steps))
    doomed = await enqueue.enqueue(
        conn, project, JobCreate(queue=plain.name, handler="doomed", max_attempts=1)
    )
    doomed_id = int(doomed.job["id"])
    await enqueue.enqueue(
        conn, project, JobCreate(queue=plain.name, handler="noop", depends_on=[doomed_id])
    )
    retried = await enqueue.enqueue(conn, project, JobCreate(queue=plain.name, handler="flaky"))
    retried_id = int(retried.job["id"])
    cancelled = await enqueue.enqueue(
        conn, project, JobCreate(queue=plain.name, handler="noop", run_at=_later())
    )
    await actions.act_on_job(conn, project, "cancel", JobId(int(cancelled.job["id"])))

    # Claim and finish until the plain queue is empty: the workflow's steps are released one
    # after another, the batch's callback job appears once the batch is complete.
    flaked = False
    for _ in range(6):
        got = await _claim_all(conn, plain, worker)
        if not got:
            break
        await lease.heartbeat(conn, worker, got, lease_s=30.0, capacity=100)
        failed: set[int] = set()
        for job in got:
            if job.id == doomed_id:
                failed.add(job.id)
                await transitions.fail(conn, job, "Boom", "no", retryable=False)
            elif job.id == retried_id and not flaked:
                flaked = True
                failed.add(job.id)
                await transitions.fail(conn, job, "Flaky", "again")
                await actions.act_on_job(conn, project, "run_now", JobId(retried_id))
        await transitions.complete_many(conn, [j for j in got if j.id not in failed])

    # The limited queue: its room count reads the held set; two leases are left to expire and
    # are taken back by the reaper.
    got = await _claim_all(conn, limited, worker)
    await transitions.complete_many(conn, got[2:])
    await reap_expired_leases(conn, now=_later())
    for job in await _claim_all(conn, limited, worker):
        await transitions.complete_many(conn, [job])


def _later() -> datetime:
    return datetime.now(UTC) + timedelta(hours=1)


async def _grow(conn: Conn, project: ProjectId, queue: QueueRef, worker: WorkerId) -> None:
    """`GROWN` finished jobs with their runs, batches, dependencies, worker references and
    dead letters: the history a busy project keeps until retention prunes it."""
    params = {"p": project, "q": queue.id, "w": worker, "n": GROWN}
    await conn.execute(
        """INSERT INTO job_batches (project_id, queue_id, size, done, callbacks, completed_at)
           SELECT %(p)s, %(q)s, 1, 1,
                  '{"on_complete": {"handler": "after_batch", "queue": "plain"}}', now()
           FROM generate_series(1, %(n)s)""",
        params,
    )
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, finished_at, worker_id,
                             batch_id, attempt, execution_seq)
           SELECT %(p)s, %(q)s, 'history', 'done', now(), %(w)s, b.id, 1, 1
           FROM job_batches b WHERE b.size = 1""",
        params,
    )
    await conn.execute(
        """INSERT INTO job_dependencies (job_id, depends_on_job_id)
           SELECT id, lag(id) OVER (ORDER BY id) FROM jobs WHERE handler = 'history'
           OFFSET 1""",
    )
    await conn.execute(
        """INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, outcome,
                                       started_at, finished_at, duration_ms)
           SELECT id, 1, 1, %(w)s, 'succeeded', now(), now(), 1
           FROM jobs WHERE handler = 'history'""",
        params,
    )
    await conn.execute(
        """INSERT INTO dead_letter_jobs (project_id, queue_id, handler, payload, reason,
                                         attempts)
           SELECT %(p)s, %(q)s, 'history', '{}', 'exhausted', 1
           FROM generate_series(1, %(n)s)""",
        params,
    )
    for table in GROWN_TABLES:
        row = await (await conn.execute(f"SELECT count(*) AS n FROM {table}")).fetchone()
        assert row is not None and row["n"] >= GROWN, (table, row)


async def test_no_cached_plan_reads_a_grown_history_table_whole(conn: Conn) -> None:
    plain_row = await make_queue(conn, name="plain")
    project = ProjectId(plain_row["project_id"])
    await make_queue(conn, project_id=project, name="limited", max_concurrency=50)
    worker = WorkerId((await make_worker(conn, project_id=project))["id"])
    plain, limited = await queues_by_names(conn, project, ["plain", "limited"])
    # Before any plan is made: DDL would invalidate them.
    leaves = await (
        await conn.execute(
            "SELECT c.oid::regclass::text AS name FROM pg_class c"
            " WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace"
        )
    ).fetchall()
    for leaf in leaves:
        await conn.execute(f"ALTER TABLE {leaf['name']} SET (autovacuum_enabled = off)")

    for _ in range(WARM_ROUNDS):
        await _round(conn, project, plain, limited, worker)
    await _grow(conn, project, plain, worker)
    # `jobs` itself is never left unanalyzed for long: its churn keeps autovacuum on it even
    # under a held horizon, and each VACUUM or ANALYZE of it replans every statement that
    # names it. The trap is a statement over the other tables alone.
    await conn.execute("ANALYZE jobs")
    plans = NestedPlans()
    await plans.watch(conn)
    await _round(conn, project, plain, limited, worker)

    read = 0
    whole = []
    for table in GROWN_TABLES:
        for scan in plans.scans_of_table(table):
            read += 1
            if "Seq Scan" in scan.node or scan.removed_by_filter >= MAX_REMOVED:
                whole.append(scan)
    assert not whole, "\n".join(f"{s.node} {s.details}" for s in whole)
    assert read > 20, f"only {read} scans of the history tables were seen"
    callbacks = await (
        await conn.execute(
            "SELECT count(*) AS n FROM jobs WHERE handler = 'after_batch' AND status = 'done'"
        )
    ).fetchone()
    assert callbacks is not None and callbacks["n"] == WARM_ROUNDS + 1
