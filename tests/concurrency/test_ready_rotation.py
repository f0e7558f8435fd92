"""Rotation of job_ready (migration 0012): a drained partition is emptied by TRUNCATE while a
snapshot is held, it never waits behind a reader, and no job is lost or claimed twice across it.

See docs/DATABASE.md ("The ready set") for the design and docs/TESTING.md ("Ready set") for what
these tests caught with the mechanism broken.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from jobyard.core import claim, enqueue, transitions
from jobyard.db.pool import Conn, connect
from jobyard.domain.ids import ProjectId, QueueId, WorkerId
from jobyard.domain.models import QueueRef
from jobyard.domain.schemas import BatchCreate, BatchItem
from tests.concurrency.test_claim_exactly_once import GATE_KEY, _logs, _spawn
from tests.factories import make_queue, make_worker

# Each test names its xdist group: the races share "claim-race"; the two that hold an xid for
# seconds are in "horizon", since an xid of any database holds every database's horizon and
# the tests that watch it must not see this one (a test in two groups would form a third).
CLAIM_RACE = pytest.mark.xdist_group("claim-race")
HOLDS_AN_XID = pytest.mark.xdist_group("horizon")

PARTITIONS = ("job_ready_0", "job_ready_1", "job_ready_2")
# Three and a half stints of the ring (two seconds at least each): every partition is current
# once.
CHURN_S = 7.0
# Make the partition after the current one current (what a rotation does once it is empty).
NEXT_PARTITION = (
    "SELECT setval('job_ready_ring', last_value - last_value % 3 + (last_value + 1) % 3)"
    " FROM job_ready_ring"
)


def _ref(queue: dict[str, Any]) -> QueueRef:
    return QueueRef(
        id=QueueId(queue["id"]),
        name=queue["name"],
        priority=0,
        is_paused=False,
        max_concurrency=None,
    )


async def _enqueue(conn: Conn, queue: dict[str, Any], n: int) -> list[int]:
    result = await enqueue.enqueue_batch(
        conn,
        ProjectId(queue["project_id"]),
        BatchCreate(queue=queue["name"], jobs=[BatchItem(handler="noop") for _ in range(n)]),
    )
    return list(result.job_ids)


async def _dead_space_everywhere(conn: Conn) -> None:
    # Whichever partition is next has something to free, so the rotation must take its lock.
    for slot, part in enumerate(PARTITIONS):
        await conn.execute(
            f"INSERT INTO {part} VALUES ({slot}, -1, -1, 0, now(), false)"  # type: ignore[arg-type]
        )
        await conn.execute(f"DELETE FROM {part} WHERE job_id = -1")  # type: ignore[arg-type]


async def _slots_filled(conn: Conn) -> int:
    row = await (await conn.execute("SELECT count(DISTINCT slot) AS n FROM job_ready")).fetchone()
    return int(row["n"]) if row else 0


async def _sizes(conn: Conn) -> dict[str, int]:
    row = await (
        await conn.execute(
            "SELECT pg_relation_size('job_ready_0') AS job_ready_0,"
            " pg_relation_size('job_ready_1') AS job_ready_1,"
            " pg_relation_size('job_ready_2') AS job_ready_2"
        )
    ).fetchone()
    assert row is not None
    return {k: int(v) for k, v in row.items()}


@HOLDS_AN_XID
async def test_rotation_empties_drained_partitions_while_an_xid_is_held(
    db_url: str, conn: Conn
) -> None:
    queue = await make_queue(conn)
    worker = WorkerId((await make_worker(conn, project_id=queue["project_id"]))["id"])
    ref = _ref(queue)
    # Jobs of another queue that nobody claims: live rows every rotation must move along.
    idle = await make_queue(conn, project_id=queue["project_id"])
    residents = set(await _enqueue(conn, idle, 5))
    holder = await connect(db_url)  # not autocommit: its transaction stays open
    try:
        await holder.execute("SELECT txid_current()")
        outcomes: Counter[str] = Counter()
        emptied: set[str] = set()
        rounds = 0
        deadline = time.monotonic() + CHURN_S
        while time.monotonic() < deadline:
            ids = await _enqueue(conn, queue, 100)
            got = await claim.claim_batch(conn, ref, worker, 100, lease_s=30, start=True)
            # The claim keeps finding every job, rotation or not.
            assert sorted(j.id for j in got) == sorted(ids)
            assert len(await transitions.complete_many(conn, got)) == 100
            before = await _sizes(conn)
            outcome = await claim.rotate_ready(conn)
            outcomes[outcome] += 1
            if outcome == "rotated":
                after = await _sizes(conn)
                # The partition that held dead rows is empty on disk now, snapshot or not.
                freed = {p for p in PARTITIONS if before[p] > 0 and after[p] == 0}
                assert freed, (before, after)
                emptied |= freed
            rounds += 1
            await asyncio.sleep(0.05)
        held = await (
            await conn.execute(
                "SELECT backend_xid IS NOT NULL AS held FROM pg_stat_activity WHERE pid = %s",
                (holder.info.backend_pid,),
            )
        ).fetchone()
        assert held == {"held": True}
        assert outcomes["rotated"] >= 2, outcomes
        assert len(emptied) >= 2, emptied
        left = await (await conn.execute("SELECT job_id FROM job_ready")).fetchall()
        assert {r["job_id"] for r in left} == residents
    finally:
        await holder.rollback()
        await holder.close()


@CLAIM_RACE
async def test_rotation_gives_up_behind_a_repeatable_read_reader_and_claims_go_on(
    db_url: str, conn: Conn
) -> None:
    queue = await make_queue(conn)
    worker = WorkerId((await make_worker(conn, project_id=queue["project_id"]))["id"])
    ids = await _enqueue(conn, queue, 3)
    await _dead_space_everywhere(conn)
    reader = await connect(db_url)
    strict = await connect(db_url, autocommit=True)
    plain = await connect(db_url, autocommit=True)
    try:
        await strict.execute("SET lock_timeout = '300ms'")
        await reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await reader.execute("SELECT count(*) FROM job_ready")  # ACCESS SHARE on each partition
        # On a connection with no lock_timeout of its own: the rotation must bring its own.
        assert await asyncio.wait_for(claim.rotate_ready(plain), 10) == "locked"
        # The rotation gave up instead of queueing an exclusive lock that claims would wait on.
        waiting = await (
            await conn.execute(
                "SELECT count(*) AS n FROM pg_locks WHERE NOT granted"
                " AND relation = ANY (ARRAY['job_ready_0', 'job_ready_1', 'job_ready_2']"
                "::regclass[])"
            )
        ).fetchone()
        assert waiting == {"n": 0}
        got = await claim.claim_batch(strict, _ref(queue), worker, 10, lease_s=30, start=True)
        assert sorted(j.id for j in got) == sorted(ids)
        await reader.rollback()
        assert await claim.rotate_ready(strict) == "rotated"
    finally:
        await reader.close()
        await strict.close()
        await plain.close()


@CLAIM_RACE
async def test_rotation_does_not_queue_behind_a_long_held_lock_at_all(
    db_url: str, conn: Conn
) -> None:
    # Even a bounded wait stalls every claim behind the pending exclusive request for all of it
    # (migration 0017): with a reader that has held the partition longer than held_ms, the
    # rotation must not ask for the lock. A wait of ten minutes makes asking visible.
    await _dead_space_everywhere(conn)
    reader = await connect(db_url)
    rotator = await connect(db_url, autocommit=True)
    try:
        await reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await reader.execute("SELECT count(*) FROM job_ready")  # ACCESS SHARE on each partition
        rotator_pid = await (await rotator.execute("SELECT pg_backend_pid() AS pid")).fetchone()
        assert rotator_pid is not None
        attempt = asyncio.ensure_future(claim.rotate_ready(rotator, wait_ms=600_000, held_ms=0))
        waited = []
        while not attempt.done():
            row = await (
                await conn.execute(
                    "SELECT count(*) AS n FROM pg_locks WHERE NOT granted AND pid = %(pid)s",
                    {"pid": rotator_pid["pid"]},
                )
            ).fetchone()
            waited.append(row["n"] if row else 0)
            if any(waited):
                attempt.cancel()
                await rotator.cancel_safe()
                break
            await asyncio.sleep(0.01)
        assert not any(waited), "the rotation queued an exclusive lock behind the reader"
        assert await attempt == "locked"
    finally:
        await reader.close()
        await rotator.close()


@CLAIM_RACE
async def test_a_partition_a_reader_holds_is_not_read_by_the_rotation(
    db_url: str, conn: Conn
) -> None:
    # A reader's snapshot keeps every dead row of the partitions it pinned, and the count of
    # live rows (the 'crowded' check) walked them all on every call: ~220,000 index entries a
    # second in a ten-minute readers run. The holder check comes first (migration 0020), so a
    # pinned partition is not scanned at all. pg_stat_xact_user_tables counts this
    # transaction's scans of each partition, the function's own included.
    await _dead_space_everywhere(conn)
    reader = await connect(db_url)
    rotator = await connect(db_url)
    scans = (
        "SELECT relname, seq_scan + coalesce(idx_scan, 0) AS n FROM pg_stat_xact_user_tables"
        " WHERE relname = ANY (%(parts)s) ORDER BY relname"
    )
    try:
        await reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await reader.execute("SELECT count(*) FROM job_ready")  # ACCESS SHARE on each partition
        before = await (await rotator.execute(scans, {"parts": list(PARTITIONS)})).fetchall()
        row = await (await rotator.execute("SELECT job_ready_rotate(20, 0) AS outcome")).fetchone()
        after = await (await rotator.execute(scans, {"parts": list(PARTITIONS)})).fetchall()
        await rotator.rollback()
        assert row == {"outcome": "locked"}
        assert after == before, (before, after)
    finally:
        await reader.close()
        await rotator.close()


@CLAIM_RACE
async def test_a_partition_with_a_backlog_is_left_alone_instead_of_copied_under_the_lock(
    conn: Conn,
) -> None:
    # 2,001 live ready rows in every partition (ids no job has): whichever is next is crowded.
    for slot, part in enumerate(PARTITIONS):
        await conn.execute(
            f"INSERT INTO {part} SELECT {slot}, -g, -1, 0, now(), false"  # type: ignore[arg-type]
            " FROM generate_series(1, 2001) g"
        )
    before = await _sizes(conn)
    # Copying 2,001 rows would hold every claim behind the exclusive lock: not done (0015).
    assert await claim.rotate_ready(conn) == "crowded"
    assert await _sizes(conn) == before
    counts = await (
        await conn.execute("SELECT slot, count(*) AS n FROM job_ready GROUP BY slot ORDER BY slot")
    ).fetchall()
    assert [r["n"] for r in counts] == [2001, 2001, 2001]
    # Drained to the cap, a partition is rotated again, its live rows copied, none lost.
    for part in PARTITIONS:
        await conn.execute(f"DELETE FROM {part} WHERE job_id = -2001")  # type: ignore[arg-type]
    assert await claim.rotate_ready(conn) == "rotated"
    total = await (await conn.execute("SELECT count(*) AS n FROM job_ready")).fetchone()
    assert total == {"n": 6000}


@HOLDS_AN_XID
async def test_no_job_is_lost_or_claimed_twice_across_rotations(
    db_url: str, conn: Conn, tmp_path: Path
) -> None:
    """Three claim loops in their own processes race while this process rotates as often as it
    can and another session holds an XID."""
    queue = await make_queue(conn, name="race")
    jobs = 6000
    # A third in each partition (the ring moved on by hand): whichever partition is next when
    # the race starts has rows to move and truncate, so rotations happen however fast the
    # claimers drain (all at once, a fast host finished before one was due).
    all_ids: set[int] = set()
    for _ in PARTITIONS:
        all_ids |= set(await _enqueue(conn, queue, jobs // 3))
        await conn.execute(NEXT_PARTITION)
    assert await _slots_filled(conn) == 3
    gate = await connect(db_url, autocommit=True)
    holder = await connect(db_url)
    rotator = await connect(db_url, autocommit=True)
    procs = []
    outcomes: Counter[str] = Counter()
    try:
        await holder.execute("SELECT txid_current()")
        await gate.execute("SELECT pg_advisory_lock(%s)", (GATE_KEY,))
        spawned = [_spawn(db_url, queue, tmp_path, i, (0.5, 2.0)) for i in range(3)]
        procs = [p for p, _ in spawned]
        deadline = time.monotonic() + 90
        while True:
            row = await (
                await gate.execute(
                    "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory'"
                    " AND NOT granted AND objid = %s",
                    (GATE_KEY,),
                )
            ).fetchone()
            if row and row["n"] == 3:
                break
            assert all(p.poll() is None for p in procs), _logs(tmp_path)
            assert time.monotonic() < deadline, _logs(tmp_path)
            await asyncio.sleep(0.05)
        await gate.execute("SELECT pg_advisory_unlock(%s)", (GATE_KEY,))
        while any(p.poll() is None for p in procs):
            outcomes[await claim.rotate_ready(rotator, wait_ms=5)] += 1
            await asyncio.sleep(0.02)
        assert [p.wait() for p in procs] == [0, 0, 0], _logs(tmp_path)
        reports = [json.loads(out.read_text(encoding="utf-8")) for _, out in spawned]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        await holder.rollback()
        await holder.close()
        await rotator.close()
        await gate.close()
    assert [e for r in reports for e in r["errors"]] == []
    claimed = Counter(i for r in reports for c in r["calls"] for i in c["ids"])
    assert [i for i, times in claimed.items() if times > 1] == [], "claimed twice"
    left = {
        r["id"]
        for r in await (
            await conn.execute("SELECT id FROM jobs WHERE status = 'queued' ORDER BY id")
        ).fetchall()
    }
    # Every job was claimed once or is still claimable; none vanished with a partition.
    assert set(claimed) | left == all_ids and not set(claimed) & left
    ready = {
        r["job_id"] for r in await (await conn.execute("SELECT job_id FROM job_ready")).fetchall()
    }
    assert ready == left
    assert outcomes["rotated"] >= 1, outcomes


@CLAIM_RACE
async def test_a_claim_removes_its_ready_rows_by_key_not_by_scanning_a_backlog(
    conn: Conn,
) -> None:
    # 20,000 queued jobs in one partition, statistics never gathered (as in a drain right after
    # a bulk enqueue): the trigger once hash-joined against the whole partition for each claim.
    queue = await make_queue(conn)
    worker = WorkerId((await make_worker(conn, project_id=queue["project_id"]))["id"])
    for _ in range(2):
        await _enqueue(conn, queue, 10_000)
    scans = """SELECT coalesce(sum(seq_scan), 0) AS n FROM pg_stat_user_tables
               WHERE relname IN ('job_ready_0', 'job_ready_1', 'job_ready_2')"""
    await conn.execute("SELECT pg_stat_force_next_flush()")
    before = await (await conn.execute(scans)).fetchone()
    for _ in range(3):
        got = await claim.claim_batch(conn, _ref(queue), worker, 100, lease_s=30, start=True)
        assert len(got) == 100
    await conn.execute("SELECT pg_stat_force_next_flush()")
    after = await (await conn.execute(scans)).fetchone()
    assert before is not None and after is not None
    # Migration 0016: = ANY (ARRAY(...)) probes job_ready_N_job_idx; no partition is scanned.
    assert after["n"] == before["n"]
    left = await (await conn.execute("SELECT count(*) AS n FROM job_ready")).fetchone()
    assert left == {"n": 19_700}


async def _ring(conn: Conn) -> int:
    row = await (
        await conn.execute("SELECT (last_value % 3)::int AS slot FROM job_ready_ring")
    ).fetchone()
    assert row is not None
    return int(row["slot"])


async def _claim_and_complete(conn: Conn, queue: QueueRef, worker: WorkerId, n: int) -> None:
    while n > 0:
        got = await claim.claim_batch(conn, queue, worker, min(n, 500), lease_s=30, start=True)
        assert got
        await transitions.complete_many(conn, got)
        n -= len(got)


@HOLDS_AN_XID
async def test_a_backlog_partition_is_not_written_to_and_is_truncated_once_drained(
    db_url: str, conn: Conn
) -> None:
    # Migration 0025. With the clock choosing the partition, one that held a backlog became
    # current again every six seconds whatever it held, so under a backlog none was ever
    # truncated and, with the horizon held, the dead rows of every claim stayed. The ring waits:
    # the crowded partition gets no new rows, is drained, and is truncated, snapshot or not.
    queue = await make_queue(conn)
    worker = WorkerId((await make_worker(conn, project_id=queue["project_id"]))["id"])
    ref = _ref(queue)
    backlog_slot = await _ring(conn)
    backlog = await _enqueue(conn, queue, 5000)
    # The backlog's partition is the one due next; the stint began long ago (only the slot moved).
    for _ in range(2):
        await conn.execute(NEXT_PARTITION)
    current = await _ring(conn)
    assert (current + 1) % 3 == backlog_slot
    holder = await connect(db_url)  # not autocommit: its transaction stays open
    try:
        await holder.execute("SELECT txid_current()")
        await _claim_and_complete(conn, ref, worker, 2500)
        assert await claim.rotate_ready(conn) == "crowded"
        # The ring stays: new jobs go to the current partition, not to the crowded one.
        assert await _ring(conn) == current
        later = await _enqueue(conn, queue, 10)
        rows = await (
            await conn.execute(
                "SELECT DISTINCT slot FROM job_ready WHERE job_id = ANY (%s)", (later,)
            )
        ).fetchall()
        assert [r["slot"] for r in rows] == [current]
        # Drained below the cap: its last live rows move, it is truncated, and it is next.
        await _claim_and_complete(conn, ref, worker, 1000)
        assert await claim.rotate_ready(conn) == "rotated"
        size = await (
            await conn.execute(
                "SELECT pg_relation_size(%s::regclass) AS n", (f"job_ready_{backlog_slot}",)
            )
        ).fetchone()
        assert size == {"n": 0}
        assert await _ring(conn) == backlog_slot
        left = await (await conn.execute("SELECT job_id FROM job_ready")).fetchall()
        assert {r["job_id"] for r in left} == set(backlog[3500:]) | set(later)
    finally:
        await holder.rollback()
        await holder.close()


@CLAIM_RACE
async def test_a_partition_the_statistics_call_crowded_is_not_scanned(conn: Conn) -> None:
    # Migration 0025: the live-row count walks a drained partition's dead rows before its live
    # ones; while the counters say it holds ten times the cap, it is not read at all.
    queue = await make_queue(conn)
    target = await _ring(conn)
    for size in (10_000, 10_000, 1):
        await _enqueue(conn, queue, size)
    for _ in range(2):
        await conn.execute(NEXT_PARTITION)
    assert (await _ring(conn) + 1) % 3 == target
    await conn.execute("SELECT pg_stat_force_next_flush()")
    await conn.execute("SELECT 1")  # the counters are published at the end of a transaction
    rotator = await connect(conn.info.dsn)
    scans = (
        "SELECT seq_scan + coalesce(idx_scan, 0) AS n FROM pg_stat_xact_user_tables"
        " WHERE relname = %s"
    )
    try:
        before = await (await rotator.execute(scans, (f"job_ready_{target}",))).fetchone()
        row = await (await rotator.execute("SELECT job_ready_rotate() AS outcome")).fetchone()
        after = await (await rotator.execute(scans, (f"job_ready_{target}",))).fetchone()
        await rotator.rollback()
        assert row == {"outcome": "crowded"}
        assert after == before, (before, after)
    finally:
        await rotator.close()
