"""A claim is a HOT update (migration 0030): no index of `jobs` names a column the claim changes
(`status_group` stands in for `status` in the indexes), so a claimed row gets its new version on
its own page and no index gets an entry, which a held xmin horizon would keep.

docs/DATABASE.md ("The claim is a HOT update"); docs/TESTING.md records what failed with the
mechanism broken.
"""

from __future__ import annotations

from typing import Any

from jobyard.core import claim, enqueue
from jobyard.core.claim import queues_by_names
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.schemas import BatchCreate, BatchItem
from tests.factories import make_queue, make_worker

UPDATES = "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'jobs'"


async def _updates(conn: Conn) -> dict[str, Any]:
    row = await (await conn.execute(UPDATES)).fetchone()
    assert row is not None
    return dict(row)


async def test_a_workers_claim_is_a_hot_update(conn: Conn) -> None:
    """The worker's claim (claimed and started in one statement) writes one version of each
    row, on its page."""
    q = await make_queue(conn, name="hot")
    w = await make_worker(conn, project_id=q["project_id"])
    project = ProjectId(q["project_id"])
    (queue,) = await queues_by_names(conn, project, ["hot"])
    items = [BatchItem(handler="noop") for _ in range(60)]
    await enqueue.enqueue_batch(conn, project, BatchCreate(queue="hot", jobs=items))

    # pg_stat_xact_user_tables counts this transaction's own updates, whoever else is running.
    async with conn.transaction():
        before = await _updates(conn)
        claimed = await claim.claim_batch(
            conn, queue, WorkerId(w["id"]), 50, lease_s=30, start=True
        )
        after = await _updates(conn)
    assert len(claimed) == 50
    updated = after["n_tup_upd"] - before["n_tup_upd"]
    hot = after["n_tup_hot_upd"] - before["n_tup_hot_upd"]
    assert updated == 50, (before, after)
    assert hot == updated, f"{hot} of {updated} updates of jobs were HOT"


async def test_the_status_group_follows_the_status(conn: Conn) -> None:
    """What the indexes name: claimed and running share queued's group, every other status is
    its own (a read by status names both, job_status_groups)."""
    rows = await (
        await conn.execute(
            """SELECT s::text AS status, job_status_group(s)::text AS grp
               FROM unnest(enum_range(NULL::job_status)) s"""
        )
    ).fetchall()
    groups = {r["status"]: r["grp"] for r in rows}
    held_too = {"claimed": "queued", "running": "queued"}
    assert groups == {s: held_too.get(s, s) for s in groups}
    row = await (
        await conn.execute(
            "SELECT job_status_groups(ARRAY['running', 'claimed', 'done']::job_status[])::text AS g"
        )
    ).fetchone()
    assert row is not None and sorted(row["g"].strip("{}").split(",")) == ["done", "queued"]
