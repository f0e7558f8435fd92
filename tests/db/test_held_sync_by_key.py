"""The held set's trigger reads `job_held` by key, whatever the planner believes of it (migration
0031).

Under a held xmin horizon a `job_held` partition fills with dead rows that nothing may remove,
and an autovacuum pass then records it as empty (no live row). The claim's statement trigger used
to ask `NOT EXISTS (SELECT FROM job_held h WHERE h.job_id = n.id)` for each claimed job, and with
those statistics the planner read the partition whole for every one of them: fifty full walks of
its dead entries a claim, 713,650 heap fetches in one of them under the pressure scenario, and a
second of stalled pickups after every autovacuum pass over `jobs` (docs/BENCHMARKS.md, "The
stalls after autovacuum"). This test builds that state on purpose, then reads the plans that the
trigger's statements ran with (auto_explain, nested statements, sent to this session): every scan
of a `job_held` partition must run once a statement and fetch none of the dead rows through the
index (the claim's anti-join walked them all, under a Materialize here and once a job there).

docs/TESTING.md records what failed with the mechanism broken.
"""

from __future__ import annotations

import pytest

from jobyard.core import claim, enqueue, transitions
from jobyard.core.claim import queues_by_names
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.schemas import BatchCreate, BatchItem
from tests.db.nested_plans import NestedPlans, dead_rows_kept
from tests.factories import make_queue, make_worker

# A REPEATABLE READ session holds the xmin horizon: share the group of the tests that read it.
pytestmark = pytest.mark.xdist_group("horizon")

DEAD_PER_PARTITION = 3_000
CLAIMED = 50


async def _bloat_and_vacuum(conn: Conn, db_url: str, queue_id: int) -> Conn:
    """Every job_held partition full of dead rows that a REPEATABLE READ snapshot (returned, still
    open) keeps, and analyzed by VACUUM as holding no live row."""
    holder = await dead_rows_kept(
        conn, db_url, "job_held", "%(slot)s, -g, %(queue_id)s, NULL", queue_id, DEAD_PER_PARTITION
    )
    stats = await (
        await conn.execute(
            "SELECT relname, reltuples, relpages FROM pg_class"
            " WHERE relname LIKE 'job\\_held\\__' ORDER BY relname"
        )
    ).fetchall()
    # What the planner now believes: no live row, in pages that the dead rows still fill.
    assert all(s["reltuples"] == 0 and s["relpages"] > 0 for s in stats), stats
    return holder


async def test_a_claim_and_its_completion_probe_the_held_set_by_key(
    conn: Conn, db_url: str
) -> None:
    q = await make_queue(conn, name="held")
    w = await make_worker(conn, project_id=q["project_id"])
    project = ProjectId(q["project_id"])
    (queue,) = await queues_by_names(conn, project, ["held"])
    items = [BatchItem(handler="noop") for _ in range(CLAIMED + 10)]
    await enqueue.enqueue_batch(conn, project, BatchCreate(queue="held", jobs=items))
    holder = await _bloat_and_vacuum(conn, db_url, q["id"])
    plans = NestedPlans()
    try:
        await plans.watch(conn)
        claimed = await claim.claim_batch(
            conn, queue, WorkerId(w["id"]), CLAIMED, lease_s=30, start=True
        )
        done = await transitions.complete_many(conn, claimed)
    finally:
        await holder.rollback()
        await holder.close()
    assert len(claimed) == len(done) == CLAIMED
    scans = plans.scans_of("job_held")
    # The claim's trigger and the completion's both read the held set…
    assert scans, "no plan scanned a job_held partition"
    for scan in scans:
        # …once a statement (a scan the planner repeats for every job was the stall)…
        assert scan.loops <= 1, scan.node
        # …and never through the index entries of the dead rows: a probe by key fetches none of
        # them (a partition still believed empty may be read by one sequential pass instead).
        assert all(n < DEAD_PER_PARTITION for n in scan.heap_fetches), scan
    held = await (await conn.execute("SELECT count(*) AS n FROM job_held")).fetchone()
    assert held is not None and held["n"] == 0  # every claimed job held, then released
