"""The lease reaper: expired leases come back refunded; extended ones never do; poison pills
are dead-lettered; after an outage live workers get one lease of grace."""

from __future__ import annotations

import asyncio
import hashlib
import random
from datetime import timedelta
from typing import Any

from jobyard.core import claim, transitions
from jobyard.core.maintenance import reap_expired_leases
from jobyard.db.pool import Conn, connect
from jobyard.domain.ids import QueueId, WorkerId
from jobyard.domain.models import QueueRef
from jobyard.scheduler.reaper import Reaper, ReaperConfig
from tests.factories import make_queue, make_worker
from tests.scheduler.helpers import (
    T0,
    all_rows,
    dead_database,
    execution,
    job,
    make_held_job,
    one,
)


async def setup(conn: Conn) -> tuple[dict[str, Any], dict[str, Any]]:
    queue = await make_queue(conn)
    worker = await make_worker(conn, project_id=queue["project_id"])
    return queue, worker


async def test_expired_lease_is_requeued_with_the_attempt_refunded(conn: Conn) -> None:
    queue, worker = await setup(conn)
    held = await make_held_job(
        conn, queue, worker, lock_expires_at=T0 - timedelta(seconds=1), attempt=2
    )
    result = await reap_expired_leases(conn, now=T0)
    assert (result.requeued, result.dead_lettered, result.job_ids) == (1, 0, (held["id"],))
    after = await job(conn, held["id"])
    assert after["status"] == "queued"
    assert after["attempt"] == 1  # refunded
    assert after["lease_lost_count"] == 1
    assert after["execution_seq"] == held["execution_seq"]  # identity is never reused
    for column in ("worker_id", "lock_expires_at", "claimed_at", "started_at", "finished_at"):
        assert after[column] is None, column
    ex = await execution(conn, held["id"])
    assert ex["outcome"] == "lease_lost"
    assert ex["attempt_charged"] is False
    assert ex["finished_at"] == T0
    assert ex["duration_ms"] == 31_000
    assert ex["error"] == "lease expired (no heartbeat)"


async def test_unexpired_lease_is_left_alone(conn: Conn) -> None:
    queue, worker = await setup(conn)
    held = await make_held_job(conn, queue, worker, lock_expires_at=T0 + timedelta(seconds=1))
    exactly_now = await make_held_job(conn, queue, worker, lock_expires_at=T0)
    assert (await reap_expired_leases(conn, now=T0)).reaped == 0
    assert (await job(conn, held["id"]))["status"] == "running"
    assert (await job(conn, exactly_now["id"]))["status"] == "running"


async def test_reaping_notifies_each_requeued_queue(conn: Conn, db_url: str) -> None:
    queue, worker = await setup(conn)
    for _ in range(3):
        await make_held_job(conn, queue, worker, lock_expires_at=T0 - timedelta(seconds=5))
    listener = await connect(db_url, autocommit=True)
    try:
        await listener.execute("LISTEN jobyard_jobs")
        await reap_expired_leases(conn, now=T0)
        heard = [n.payload async for n in listener.notifies(timeout=1.0)]
    finally:
        await listener.close()
    assert heard == [str(queue["id"])]


async def test_poison_pill_is_dead_lettered_on_its_nth_solo_death(conn: Conn) -> None:
    queue, worker = await setup(conn)
    held = await make_held_job(
        conn,
        queue,
        worker,
        lock_expires_at=T0 - timedelta(seconds=1),
        lease_lost_count=2,
        solo_deaths=2,
    )
    result = await reap_expired_leases(conn, poison_threshold=3, now=T0)
    assert (result.requeued, result.dead_lettered) == (0, 1)
    after = await job(conn, held["id"])
    message = "worker died 3 times while running this job alone"
    assert (after["status"], after["finished_at"], after["last_error"]) == (
        "dead_letter",
        T0,
        message,
    )
    assert after["attempt"] == 1  # a poison pill's run is charged, not refunded
    letter = await one(conn, "SELECT * FROM dead_letter_jobs WHERE job_id = %s", held["id"])
    assert letter["reason"] == "poison_pill"
    assert letter["error"] == message
    assert letter["error_fingerprint"] == hashlib.md5(message.encode()).hexdigest()
    assert (letter["payload"], letter["attempts"], letter["queue_id"]) == (
        {"secret": 1},
        1,
        queue["id"],
    )
    ex = await execution(conn, held["id"])
    assert (ex["outcome"], ex["attempt_charged"]) == ("lease_lost", True)


async def test_a_lost_job_whose_cancel_was_requested_ends_cancelled_not_requeued(
    conn: Conn, db_url: str
) -> None:
    queue, worker = await setup(conn)
    # At the poison threshold too: the user's cancel wins over dead-lettering.
    held = await make_held_job(
        conn,
        queue,
        worker,
        lock_expires_at=T0 - timedelta(seconds=1),
        lease_lost_count=2,
        solo_deaths=2,
    )
    await conn.execute("UPDATE jobs SET cancel_requested_at = %s WHERE id = %s", (T0, held["id"]))
    listener = await connect(db_url, autocommit=True)
    try:
        await listener.execute("LISTEN jobyard_jobs")
        result = await reap_expired_leases(conn, poison_threshold=3, now=T0)
        heard = [n.payload async for n in listener.notifies(timeout=0.5)]
    finally:
        await listener.close()
    assert (result.requeued, result.dead_lettered, result.cancelled) == (0, 0, 1)
    after = await job(conn, held["id"])
    assert (after["status"], after["finished_at"], after["worker_id"]) == ("cancelled", T0, None)
    assert after["attempt"] == 0  # the lost run is refunded, as for any lost lease
    assert await all_rows(conn, "SELECT * FROM dead_letter_jobs") == []
    assert heard == []  # nothing came back to the queue, so no worker is woken
    ex = await execution(conn, held["id"])
    assert (ex["outcome"], ex["attempt_charged"]) == ("lease_lost", False)


async def test_below_the_poison_threshold_the_job_is_requeued(conn: Conn) -> None:
    queue, worker = await setup(conn)
    held = await make_held_job(
        conn, queue, worker, lock_expires_at=T0 - timedelta(seconds=1), lease_lost_count=1
    )
    result = await reap_expired_leases(conn, poison_threshold=3, now=T0)
    assert result.requeued == 1
    assert (await job(conn, held["id"]))["lease_lost_count"] == 2


async def test_reaper_leaves_a_row_a_heartbeat_is_extending_right_now(
    conn: Conn, db_url: str
) -> None:
    """The race with a heartbeat: the heartbeat holds the row lock and commits an extension
    while the reaper runs. SKIP LOCKED passes over the row; without it the reaper would wait
    for the lock and then take the just-extended lease (the recheck must then refuse it)."""
    queue, worker = await setup(conn)
    held = await make_held_job(conn, queue, worker, lock_expires_at=T0 - timedelta(seconds=1))
    heartbeat = await connect(db_url, autocommit=False)
    reaper_conn = await connect(db_url, autocommit=True)
    try:
        await heartbeat.execute(
            "UPDATE jobs SET lock_expires_at = %s WHERE id = %s AND worker_id = %s",
            (T0 + timedelta(seconds=30), held["id"], worker["id"]),
        )
        reap = asyncio.create_task(reap_expired_leases(reaper_conn, now=T0))
        done, _ = await asyncio.wait({reap}, timeout=1.0)
        await heartbeat.commit()
        result = await reap
    finally:
        await heartbeat.close()
        await reaper_conn.close()
    after = await job(conn, held["id"])
    assert (after["status"], after["lock_expires_at"]) == ("running", T0 + timedelta(seconds=30))
    # Still in flight: the run has no execution row yet.
    assert await all_rows(conn, "SELECT 1 FROM job_executions WHERE job_id = %s", held["id"]) == []
    assert result.reaped == 0
    assert done, "the reaper waited for the heartbeat's row lock instead of skipping the row"


async def test_reaper_racing_heartbeats_and_completions_never_takes_a_saved_job(
    conn: Conn, db_url: str
) -> None:
    """200 jobs whose leases just expired; one connection extends or completes them in random
    order while another reaps in small batches. Every job ends exactly one way: saved by its
    heartbeat/completion, or reaped — never saved *and* requeued."""
    queue, worker = await setup(conn)
    await conn.execute(
        "UPDATE workers SET last_heartbeat_at = now() WHERE id = %s", (worker["id"],)
    )
    ids = []
    for _ in range(200):
        held = await make_held_job(
            conn, queue, worker, lock_expires_at=T0 - timedelta(milliseconds=1)
        )
        ids.append(held["id"])
    # Real time from here: the reaper uses the database clock.
    await conn.execute(
        "UPDATE jobs SET lock_expires_at = now() - interval '1 ms' WHERE id = ANY(%s)", (ids,)
    )
    saver = await connect(db_url, autocommit=True)
    reaper_conn = await connect(db_url, autocommit=True)
    saved: set[int] = set()
    reaped: set[int] = set()
    finished = asyncio.Event()

    async def save() -> None:
        order = ids[:]
        random.Random(7).shuffle(order)
        for i, job_id in enumerate(order):
            if i % 2:
                query = """UPDATE jobs SET lock_expires_at = now() + interval '30 s'
                           WHERE id = %s AND worker_id = %s AND execution_seq = 1
                             AND status IN ('claimed', 'running') RETURNING id"""
            else:
                query = """UPDATE jobs SET status = 'done', lock_expires_at = NULL,
                                  finished_at = now()
                           WHERE id = %s AND worker_id = %s AND execution_seq = 1
                             AND status = 'running' RETURNING id"""
            cur = await saver.execute(query, (job_id, worker["id"]))  # type: ignore[arg-type]
            if await cur.fetchone():
                saved.add(job_id)
        finished.set()

    async def reap() -> None:
        while not finished.is_set():
            result = await reap_expired_leases(reaper_conn, batch=3)
            reaped.update(result.job_ids)
        result = await reap_expired_leases(reaper_conn, batch=500)
        reaped.update(result.job_ids)

    try:
        await asyncio.gather(save(), reap())
    finally:
        await saver.close()
        await reaper_conn.close()
    assert saved & reaped == set()
    assert saved | reaped == set(ids)
    print(f"\nrace: saved {len(saved)}, reaped {len(reaped)}")
    assert saved and reaped, (len(saved), len(reaped))  # both sides really won some races
    rows = await all_rows(conn, "SELECT id, status::text FROM jobs WHERE id = ANY(%s)", ids)
    status = {r["id"]: r["status"] for r in rows}
    assert {status[i] for i in reaped} == {"queued"}
    assert {status[i] for i in saved} <= {"running", "done"}


# ----------------------------------------------------------------------------- outage grace


async def test_reaper_holds_off_one_lease_after_start(conn: Conn) -> None:
    queue, worker = await setup(conn)
    held = await make_held_job(conn, queue, worker, lock_expires_at=T0 - timedelta(minutes=10))
    reaper = Reaper(ReaperConfig(lease_s=30, suspect_delay_s=0))  # outage grace only
    first = await reaper.run_once(conn, now=T0)
    assert first.counts["held_off"] == 1
    assert (await reaper.run_once(conn, now=T0 + timedelta(seconds=29))).counts["held_off"] == 1
    assert (await job(conn, held["id"]))["status"] == "running"
    later = await reaper.run_once(conn, now=T0 + timedelta(seconds=30))
    assert (later.counts["held_off"], later.counts["requeued"]) == (0, 1)


async def test_after_an_outage_live_workers_keep_their_jobs_and_dead_ones_lose_them(
    conn: Conn,
) -> None:
    """The database is away from T0 to T0+5min. Both workers' leases expire during the outage.
    When it returns, the live worker heartbeats within one lease and keeps its job; the dead
    worker's job comes back after that lease — not at once."""
    queue, live_worker = await setup(conn)
    dead_worker = await make_worker(conn, project_id=queue["project_id"], name="dead")
    reaper = Reaper(ReaperConfig(lease_s=30, suspect_delay_s=0))  # outage grace only
    assert (await reaper.run_once(conn, now=T0 - timedelta(minutes=5))).counts["held_off"] == 1
    assert (await reaper.run_once(conn, now=T0)).counts["held_off"] == 0  # window over
    live = await make_held_job(conn, queue, live_worker, lock_expires_at=T0 + timedelta(seconds=25))
    dead = await make_held_job(conn, queue, dead_worker, lock_expires_at=T0 + timedelta(seconds=20))
    # Outage: a pass fails for real (nothing listens on the port).
    assert await reaper.step(lambda: dead_database()) is None
    back = T0 + timedelta(minutes=5)
    assert (await reaper.run_once(conn, now=back)).counts["held_off"] == 1
    # The live worker heartbeats 5 s after the database returns.
    await conn.execute(
        "UPDATE jobs SET lock_expires_at = %s WHERE id = %s",
        (back + timedelta(seconds=35), live["id"]),
    )
    assert (await reaper.run_once(conn, now=back + timedelta(seconds=20))).counts["held_off"] == 1
    result = await reaper.run_once(conn, now=back + timedelta(seconds=31))
    assert (result.counts["held_off"], result.counts["requeued"]) == (0, 1)
    assert (await job(conn, live["id"]))["status"] == "running"
    assert (await job(conn, dead["id"]))["status"] == "queued"


# ----------------------------------------------------------------------------- the position


async def test_a_lease_behind_the_position_waits_for_the_full_pass(conn: Conn) -> None:
    """A lease the position has passed (skipped while another session held its row, which then
    let go without extending it) is not seen by a positioned pass; the next full pass takes it."""
    queue, worker = await setup(conn)
    reaper = Reaper(ReaperConfig(lease_s=30, suspect_delay_s=0, full_every_s=3600))
    assert (await reaper.run_once(conn, now=T0)).counts["held_off"] == 1  # outage grace
    first = await reaper.run_once(conn, now=T0 + timedelta(seconds=31))  # full, nothing to do
    assert (first.counts["held_off"], first.counts["requeued"]) == (0, 0)
    behind = await make_held_job(conn, queue, worker, lock_expires_at=T0)
    recent = await make_held_job(conn, queue, worker, lock_expires_at=T0 + timedelta(seconds=35))
    second = await reaper.run_once(conn, now=T0 + timedelta(seconds=41))
    assert second.counts["requeued"] == 1
    assert (await job(conn, recent["id"]))["status"] == "queued"
    assert (await job(conn, behind["id"]))["status"] == "running"
    reaper.position.next_full_at = 0.0  # the full pass is due
    third = await reaper.run_once(conn, now=T0 + timedelta(seconds=51))
    assert third.counts["requeued"] == 1
    assert (await job(conn, behind["id"]))["status"] == "queued"


async def _attribution(conn: Conn, *ids: int) -> list[tuple[str, bool, int, int]]:
    return [
        (j["status"], j["suspect"], j["solo_deaths"], j["attempt"])
        for j in [await job(conn, i) for i in ids]
    ]


async def test_a_death_is_pinned_on_a_job_only_when_its_worker_held_nothing_else(
    conn: Conn,
) -> None:
    queue, worker = await setup(conn)
    lonely = await make_worker(conn, project_id=queue["project_id"], name="lonely")
    expired = T0 - timedelta(seconds=1)
    shared = [await make_held_job(conn, queue, worker, lock_expires_at=expired) for _ in range(3)]
    alone = await make_held_job(conn, queue, lonely, lock_expires_at=expired)
    result = await reap_expired_leases(conn, poison_threshold=1, now=T0)
    # At a cap of 1 a pinned death dead-letters at once: only the job that ran alone.
    assert (result.requeued, result.dead_lettered) == (3, 1)
    assert await _attribution(conn, *(j["id"] for j in shared)) == [("queued", True, 0, 0)] * 3
    assert await _attribution(conn, alone["id"]) == [("dead_letter", False, 1, 1)]
    letter = await one(conn, "SELECT job_id, error FROM dead_letter_jobs")
    assert letter == {
        "job_id": alone["id"],
        "error": "worker died 1 time while running this job alone",
    }


async def test_a_job_whose_lease_outlived_its_companions_is_not_taken_for_alone(
    conn: Conn,
) -> None:
    """Claimed after the last heartbeat, B's lease ends later than A's: by the time B is reaped,
    A is back in the queue. A's lost run (same worker) still shows B did not die alone."""
    queue, worker = await setup(conn)
    a = await make_held_job(conn, queue, worker, lock_expires_at=T0 - timedelta(seconds=1))
    b = await make_held_job(conn, queue, worker, lock_expires_at=T0 + timedelta(seconds=5))
    assert (await reap_expired_leases(conn, now=T0)).requeued == 1
    assert await _attribution(conn, a["id"]) == [("queued", True, 0, 0)]  # B was still held
    assert (await reap_expired_leases(conn, now=T0 + timedelta(seconds=10))).requeued == 1
    assert await _attribution(conn, b["id"]) == [("queued", True, 0, 0)]


async def test_a_suspect_whose_run_ends_normally_is_cleared(conn: Conn) -> None:
    queue, worker = await setup(conn)
    held = await make_held_job(conn, queue, worker, lock_expires_at=T0 - timedelta(seconds=1))
    await reap_expired_leases(conn, now=T0)
    ref = QueueRef(QueueId(queue["id"]), queue["name"], 0, False, None)
    wid = WorkerId(worker["id"])
    # Not solo: the suspect is not taken, and the claim says one waits.
    busy = await claim.claim(conn, ref, wid, 5, lease_s=30, start=True)
    assert (busy.jobs, busy.suspect_waiting) == ([], True)
    (run,) = (await claim.claim(conn, ref, wid, 5, lease_s=30, start=True, solo=True)).jobs
    assert (run.id, run.suspect) == (held["id"], True)
    await transitions.fail(conn, run, "RuntimeError", "handled", retryable=True)
    after = await job(conn, held["id"])
    # No longer a suspect; the death it had alone still counts (a job that sometimes kills its
    # worker is still dead-lettered at the cap, over its whole life).
    assert (after["status"], after["suspect"], after["solo_deaths"]) == ("scheduled", False, 1)


async def test_after_a_pinned_death_the_job_waits_before_its_next_run(conn: Conn) -> None:
    queue, worker = await setup(conn)
    lonely = await make_worker(conn, project_id=queue["project_id"], name="lonely")
    expired = T0 - timedelta(seconds=1)
    shared = [await make_held_job(conn, queue, worker, lock_expires_at=expired) for _ in range(2)]
    alone = await make_held_job(conn, queue, lonely, lock_expires_at=expired)
    result = await reap_expired_leases(conn, suspect_delay_s=10, now=T0)
    assert result.requeued == 3
    back = [await job(conn, j["id"]) for j in [*shared, alone]]
    assert [(j["status"], j["suspect"], j["solo_deaths"]) for j in back] == [
        ("queued", True, 0),
        ("queued", True, 0),
        ("scheduled", True, 1),
    ]
    assert back[2]["run_at"] == T0 + timedelta(seconds=10)
