"""A claim right after a burst of enqueues locks the jobs it takes, not the whole backlog.

The claim's lock filter sits on its ordered scan of job_ready, so LIMIT stops after n rows. A
ready partition whose statistics predate the burst (a fresh database, a new queue, a bulk
enqueue) looked as if it held a hundred rows of the queue: the planner read them all by bitmap
scan and sorted them, and the filter, below the sort, locked every queued job of the queue on
every claim (measured: 15 ms a claim, and a second worker found nothing it could take).
`refresh_ready_stats` (migration 0018), called beside the rotation, analyzes such a partition at
once. Autovacuum is off here, so nothing else repairs the statistics under the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jobyard.core import claim
from jobyard.db.pool import SyncConn, connect_sync
from jobyard.db.queries import sql
from tests.db.backlog import call, claim_params, clone_with_backlog

pytestmark = pytest.mark.xdist_group("explain")

BACKLOG = 20_000
TAKE = 100


@pytest.fixture
def burst(pg_admin_url: str, pg_template: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A fresh clone: one queue with BACKLOG queued jobs inserted in one statement, and the
    ready partitions' autovacuum off."""
    with clone_with_backlog(pg_admin_url, pg_template, BACKLOG) as made:
        yield made


def _refresh(url: str, **options: Any) -> int:
    return call(url, lambda conn: claim.refresh_ready_stats(conn, **options))


def _left_for_another_worker(url: str, ids: dict[str, Any], generic: bool) -> int:
    """Claim TAKE jobs in an open transaction; count the queued jobs another session can still
    lock (SKIP LOCKED) while it is open."""
    params = claim_params(ids, TAKE)
    with connect_sync(url, autocommit=False) as claimer, connect_sync(url) as other:
        if generic:
            # What psycopg's prepared statement runs after five calls.
            claimer.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        taken = claimer.execute(sql("job_claim_batch"), params, prepare=generic).fetchall()
        assert len([r for r in taken if not r["suspect_waiting"]]) == TAKE
        free = _count(other, "SELECT count(*) AS n FROM (SELECT 1 FROM jobs WHERE status = "
                      "'queued' FOR UPDATE SKIP LOCKED) s")  # fmt: skip
        claimer.rollback()
    return free


def _count(conn: SyncConn, text: Any) -> int:
    row = conn.execute(text).fetchone()
    assert row is not None
    return int(row["n"])


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
def test_a_claim_after_a_burst_locks_only_what_it_takes(
    burst: tuple[str, dict[str, Any]], generic: bool
) -> None:
    url, ids = burst
    _refresh(url)  # what every worker and the scheduler call about once a second
    assert _left_for_another_worker(url, ids, generic) == BACKLOG - TAKE


def test_refresh_is_a_no_op_once_the_statistics_are_fresh(
    burst: tuple[str, dict[str, Any]],
) -> None:
    url, _ = burst
    assert _refresh(url) == 1  # the partition that took the burst
    assert _refresh(url) == 0
    # As many changes again in that same partition right after: left alone for min_interval_s,
    # then analyzed. (Not a second burst of enqueues: on a slow host it can cross into the next
    # two-second slot, whose partition was never analyzed and rightly is; CI, PostgreSQL 15.)
    with connect_sync(url, autocommit=True) as conn:
        row = conn.execute("SELECT tableoid::regclass::text AS part FROM job_ready LIMIT 1")
        part = row.fetchone()
        assert part is not None
        conn.execute(f"UPDATE {part['part']} SET priority = priority")
        conn.execute("SELECT pg_stat_force_next_flush()")
    assert _refresh(url) == 0
    assert _refresh(url, min_interval_s=0.0) == 1


def test_a_burst_is_analyzed_before_its_writer_publishes_its_counters(
    pg_admin_url: str, pg_template: str
) -> None:
    """A backend publishes its change counters at most once a second (ten seconds later if it
    goes idle), so a worker started right after a bulk enqueue used to claim on the statistics
    from before it. The partition's size is seen at once (migration 0024)."""
    burst = 3_000  # above the 2,000-row threshold, and quick enough to commit within a second
    with clone_with_backlog(pg_admin_url, pg_template, burst, counters_published=False) as made:
        url, ids = made
        with connect_sync(url, autocommit=True) as reader:
            published = _count(
                reader,
                "SELECT coalesce(sum(n_mod_since_analyze), 0) AS n FROM pg_stat_user_tables"
                " WHERE relname LIKE 'job_ready_%'",
            )
        assert published < 2_000, "the burst's counters were published already"
        assert _refresh(url) == 1
        assert _left_for_another_worker(url, ids, generic=False) == burst - TAKE
