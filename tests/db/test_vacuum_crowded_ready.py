"""A ready partition too crowded to rotate is vacuumed, so a full claim stops walking its dead.

The rotation empties a job_ready partition by TRUNCATE only when few live rows remain in it
(migration 0015). A backlog that a drain works through keeps, at the head of its claim index,
the dead entries of every job claimed from it, and each full claim steps over all of them before
its first live row (a 1,000,000-job drain: 4.4 ms a claim, 2.5 ms after a VACUUM;
docs/BENCHMARKS.md). `claim.vacuum_ready`, started by every worker after its rotation call,
vacuums such a partition. Autovacuum is off here, so nothing else clears them under the test.

Counted in buffers, never in time: EXPLAIN (ANALYZE, BUFFERS) of the claim's ordered scan.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from jobyard.core import claim
from jobyard.db.pool import SyncConn, connect_sync
from jobyard.db.queries import sql
from tests.db.backlog import call, claim_params, clone_with_backlog

# "horizon": the VACUUM must be able to remove the claimed rows, so this runs apart from the
# tests that hold an xid (any database's xid holds every database's horizon).
pytestmark = pytest.mark.xdist_group("horizon")

BACKLOG = 30_000
CLAIMED = 24_000
BATCH = 1_000
# A transaction of another test outside that group can still hold the horizon for a while; the
# VACUUM is retried until it may remove the claimed rows.
SETTLE_S = 20.0
# Far longer than a VACUUM that skips a locked table takes; a VACUUM that waits never returns.
LOCK_WAIT_LIMIT_S = 30.0


@pytest.fixture
def drained(pg_admin_url: str, pg_template: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A fresh clone: one queue with BACKLOG queued jobs, CLAIMED of them taken by the claim
    statement (their ready rows deleted, dead until a VACUUM), autovacuum off on job_ready."""
    with clone_with_backlog(pg_admin_url, pg_template, BACKLOG) as (url, ids):
        with connect_sync(url, autocommit=True) as conn:
            for _ in range(CLAIMED // BATCH):
                assert len(_claim(conn, ids, BATCH)) == BATCH
            # The counters vacuum_ready reads are flushed by a backend at its next chance.
            conn.execute("SELECT pg_stat_force_next_flush()")
        yield url, ids


def _claim(conn: SyncConn, ids: dict[str, Any], n: int) -> list[Any]:
    rows = conn.execute(sql("job_claim_batch"), claim_params(ids, n)).fetchall()
    return [r for r in rows if not r["suspect_waiting"]]


def _first_row_buffers(url: str, ids: dict[str, Any]) -> int:
    """Shared buffers the claim's ordered scan reads to reach the queue's first ready row: what
    its Merge Append asks of every partition on every full claim."""
    with connect_sync(url, autocommit=True) as conn:
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT job_id FROM job_ready"
            " WHERE queue_id = %(queue_id)s ORDER BY - priority, run_at, job_id LIMIT 1",
            {"queue_id": ids["queue_id"]},
        ).fetchone()
    assert row is not None
    plan = row["QUERY PLAN"]
    top = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


def _vacuum(url: str, **options: Any) -> list[str]:
    return call(url, lambda conn: claim.vacuum_ready(conn, **options))


def _partition_of_backlog(url: str) -> str:
    with connect_sync(url, autocommit=True) as conn:
        row = conn.execute("SELECT tableoid::regclass::text AS part FROM job_ready LIMIT 1")
        found = row.fetchone()
    assert found is not None
    return str(found["part"])


def test_a_crowded_partition_is_vacuumed_and_claims_stop_walking_its_dead(
    drained: tuple[str, dict[str, Any]],
) -> None:
    url, ids = drained
    # Walked twice, so the first walk's marks on dead index entries are in place.
    _first_row_buffers(url, ids)
    walked = _first_row_buffers(url, ids)
    assert walked > 60, f"the scan read only {walked} buffers past {CLAIMED:,} dead rows"

    assert _vacuum(url) == [_partition_of_backlog(url)]
    deadline = time.monotonic() + SETTLE_S
    after = _first_row_buffers(url, ids)
    while after * 4 > walked and time.monotonic() < deadline:
        # Another session held the horizon during that VACUUM: what it could not remove is
        # still counted dead, so the partition is due again (min_interval_s aside).
        time.sleep(0.5)
        _vacuum(url, min_interval_s=0.0)
        after = _first_row_buffers(url, ids)
    assert after * 4 <= walked, f"{after} buffers after the VACUUM, {walked} before"


def test_only_a_crowded_partition_with_enough_dead_rows_is_vacuumed(
    drained: tuple[str, dict[str, Any]],
) -> None:
    url, _ = drained
    live = BACKLOG - CLAIMED
    # Too few dead rows, or too few live ones (the rotation truncates those): left alone.
    assert _vacuum(url, min_dead=CLAIMED + 1) == []
    assert _vacuum(url, min_live=live) == []
    assert _vacuum(url) == [_partition_of_backlog(url)]
    # Not again within min_interval_s, whatever it left dead.
    assert _vacuum(url, min_dead=0) == []


def test_a_partition_another_session_holds_is_passed_over_not_waited_for(
    drained: tuple[str, dict[str, Any]],
) -> None:
    url, _ = drained
    part = _partition_of_backlog(url)
    # What autovacuum, another worker's VACUUM or an ANALYZE holds while it works on the table.
    with connect_sync(url, autocommit=False) as holder:
        holder.execute(f"LOCK TABLE {part} IN SHARE UPDATE EXCLUSIVE MODE")

        # Picked, sent, and skipped by the server: it returns, the partition still due. Without
        # SKIP_LOCKED the VACUUM waits for the holder, here for ever.
        skipped = call(
            url, lambda conn: asyncio.wait_for(claim.vacuum_ready(conn), LOCK_WAIT_LIMIT_S)
        )
        assert skipped == [part]
        holder.rollback()
    assert _vacuum(url) == [part]
