"""Workers over the real app: status, heartbeat, in-flight vs capacity, recent heartbeats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from jobyard.core import lease, workers
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import ProjectId
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
