"""The ready set's trigger reads `job_ready` by key, whatever the planner believes of it
(migration 0032).

The same trap as the held set's (migration 0031, tests/db/test_held_sync_by_key.py): under a held
xmin horizon a `job_ready` partition fills with the dead rows of the jobs claimed from it, an
autovacuum pass records it as holding few or no live rows, and a join planned from those
statistics reads the partition whole for every job. `jobs_ready_sync` had two such joins on the
path of every statement that leaves jobs queued (a release, a retry's promotion, a reprioritised
backlog): the UPDATE `… FROM new_jobs n WHERE r.job_id = n.id` and the INSERT's `NOT EXISTS
(SELECT FROM job_ready r WHERE r.job_id = n.id)`. This test builds the state (dead rows in every
partition kept by a REPEATABLE READ snapshot, then VACUUM ANALYZE) and reads the plans the
trigger's statements ran with: every scan of a ready partition runs once a statement and fetches
none of the dead rows through the index.

docs/TESTING.md records what failed with the mechanism broken.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobyard.core import claim, enqueue, maintenance, transitions
from jobyard.core.claim import queues_by_names
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.schemas import BatchCreate, BatchItem
from tests.db.nested_plans import NestedPlans, dead_rows_kept
from tests.factories import make_queue, make_worker

# A REPEATABLE READ session holds the xmin horizon: share the group of the tests that read it.
pytestmark = pytest.mark.xdist_group("horizon")

DEAD_PER_PARTITION = 3_000
JOBS = 50


async def test_statements_that_queue_jobs_probe_the_ready_set_by_key(
    conn: Conn, db_url: str
) -> None:
    q = await make_queue(conn, name="ready")
    w = await make_worker(conn, project_id=q["project_id"])
    project = ProjectId(q["project_id"])
    (queue,) = await queues_by_names(conn, project, ["ready"])
    now = (await (await conn.execute("SELECT now() AS t")).fetchone() or {})["t"]
    later = now + timedelta(hours=1)
    await enqueue.enqueue_batch(
        conn, project, BatchCreate(queue="ready", jobs=[BatchItem(handler="noop")] * JOBS)
    )
    scheduled = [BatchItem(handler="noop", run_at=later) for _ in range(JOBS)]
    await enqueue.enqueue_batch(conn, project, BatchCreate(queue="ready", jobs=scheduled))
    holder = await dead_rows_kept(
        conn,
        db_url,
        "job_ready",
        "%(slot)s, -g, %(queue_id)s, 0, now(), false",
        q["id"],
        DEAD_PER_PARTITION,
    )
    plans = NestedPlans()
    try:
        await plans.watch(conn)
        # Leaves 'queued' (the DELETE by key), then enters it again (the INSERT)…
        claimed = await claim.claim_batch(conn, queue, WorkerId(w["id"]), JOBS, lease_s=30)
        released = await transitions.release_many(conn, claimed)
        # …stays queued with a new order (the UPDATE), and enters it from 'scheduled'.
        await conn.execute("UPDATE jobs SET priority = 5 WHERE status = 'queued'")
        promoted = await maintenance.promote_due(conn, now=later + timedelta(seconds=1))
    finally:
        await holder.rollback()
        await holder.close()
    assert len(claimed) == len(released) == JOBS and promoted.promoted == JOBS
    scans = plans.scans_of("job_ready")
    assert scans, "no plan scanned a job_ready partition"
    for scan in scans:
        # Once a statement: a scan repeated for every job is the walk this test guards against…
        assert scan.loops <= 1, scan.node
        # …and never through the index entries of the dead rows.
        assert all(n < DEAD_PER_PARTITION for n in scan.heap_fetches), scan
    ready = await (
        await conn.execute("SELECT count(*) AS n, min(priority) AS lo FROM job_ready")
    ).fetchone()
    assert ready is not None and ready["n"] == 2 * JOBS  # every queued job has its ready row
