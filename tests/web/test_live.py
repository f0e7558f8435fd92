"""Live dashboards: server-sent events fed by one LISTEN connection per API process.

The browser tests watch a change appear without a reload and without a single `/partials/`
request (polling is the fallback, off while the event stream is up)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from playwright.async_api import Page, Request, expect

from jobyard.core import enqueue, live, stats
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import ProjectId
from jobyard.domain.schemas import JobCreate
from tests.api.conftest import FIXTURE_PASSWORD
from tests.api.engine_helpers import dead_letter
from tests.api.processes import ApiProcess
from tests.web.conftest import Seed, form_token, scalar, screenshot_path, ui_sign_in

pytestmark = pytest.mark.browser


def _record_polls(page: Page) -> list[str]:
    polled: list[str] = []

    def seen(request: Request) -> None:
        if "/partials/" in request.url:
            polled.append(request.url)

    page.on("request", seen)
    return polled


async def test_a_new_job_appears_in_the_jobs_list_over_sse(
    page: Page, seed: Seed, conn: Conn
) -> None:
    await ui_sign_in(page, seed.a)
    polled = _record_polls(page)
    await page.goto(f"/p/{seed.project}/jobs?queue=default")
    live_body = page.locator("#jobs tbody")
    await expect(live_body).to_have_attribute("data-live-state", "sse")
    job = await enqueue.enqueue(
        conn, ProjectId(seed.project), JobCreate(queue="default", handler="arrived-live")
    )
    row = page.locator(f"#jobs tr[data-job='{job.job['id']}']")
    await expect(row).to_contain_text("arrived-live", timeout=5000)
    await asyncio.sleep(2.5)  # longer than the polling period: a poller would have fetched
    assert polled == [], polled  # it came over the event stream, and nothing polls meanwhile
    await page.screenshot(path=screenshot_path("live-jobs.png"), full_page=True)


async def test_the_overview_counts_a_new_job_over_sse(page: Page, seed: Seed, conn: Conn) -> None:
    await ui_sign_in(page, seed.a)
    polled = _record_polls(page)
    await page.goto(f"/p/{seed.project}")
    await expect(page.locator("[data-live-state='sse']")).to_have_count(1)
    before = int(await page.locator("[data-stat='queued']").inner_text())
    await enqueue.enqueue(conn, ProjectId(seed.project), JobCreate(queue="critical", handler="x"))
    await expect(page.locator("[data-stat='queued']")).to_have_text(str(before + 1), timeout=5000)
    assert polled == []


async def test_a_dead_letter_appears_on_the_dlq_page_when_the_rollup_folds_it(
    page: Page, seed: Seed, conn: Conn
) -> None:
    await ui_sign_in(page, seed.a)
    polled = _record_polls(page)
    await page.goto(f"/p/{seed.project}/dlq")
    await expect(page.locator("#dlq-latest")).to_have_attribute("data-live-state", "sse")
    letter = await dead_letter(conn, seed.project, seed.worker_id, queue="reports")
    await stats.fold(conn, lag_s=0)  # the scheduler's stats loop: folds it and NOTIFYs
    await expect(page.locator(f"#dlq-latest tr[data-letter='{letter}']")).to_have_count(
        1, timeout=5000
    )
    assert polled == []
    await page.screenshot(path=screenshot_path("live-dlq.png"), full_page=True)


async def test_the_job_page_shows_a_cancel_from_another_tab(
    page: Page, seed: Seed, conn: Conn
) -> None:
    await ui_sign_in(page, seed.a, Role.MEMBER)
    other = await page.context.new_page()
    await page.goto(f"/p/{seed.project}/jobs/{seed.queued_job_id}")
    await expect(page.locator("[data-live-state='sse']")).to_have_count(1)
    await other.goto(f"/p/{seed.project}/jobs/{seed.queued_job_id}")
    await other.click("#cancel-job")
    await expect(other.locator("#job-status")).to_contain_text("cancelled")
    await expect(page.locator("#job-status")).to_contain_text("cancelled", timeout=5000)


async def test_polling_takes_over_when_the_event_stream_is_refused(page: Page, seed: Seed) -> None:
    await page.route("**/live/**", lambda route: route.fulfill(status=503, body=""))
    await ui_sign_in(page, seed.a)
    polled = _record_polls(page)
    await page.goto(f"/p/{seed.project}")
    await expect(page.locator("[data-live-state='polling']")).to_have_count(1)
    for _ in range(60):
        if polled:
            break
        await asyncio.sleep(0.1)
    assert polled, "no /partials/ request within 6 s"


async def _signed_in_client(server: ApiProcess, seed: Seed) -> httpx.AsyncClient:
    client = httpx.AsyncClient(base_url=server.base_url, headers={"Origin": server.base_url})
    login = await client.get("/login")
    r = await client.post(
        "/login",
        data={
            "email": seed.a.users[Role.OWNER].email,
            "password": FIXTURE_PASSWORD,
            "csrf_token": form_token(login.text),
        },
    )
    assert r.status_code == 303, r.text
    return client


async def test_many_streams_share_one_listen_connection(
    server: ApiProcess, seed: Seed, conn: Conn
) -> None:
    client = await _signed_in_client(server, seed)
    streams = []
    try:
        for path in ("overview", "jobs", "dlq", "workers", "overview", "jobs", "dlq", "overview"):
            request = client.build_request("GET", f"/live/p/{seed.project}/{path}")
            response = await client.send(request, stream=True)
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = response.aiter_lines()
            while not (await anext(lines)).startswith("event: fragment"):
                pass
            streams.append(response)
        await asyncio.sleep(0.5)
        assert await live.listeners(conn) == 1
        n = await scalar(
            conn,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jobyard-api-live'",
        )
        assert n == 1
    finally:
        for response in streams:
            await response.aclose()
        await client.aclose()


async def test_a_stream_without_a_session_is_refused(server: ApiProcess, seed: Seed) -> None:
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        r = await client.get(f"/live/p/{seed.project}/overview")
        assert r.status_code == 401
