"""A completion's "does any of these batches have callbacks?" probe reads `job_batches` by key
however much the table grew since the session first planned it (migration 0033).

Every batch enqueue adds a `job_batches` row. The probe in `jobs_final_effects` took no
parameter, so a session planned it once and kept that plan until the table was invalidated; a
worker that planned it while the table was small read every batch row, with a JSONB comparison
each, on every completion afterwards (a tenth of the server's CPU late in the 80 % pressure cell,
docs/BENCHMARKS.md). This test makes the session plan it on a small table, grows the table with
autovacuum off for it (so no ANALYZE replaces the plan, as under a held horizon), and reads the
plan of the next completion's probe.

docs/TESTING.md records what failed with the mechanism broken.
"""

from __future__ import annotations

from jobyard.core import enqueue
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId
from jobyard.domain.schemas import BatchCreate, BatchItem
from tests.db.nested_plans import NestedPlans
from tests.factories import make_queue

GROWN_BY = 5_000
STATEMENT = 50
_COMPLETE = """UPDATE jobs SET status = 'done', finished_at = now()
               WHERE id IN (SELECT id FROM jobs WHERE status = 'queued' ORDER BY id LIMIT %s)"""


async def test_the_callbacks_probe_reads_a_grown_batch_table_by_key(conn: Conn) -> None:
    q = await make_queue(conn, name="batches")
    project = ProjectId(q["project_id"])
    await conn.execute("ALTER TABLE job_batches SET (autovacuum_enabled = off)")
    items = [BatchItem(handler="noop") for _ in range(10 * STATEMENT)]
    await enqueue.enqueue_batch(conn, project, BatchCreate(queue="batches", jobs=items))
    # The session plans the trigger's statements on a table of one batch (PL/pgSQL keeps a
    # plan after its first runs)…
    for _ in range(7):
        await conn.execute(_COMPLETE, (STATEMENT,))
    # …then the table grows by thousands of batches, none of them analyzed.
    await conn.execute(
        "INSERT INTO job_batches (project_id, queue_id, size, callbacks)"
        " SELECT %s, %s, 1, '{}' FROM generate_series(1, %s)",
        (q["project_id"], q["id"], GROWN_BY),
    )
    plans = NestedPlans()
    await plans.watch(conn)
    await conn.execute(_COMPLETE, (STATEMENT,))
    scans = plans.scans_of_table("job_batches")
    assert scans, "no plan read job_batches"
    for scan in scans:
        # By key: a handful of rows read, not the grown table.
        assert scan.removed_by_filter < GROWN_BY, scan
        assert not scan.node.startswith("->  Seq Scan") and not scan.node.startswith("Seq Scan"), (
            scan
        )
    done = await (
        await conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'done'")
    ).fetchone()
    assert done is not None and done["n"] == 8 * STATEMENT


async def test_the_callbacks_probe_reads_by_key_when_freshly_planned(conn: Conn) -> None:
    """Without any cached plan: with both tables analyzed, a completion of a hundred jobs of one
    batch among 13,000 batch rows. The planner cannot know that a statement's jobs share a batch;
    it expects as many batch ids as jobs, and for the old probe a scan of the table looked
    cheaper than a hundred key probes until the table held some 20,000–50,000 rows."""
    q = await make_queue(conn, name="batches")
    project = ProjectId(q["project_id"])
    await conn.execute(
        "INSERT INTO job_batches (project_id, queue_id, size, callbacks)"
        " SELECT %s, %s, 1, '{}' FROM generate_series(1, 13000)",
        (q["project_id"], q["id"]),
    )
    items = [BatchItem(handler="noop") for _ in range(2 * STATEMENT)]
    await enqueue.enqueue_batch(conn, project, BatchCreate(queue="batches", jobs=items))
    await conn.execute("ANALYZE job_batches, jobs")
    plans = NestedPlans()
    await plans.watch(conn)
    await conn.execute(_COMPLETE, (2 * STATEMENT,))
    scans = plans.scans_of_table("job_batches")
    assert scans, "no plan read job_batches"
    for scan in scans:
        assert "Seq Scan" not in scan.node and scan.removed_by_filter < 1_000, scan
