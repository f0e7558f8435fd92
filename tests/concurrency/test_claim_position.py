"""Claims past a position while a REPEATABLE READ reader blocks the rotation (migration 0014).

A reader that keeps one transaction open and reads job_ready holds ACCESS SHARE on every
partition, so job_ready_rotate() answers 'locked' and the dead rows of claimed jobs stay in the
claim index. The worker then claims past the last job it claimed (`claim(after=...)`), with a
full claim every few seconds for the jobs that entered behind the position. These tests hold
such a reader and check (1) that every job is still claimed exactly once, stragglers included,
and only by a full claim when they are behind the position, and (2) that the positioned claim's
buffers stay flat while the dead prefix grows and the full claim's do not.

See docs/DATABASE.md ("Claim position") and docs/TESTING.md ("Claim position").
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from jobyard.core import claim, enqueue, transitions
from jobyard.db.explain import plan_stats
from jobyard.db.pool import Conn, connect
from jobyard.db.queries import sql
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.models import QueueRef
from jobyard.domain.schemas import JobCreate
from tests.concurrency.test_ready_rotation import _dead_space_everywhere, _enqueue, _ref
from tests.factories import make_queue, make_worker

pytestmark = pytest.mark.xdist_group("claim-race")


async def _hold_reader(db_url: str) -> Conn:
    reader = await connect(db_url)  # not autocommit: its transaction stays open
    await reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    # ACCESS SHARE on every partition, and a snapshot that keeps every dead row below.
    await reader.execute("SELECT count(*) FROM jobs")
    await reader.execute("SELECT count(*) FROM job_ready")
    return reader


async def test_positioned_claims_take_every_job_once_with_stragglers_behind_a_reader(
    db_url: str, conn: Conn
) -> None:
    queue = await make_queue(conn)
    project = ProjectId(queue["project_id"])
    worker = WorkerId((await make_worker(conn, project_id=project))["id"])
    ref = _ref(queue)
    await _dead_space_everywhere(conn)
    reader = await _hold_reader(db_url)
    locker = await connect(db_url)
    # A virtual clock (one second a round): the mode's timers, not the test's speed, decide.
    mode = claim.ClaimMode(blocked_after_s=5, full_every_s=5, slack_s=1, now=0)
    try:
        assert await claim.rotate_ready(conn) == "locked"
        assert mode.rotated("locked", 3.0) is None
        assert mode.rotated("locked", 6.0) == "entered"
        offered: list[int] = []
        claims: list[tuple[int, bool, list[int]]] = []  # (round, positioned, ids)
        stragglers: dict[str, int] = {}
        entered_at: dict[int, int] = {}
        for rnd in range(40):
            now = 6.0 + rnd
            if rnd < 20:
                ids = await _enqueue(conn, queue, 20)
                offered += ids
                entered_at.update(dict.fromkeys(ids, rnd))
            if rnd == 6:
                # A higher priority than anything claimed: behind the position.
                job = await enqueue.enqueue(
                    conn, project, JobCreate(queue=queue["name"], handler="noop", priority=5)
                )
                stragglers["priority"] = job.job["id"]
            if rnd == 8:
                # An earlier run_at (as a retry due long ago would have), well beyond the slack.
                job = await enqueue.enqueue(
                    conn, project, JobCreate(queue=queue["name"], handler="noop")
                )
                await conn.execute(
                    "UPDATE jobs SET run_at = now() - interval '1 hour' WHERE id = %s",
                    (job.job["id"],),
                )
                stragglers["run_at"] = job.job["id"]
            if rnd == 2:
                # The next job in order, held by another session: the claims pass it over.
                nxt = await (
                    await conn.execute(
                        "SELECT job_id FROM job_ready WHERE queue_id = %s"
                        " ORDER BY - priority, run_at, job_id LIMIT 1",
                        (queue["id"],),
                    )
                ).fetchone()
                assert nxt is not None
                stragglers["locked"] = nxt["job_id"]
                await locker.execute(
                    "SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (nxt["job_id"],)
                )
            if rnd == 4:
                await locker.rollback()
            for s_id in stragglers.values():
                entered_at.setdefault(s_id, rnd)
                if s_id not in offered:
                    offered.append(s_id)
            after = mode.after(ref.id, now)
            got = await claim.claim(conn, ref, worker, 15, lease_s=30, start=True, after=after)
            mode.claimed(ref.id, got.position)
            claims.append((rnd, after is not None, [j.id for j in got.jobs]))
            if got.jobs:
                # Their ready rows die, and the reader keeps them from being freed.
                assert len(await transitions.complete_many(conn, got.jobs)) == len(got.jobs)
        # The reader still blocks the rotation: everything above ran in degraded mode.
        assert await claim.rotate_ready(conn) == "locked"
        taken = Counter(i for _, _, ids in claims for i in ids)
        assert set(taken) == set(offered), set(offered) - set(taken)
        assert all(n == 1 for n in taken.values()), [i for i, n in taken.items() if n > 1]
        assert sum(1 for _, positioned, _ in claims if positioned) >= 20
        by_job = {i: (rnd, positioned) for rnd, positioned, ids in claims for i in ids}
        for kind in ("priority", "run_at"):
            rnd, positioned = by_job[stragglers[kind]]
            # Behind the position: no positioned claim sees it, a full claim takes it, within
            # the full-claim period of its entry.
            assert not positioned, kind
            assert rnd - entered_at[stragglers[kind]] <= mode.full_every_s, kind
        left = await (
            await conn.execute("SELECT count(*) AS n FROM job_ready WHERE queue_id = %s", (ref.id,))
        ).fetchone()
        assert left == {"n": 0}
    finally:
        await locker.rollback()
        await locker.close()
        await reader.rollback()
        await reader.close()


async def _claim_buffers(
    conn: Conn, name: str, ref: QueueRef, worker: WorkerId, params: dict[str, Any]
) -> int:
    """Shared buffers of the claim's picking step (the `picked` CTE), claim rolled back."""
    statement = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql(name)
    all_params = {
        "queue_id": ref.id,
        "worker_id": worker,
        "n": 10,
        "lease_s": 30.0,
        "start": True,
        "solo": False,
        "limited": False,
        "now": None,
        **params,
    }
    async with conn.transaction(force_rollback=True):
        row = await (await conn.execute(statement, all_params)).fetchone()  # type: ignore[arg-type]
    assert row is not None
    stats = plan_stats(row["QUERY PLAN"][0], subtree="CTE picked")
    assert stats.rows_returned == 10
    return stats.shared_hit + stats.shared_read


async def test_positioned_claim_does_not_walk_the_dead_prefix(db_url: str, conn: Conn) -> None:
    queue = await make_queue(conn)
    worker = WorkerId((await make_worker(conn, project_id=queue["project_id"]))["id"])
    ref = _ref(queue)
    await _dead_space_everywhere(conn)
    reader = await _hold_reader(db_url)
    try:
        full: list[int] = []
        positioned: list[int] = []
        for _ in range(3):
            # 5,000 more dead ready rows: claimed and finished while the reader holds them.
            for _ in range(5):
                await _enqueue(conn, queue, 1000)
            position: claim.ClaimPosition | None = None
            while True:
                got = await claim.claim(conn, ref, worker, 500, lease_s=30, start=True)
                if not got.jobs:
                    break
                position = got.position
                await transitions.complete_many(conn, got.jobs)
            assert position is not None
            await _enqueue(conn, queue, 20)
            full.append(await _claim_buffers(conn, "job_claim_batch", ref, worker, {}))
            after = {
                "after_npriority": position.npriority,
                "after_run_at": position.run_at,
                "after_job_id": position.job_id,
            }
            positioned.append(
                await _claim_buffers(conn, "job_claim_batch_after", ref, worker, after)
            )
        assert await claim.rotate_ready(conn) == "locked"
        print(f"\npicking buffers, full {full}, positioned {positioned}")
        # The full claim walks every dead entry (index leaf pages and the heap pages of their
        # rows): about 15 buffers per 1,000 dead rows, so 150 more over the two steps.
        assert full[2] - full[0] >= 100, full
        assert full[2] >= positioned[2] + 150, (full, positioned)
        # The positioned claim starts past them: flat, whatever lies behind (the ~100 buffers
        # are the ten jobs rows it locks by key, the Merge Append's three partitions).
        assert positioned[2] - positioned[0] <= 5, positioned
    finally:
        await reader.rollback()
        await reader.close()


async def test_a_positioned_claim_over_an_analyzed_backlog_locks_only_what_it_takes(
    db_url: str, conn: Conn
) -> None:
    # The planner estimates a row comparison from its first column alone. With the backlog at
    # one priority, `(-priority, ...) > (0, ...)` read as "-priority > 0": no row, so it sorted
    # the whole partition and the lock filter below the sort locked every queued job, for
    # each positioned claim (400 ms a claim over 200,000 jobs in a burndown). `>=` reads as
    # "every row", and the scan follows job_ready_claim_idx under the LIMIT.
    queue = await make_queue(conn)
    worker = WorkerId((await make_worker(conn, project_id=queue["project_id"]))["id"])
    ref = _ref(queue)
    await _enqueue(conn, queue, 5000)
    await conn.execute("ANALYZE job_ready")
    first = await claim.claim(conn, ref, worker, 100, lease_s=30, start=True)
    assert first.position is not None
    claimer = await connect(db_url)  # not autocommit: its locks stay until the rollback
    other = await connect(db_url, autocommit=True)
    try:
        got = await claim.claim(
            claimer, ref, worker, 100, lease_s=30, start=True, after=first.position.lowered(0.25)
        )
        assert len(got.jobs) == 100
        free = await (
            await other.execute(
                "SELECT count(*) AS n FROM (SELECT 1 FROM jobs WHERE queue_id = %s"
                " AND status = 'queued' FOR UPDATE SKIP LOCKED) l",
                (queue["id"],),
            )
        ).fetchone()
        assert free == {"n": 5000 - 200}
    finally:
        await claimer.rollback()
        await claimer.close()
        await other.close()
