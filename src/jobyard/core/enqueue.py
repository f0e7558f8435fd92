"""Enqueue: immediate, delayed, prioritised, idempotent, batched, with dependencies.

Every function takes the caller's connection, so a job can be enqueued atomically with the
caller's own writes (it commits or rolls back with them).
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta
from typing import Any, Final

from pydantic import TypeAdapter

from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.errors import translated
from jobyard.db.json import jsonb, jsonb_or_none
from jobyard.db.pool import Conn, transaction
from jobyard.domain.errors import Conflict, IdempotencyConflict, NotFound
from jobyard.domain.ids import ProjectId
from jobyard.domain.models import BatchResult, EnqueueResult
from jobyard.domain.schemas import BatchCreate, BatchItem, JobCreate

_BATCH_ITEMS: Final = TypeAdapter(list[BatchItem])


async def enqueue(
    conn: Conn,
    project_id: ProjectId,
    job: JobCreate,
    *,
    now: datetime | None = None,
    schedule_id: int | None = None,
    whole_job: bool = True,
) -> EnqueueResult:
    """Insert one job. With an idempotency key, the same key and payload return the existing
    job (created=False); the same key with a different payload raises IdempotencyConflict.

    `whole_job=False` returns only the new job's `id` and `status` (what the SDK's defer needs):
    the same statement without sending the whole row back. An existing job found by its
    idempotency key is returned whole either way."""
    run_at = job.run_at
    if job.delay_ms is not None:
        # A delay is relative to the database clock: resolve it there, not on this host.
        base = now or await database_now(conn)
        run_at = base + timedelta(milliseconds=job.delay_ms)
    params: dict[str, Any] = {
        "project_id": project_id,
        "queue": job.queue,
        "handler": job.handler,
        "payload": jsonb(job.payload),
        "priority": job.priority,
        "run_at": run_at,
        "max_attempts": job.max_attempts,
        "timeout_ms": job.timeout_ms,
        "idempotency_key": job.idempotency_key,
        "retry_override": jsonb_or_none(job.retry.model_dump(mode="json", exclude_none=True))
        if job.retry
        else None,
        "schedule_id": schedule_id,
        "waiting": False,
        "now": sql_now(now),
    }
    insert = "job_insert" if whole_job else "job_insert_ref"
    async with translated():
        if job.depends_on:
            # Parents checked and edges written in the same transaction as the job itself.
            async with conn.transaction():
                params["waiting"] = await _has_unfinished_parents(
                    conn, project_id, job.depends_on, run_anyway=job.run_anyway
                )
                row = await run.one(conn, insert, params)
                if row is not None:
                    await run.execute(
                        conn,
                        "job_insert_dependencies",
                        {
                            "job_id": row["id"],
                            "parents": sorted(set(job.depends_on)),
                            "run_anyway": job.run_anyway,
                        },
                    )
        else:
            row = await run.one(conn, insert, params)
        if row is not None:
            row.pop("notified", None)
            return EnqueueResult(job=row, created=True)
        if job.idempotency_key is None:
            raise NotFound(f"queue {job.queue!r} does not exist in this project", field="queue")
        # ON CONFLICT DO NOTHING waited for any in-flight twin to commit, so it is visible now.
        existing = await run.one(
            conn,
            "job_get_by_idempotency_key",
            {"project_id": project_id, "queue": job.queue, "idempotency_key": job.idempotency_key},
        )
    if existing is None:
        # No row inserted and none to find: the queue is missing (job_insert selects nothing),
        # or the conflicting row was deleted between the two statements.
        queue = await run.one(
            conn, "queue_get_by_name", {"project_id": project_id, "name": job.queue}
        )
        if queue is None:
            raise NotFound(f"queue {job.queue!r} does not exist in this project", field="queue")
        raise IdempotencyConflict("the job for this idempotency key vanished; retry the request")
    if existing["payload"] != job.payload or existing["handler"] != job.handler:
        raise IdempotencyConflict(job_id=existing["id"], idempotency_key=job.idempotency_key)
    return EnqueueResult(job=existing, created=False)


async def _has_unfinished_parents(
    conn: Conn, project_id: ProjectId, parents: list[int], *, run_anyway: bool
) -> bool:
    """Lock the parents (FOR SHARE: a parent's final transition then waits for this enqueue,
    and its trigger sees the new child) and say whether the child must wait.

    A parent of another project reads as missing. A parent that already ended dead_letter or
    cancelled is refused (Conflict, 409) unless the child runs anyway: the failure policy would
    cancel the child at once, and a refusal says why where a cancelled job would not."""
    rows = await run.all_rows(
        conn, "job_lock_parents", {"project_id": project_id, "parents": parents}
    )
    found = {r["id"]: r["status"] for r in rows}
    missing = sorted(set(parents) - set(found))
    if missing:
        # Another project's job reads as missing: 404, as for every other tenant's object.
        raise NotFound(
            f"depends_on names jobs that do not exist in this project: {missing}",
            field="depends_on",
        )
    if not run_anyway:
        failed = [(i, s) for i, s in found.items() if s in ("dead_letter", "cancelled")]
        if failed:
            i, s = failed[0]
            # 409, not 422: the request is valid; the parent's current state refuses it.
            raise Conflict(
                f"parent job {i} already ended {s}, so this job would never run; "
                "pass run_anyway to run it after its parents whatever their outcome",
                field="depends_on",
            )
    return any(s not in ("done", "dead_letter", "cancelled") for s in found.values())


async def database_now(conn: Conn) -> datetime:
    """The database's clock (what a delay is added to)."""
    row = await run.one(conn, "clock_now", {})
    assert row is not None
    result: datetime = row["now"]
    return result


async def enqueue_batch(
    conn: Conn, project_id: ProjectId, batch: BatchCreate, *, now: datetime | None = None
) -> BatchResult:
    """Insert many jobs of one queue in one statement (and one job_batches row)."""
    params = {
        "project_id": project_id,
        "queue": batch.queue,
        "size": len(batch.jobs),
        # The validated items serialized by pydantic's Rust core in one pass (~0.5 µs a job).
        # Unset optional fields are left out, not sent as null: jsonb_to_recordset reads both as
        # SQL NULL, and the server parses 44 bytes of a plain job instead of 113, 9 % of its CPU
        # a job (docs/BENCHMARKS.md item 21). A payload's own nulls are data and stay.
        "items": _BATCH_ITEMS.dump_json(batch.jobs, exclude_none=True).decode(),
        # Picks the statement's path: the idempotency arbiter only when some item has a key.
        "any_key": any(item.idempotency_key is not None for item in batch.jobs),
        "callbacks": jsonb(batch.callbacks()),
        "now": sql_now(now),
    }
    async with translated():
        for spec in batch.callbacks().values():
            # A callback's queue is checked now: at completion there is nobody to tell.
            if (
                await run.one(
                    conn, "queue_get_by_name", {"project_id": project_id, "name": spec["queue"]}
                )
                is None
            ):
                raise NotFound(
                    f"callback queue {spec['queue']!r} does not exist in this project",
                    field="queue",
                )
        # Only items with a key can be skipped, and only then may a second statement follow:
        # it must share the insert's transaction. A batch without keys stays one statement
        # (no BEGIN and COMMIT round trips on an autocommit connection).
        async with transaction(conn) if params["any_key"] else contextlib.nullcontext():
            row = await run.one(conn, "job_insert_batch", params)
            if row is None or row["batch_id"] is None:
                raise NotFound(
                    f"queue {batch.queue!r} does not exist in this project", field="queue"
                )
            ids = list(row["ids"])
            if len(ids) < len(batch.jobs):
                return await _batch_with_skips(conn, project_id, batch, row["batch_id"], row)
    return BatchResult(batch_id=row["batch_id"], job_ids=ids, queued=row["queued"])


async def _batch_with_skips(
    conn: Conn, project_id: ProjectId, batch: BatchCreate, batch_id: int, row: Any
) -> BatchResult:
    """Some items were skipped (their key named a job already): the batch holds only the
    jobs inserted. If there are none, it is the repeat of an earlier batch request: the
    answer is that batch, when all the existing jobs came from one."""
    ids = list(row["ids"])
    if ids:
        await run.execute(conn, "job_insert_batch_resize", {"batch_id": batch_id, "size": len(ids)})
        return BatchResult(batch_id=batch_id, job_ids=ids, queued=row["queued"])
    await run.execute(conn, "job_insert_batch_drop", {"batch_id": batch_id})
    keys = [item.idempotency_key for item in batch.jobs if item.idempotency_key is not None]
    found = await run.all_rows(
        conn,
        "job_insert_batch_earlier",
        {"project_id": project_id, "queue": batch.queue, "keys": keys},
    )
    earlier = {r["batch_id"] for r in found}
    if len(earlier) == 1 and None not in earlier:
        return BatchResult(batch_id=int(earlier.pop()), job_ids=[], queued=0)
    raise Conflict(
        "every job of this batch already exists (their idempotency keys name jobs that were "
        "not enqueued as one batch), so no batch was made; enqueue new keys, or follow the "
        "existing jobs by key",
        field="jobs",
    )
