"""The schema enforces its own invariants: limits, cascades, null-outs, the claim plan."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql
from psycopg.types.json import Jsonb

from jobyard.db import migrate
from jobyard.db.pool import Conn
from jobyard.db.queries import sql
from jobyard.domain import enums
from jobyard.domain.limits import MAX_JSON_DEPTH, MAX_PAYLOAD_BYTES
from tests.factories import make_job, make_project, make_queue, make_worker

# A finished run of (job_id, execution_seq, attempt), as the engine writes it when the run ends.
_FINISHED_RUN = """INSERT INTO job_executions (job_id, execution_seq, attempt, outcome, started_at,
                   finished_at) VALUES (%s, %s, %s, 'succeeded', now(), now())"""


async def test_payload_over_64kb_is_rejected_by_the_database(conn: Conn) -> None:
    queue = await make_queue(conn)
    big = {"blob": "x" * MAX_PAYLOAD_BYTES}
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        await make_job(conn, queue=queue, payload=big)
    assert caught.value.diag.constraint_name == "jobs_payload_size"
    # Just under the cap is fine.
    fits = {"blob": "x" * (MAX_PAYLOAD_BYTES - 20)}
    await make_job(conn, queue=queue, payload=fits)


# Every single-column limit of `jobs`: a domain since migration 0026 (idempotency_key's is still
# a table CHECK), named as its table CHECK was (db/errors.py maps some of the names to fields). A
# domain is checked only where a statement assigns its column, so each is exercised by an UPDATE
# of that column alone.
_BIG_JSON = {"blob": "x" * MAX_PAYLOAD_BYTES}
_FITTING_JSON = {"blob": "x" * (MAX_PAYLOAD_BYTES - 20)}


def _nested(levels: int) -> Any:
    """Arrays nested `levels` deep, the innermost holding a number."""
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


# Migration 0035: nothing 101 levels below the top (MAX_JSON_DEPTH arrays hold a scalar at
# level 100; Python refuses 101 arrays, the database an item at level 101).
_DEEP_JSON = {"v": _nested(MAX_JSON_DEPTH)}
_DEEPEST_JSON = _nested(MAX_JSON_DEPTH)


@pytest.mark.parametrize(
    ("column", "fits", "breaks", "constraint"),
    [
        ("attempt", 0, -1, "job_counter_check"),
        ("execution_seq", 0, -1, "job_counter_check"),
        ("lease_lost_count", 0, -1, "job_counter_check"),
        ("solo_deaths", 0, -1, "job_counter_check"),
        ("handler", "h" * 200, "h" * 201, "jobs_handler_check"),
        ("handler", "h", "", "jobs_handler_check"),
        ("idempotency_key", "k" * 200, "", "jobs_idempotency_key_check"),
        ("cancel_reason", "c" * 1000, "c" * 1001, "jobs_cancel_reason_check"),
        ("last_error", "e" * 8000, "e" * 8001, "jobs_last_error_check"),
        ("max_attempts", 100, 101, "jobs_max_attempts_check"),
        ("max_attempts", 1, 0, "jobs_max_attempts_check"),
        ("priority", -1000, -1001, "jobs_priority_check"),
        ("priority", 1000, 1001, "jobs_priority_check"),
        ("progress", 1.0, 1.5, "jobs_progress_range"),
        ("progress", 0.0, -0.1, "jobs_progress_range"),
        ("progress_message", "m" * 500, "m" * 501, "jobs_progress_message_length"),
        ("retry_override", Jsonb({}), Jsonb([]), "jobs_retry_override_check"),
        ("timeout_ms", 86_400_000, 86_400_001, "jobs_timeout_ms_check"),
        ("timeout_ms", 1, 0, "jobs_timeout_ms_check"),
        ("payload", Jsonb(_FITTING_JSON), Jsonb(_BIG_JSON), "jobs_payload_size"),
        ("result", Jsonb(_FITTING_JSON), Jsonb(_BIG_JSON), "jobs_result_size"),
        ("payload", Jsonb(_DEEPEST_JSON), Jsonb(_DEEP_JSON), "jobs_payload_depth"),
        ("result", Jsonb(_DEEPEST_JSON), Jsonb(_DEEP_JSON), "jobs_result_depth"),
    ],
)
async def test_each_column_limit_of_a_job_is_enforced_on_update(
    conn: Conn, column: str, fits: Any, breaks: Any, constraint: str
) -> None:
    job = await make_job(conn, queue=await make_queue(conn))
    update = pgsql.SQL("UPDATE jobs SET {} = %s WHERE id = %s").format(pgsql.Identifier(column))
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        await conn.execute(update, (breaks, job["id"]))
    assert caught.value.diag.constraint_name == constraint
    await conn.execute(update, (fits, job["id"]))


@pytest.mark.parametrize(
    ("insert", "constraint"),
    [
        (
            "INSERT INTO scheduled_jobs (project_id, queue_id, name, cron, handler, payload)"
            " VALUES (%(project_id)s, %(queue_id)s, 'nightly', '0 3 * * *', 'h', %(payload)s)",
            "scheduled_jobs_payload_depth",
        ),
        (
            "INSERT INTO dead_letter_jobs (project_id, queue_id, handler, payload, reason,"
            " attempts) VALUES (%(project_id)s, %(queue_id)s, 'h', %(payload)s, 'exhausted', 1)",
            "dead_letter_jobs_payload_depth",
        ),
    ],
)
async def test_the_other_payload_tables_refuse_json_deeper_than_the_limit(
    conn: Conn, insert: str, constraint: str
) -> None:
    queue = await make_queue(conn)
    values = {"project_id": queue["project_id"], "queue_id": queue["id"]}
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        await conn.execute(insert, {**values, "payload": Jsonb(_DEEP_JSON)})  # type: ignore[arg-type]
    assert caught.value.diag.constraint_name == constraint
    await conn.execute(insert, {**values, "payload": Jsonb(_DEEPEST_JSON)})  # type: ignore[arg-type]


async def test_the_upgrade_to_domains_rewrites_no_table_and_keeps_the_rows(
    conn: Conn, db_url: str
) -> None:
    """Migration 0026 changes 15 columns of `jobs` to domains without rewriting the table or
    its indexes (a domain with a constraint would force a rewrite under ACCESS EXCLUSIVE)."""
    migrate.downgrade(db_url, "0025")
    queue = await make_queue(conn)
    jobs = [await make_job(conn, queue=queue, priority=p) for p in (-1000, 0, 1000)]
    files = """SELECT c.relname, pg_relation_filenode(c.oid) AS node FROM pg_class c
               WHERE c.oid = 'jobs'::regclass
                  OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'jobs'::regclass)
               ORDER BY 1"""
    before = await (await conn.execute(files)).fetchall()
    migrate.upgrade(db_url, "0026")  # not head: later migrations drop indexes of jobs
    assert await (await conn.execute(files)).fetchall() == before
    kept = await (await conn.execute("SELECT id, priority FROM jobs ORDER BY id")).fetchall()
    assert kept == [{"id": j["id"], "priority": j["priority"]} for j in jobs]
    with pytest.raises(psycopg.errors.CheckViolation):
        await make_job(conn, queue=queue, priority=1001)


async def test_deleting_a_worker_nulls_job_references_and_keeps_executions(conn: Conn) -> None:
    queue = await make_queue(conn)
    worker = await make_worker(conn, project_id=queue["project_id"])
    job = await make_job(conn, queue=queue, status="done")
    await conn.execute("UPDATE jobs SET worker_id = %s WHERE id = %s", (worker["id"], job["id"]))
    await conn.execute(
        """INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, outcome,
           started_at, finished_at) VALUES (%s, 1, 1, %s, 'succeeded', now(), now())""",
        (job["id"], worker["id"]),
    )
    await conn.execute("DELETE FROM workers WHERE id = %s", (worker["id"],))
    row = await (
        await conn.execute("SELECT worker_id FROM jobs WHERE id = %s", (job["id"],))
    ).fetchone()
    assert row == {"worker_id": None}
    ex = await (
        await conn.execute(
            "SELECT worker_id, outcome FROM job_executions WHERE job_id = %s", (job["id"],)
        )
    ).fetchall()
    assert ex == [{"worker_id": None, "outcome": "succeeded"}]


async def test_deleting_a_project_cascades_to_everything_it_owns(conn: Conn) -> None:
    project = await make_project(conn)
    queue = await make_queue(conn, project_id=project["id"])
    job = await make_job(conn, queue=queue)
    await conn.execute(_FINISHED_RUN, (job["id"], 1, 1))
    await conn.execute(
        "INSERT INTO job_logs (job_id, execution_seq, message) VALUES (%s, 1, 'hi')", (job["id"],)
    )
    await conn.execute("DELETE FROM projects WHERE id = %s", (project["id"],))
    for table in ("queues", "jobs", "job_executions", "job_logs"):
        cur = await conn.execute(f"SELECT count(*) AS n FROM {table}")
        assert (await cur.fetchone()) == {"n": 0}, table


async def test_execution_seq_is_unique_per_job(conn: Conn) -> None:
    queue = await make_queue(conn)
    job = await make_job(conn, queue=queue)
    await conn.execute(_FINISHED_RUN, (job["id"], 1, 1))
    with pytest.raises(psycopg.errors.UniqueViolation):
        await conn.execute(_FINISHED_RUN, (job["id"], 1, 1))
    # The same attempt number may repeat (a refunded run); the seq may not.
    await conn.execute(_FINISHED_RUN, (job["id"], 2, 1))


@pytest.mark.parametrize("column", ["outcome", "finished_at", "started_at"])
async def test_an_execution_row_is_a_finished_run(conn: Conn, column: str) -> None:
    # Rows are written once, when the run ends: one without its outcome or times is refused.
    job = await make_job(conn, queue=await make_queue(conn))
    values = {"outcome": "'succeeded'", "started_at": "now()", "finished_at": "now()"}
    del values[column]
    with pytest.raises(psycopg.errors.NotNullViolation) as caught:
        await conn.execute(
            f"INSERT INTO job_executions (job_id, execution_seq, attempt, {', '.join(values)})"
            f" VALUES (%s, 1, 1, {', '.join(values.values())})",
            (job["id"],),
        )
    assert caught.value.diag.column_name == column


async def test_log_lines_hang_from_the_job_not_from_an_execution_row(conn: Conn) -> None:
    # A run logs before its execution row exists; the line needs its job, and goes with it.
    job = await make_job(conn, queue=await make_queue(conn))
    await conn.execute(
        "INSERT INTO job_logs (job_id, execution_seq, message) VALUES (%s, 1, 'hi')", (job["id"],)
    )
    with pytest.raises(psycopg.errors.ForeignKeyViolation) as caught:
        await conn.execute(
            "INSERT INTO job_logs (job_id, execution_seq, message) VALUES (%s, 1, 'x')",
            (job["id"] + 1000,),
        )
    assert caught.value.diag.constraint_name == "job_logs_job_fkey"
    await conn.execute("DELETE FROM jobs WHERE id = %s", (job["id"],))
    cur = await conn.execute("SELECT count(*) AS n FROM job_logs")
    assert await cur.fetchone() == {"n": 0}


async def test_idempotency_key_is_unique_per_queue_only_when_set(conn: Conn) -> None:
    queue = await make_queue(conn)
    other = await make_queue(conn, project_id=queue["project_id"])
    insert = """INSERT INTO jobs (project_id, queue_id, handler, idempotency_key)
                VALUES (%s, %s, 'noop', %s)"""
    await conn.execute(insert, (queue["project_id"], queue["id"], None))
    await conn.execute(insert, (queue["project_id"], queue["id"], None))
    await conn.execute(insert, (queue["project_id"], queue["id"], "k1"))
    await conn.execute(insert, (queue["project_id"], other["id"], "k1"))
    with pytest.raises(psycopg.errors.UniqueViolation) as caught:
        await conn.execute(insert, (queue["project_id"], queue["id"], "k1"))
    assert caught.value.diag.constraint_name == "jobs_idempotency_key"


async def test_a_held_job_must_have_a_lease(conn: Conn) -> None:
    queue = await make_queue(conn)
    job = await make_job(conn, queue=queue)
    with pytest.raises(psycopg.errors.CheckViolation):
        await conn.execute("UPDATE jobs SET status = 'running' WHERE id = %s", (job["id"],))


@pytest.mark.parametrize(
    ("pg_type", "enum"),
    [
        ("job_status", enums.JobStatus),
        ("member_role", enums.Role),
        ("backoff_kind", enums.BackoffKind),
        ("worker_status", enums.WorkerStatus),
        ("execution_outcome", enums.ExecutionOutcome),
        ("overlap_policy", enums.OverlapPolicy),
        ("dead_letter_reason", enums.DeadLetterReason),
    ],
)
async def test_python_enums_mirror_the_database_enums(conn: Conn, pg_type: str, enum: Any) -> None:
    cur = await conn.execute(
        "SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder) AS labels FROM pg_enum e"
        " JOIN pg_type t ON t.oid = e.enumtypid WHERE t.typname = %s",
        (pg_type,),
    )
    row = await cur.fetchone()
    assert row is not None
    assert sorted(row["labels"]) == sorted(m.value for m in enum)


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(_plan_nodes(child))
    return nodes


async def test_claim_plan_uses_the_partial_index_with_no_sort(conn: Conn) -> None:
    queue = await make_queue(conn)
    other = await make_queue(conn, project_id=queue["project_id"])
    worker = await make_worker(conn, project_id=queue["project_id"])
    # A realistic shape: many finished rows, a few thousand claimable across two queues.
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, priority, finished_at)
           SELECT %(p)s, CASE WHEN g %% 2 = 0 THEN %(q)s ELSE %(o)s END, 'noop',
                  CASE WHEN g %% 10 = 0 THEN 'queued'::job_status ELSE 'done'::job_status END,
                  g %% 5,
                  CASE WHEN g %% 10 = 0 THEN NULL ELSE now() END
           FROM generate_series(1, 50000) g""",
        {"p": queue["project_id"], "q": queue["id"], "o": other["id"]},
    )
    await conn.execute("ANALYZE jobs")
    params = {
        "queue_id": queue["id"],
        "worker_id": worker["id"],
        "n": 10,
        "lease_s": 30.0,
        "start": True,
        "solo": False,
        "limited": False,
        "now": None,
    }
    async with conn.cursor() as cur:
        await cur.execute("EXPLAIN (FORMAT JSON) " + sql("job_claim_batch"), params)  # type: ignore[operator]
        row = await cur.fetchone()
    assert row is not None
    plan = row["QUERY PLAN"]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    nodes = _plan_nodes(plan[0]["Plan"])
    kinds = [n["Node Type"] for n in nodes]
    assert "Sort" not in kinds, kinds
    # The claim reads the ready set's partitions through their claim indexes (migration 0012).
    assert any(
        str(n.get("Index Name", "")).startswith("job_ready_")
        and str(n.get("Index Name", "")).endswith("_claim_idx")
        for n in nodes
    ), kinds


async def test_each_ready_partition_keeps_one_index_in_claim_order(conn: Conn) -> None:
    """Every job that enters the ready set writes an entry into each of its partition's indexes:
    one in claim order serves both claims (migration 0027), one by job finds a row to delete,
    and the suspects' index is partial (nearly always empty)."""
    cur = await conn.execute(
        "SELECT c.relname AS partition, i.relname AS index, pg_get_indexdef(i.oid) AS definition"
        " FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid"
        " JOIN pg_index x ON x.indrelid = c.oid JOIN pg_class i ON i.oid = x.indexrelid"
        " WHERE h.inhparent = 'job_ready'::regclass ORDER BY 1, 2"
    )
    rows = await cur.fetchall()
    partitions = sorted({r["partition"] for r in rows})
    assert partitions == ["job_ready_0", "job_ready_1", "job_ready_2"]
    for part in partitions:
        mine = {r["index"]: r["definition"] for r in rows if r["partition"] == part}
        assert sorted(mine) == [f"{part}_claim_idx", f"{part}_job_idx", f"{part}_suspect_idx"]
        assert mine[f"{part}_claim_idx"].endswith("(queue_id, ((- priority)), run_at, job_id)")
        assert mine[f"{part}_suspect_idx"].endswith("WHERE suspect")


async def test_claim_changes_at_most_n_rows(conn: Conn) -> None:
    queue = await make_queue(conn)
    worker = await make_worker(conn, project_id=queue["project_id"])
    for _ in range(30):
        await make_job(conn, queue=queue)
    cur = await conn.execute(
        sql("job_claim_batch"),
        {
            "queue_id": queue["id"],
            "worker_id": worker["id"],
            "n": 7,
            "lease_s": 30.0,
            "start": False,
            "solo": False,
            "limited": False,
            "now": None,
        },
    )
    assert len(await cur.fetchall()) == 7
    cur = await conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'claimed'")
    assert await cur.fetchone() == {"n": 7}
    # The claimed jobs carry their runs; execution rows are written when the runs end.
    cur = await conn.execute("SELECT count(*) AS n FROM job_executions")
    assert await cur.fetchone() == {"n": 0}


def test_migrate_is_idempotent_and_reversible(db_url: str) -> None:
    assert migrate.is_at_head(db_url)
    migrate.upgrade(db_url)  # at head: nothing to do, no error
    migrate.downgrade(db_url, "base")
    assert migrate.current_revision(db_url) is None
    migrate.upgrade(db_url)
    assert migrate.is_at_head(db_url)


async def test_jsonb_round_trips(conn: Conn) -> None:
    queue = await make_queue(conn)
    job = await make_job(conn, queue=queue, payload={"a": [1, 2, {"b": None}]})
    assert job["payload"] == {"a": [1, 2, {"b": None}]}
    _ = Jsonb
