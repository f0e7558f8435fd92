"""A worker's writes by job id reach `jobs` through its primary key, even under a held horizon.

The 10-minute pressure run (docs/BENCHMARKS.md) stalled after eight minutes of a held xmin: the
completion's plan had turned into a full scan of `jobs_held_idx` (the partial index of claimed
and running jobs). Statistics said one job was running, so that index looked like a few pages;
under the held horizon it was every job that had run since, all dead, 20,000 buffers a call.
This builds that state on purpose — jobs that went running → done while another session holds
the horizon, then ANALYZE — and EXPLAINs each by-id statement of the worker's path, with the
plan the planner picks for given values and with its generic plan (what psycopg's prepared
statements run after five calls). Plans and buffers, never timings.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

import pytest
from psycopg import ClientCursor
from psycopg.types.json import Jsonb

from jobyard.db.pool import SyncConn, connect_sync
from jobyard.db.queries import sql

# The fixture holds an xid for the whole module, and an xid of any database holds every
# database's horizon: these tests run in the group of the tests that watch the horizon.
pytestmark = pytest.mark.xdist_group("horizon")

# Jobs that went running → done under the held horizon: their entries in jobs_held_idx are dead
# and cannot be removed. Enough that a scan of them is ~100× a handful of key lookups.
PASSED_THROUGH = 20_000
HELD = 10
# A lookup of HELD jobs by key reads a few pages each (index and heap, plus the statement's
# own inserts and triggers); a scan of the dead entries reads thousands.
MAX_BUFFERS = 600


def _nodes(node: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


@pytest.fixture(scope="module", params=["held", "stale"])
def bloated(
    request: pytest.FixtureRequest, pg_admin_url: str, pg_template: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    """'held': statistics taken after the jobs ran, under the held horizon (jobs_held_idx).
    'stale': statistics taken before they ran, as after a bulk enqueue that a drain then works
    off: worker_id looks always NULL, so jobs_worker_idx looks like one row for a worker, but
    it holds every job that worker has finished (a 100,000-job drain: 39 ms a completion)."""
    from jobyard.db import testing

    url = testing.create_clone(pg_admin_url, pg_template)
    holder = connect_sync(url)
    try:
        with connect_sync(url, autocommit=True) as conn:
            ids = conn.execute(
                """WITH o AS (INSERT INTO organizations (name, slug) VALUES ('h', 'h') RETURNING id),
                        p AS (INSERT INTO projects (org_id, name, slug)
                              SELECT id, 'h', 'h' FROM o RETURNING id),
                        q AS (INSERT INTO queues (project_id, name) SELECT id, 'q' FROM p
                              RETURNING id, project_id)
                   INSERT INTO workers (project_id, name, concurrency)
                   SELECT project_id, 'w', 10 FROM q RETURNING id, project_id,
                          (SELECT id FROM q) AS queue_id"""
            ).fetchone()
            assert ids is not None
            holder.execute("SELECT txid_current()")  # holds the horizon from here on
            running = """INSERT INTO jobs (project_id, queue_id, handler, payload, status,
                                           run_at, worker_id, attempt, execution_seq,
                                           claimed_at, started_at, lock_expires_at)
                         SELECT %(p)s, %(q)s, 'h', '{}', 'running', now(), %(w)s, 1, 1,
                                now(), now(), now() + interval '1 hour'
                         FROM generate_series(1, %(n)s)"""
            params = {"p": ids["project_id"], "q": ids["queue_id"], "w": ids["id"]}
            if request.param == "stale":
                # No autovacuum either: its ANALYZE would repair the statistics under the test.
                conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
                conn.execute(
                    "INSERT INTO jobs (project_id, queue_id, handler, payload)"
                    " SELECT %(p)s, %(q)s, 'h', '{}' FROM generate_series(1, %(n)s)",
                    {**params, "n": PASSED_THROUGH},
                )
                conn.execute("ANALYZE jobs")
                conn.execute(
                    "UPDATE jobs SET status = 'done', worker_id = %(w)s, attempt = 1,"
                    " execution_seq = 1, claimed_at = now(), started_at = now(),"
                    " finished_at = now()",
                    params,
                )
                conn.execute(running, {**params, "n": HELD})  # type: ignore[arg-type]
            else:
                conn.execute(running, {**params, "n": PASSED_THROUGH})  # type: ignore[arg-type]
                conn.execute(
                    "UPDATE jobs SET status = 'done', finished_at = now(), lock_expires_at = NULL"
                )
                conn.execute(running, {**params, "n": HELD})  # type: ignore[arg-type]
                conn.execute("ANALYZE jobs")
            held = conn.execute(
                "SELECT array_agg(id ORDER BY id) AS ids FROM jobs WHERE status = 'running'"
            ).fetchone()
            assert held is not None
        yield url, {**params, "ids": held["ids"]}
    finally:
        holder.close()
        testing.drop_database(pg_admin_url, url)


def _cases(f: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    ids, one = f["ids"], f["ids"][0]
    seqs = [1] * len(ids)
    fenced = {"worker_id": f["w"], "now": None}
    return [
        ("job_complete_many", {**fenced, "ids": ids, "seqs": seqs,
                               "results": [Jsonb(None)] * len(ids)}),
        ("job_start_many", {**fenced, "ids": ids, "seqs": seqs}),
        ("job_release_many", {**fenced, "ids": ids, "seqs": seqs}),
        ("lease_extend", {**fenced, "ids": ids, "seqs": seqs, "lease_s": 30.0,
                          "draining": False, "capacity": 10, "orphan_threads": 0}),
        ("job_progress_set", {"worker_id": f["w"], "id": one, "seq": 1, "fraction": 0.5,
                              "message": None}),
        ("job_log_append", {"worker_id": f["w"], "id": one, "seq": 1, "level": "info",
                            "message": "m", "fields": Jsonb({})}),
        ("job_retry_context", {"worker_id": f["w"], "id": one, "seq": 1}),
    ]  # fmt: skip


def _explain(conn: SyncConn, name: str, params: Mapping[str, Any], generic: bool) -> Any:
    text = sql(name)
    with conn.transaction(force_rollback=True):
        if generic:
            # The plan a driver's prepared call runs: psycopg prepares the statement (typed
            # parameters), and EXPLAIN EXECUTE runs that prepared statement's generic plan.
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            conn.execute(text, params, prepare=True)
            found = conn.execute(
                "SELECT name FROM pg_prepared_statements ORDER BY prepare_time DESC LIMIT 1"
            ).fetchone()
            assert found is not None
            values = _in_order(text, params)
            # Values inlined as literals (a client-side cursor): EXECUTE's arguments take the
            # prepared statement's parameter types, which server-side $n could not tell it.
            with ClientCursor(conn) as cur:
                cur.execute(
                    f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {found['name']}("
                    + ", ".join(["%s"] * len(values))
                    + ")",
                    values,
                )
                row = cur.fetchone()
        else:
            row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text, params).fetchone()
    assert row is not None
    plan = row["QUERY PLAN"]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]


def _in_order(text: str, params: Mapping[str, Any]) -> list[Any]:
    """The values of `%(name)s` placeholders in first-use order (psycopg's $n order)."""
    order: list[str] = []
    for key in re.findall(r"%\((\w+)\)s", text):
        if key not in order:
            order.append(key)
    return [params[k] for k in order]


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
@pytest.mark.parametrize("name", [c[0] for c in _cases({"ids": [0], "w": 0})])
def test_a_by_id_write_reads_jobs_by_key_not_the_dead_held_entries(
    bloated: tuple[str, dict[str, Any]], name: str, generic: bool
) -> None:
    url, fixture = bloated
    params = dict(_cases(fixture))[name]
    with connect_sync(url) as conn:
        explained = _explain(conn, name, params, generic)
    scans = [
        (n.get("Node Type"), n.get("Index Name"))
        for n in _nodes(explained["Plan"])
        if n.get("Relation Name") == "jobs" and "Scan" in str(n.get("Node Type"))
    ]
    assert ("Index Scan", "jobs_held_idx") not in scans, scans
    assert ("Index Scan", "jobs_worker_idx") not in scans, scans
    assert all(index == "jobs_pkey" for _, index in scans), scans
    buffers = explained["Plan"].get("Shared Hit Blocks", 0) + explained["Plan"].get(
        "Shared Read Blocks", 0
    )
    assert buffers <= MAX_BUFFERS, (buffers, scans)


def _buffers(explained: Mapping[str, Any]) -> int:
    plan = explained["Plan"]
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def _from_position_and_full(
    conn: SyncConn, name: str, params: Mapping[str, Any], since: Any, *, generic: bool
) -> tuple[Any, Any]:
    """A scheduler pass EXPLAINed twice: from a position (`since`) and as a full pass (None).
    Returns both, after checking that the full pass walks the dead entries (more than ten
    times the buffers) that the positioned one skips."""
    positioned = _explain(conn, name, {**params, "since": since}, generic)
    full = _explain(conn, name, {**params, "since": None}, generic)
    assert _buffers(full) > 10 * _buffers(positioned), (_buffers(full), _buffers(positioned))
    return positioned, full


def _reap_buffers(conn: SyncConn, now: Any, since: Any) -> tuple[int, list[tuple[Any, Any]]]:
    params = {"batch": 500, "grace_s": 0.0, "worker_ids": [], "poison_threshold": 3,
              "suspect_delay_s": 10.0, "now": now, "since": since}  # fmt: skip
    explained = _explain(conn, "lease_reap", params, generic=False)
    scans = [
        (n.get("Node Type"), n.get("Index Name"))
        for n in _nodes(explained["Plan"])
        if n.get("Relation Name") == "jobs"
        and "Scan" in str(n.get("Node Type"))
        and n.get("Actual Loops", 0) > 0
    ]
    return _buffers(explained), scans


@pytest.mark.parametrize("bloated", ["held"], indirect=True)
def test_a_reaper_pass_reads_the_held_set_not_the_runs_of_the_hold(
    bloated: tuple[str, dict[str, Any]],
) -> None:
    """The scheduler's reaper finds its candidates in the held set (migration 0029) and reads
    each by key. The 20,000 runs of the hold left a dead row each in job_held too, which a pass
    walks until the rotation truncates their partition (the workers rotate once a second);
    after it, a pass reads a few pages, from its position or in full, however long the hold."""
    url, _ = bloated
    with connect_sync(url, autocommit=True) as conn:
        found = conn.execute("SELECT now() + interval '2 hours' AS t").fetchone()
        assert found is not None
        now = found["t"]  # every lease of the fixture (an hour long) has expired by then
        # From a position past those leases the pass takes nothing: what it reads is its walk.
        since = now - timedelta(minutes=1)
        before, _ = _reap_buffers(conn, now, since)
        deadline = time.monotonic() + 20.0
        outcomes: list[str] = []
        while time.monotonic() < deadline and _reap_buffers(conn, now, since)[0] > 100:
            row = conn.execute("SELECT job_held_rotate(20, 1000) AS outcome").fetchone()
            assert row is not None
            outcomes.append(str(row["outcome"]))
            time.sleep(0.1)
        after, _ = _reap_buffers(conn, now, since)
        # A full pass takes the fixture's ten held jobs back (the reads and writes of ten).
        full, full_scans = _reap_buffers(conn, now, None)
    print(f"reaper pass buffers: {before} before the rotations, {after} after; a full pass "
          f"{full}; rotations {outcomes.count('rotated')}")  # fmt: skip
    assert before > 100, before  # the hold's dead rows are there to be walked at first
    assert "rotated" in outcomes, outcomes
    assert after <= 100, after
    assert full <= 300, full
    # Every held job read by key; no walk of jobs.
    assert full_scans and all(index == "jobs_pkey" for _, index in full_scans), full_scans


@pytest.fixture(scope="module")
def promoted_under_hold(pg_admin_url: str, pg_template: str) -> Iterator[tuple[str, int]]:
    """PASSED_THROUGH scheduled jobs that left 'scheduled' while another session held an xid:
    their entries in jobs_due_idx are dead and cannot be removed."""
    from jobyard.db import testing

    url = testing.create_clone(pg_admin_url, pg_template)
    holder = connect_sync(url)
    try:
        with connect_sync(url, autocommit=True) as conn:
            queue = conn.execute(
                """WITH o AS (INSERT INTO organizations (name, slug) VALUES ('h', 'h') RETURNING id),
                        p AS (INSERT INTO projects (org_id, name, slug)
                              SELECT id, 'h', 'h' FROM o RETURNING id)
                   INSERT INTO queues (project_id, name) SELECT id, 'q' FROM p
                   RETURNING id, project_id"""
            ).fetchone()
            assert queue is not None
            holder.execute("SELECT txid_current()")  # holds the horizon from here on
            conn.execute(
                """INSERT INTO jobs (project_id, queue_id, handler, payload, status, run_at)
                   SELECT %s, %s, 'h', '{}', 'scheduled', now() - interval '1 hour'
                                                         + g * interval '1 ms'
                   FROM generate_series(1, %s) g""",
                (queue["project_id"], queue["id"], PASSED_THROUGH),
            )
            conn.execute("UPDATE jobs SET status = 'cancelled', finished_at = now()")
            conn.execute("ANALYZE jobs")
        yield url, PASSED_THROUGH
    finally:
        holder.close()
        testing.drop_database(pg_admin_url, url)


def test_a_promoter_pass_from_its_position_does_not_walk_the_promotions_of_the_hold(
    promoted_under_hold: tuple[str, int],
) -> None:
    """The scheduler's promoter (scheduler.position.PassPosition): a pass that starts from the
    last complete pass's start reads the jobs due since, not the dead entry of every job
    promoted since the hold began. A full pass still walks them: that is why it runs only now
    and then."""
    url, _ = promoted_under_hold
    with connect_sync(url) as conn:
        found = conn.execute("SELECT now() AS t").fetchone()
        assert found is not None
        now = found["t"]  # every job of the fixture was due (and has left 'scheduled') by then
        params = {"batch": 1000, "now": now}
        positioned, _ = _from_position_and_full(
            conn, "job_promote_due", params, now - timedelta(minutes=1), generic=True
        )
    # Nothing due since the position: one descent of the index (2 buffers when written); the
    # full pass walks the 20,000 dead entries, in the lookup or, before the UPDATE's status was
    # written as text, in the UPDATE as well (56 buffers, the whole index).
    assert _buffers(positioned) <= 20, _buffers(positioned)
    scans = [
        n.get("Index Cond")
        for n in _nodes(positioned["Plan"])
        if n.get("Relation Name") == "jobs" and n.get("Index Name") == "jobs_due_idx"
    ]
    # The position is a bound of the index scan, not a filter over a walk from the start.
    assert scans and all("run_at >=" in str(cond) for cond in scans), scans
