"""A client generated from the served document covers every route and works against the server.

`openapi-python-client` (a dev dependency) generates a package from /api/v1/openapi.json into
this test's temporary directory; the test imports it from there, checks it has one module per
route of the table (named by the route's operationId), and drives a scenario end to end against
a real `jobyard api` process: log in, create a queue, enqueue (and re-enqueue idempotently),
page the job list with its cursor, get a job, cancel it, and replay a dead letter.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import pkgutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from jobyard.api.routes import ALL_ROUTES
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from tests.api.conftest import FIXTURE_PASSWORD, Tenant
from tests.api.processes import api_process

PACKAGE = "jobyard_client"
GENERATOR = Path(sys.executable).parent / "openapi-python-client"


def generate(document: dict[str, Any], into: Path) -> Path:
    spec = into / "openapi.json"
    spec.write_text(json.dumps(document), encoding="utf-8")
    config = into / "generator.yaml"
    config.write_text(f"package_name_override: {PACKAGE}\npost_hooks: []\n", encoding="utf-8")
    out = into / PACKAGE
    command = [str(GENERATOR), "generate", "--path", str(spec), "--output-path", str(out)]
    result = subprocess.run(
        [*command, "--meta", "none", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # The generator skips (with a warning) any operation it cannot represent.
    assert result.returncode == 0 and "Warning" not in result.stdout + result.stderr, (
        result.stdout + result.stderr
    )
    return out


@pytest.fixture
def generated(tmp_path: Path) -> Iterator[Any]:
    """Import hook for the generated package; forgets it afterwards."""
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def operations(package: ModuleType) -> dict[str, ModuleType]:
    api = importlib.import_module(f"{PACKAGE}.api")
    found: dict[str, ModuleType] = {}
    for info in pkgutil.walk_packages(api.__path__, f"{PACKAGE}.api."):
        module = importlib.import_module(info.name)
        if hasattr(module, "sync_detailed"):
            found[info.name.rsplit(".", 1)[-1]] = module
    return found


async def _dead_letter(conn: Conn, project_id: int, queue_id: int) -> int:
    cur = await conn.execute(
        "INSERT INTO dead_letter_jobs (project_id, queue_id, handler, payload, reason, attempts)"
        " VALUES (%s, %s, 'noop', '{\"n\": 1}', 'exhausted', 3) RETURNING id",
        (project_id, queue_id),
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row["id"])


async def test_a_generated_client_covers_every_route_and_drives_the_api(
    client: httpx.AsyncClient, conn: Conn, db_url: str, tenant_a: Tenant, generated: Path
) -> None:
    document = (await client.get("/api/v1/openapi.json")).json()
    await asyncio.to_thread(generate, document, generated)
    package = importlib.import_module(PACKAGE)
    ops = operations(package)
    print(f"\ngenerated client: {len(ops)} operations for {len(ALL_ROUTES)} routes")
    assert len(ops) == len(ALL_ROUTES)
    assert set(ops) == {route.op_id for route in ALL_ROUTES}

    models = importlib.import_module(f"{PACKAGE}.models")
    client_module = importlib.import_module(f"{PACKAGE}.client")
    pid = tenant_a.project_id
    owner = tenant_a.users[Role.OWNER]

    with api_process(db_url, generated) as api:
        with client_module.Client(base_url=api.base_url) as anonymous:
            login = ops["auth_login"].sync_detailed(
                client=anonymous,
                body=models.LoginRequest(email=owner.email, password=FIXTURE_PASSWORD),
            )
        assert login.status_code == 200, login.content
        token = login.parsed.access_token
        with client_module.AuthenticatedClient(base_url=api.base_url, token=token) as authed:
            queue = ops["queues_create"].sync_detailed(
                project_id=pid, client=authed, body=models.QueueCreate(name="generated")
            )
            assert queue.status_code == 201, queue.content
            assert isinstance(queue.parsed, models.QueuePublic)

            enqueued = []
            for n in range(3):
                job = models.JobCreate(
                    queue="generated",
                    handler="noop",
                    payload={"n": n},
                    idempotency_key=f"generated-{n}",
                )
                response = ops["jobs_enqueue"].sync_detailed(
                    project_id=pid, client=authed, body=job
                )
                assert response.status_code == 202, response.content
                assert isinstance(response.parsed, models.JobPublic)
                enqueued.append(response.parsed.id)
            again = ops["jobs_enqueue"].sync_detailed(project_id=pid, client=authed, body=job)
            assert again.status_code == 200 and again.parsed.id == enqueued[-1]  # idempotent

            first = ops["jobs_list"].sync_detailed(
                project_id=pid, client=authed, queue="generated", limit=2
            )
            assert first.status_code == 200 and len(first.parsed.items) == 2
            assert isinstance(first.parsed.next_cursor, str)
            second = ops["jobs_list"].sync_detailed(
                project_id=pid,
                client=authed,
                queue="generated",
                limit=2,
                cursor=first.parsed.next_cursor,
            )
            assert second.status_code == 200 and second.parsed.next_cursor is None
            paged = [j.id for j in first.parsed.items + second.parsed.items]
            assert sorted(paged) == sorted(enqueued)

            got = ops["jobs_get"].sync_detailed(project_id=pid, job_id=enqueued[0], client=authed)
            assert got.status_code == 200 and isinstance(got.parsed, models.JobDetail)
            assert got.parsed.status == models.JobStatus.QUEUED

            cancelled = ops["jobs_cancel"].sync_detailed(
                project_id=pid, job_id=enqueued[0], client=authed
            )
            assert cancelled.status_code == 200, cancelled.content  # queued → cancelled at once
            assert cancelled.parsed.status == models.JobStatus.CANCELLED
            again_cancel = ops["jobs_cancel"].sync_detailed(
                project_id=pid, job_id=enqueued[0], client=authed
            )
            assert again_cancel.status_code == 409
            assert isinstance(again_cancel.parsed, models.ErrorEnvelope)

            dlq_id = await _dead_letter(conn, pid, queue.parsed.id)
            letters = ops["dlq_list"].sync_detailed(project_id=pid, client=authed)
            assert letters.status_code == 200 and [d.id for d in letters.parsed.items] == [dlq_id]
            # The body is optional on the wire; the generated function needs it given (it would
            # send its UNSET marker otherwise).
            replayed = ops["dlq_replay"].sync_detailed(
                project_id=pid, dlq_id=dlq_id, client=authed, body=models.DeadLetterReplay()
            )
            assert replayed.status_code == 202, replayed.content
            assert replayed.parsed.status == models.JobStatus.QUEUED
            assert replayed.parsed.id not in enqueued
