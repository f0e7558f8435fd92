"""Workers over the real app: status, heartbeat, in-flight vs capacity, recent heartbeats."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest

from jobyard.core import lease, workers
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import ProjectId
from jobyard.domain.models import LoopStall
from tests.api.conftest import Tenant
from tests.api.engine_helpers import base, claim_one, error_of, make_queue


async def test_workers_show_status_heartbeat_in_flight_capacity_and_queues(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    h = tenant_a.headers(Role.VIEWER)
    project = ProjectId(tenant_a.project_id)
    busy = await workers.register(conn, project, name="busy", queues=["default"], concurrency=8)
    gone = await workers.register(conn, project, name="gone", queues=["default"], concurrency=2)
    await workers.stop(conn, gone)
    for _ in range(2):
        await client.post(
            f"{base(tenant_a)}/jobs", json={"handler": "h"}, headers=tenant_a.headers(Role.MEMBER)
        )
    held = [await claim_one(conn, tenant_a.project_id, busy) for _ in range(2)]
    t0 = datetime.now(UTC)
    for i in range(3):
        await lease.heartbeat(
            conn, busy, held, lease_s=30, capacity=8, now=t0 + timedelta(seconds=5 * i)
        )

    listed = (await client.get(f"{base(tenant_a)}/workers", headers=h)).json()["items"]
    assert [w["name"] for w in listed] == ["gone", "busy"]  # newest first
    by_name = {w["name"]: w for w in listed}
    assert by_name["busy"]["status"] == "active"
    assert by_name["busy"]["in_flight"] == 2 and by_name["busy"]["capacity"] == 8
    assert by_name["busy"]["queues"] == ["default"]
    assert datetime.fromisoformat(by_name["busy"]["last_heartbeat_at"]) == t0 + timedelta(
        seconds=10
    )
    assert by_name["gone"]["status"] == "stopped" and by_name["gone"]["stopped_at"]
    active = await client.get(f"{base(tenant_a)}/workers", params={"status": "active"}, headers=h)
    assert [w["name"] for w in active.json()["items"]] == ["busy"]

    detail = (await client.get(f"{base(tenant_a)}/workers/{busy}", headers=h)).json()
    beats = detail["recent_heartbeats"]
    assert [datetime.fromisoformat(b["beat_at"]) for b in beats] == [
        t0 + timedelta(seconds=s) for s in (10, 5, 0)
    ]
    assert all(b["in_flight"] == 2 and b["capacity"] == 8 for b in beats)
    error_of(await client.get(f"{base(tenant_a)}/workers/987654", headers=h), 404, "not_found")


async def test_workers_show_orphan_threads_and_event_loop_stalls(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    h = tenant_a.headers(Role.VIEWER)
    project = ProjectId(tenant_a.project_id)
    sick = await workers.register(conn, project, name="sick", queues=["default"], concurrency=4)
    well = await workers.register(conn, project, name="well", queues=["default"], concurrency=4)
    await lease.heartbeat(conn, sick, [], lease_s=30, capacity=4, orphan_threads=3)
    stall = LoopStall(
        number=2, blocked_s=1.25, ongoing=True, handler="resize", job_ids=(7, 8),
        at="/srv/app/tasks.py:13 in resize",
    )  # fmt: skip
    await workers.record_loop_stall(conn, sick, stall)

    listed = (await client.get(f"{base(tenant_a)}/workers", headers=h)).json()["items"]
    by_name = {w["name"]: w for w in listed}
    assert by_name["well"]["orphan_threads"] == 0 and by_name["well"]["loop_stalls"] == 0
    assert by_name["well"]["loop_stall"] is None
    shown = by_name["sick"]
    assert shown["orphan_threads"] == 3 and shown["loop_stalls"] == 2
    assert {k: v for k, v in shown["loop_stall"].items() if k != "started_at"} == {
        "blocked_s": 1.25, "ongoing": True, "handler": "resize", "job_ids": [7, 8],
        "at": "/srv/app/tasks.py:13 in resize",
    }  # fmt: skip
    started = datetime.fromisoformat(shown["loop_stall"]["started_at"])

    # The end of the same stall keeps its start; a stopped worker's stall is never ongoing.
    await workers.record_loop_stall(conn, sick, replace(stall, blocked_s=9.5, ongoing=False))
    detail = (await client.get(f"{base(tenant_a)}/workers/{sick}", headers=h)).json()
    assert detail["loop_stall"]["ongoing"] is False and detail["loop_stall"]["blocked_s"] == 9.5
    assert datetime.fromisoformat(detail["loop_stall"]["started_at"]) == started
    await workers.record_loop_stall(conn, well, replace(stall, number=1))
    await workers.stop(conn, well)
    detail = (await client.get(f"{base(tenant_a)}/workers/{well}", headers=h)).json()
    assert detail["loop_stall"]["ongoing"] is False


async def test_the_database_bounds_what_a_worker_reports_about_itself(
    conn: Conn, tenant_a: Tenant
) -> None:
    project = ProjectId(tenant_a.project_id)
    worker = await workers.register(conn, project, name="w", queues=["default"], concurrency=1)
    for column, value in (
        ("orphan_threads", "-1"),
        ("loop_stalls", "-1"),
        ("loop_stall", "'[1]'::jsonb"),
        ("loop_stall", "jsonb_build_object('at', repeat('x', 5000))"),
        ("paused_by", "''"),
        ("paused_by", "repeat('x', 201)"),
    ):
        with pytest.raises(psycopg.errors.CheckViolation):
            async with conn.transaction():
                await conn.execute(
                    f"UPDATE workers SET {column} = {value} WHERE id = %s",  # type: ignore[arg-type]
                    (worker,),
                )


async def test_an_admin_pauses_and_resumes_a_live_worker_and_nothing_else(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    await make_queue(client, tenant_a)
    project = ProjectId(tenant_a.project_id)
    live = await workers.register(conn, project, name="live", queues=["default"], concurrency=2)
    gone = await workers.register(conn, project, name="gone", queues=["default"], concurrency=2)
    await workers.stop(conn, gone)
    url = f"{base(tenant_a)}/workers/{live}"
    admin, member = tenant_a.headers(Role.ADMIN), tenant_a.headers(Role.MEMBER)

    error_of(await client.post(f"{url}/pause", headers=member), 403, "forbidden")
    paused = (await client.post(f"{url}/pause", headers=admin)).json()
    assert paused["paused_at"] is not None and paused["name"] == "live"
    assert paused["paused_by"] == tenant_a.users[Role.ADMIN].email, paused
    by_key = tenant_a.key_headers(Role.ADMIN)
    again = (await client.post(f"{url}/pause", headers=by_key)).json()
    # The first pause's time and pauser are kept.
    assert (again["paused_at"], again["paused_by"]) == (paused["paused_at"], paused["paused_by"])
    beat = await lease.heartbeat(conn, live, [], lease_s=30, capacity=2)
    assert beat.paused is True

    resumed = (await client.post(f"{url}/resume", headers=admin)).json()
    assert resumed["paused_at"] is None and resumed["paused_by"] is None
    keyed = await client.post(f"{url}/pause", headers=by_key)
    assert re.fullmatch(r"api key #\d+", keyed.json()["paused_by"]), keyed.text
    await client.post(f"{url}/resume", headers=admin)
    assert (await lease.heartbeat(conn, live, [], lease_s=30, capacity=2)).paused is False

    stopped = error_of(
        await client.post(f"{base(tenant_a)}/workers/{gone}/pause", headers=admin), 409, "conflict"
    )
    assert "is stopped" in stopped["message"], stopped
    error_of(
        await client.post(f"{base(tenant_a)}/workers/987654/pause", headers=admin), 404, "not_found"
    )
    # Another tenant's worker is not found from here.
    other = await workers.register(
        conn, ProjectId(tenant_b.project_id), name="b", queues=["default"], concurrency=1
    )
    error_of(
        await client.post(f"{base(tenant_a)}/workers/{other}/pause", headers=admin),
        404,
        "not_found",
    )
