"""Helpers for the engine resource tests (queues, jobs, DLQ, schedules, workers, metrics)."""

from __future__ import annotations

from typing import Any

import httpx

from jobyard.core import claim, enqueue, transitions
from jobyard.core.claim import queues_by_names
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.models import ClaimedJob
from jobyard.domain.schemas import JobCreate
from tests.api.conftest import Tenant


def base(tenant: Tenant) -> str:
    return f"/api/v1/projects/{tenant.project_id}"


def owner(tenant: Tenant) -> dict[str, str]:
    return tenant.headers(Role.OWNER)


def error_of(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """The error envelope's body, after checking its status, shape and code."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details", "request_id"}, body
    if code is not None:
        assert body["error"]["code"] == code, body
    return dict(body["error"])


def error_fields(error: dict[str, Any]) -> set[str]:
    """Every field a 422 names: request validation lists `fields`, core names one `field`."""
    details = error["details"]
    named = {f["field"] for f in details.get("fields", [])}
    if "field" in details:
        named.add(details["field"])
    return named


async def scalar(conn: Conn, query: str, *args: Any) -> Any:
    cur = await conn.execute(query, args)  # type: ignore[arg-type]
    row = await cur.fetchone()
    assert row is not None
    return next(iter(row.values()))


async def make_queue(
    client: httpx.AsyncClient, tenant: Tenant, name: str = "default", **fields: Any
) -> dict[str, Any]:
    response = await client.post(
        f"{base(tenant)}/queues", json={"name": name, **fields}, headers=owner(tenant)
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def make_worker(conn: Conn, project_id: int, *, concurrency: int = 4) -> WorkerId:
    row = await (
        await conn.execute(
            """INSERT INTO workers (project_id, name, hostname, concurrency, queues)
               VALUES (%s, 'w', 'host-1', %s, '{default}') RETURNING id""",
            (project_id, concurrency),
        )
    ).fetchone()
    assert row is not None
    return WorkerId(row["id"])


async def claim_one(
    conn: Conn, project_id: int, worker: WorkerId, queue: str = "default"
) -> ClaimedJob:
    (ref,) = await queues_by_names(conn, ProjectId(project_id), [queue])
    (job,) = await claim.claim_batch(conn, ref, worker, 1, lease_s=30)
    await transitions.start_many(conn, [job])
    return job


async def dead_letter(
    conn: Conn,
    project_id: int,
    worker: WorkerId,
    *,
    queue: str = "default",
    handler: str = "charge",
    payload: Any = None,
    error: str = "card 4242 declined",
) -> int:
    """Run a job to the dead-letter queue the real way (enqueue, claim, fail); its DLQ id."""
    spec = JobCreate(queue=queue, handler=handler, payload=payload or {}, max_attempts=1)
    await enqueue.enqueue(conn, ProjectId(project_id), spec)
    job = await claim_one(conn, project_id, worker, queue)
    result = await transitions.fail(conn, job, "CardError", error)
    assert result.dead_letter_id is not None
    return result.dead_letter_id
