"""A limited queue's cap holds while its held set is rotated under racing claims (migration 0022).

Sixteen claim loops in their own processes race for a queue with max_concurrency while this
process rotates job_held as often as it can and keeps three of the queue's jobs running the whole
time, so the rotations move live rows that the racers' counts depend on. See docs/TESTING.md
("Held set") for what this caught with the move broken.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from jobyard.core import claim
from jobyard.core.claim import queues_by_names
from jobyard.db.pool import Conn, connect
from jobyard.domain.ids import ProjectId, WorkerId
from tests.concurrency.test_claim_exactly_once import _race, _setup, _summary
from tests.factories import make_worker

pytestmark = pytest.mark.xdist_group("claim-race")


async def _kept_slots(conn: Conn, ids: list[int]) -> set[int]:
    rows = await (
        await conn.execute("SELECT DISTINCT slot FROM job_held WHERE job_id = ANY(%s)", (ids,))
    ).fetchall()
    return {r["slot"] for r in rows}


async def test_the_cap_holds_while_the_held_set_is_rotated_under_racing_claims(
    db_url: str, conn: Conn, tmp_path: Path
) -> None:
    jobs, cap, kept = 6_000, 8, 3
    queue = await _setup(conn, jobs, max_concurrency=cap)
    (ref,) = await queues_by_names(conn, ProjectId(queue["project_id"]), [queue["name"]])
    worker = WorkerId((await make_worker(conn, project_id=queue["project_id"]))["id"])
    held = [j.id for j in await claim.claim_batch(conn, ref, worker, kept, lease_s=600, start=True)]
    assert len(held) == kept

    rotator = await connect(db_url, autocommit=True, application_name="held-set-rotator")
    moves: list[float] = []  # wall times at which the kept jobs' rows changed partition

    async def rotate() -> None:
        slots = await _kept_slots(rotator, held)
        while True:
            if await claim.keep_held(rotator, wait_ms=5) == "rotated":
                now = await _kept_slots(rotator, held)
                if now != slots:
                    moves.append(time.time())
                    slots = now
            await asyncio.sleep(0.02)

    task = asyncio.create_task(rotate())
    try:
        race = await _race(db_url, queue, tmp_path, hold_ms=(5.0, 10.0))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await rotator.close()
    print(_summary(race), f"kept rows moved at {moves}")

    assert race.errors == [], race.errors[:5]
    assert len(race.claimed_ids) == jobs - kept and max(race.claimed_ids.values()) == 1
    # Sampled from a separate connection while the loops ran; the kept jobs count in it.
    assert race.samples > 10 and race.max_in_flight <= cap, race.max_in_flight
    assert race.max_in_flight == cap, "the race never hit the cap"
    walls = [c["at"] for c in race.calls]
    assert any(min(walls) < t < max(walls) for t in moves), "no move while the loops raced"
    rows = await (
        await conn.execute("SELECT job_id FROM job_held WHERE queue_id = %s", (queue["id"],))
    ).fetchall()
    assert sorted(r["job_id"] for r in rows) == sorted(held)
