"""A handler's progress (JobPublic.progress*) and a failed run's traceback
(ExecutionPublic.traceback) in the API; both writes are fenced and bounded."""

from __future__ import annotations

import httpx
import pytest

from jobyard.core import transitions
from jobyard.db.pool import Conn
from jobyard.domain import limits
from jobyard.domain.errors import LeaseLost, ValidationFailed
from tests.api.conftest import Tenant
from tests.api.engine_helpers import base, claim_one, make_queue, make_worker, owner


async def _job(client: httpx.AsyncClient, tenant: Tenant) -> tuple[int, dict[str, str]]:
    await make_queue(client, tenant)
    h = owner(tenant)
    r = await client.post(
        f"{base(tenant)}/jobs", json={"handler": "h", "max_attempts": 3}, headers=h
    )
    return r.json()["id"], h


async def test_progress_is_returned_with_the_job_and_fenced_on_the_run(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    job_id, h = await _job(client, tenant_a)
    worker = await make_worker(conn, tenant_a.project_id)
    run = await claim_one(conn, tenant_a.project_id, worker)
    await transitions.set_progress(conn, run, 0.25, "a quarter")
    body = (await client.get(f"{base(tenant_a)}/jobs/{job_id}", headers=h)).json()
    assert (body["progress"], body["progress_message"]) == (0.25, "a quarter")
    assert body["progress_at"] is not None
    # The run ends (failed, retry later): its fence no longer holds, so a late report is refused.
    await transitions.fail(conn, run, "IOError", "disk full")
    with pytest.raises(LeaseLost):
        await transitions.set_progress(conn, run, 0.9, "too late")
    # A later run of the same job (new execution_seq) may report; the stale fence still may not.
    await conn.execute("UPDATE jobs SET status = 'queued', run_at = now() WHERE id = %s", (job_id,))
    again = await claim_one(conn, tenant_a.project_id, worker)
    with pytest.raises(LeaseLost):
        await transitions.set_progress(conn, run, 0.9, "stale run")
    await transitions.set_progress(conn, again, 0.5, None)
    body = (await client.get(f"{base(tenant_a)}/jobs/{job_id}", headers=h)).json()
    assert (body["progress"], body["progress_message"]) == (0.5, None)


async def test_the_database_bounds_progress(
    conn: Conn, client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    await _job(client, tenant_a)
    worker = await make_worker(conn, tenant_a.project_id)
    run = await claim_one(conn, tenant_a.project_id, worker)
    with pytest.raises(ValidationFailed, match="between 0 and 1"):
        await transitions.set_progress(conn, run, 1.5, None)
    with pytest.raises(ValidationFailed, match="longer than 500"):
        await transitions.set_progress(conn, run, 0.1, "x" * 501)


async def test_a_failed_runs_traceback_is_stored_cut_to_size_and_listed(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    job_id, h = await _job(client, tenant_a)
    worker = await make_worker(conn, tenant_a.project_id)
    first = await claim_one(conn, tenant_a.project_id, worker)
    short = 'Traceback (most recent call last):\n  File "app.py", line 3\nRuntimeError: boom\n'
    await transitions.fail(conn, first, "RuntimeError", "boom", traceback=short)
    await conn.execute("UPDATE jobs SET status = 'queued', run_at = now() WHERE id = %s", (job_id,))
    second = await claim_one(conn, tenant_a.project_id, worker)
    huge = "Traceback (most recent call last):\n" + "  frame\n" * 5000 + "RuntimeError: deep\n"
    await transitions.fail(conn, second, "RuntimeError", "deep", traceback=huge)
    items = (await client.get(f"{base(tenant_a)}/jobs/{job_id}/executions", headers=h)).json()[
        "items"
    ]
    assert items[0]["traceback"] == short
    cut = items[1]["traceback"]
    assert len(cut) <= limits.MAX_TRACEBACK_LENGTH
    assert cut.startswith("Traceback (most recent call last):")
    assert cut.endswith("RuntimeError: deep\n")
    assert "characters of traceback cut by jobyard" in cut


def test_truncation_keeps_head_and_tail_and_fits_exactly() -> None:
    text = "H" * 100 + "M" * 10_000 + "T" * 100
    cut = transitions.truncate_traceback(text, limit=1000)
    assert len(cut) <= 1000 and cut.startswith("H" * 100) and cut.endswith("T" * 100)
    assert transitions.truncate_traceback("short", limit=1000) == "short"
