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

import re

from jobyard.core import claim, enqueue, transitions
from jobyard.core.claim import queues_by_names
from jobyard.db.pool import Conn, connect
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.schemas import BatchCreate, BatchItem
from tests.factories import make_queue, make_worker

DEAD_PER_PARTITION = 3_000
CLAIMED = 50
# A scan node of a held partition in an auto_explain plan, and the buffers it touched.
_HELD_SCAN = re.compile(r"Scan (?:using \S+ )?on job_held_\d")
_LOOPS = re.compile(r"loops=(\d+)\)")
_FETCHES = re.compile(r"Heap Fetches: (\d+)")


class Plans:
    """The plan of every statement this session runs, nested ones included (auto_explain, its
    log sent to the client)."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def watch(self, conn: Conn) -> None:
        await conn.execute("LOAD 'auto_explain'")
        for setting in (
            "auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
            "auto_explain.log_analyze = on", "auto_explain.log_timing = off",
            "client_min_messages = log",
        ):  # fmt: skip
            await conn.execute(f"SET {setting}")
        conn.add_notice_handler(lambda d: self.texts.append(d.message_primary or ""))

    def held_scans(self) -> list[tuple[str, list[str]]]:
        """Each scan node of a held partition with its detail lines, in plan order."""
        scans: list[tuple[str, list[str]]] = []
        for text in self.texts:
            lines = text.splitlines()
            for i, line in enumerate(lines):
                if _HELD_SCAN.search(line):
                    # The node's own details follow it, more indented than the node.
                    depth = len(line) - len(line.lstrip())
                    details = []
                    for detail in lines[i + 1 :]:
                        if len(detail) - len(detail.lstrip()) <= depth:
                            break
                        details.append(detail.strip())
                    scans.append((line.strip(), details))
        return scans


async def _bloat_and_vacuum(conn: Conn, db_url: str, queue_id: int) -> Conn:
    """Every job_held partition full of dead rows that a REPEATABLE READ snapshot (returned, still
    open) keeps, and analyzed by VACUUM as holding no live row."""
    holder = await connect(db_url)
    await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    await holder.execute("SELECT 1")  # the snapshot is taken by the first statement
    for slot in range(3):
        await conn.execute(
            "INSERT INTO job_held (slot, job_id, queue_id, worker_id)"
            " SELECT %s, -g, %s, NULL FROM generate_series(1, %s) g",
            (slot, queue_id, DEAD_PER_PARTITION),
        )
    await conn.execute("DELETE FROM job_held WHERE job_id < 0")
    await conn.execute("VACUUM (ANALYZE) job_held_0, job_held_1, job_held_2")
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
    plans = Plans()
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
    scans = plans.held_scans()
    # The claim's trigger and the completion's both read the held set…
    assert scans, "no plan scanned a job_held partition"
    for node, details in scans:
        # …once a statement (a scan the planner repeats for every job was the stall)…
        loops = _LOOPS.search(node)
        assert loops is not None and int(loops.group(1)) == 1, node
        # …and never through the index entries of the dead rows: a probe by key fetches none of
        # them (a partition still believed empty may be read by one sequential pass instead).
        fetched = [int(m.group(1)) for d in details if (m := _FETCHES.match(d))]
        assert all(n < DEAD_PER_PARTITION for n in fetched), (node, details)
    held = await (await conn.execute("SELECT count(*) AS n FROM job_held")).fetchone()
    assert held is not None and held["n"] == 0  # every claimed job held, then released
