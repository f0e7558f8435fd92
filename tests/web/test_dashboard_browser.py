"""The dashboard in a real Chromium against a real `jobyard api` process and PostgreSQL."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Page, expect

from jobyard.core import enqueue, stats
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import ProjectId
from jobyard.domain.schemas import JobCreate
from tests.web.conftest import HOSTILE, Seed, scalar, screenshot_path, ui_sign_in

pytestmark = pytest.mark.browser


async def test_overview_shows_the_seeded_queues_with_numbers_from_sql(
    page: Page, seed: Seed, conn: Conn
) -> None:
    await stats.fold(conn, lag_s=0)  # the scheduler's stats loop: the last hour's figures
    await ui_sign_in(page, seed.a)
    await page.click(f"a[href='/p/{seed.project}']")
    rows = page.locator("#overview-queues tbody tr")
    await expect(rows).to_have_count(3)
    for name in ("default", "critical", "reports"):
        row = page.locator(f"tr[data-queue='{name}']")
        for col, status in (("queued", "queued"), ("scheduled", "scheduled")):
            n = await scalar(
                conn,
                "SELECT count(*) FROM jobs j JOIN queues q ON q.id = j.queue_id"
                " WHERE q.name = %s AND q.project_id = %s AND j.status = %s::job_status",
                name, seed.project, status,
            )  # fmt: skip
            await expect(row.locator(f"td[data-col='{col}']")).to_have_text(str(n))
    total = await scalar(conn, "SELECT count(*) FROM jobs WHERE status = 'queued'"
                         " AND project_id = %s", seed.project)  # fmt: skip
    await expect(page.locator("[data-stat='queued']")).to_have_text(str(total))
    ok = await scalar(conn, "SELECT count(*) FROM job_executions WHERE outcome = 'succeeded'")
    await expect(page.locator("[data-stat='succeeded']")).to_have_text(str(ok))
    # Live: a job enqueued now (its NOTIFY reaches the page's event stream) shows without a
    # reload; tests/web/test_live.py covers the stream itself.
    await enqueue.enqueue(conn, ProjectId(seed.project), JobCreate(queue="default", handler="late"))
    await expect(page.locator("[data-stat='queued']")).to_have_text(str(total + 1), timeout=8000)
    await page.screenshot(path=screenshot_path("overview.png"), full_page=True)


async def test_job_explorer_filters_by_status_and_pages_with_the_cursor(
    page: Page, seed: Seed, conn: Conn
) -> None:
    await ui_sign_in(page, seed.a)
    await page.goto(f"/p/{seed.project}/jobs")
    await page.select_option("select[name=status]", "queued")
    await page.click("form.filters button[type=submit]")
    await page.wait_for_url(re.compile(r"status=queued"))
    first = await page.locator("#jobs tbody tr[data-job]").evaluate_all(
        "rows => rows.map(r => Number(r.dataset.job))"
    )
    assert len(first) == 50
    await page.click("#older")
    await page.wait_for_url(re.compile(r"before=\d+"))
    assert "status=queued" in page.url
    second = await page.locator("#jobs tbody tr[data-job]").evaluate_all(
        "rows => rows.map(r => Number(r.dataset.job))"
    )
    expected = await scalar(
        conn,
        "SELECT array_agg(id ORDER BY id DESC) FROM jobs WHERE status = 'queued'"
        " AND project_id = %s",
        seed.project,
    )
    assert first + second == expected  # newest first, no gap, no repeat
    await expect(page.locator("#older")).to_have_count(0)
    statuses = await page.locator("#jobs tbody .status").all_inner_texts()
    assert set(statuses) == {"queued"}


async def test_job_detail_shows_executions_logs_and_escaped_payload(page: Page, seed: Seed) -> None:
    await ui_sign_in(page, seed.a)
    await page.goto(f"/p/{seed.project}/jobs/{seed.failed_job_id}")
    await expect(page.locator("#executions li")).to_have_count(1)
    await expect(page.locator("#executions li").first).to_contain_text("failed")
    await expect(page.locator("#executions li").first).to_contain_text("CardError: card declined")
    await expect(page.locator("#logs tr")).to_have_count(2)
    await expect(page.locator("#logs")).to_contain_text("gateway said <declined>")
    await expect(page.locator("#payload")).to_contain_text(HOSTILE)
    assert await page.title() != "pwned"
    assert await page.locator("#payload b").count() == 0
    await page.screenshot(path=screenshot_path("job-detail.png"), full_page=True)


async def test_cancel_a_queued_job_from_its_page(page: Page, seed: Seed, conn: Conn) -> None:
    await ui_sign_in(page, seed.a, Role.MEMBER)
    await page.goto(f"/p/{seed.project}/jobs/{seed.queued_job_id}")
    await page.click("#cancel-job")
    await expect(page.locator("#job-status")).to_contain_text("cancelled")
    await expect(page.locator(".notice")).to_contain_text("The job was cancelled.")
    await expect(page.locator("#cancel-job")).to_have_count(0)
    status = await scalar(conn, "SELECT status FROM jobs WHERE id = %s", seed.queued_job_id)
    assert status == "cancelled"


async def test_an_admin_pauses_and_resumes_a_queue(page: Page, seed: Seed, conn: Conn) -> None:
    queue = seed.queues["default"]
    await ui_sign_in(page, seed.a, Role.ADMIN)
    await page.goto(f"/p/{seed.project}/queues/{queue}")
    await expect(page.locator("#queue-toggle")).to_have_text("Pause")
    await page.click("#queue-toggle")
    await expect(page.locator("#queue-state")).to_contain_text("paused")
    assert await scalar(conn, "SELECT is_paused FROM queues WHERE id = %s", queue) is True
    await page.click("#queue-toggle")
    await expect(page.locator("#queue-state")).to_contain_text("active")
    assert await scalar(conn, "SELECT is_paused FROM queues WHERE id = %s", queue) is False


async def test_dlq_invalid_json_changes_nothing_and_a_valid_replay_enqueues(
    page: Page, seed: Seed, conn: Conn
) -> None:
    await ui_sign_in(page, seed.a, Role.MEMBER)
    await page.goto(f"/p/{seed.project}/dlq")
    letter = page.locator(f"#dlq-{seed.dlq_id}")
    await letter.locator("summary").click()
    await letter.locator("textarea").fill('{"n": 2,')
    await letter.locator("button.save").click()
    letter = page.locator(f"#dlq-{seed.dlq_id}")
    await expect(letter.locator(".error")).to_contain_text("payload is not valid JSON")
    await expect(letter.locator("textarea")).to_have_value('{"n": 2,')  # kept as typed
    await page.screenshot(path=screenshot_path("dlq-error.png"), full_page=True)
    stored = await scalar(conn, "SELECT payload FROM dead_letter_jobs WHERE id = %s", seed.dlq_id)
    assert stored == {"n": 1}
    jobs_before = await scalar(conn, "SELECT count(*) FROM jobs")

    await letter.locator("textarea").fill('{"n": 2, "fixed": true}')
    await letter.locator("button.replay").click()
    await page.wait_for_url(re.compile(r"/jobs/\d+\?done=replayed"))
    new_id = int(re.findall(r"/jobs/(\d+)", page.url)[0])
    await expect(page.locator("#job-status")).to_contain_text("queued")
    row = await (await conn.execute("SELECT status, payload FROM jobs WHERE id = %s", (new_id,))
                 ).fetchone()  # fmt: skip
    assert row == {"status": "queued", "payload": {"n": 2, "fixed": True}}
    assert await scalar(conn, "SELECT count(*) FROM jobs") == jobs_before + 1
    replayed = await scalar(
        conn, "SELECT replay_job_id FROM dead_letter_jobs WHERE id = %s", seed.dlq_id
    )
    assert replayed == new_id

    # Replayed once: the Replayed tab links the job and offers no second replay (the API
    # refuses one with 409).
    await page.goto(f"/p/{seed.project}/dlq?show=replayed")
    letter = page.locator(f"#dlq-{seed.dlq_id}")
    await expect(letter.locator("summary")).to_contain_text(f"replayed as {new_id}")
    await letter.locator("summary").click()
    await expect(letter.locator("button.save")).to_be_visible()
    await expect(letter.locator("button.replay")).to_have_count(0)
    await page.screenshot(path=screenshot_path("dlq-replayed.png"), full_page=True)


async def test_a_viewer_sees_no_action_buttons(page: Page, seed: Seed) -> None:
    await ui_sign_in(page, seed.a, Role.VIEWER)
    p = f"/p/{seed.project}"
    for path in (f"{p}/jobs/{seed.queued_job_id}", f"{p}/queues/{seed.queues['default']}",
                 f"{p}/dlq"):  # fmt: skip
        await page.goto(path)
        await expect(page.locator("main h1")).to_be_visible()
        # Only the sign-out form posts; no action form is rendered for a viewer.
        assert await page.locator("main form[method=post]").count() == 0, path
        assert await page.locator("main button").count() == 0, path


async def test_another_orgs_project_is_a_404_page_and_sign_out_ends_the_session(
    page: Page, seed: Seed
) -> None:
    await ui_sign_in(page, seed.a)
    response = await page.goto(f"/p/{seed.b.project_id}")
    assert response is not None and response.status == 404
    await expect(page.locator("h1")).to_have_text("Not found")
    await page.goto(f"/p/{seed.project}")
    cookies = await page.context.cookies()
    session = [c for c in cookies if c["name"] in ("jy_access", "jy_refresh")]
    assert len(session) == 2 and all(c["httpOnly"] and c["sameSite"] == "Lax" for c in session)
    await page.click("header form button")
    await page.wait_for_url("**/login")
    # Put the old cookies back: the revoked session must not open the project again.
    await page.context.add_cookies(session)  # type: ignore[arg-type]
    await page.goto(f"/p/{seed.project}")
    assert "/login" in page.url
