"""The console's actions over ASGI: CSRF and roles on every new POST, another tenant's objects,
bad input named on the page, and the unknown-path 404 page."""

from __future__ import annotations

import httpx

from jobyard.core import admin, enqueue, transitions
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.schemas import JobCreate
from tests.api.engine_helpers import claim_one
from tests.web.conftest import Seed, scalar, sign_in


async def _schedule_id(conn: Conn) -> int:
    return int(await scalar(conn, "SELECT id FROM scheduled_jobs WHERE name = 'nightly'"))


async def _fingerprint(conn: Conn, seed: Seed) -> str:
    fp = await scalar(
        conn, "SELECT error_fingerprint FROM dead_letter_jobs WHERE id = %s", seed.dlq_id
    )
    return str(fp)


async def test_new_posts_need_the_csrf_token(
    client: httpx.AsyncClient, seed: Seed, conn: Conn
) -> None:
    await sign_in(client, seed.a, Role.OWNER)
    p = f"/p/{seed.project}"
    sid, fp = await _schedule_id(conn), await _fingerprint(conn, seed)
    for url in (
        f"{p}/jobs/{seed.failed_job_id}/run-now",
        f"{p}/jobs/{seed.queued_job_id}/retry",
        f"{p}/jobs-bulk",
        f"{p}/failures/{fp}/discard",
        f"{p}/schedules/{sid}/delete",
        f"{p}/schedules/{sid}/trigger",
        f"{p}/queues/{seed.queues['default']}/settings",
    ):
        response = await client.post(url, data={"action": "delete", "priority": "5"})
        assert response.status_code == 403, url
    assert await scalar(conn, "SELECT count(*) FROM scheduled_jobs") == 1
    assert await scalar(conn, "SELECT count(*) FROM dead_letter_jobs") == 1
    assert await scalar(conn, "SELECT count(*) FROM jobs WHERE status = 'queued'") == 60


async def test_roles_viewer_reads_member_acts_admin_deletes(
    client: httpx.AsyncClient, seed: Seed, conn: Conn
) -> None:
    p = f"/p/{seed.project}"
    sid, fp = await _schedule_id(conn), await _fingerprint(conn, seed)
    token = await sign_in(client, seed.a, Role.VIEWER)
    for url in (f"{p}/failures", f"{p}/schedules", f"{p}/jobs/{seed.queued_job_id}"):
        assert (await client.get(url)).status_code == 200, url
    viewer = [
        (f"{p}/jobs/{seed.failed_job_id}/run-now", {}),
        (f"{p}/failures/{fp}/retry", {}),
        (f"{p}/jobs-bulk", {"action": "cancel"}),
        (f"{p}/schedules/{sid}/trigger", {}),
    ]
    for url, data in viewer:
        response = await client.post(url, data={"csrf_token": token, **data})
        assert response.status_code == 403, url
    assert (await client.get(f"{p}/schedules/new")).status_code == 403

    token = await sign_in(client, seed.a, Role.MEMBER)
    member = [
        (f"{p}/jobs-bulk", {"action": "delete"}),
        (f"{p}/failures/{fp}/discard", {}),
        (f"{p}/schedules/{sid}/delete", {}),
        (f"{p}/schedules/{sid}/toggle", {}),
        (f"{p}/queues/{seed.queues['default']}/settings", {"priority": "3"}),
    ]
    for url, data in member:
        response = await client.post(url, data={"csrf_token": token, **data})
        assert response.status_code == 403, url
    assert await scalar(conn, "SELECT count(*) FROM jobs WHERE project_id = %s", seed.project) > 60
    ok = await client.post(f"{p}/schedules/{sid}/trigger", data={"csrf_token": token})
    assert ok.status_code == 303 and "/jobs/" in ok.headers["location"]


async def test_another_tenants_objects_are_404_pages(
    client: httpx.AsyncClient, seed: Seed, conn: Conn
) -> None:
    token = await sign_in(client, seed.b, Role.OWNER)
    b = f"/p/{seed.b.project_id}"
    sid, fp = await _schedule_id(conn), await _fingerprint(conn, seed)
    for url in (
        f"{b}/jobs/{seed.failed_job_id}/run-now",
        f"{b}/schedules/{sid}/trigger",
        f"{b}/failures/{fp}/retry",
        f"{b}/queues/{seed.queues['default']}/settings",
    ):
        response = await client.post(url, data={"csrf_token": token, "priority": "1"})
        assert response.status_code == 404, url
    assert (await client.get(f"{b}/failures/{fp}/retry")).status_code == 404
    assert (await client.get(f"{b}/schedules/{sid}/edit")).status_code == 404
    status = await scalar(conn, "SELECT status::text FROM jobs WHERE id = %s", seed.failed_job_id)
    assert status == "scheduled"


async def test_bad_input_is_named_on_the_page_and_changes_nothing(
    client: httpx.AsyncClient, seed: Seed, conn: Conn
) -> None:
    token = await sign_in(client, seed.a, Role.ADMIN)
    p = f"/p/{seed.project}"
    queue = seed.queues["default"]
    bad = await client.post(
        f"{p}/queues/{queue}/settings",
        data={"csrf_token": token, "priority": "lots", "max_concurrency": ""},
    )
    assert bad.status_code == 422 and "priority: a whole number" in bad.text
    too_big = await client.post(
        f"{p}/queues/{queue}/settings",
        data={"csrf_token": token, "priority": "1", "max_concurrency": "0"},
    )
    assert too_big.status_code == 422 and "max_concurrency" in too_big.text
    assert await scalar(conn, "SELECT priority FROM queues WHERE id = %s", queue) == 0
    action = await client.get(f"{p}/jobs-bulk?action=explode")
    assert action.status_code == 422 and "action: one of" in action.text
    schedule = await client.post(
        f"{p}/schedules/new",
        data={"csrf_token": token, "name": "x", "cron": "61 * * * *", "handler": "h",
              "queue_id": str(queue), "payload": "{oops"},
    )  # fmt: skip
    assert schedule.status_code == 422 and "payload is not valid JSON" in schedule.text
    assert 'value="61 * * * *"' in schedule.text  # what was typed is kept
    cron = await client.post(
        f"{p}/schedules/new",
        data={"csrf_token": token, "name": "x", "cron": "61 * * * *", "handler": "h",
              "queue_id": str(queue), "payload": "{}"},
    )  # fmt: skip
    assert cron.status_code == 422 and "cron" in cron.text
    assert await scalar(conn, "SELECT count(*) FROM scheduled_jobs") == 1
    retry_queued = await client.post(
        f"{p}/jobs/{seed.queued_job_id}/retry", data={"csrf_token": token}
    )
    assert (
        retry_queued.status_code == 409 and "cannot retry a job that is queued" in retry_queued.text
    )


async def test_unknown_dashboard_paths_are_the_html_404_page(
    client: httpx.AsyncClient, seed: Seed
) -> None:
    for path in ("/nowhere", f"/p/{seed.project}/jobs/1/nonsense", "/p"):
        response = await client.get(path)
        assert response.status_code == 404, path
        assert response.headers["content-type"].startswith("text/html")
        assert "Not found" in response.text
    api = await client.get("/api/v1/nowhere")
    assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"


async def test_the_job_pages_retry_revives_the_steps_its_failure_cancelled(
    client: httpx.AsyncClient, seed: Seed, conn: Conn
) -> None:
    """The job page's Retry now is the same mechanism as the API's and the CLI's
    (core.actions.retry): a dead-lettered parent's cancelled child waits again."""
    pid = ProjectId(seed.project)
    await admin.create_queue(conn, pid, name="steps")
    parent = (await enqueue.enqueue(conn, pid, JobCreate(queue="steps", handler="h"))).job["id"]
    child = (
        await enqueue.enqueue(
            conn, pid, JobCreate(queue="steps", handler="h", depends_on=[int(parent)])
        )
    ).job["id"]
    held = await claim_one(conn, seed.project, WorkerId(seed.worker_id), "steps")
    await transitions.fail(conn, held, "E", "boom", retryable=False)
    assert await scalar(conn, "SELECT status::text FROM jobs WHERE id = %s", child) == "cancelled"
    token = await sign_in(client, seed.a, Role.MEMBER)
    r = await client.post(f"/p/{seed.project}/jobs/{parent}/retry", data={"csrf_token": token})
    assert r.status_code in (200, 303), r.text
    assert await scalar(conn, "SELECT status::text FROM jobs WHERE id = %s", parent) == "queued"
    assert await scalar(conn, "SELECT status::text FROM jobs WHERE id = %s", child) == "waiting"
