"""The held set (migrations 0022, 0029): job_held holds every held job of every queue with its
worker, follows every way into and out of `claimed`/`running`, and is rotated like the ready set,
so a held xmin horizon cannot slow the reads of held jobs: a limited queue's room count, the
reaper, the workers' pages.

See docs/DATABASE.md ("The held set") and docs/TESTING.md ("Held set") for what these tests
caught with the mechanism broken.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from jobyard.core import claim, enqueue, transitions
from jobyard.core.claim import queues_by_names
from jobyard.core.maintenance import reap_expired_leases
from jobyard.db import migrate, run
from jobyard.db.explain import plan_stats
from jobyard.db.pool import Conn, connect
from jobyard.db.queries import sql
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.models import QueueRef
from jobyard.domain.schemas import BatchCreate, BatchItem
from tests.factories import make_queue, make_worker

# An xid of any database holds every database's horizon: the tests that hold one share the
# xdist group of the other tests that do (tests/concurrency/test_ready_rotation.py).
HORIZON = pytest.mark.xdist_group("horizon")

# Three and a half stints of the ring (two seconds at least each): every partition is next once.
CHURN_S = 7.0


async def _queue(conn: Conn, name: str, limit: int | None) -> tuple[ProjectId, QueueRef, WorkerId]:
    q = await make_queue(conn, name=name, max_concurrency=limit)
    w = await make_worker(conn, project_id=q["project_id"])
    project = ProjectId(q["project_id"])
    (ref,) = await queues_by_names(conn, project, [name])
    return project, ref, WorkerId(w["id"])


async def _enqueue(conn: Conn, project: ProjectId, queue: QueueRef, n: int) -> None:
    items = [BatchItem(handler="noop") for _ in range(n)]
    await enqueue.enqueue_batch(conn, project, BatchCreate(queue=queue.name, jobs=items))


async def _held_rows(conn: Conn, queue: QueueRef) -> set[int]:
    rows = await (
        await conn.execute("SELECT job_id FROM job_held WHERE queue_id = %s", (queue.id,))
    ).fetchall()
    return {r["job_id"] for r in rows}


async def _held_jobs(conn: Conn, queue: QueueRef) -> set[int]:
    rows = await (
        await conn.execute(
            "SELECT id FROM jobs WHERE queue_id = %s AND status IN ('claimed', 'running')",
            (queue.id,),
        )
    ).fetchall()
    return {r["id"] for r in rows}


async def _held_workers(conn: Conn, queue: QueueRef) -> dict[int, int | None]:
    rows = await (
        await conn.execute(
            "SELECT job_id, worker_id FROM job_held WHERE queue_id = %s", (queue.id,)
        )
    ).fetchall()
    return {r["job_id"]: r["worker_id"] for r in rows}


async def _room(conn: Conn, queue: QueueRef, n: int = 100) -> int:
    row = await run.one(conn, "job_claim_room", {"queue_id": queue.id, "n": n})
    assert row is not None
    return int(row["room"])


async def test_held_jobs_of_a_limited_queue_have_rows_and_lose_them_on_every_way_out(
    conn: Conn,
) -> None:
    project, queue, worker = await _queue(conn, "limited", 10)
    await _enqueue(conn, project, queue, 6)

    claimed = await claim.claim_batch(conn, queue, worker, 5, lease_s=30, start=True)
    assert len(claimed) == 5
    assert await _held_workers(conn, queue) == {j.id: worker for j in claimed}
    assert await _room(conn, queue) == 5

    done, failed, expired, *kept = claimed
    assert await transitions.complete_many(conn, [done]) == {done.id}
    await transitions.fail(conn, failed, "E", "boom")  # a retry: back to scheduled
    await conn.execute(
        "UPDATE jobs SET lock_expires_at = now() - interval '1 minute' WHERE id = %s",
        (expired.id,),
    )
    reaped = await reap_expired_leases(conn)
    assert expired.id in reaped.job_ids
    await conn.execute("DELETE FROM jobs WHERE id = %s", (kept[0].id,))
    assert await _held_rows(conn, queue) == {kept[1].id} == await _held_jobs(conn, queue)
    assert await _room(conn, queue) == 9


async def test_a_queue_without_a_limit_keeps_rows_too(conn: Conn) -> None:
    """Every held job has its row: the reaper and the workers' pages read them all there."""
    project, queue, worker = await _queue(conn, "free", None)
    await _enqueue(conn, project, queue, 4)
    claimed = await claim.claim_batch(conn, queue, worker, 3, lease_s=30, start=True)
    assert await _held_workers(conn, queue) == {j.id: worker for j in claimed}
    await transitions.complete_many(conn, claimed[:2])
    assert await _held_rows(conn, queue) == {claimed[2].id} == await _held_jobs(conn, queue)


async def test_a_limit_set_after_the_claims_counts_them_at_once(db_url: str, conn: Conn) -> None:
    """Claims made before the limit count against it from the next claim on, and one still
    uncommitted when the limit is set as soon as it commits: their rows were written with them,
    whatever the queue (there used to be a fill to wait for)."""
    project, queue, worker = await _queue(conn, "late", None)
    await _enqueue(conn, project, queue, 6)
    claimed = await claim.claim_batch(conn, queue, worker, 2, lease_s=30, start=True)
    claimer = await connect(db_url)  # not autocommit: this claim stays uncommitted a while
    try:
        late = await claim.claim_batch(claimer, queue, worker, 1, lease_s=30, start=True)
        await conn.execute("UPDATE queues SET max_concurrency = 5 WHERE id = %s", (queue.id,))
        assert await _room(conn, queue) == 3
        await claimer.commit()
    finally:
        await claimer.close()
    assert await _held_rows(conn, queue) == {j.id for j in [*claimed, *late]}
    assert await _room(conn, queue) == 2


async def test_a_job_inserted_already_held_has_its_row(conn: Conn) -> None:
    """Jobyard never inserts a held job; an import or a fixture may, and the reaper must still
    find it."""
    project, queue, worker = await _queue(conn, "imported", 2)
    row = await (
        await conn.execute(
            "INSERT INTO jobs (project_id, queue_id, handler, status, worker_id, attempt,"
            " execution_seq, claimed_at, started_at, lock_expires_at)"
            " VALUES (%s, %s, 'h', 'running', %s, 1, 1, now(), now(), now() - interval '1 minute')"
            " RETURNING id",
            (project, queue.id, worker),
        )
    ).fetchone()
    assert row is not None
    assert await _held_workers(conn, queue) == {row["id"]: worker}
    assert await _room(conn, queue) == 1
    assert row["id"] in (await reap_expired_leases(conn)).job_ids
    assert await _held_rows(conn, queue) == set()


async def test_the_rotation_moves_held_rows_and_drops_the_rows_of_jobs_no_longer_held(
    conn: Conn,
) -> None:
    project, queue, worker = await _queue(conn, "rotate", 10)
    await _enqueue(conn, project, queue, 4)
    held = await claim.claim_batch(conn, queue, worker, 3, lease_s=30, start=True)
    # A row that no transition will delete: a job that is not held.
    (stale,) = await claim.claim_batch(conn, queue, worker, 1, lease_s=30, start=True)
    await transitions.complete_many(conn, [stale])
    await conn.execute("INSERT INTO job_held VALUES (0, %s, %s)", (stale.id, queue.id))
    assert await _room(conn, queue) == 6
    outcomes: Counter[str] = Counter()
    deadline = time.monotonic() + CHURN_S
    while time.monotonic() < deadline:
        outcomes[await claim.keep_held(conn)] += 1
        await asyncio.sleep(0.1)
    assert outcomes["rotated"] >= 1, outcomes
    assert await _held_workers(conn, queue) == {j.id: worker for j in held}
    assert await _room(conn, queue) == 7


async def test_the_migration_gives_every_held_job_its_row(db_url: str, conn: Conn) -> None:
    """Before migration 0029 only a limited queue's claims wrote rows: a deployment upgraded with
    jobs in flight on a queue without a limit must find them in the set, with their worker."""
    project, queue, worker = await _queue(conn, "upgraded", None)
    await _enqueue(conn, project, queue, 3)
    migrate.downgrade(db_url, "0028")
    claimed = await claim.claim_batch(conn, queue, worker, 2, lease_s=30, start=True)
    assert await _held_rows(conn, queue) == set()
    migrate.upgrade(db_url)
    assert await _held_workers(conn, queue) == {j.id: worker for j in claimed}


async def _room_buffers(conn: Conn, queue: QueueRef) -> int:
    """Shared buffers the room count reads: EXPLAIN (ANALYZE, BUFFERS), never a time."""
    cur = await conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql("job_claim_room"),
        {"queue_id": queue.id, "n": 100},
    )
    row = await cur.fetchone()
    assert row is not None
    stats = plan_stats(row["QUERY PLAN"][0])
    return stats.shared_hit + stats.shared_read


async def _jobs_count_buffers(conn: Conn, project: ProjectId) -> int:
    """The same count on `jobs` (through its index of jobs by project and status)."""
    cur = await conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT count(*) FROM jobs"
        " WHERE project_id = %s AND status IN ('claimed', 'running')",
        (project,),
    )
    row = await cur.fetchone()
    assert row is not None
    stats = plan_stats(row["QUERY PLAN"][0])
    return stats.shared_hit + stats.shared_read


@HORIZON
async def test_under_a_held_xid_the_count_reads_only_the_last_rotations_rows(
    db_url: str, conn: Conn
) -> None:
    """Thousands of jobs run through a limited queue while an xid is held. A count of the held
    jobs on `jobs` walks the dead entry of each; the held set's rotation has dropped all but the
    last few periods' rows."""
    project, queue, worker = await _queue(conn, "pressure", 100)
    await _enqueue(conn, project, queue, 6000)
    holder = await connect(db_url)
    try:
        await holder.execute("SELECT txid_current()")
        outcomes: Counter[str] = Counter()
        started = time.monotonic()
        while True:
            jobs = await claim.claim_batch(conn, queue, worker, 100, lease_s=30, start=True)
            if not jobs:
                break
            await transitions.complete_many(conn, jobs)
            outcomes[await claim.keep_held(conn)] += 1
        # The rotation needs every partition to have been next once since the run began.
        while time.monotonic() - started < CHURN_S:
            outcomes[await claim.keep_held(conn)] += 1
            await asyncio.sleep(0.1)
        # Twice: the first count after a rotation plans job_held_count's statement again (the
        # TRUNCATE invalidated its cached plan), which reads catalog buffers.
        await _room_buffers(conn, queue)
        in_held_set = await _room_buffers(conn, queue)
        in_jobs = await _jobs_count_buffers(conn, project)
    finally:
        await holder.rollback()
        await holder.close()
    print(f"room count buffers: held set {in_held_set}, jobs {in_jobs}; rotations {outcomes}")
    assert outcomes["rotated"] >= 1, outcomes
    assert in_jobs > 100
    assert in_held_set < 20, in_held_set


async def test_the_room_count_reads_the_held_set(conn: Conn) -> None:
    """A held row counts against the limit, whatever `jobs` says: the count reads job_held."""
    project, queue, worker = await _queue(conn, "counted", 3)
    await _enqueue(conn, project, queue, 3)
    await conn.execute("INSERT INTO job_held VALUES (0, -1, %s)", (queue.id,))
    assert await _room(conn, queue) == 2
    assert len(await claim.claim_batch(conn, queue, worker, 3, lease_s=30, start=True)) == 2


async def _heap_blocks_of_room_count(conn: Conn, queue: QueueRef) -> int:
    """Heap blocks of job_held's partitions that one room count fetches: this transaction's own
    statistics, which count as the scan goes."""
    fetched = (
        "SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(i.inhrelid)), 0)::int AS n"
        " FROM pg_inherits i WHERE i.inhparent = 'job_held'::regclass"
    )
    async with conn.transaction():
        before = await (await conn.execute(fetched)).fetchone()
        await _room(conn, queue)
        after = await (await conn.execute(fetched)).fetchone()
    assert before is not None and after is not None
    return int(after["n"]) - int(before["n"])


# The room count is serialized by the queue's lock, so what one count reads every claim waits for.
@HORIZON
async def test_the_room_count_steps_over_the_rows_of_finished_jobs_once_it_has_seen_them(
    conn: Conn,
) -> None:
    """Thousands of jobs of a limited queue run and finish within a slot period, one stays held.
    Their rows stay in job_held until the rotation truncates the partition; a count marks their
    index entries dead, so the next one fetches only the live row's heap page. (A bitmap scan
    marks nothing and fetched every page again, migration 0023.)"""
    project, queue, worker = await _queue(conn, "marks-dead", 100)
    await _enqueue(conn, project, queue, 4001)
    for _ in range(40):
        jobs = await claim.claim_batch(conn, queue, worker, 100, lease_s=30, start=True)
        await transitions.complete_many(conn, jobs)
    (held,) = await claim.claim_batch(conn, queue, worker, 1, lease_s=30, start=True)
    assert await _held_rows(conn, queue) == {held.id}
    # A transaction elsewhere that began before the jobs finished keeps their rows visible to
    # it, and nothing may be marked until it ends: count until one reads little, or time out.
    deadline = time.monotonic() + 15.0
    seen: list[int] = []
    while not seen or seen[-1] > 2:
        assert time.monotonic() < deadline, f"heap blocks fetched per count: {seen[-5:]}"
        seen.append(await _heap_blocks_of_room_count(conn, queue))
        await asyncio.sleep(0.1)
    print(f"heap blocks fetched per count: {seen}")
    assert await _room(conn, queue) == 99


async def test_a_count_that_waits_for_a_rotation_sees_the_rows_it_moved(
    db_url: str, conn: Conn
) -> None:
    """A rotation moves a partition's rows to another and truncates it, in one transaction. A
    count that reaches the partition meanwhile waits for the rotation's lock; its snapshot must
    be taken after that wait, or it sees neither the moved rows nor the truncated ones."""
    project, queue, worker = await _queue(conn, "moved", 10)
    await _enqueue(conn, project, queue, 3)
    held = await claim.claim_batch(conn, queue, worker, 3, lease_s=30, start=True)
    assert await _room(conn, queue) == 7
    row = await (
        await conn.execute(
            "SELECT min(slot) AS slot, pg_backend_pid() AS pid FROM job_held WHERE queue_id = %s",
            (queue.id,),
        )
    ).fetchone()
    assert row is not None
    slot, pid = int(row["slot"]), int(row["pid"])
    rotator = await connect(db_url)
    try:
        # What job_set_rotate does, held open: move the rows on, empty their partition.
        await rotator.execute(
            "INSERT INTO job_held (slot, job_id, queue_id)"
            " SELECT (slot + 1) %% 3, job_id, queue_id FROM job_held WHERE slot = %s",
            (slot,),
        )
        await rotator.execute(f"TRUNCATE job_held_{slot}")
        counting = asyncio.ensure_future(_room(conn, queue))
        deadline = time.monotonic() + 10.0
        waiting = False
        while not waiting:
            assert time.monotonic() < deadline, "the count never waited for the rotation"
            await asyncio.sleep(0.02)
            waiting = bool(
                await (
                    await rotator.execute(
                        "SELECT 1 FROM pg_stat_activity"
                        " WHERE pid = %s AND wait_event_type = 'Lock'",
                        (pid,),
                    )
                ).fetchone()
            )
        await rotator.commit()
        assert await counting == 7
    finally:
        await rotator.rollback()
        await rotator.close()
    assert await _held_rows(conn, queue) == {j.id for j in held}


async def test_an_enqueue_does_not_wait_for_a_limited_queue_s_claim_lock(
    db_url: str, conn: Conn
) -> None:
    """Claims of a limited queue take turns on the queue's row lock; an enqueue to the queue
    only needs the row to stay (FOR KEY SHARE), so it must not wait for a claim in progress."""
    project, queue, _ = await _queue(conn, "busy", 5)
    claimer = await connect(db_url)  # not autocommit: the lock is held until the rollback
    try:
        await run.one(claimer, "job_claim_lock_queue", {"queue_id": queue.id})
        await conn.execute("SET lock_timeout = '2s'")
        await _enqueue(conn, project, queue, 1)  # with FOR UPDATE: LockNotAvailable after 2 s
    finally:
        await claimer.rollback()
        await claimer.close()
