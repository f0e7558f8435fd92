"""The operator console in a real Chromium against a real `jobyard api` process: the "why"
panel, job actions, bulk actions with a counted confirmation, failure groups, schedules, queue
settings, the DLQ's waiting/replayed split, the 404 page, and a 390 px wide phone."""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from jobyard.core import enqueue, transitions
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import JobId, ProjectId
from jobyard.domain.schemas import JobCreate
from tests.api.processes import ApiProcess
from tests.web.conftest import Seed, scalar, screenshot_path, ui_sign_in

pytestmark = pytest.mark.browser


async def test_the_job_page_explains_and_its_buttons_follow_the_state_without_a_reload(
    page: Page, seed: Seed, conn: Conn
) -> None:
    await ui_sign_in(page, seed.a, Role.MEMBER)
    await page.goto(f"/p/{seed.project}/jobs/{seed.queued_job_id}")
    why = page.locator("#why")
    await expect(why).to_contain_text("Why isn't this job running?")
    await expect(why.locator("li[data-code=position]")).to_contain_text("job(s) ahead of it")
    await page.screenshot(path=screenshot_path("job-why.png"), full_page=True)
    # Cancelled elsewhere (the API, another operator): the poll drops Cancel, offers Retry.
    await transitions.cancel(conn, ProjectId(seed.project), JobId(seed.queued_job_id))
    await expect(page.locator("#cancel-job")).to_have_count(0, timeout=10_000)
    await expect(page.locator("#job-status")).to_contain_text("cancelled")
    await page.click("#retry-job")
    await expect(page.locator(".notice")).to_contain_text("Queued again")
    await expect(page.locator("#job-status")).to_contain_text("queued")
    await expect(page.locator("#cancel-job")).to_have_count(1)

    # The failed job is backing off: "Run now" queues it at once, its panel said why it waited.
    await page.goto(f"/p/{seed.project}/jobs/{seed.failed_job_id}")
    await expect(page.locator("li[data-code=retry_backoff]")).to_contain_text("retry 2 of 3")
    await page.click("#run-now-job")
    await expect(page.locator("#job-status")).to_contain_text("queued")
    status = await scalar(conn, "SELECT status::text FROM jobs WHERE id = %s", seed.failed_job_id)
    assert status == "queued"


async def test_a_job_cancelled_because_its_parent_failed_points_at_the_parent(
    page: Page, seed: Seed, conn: Conn
) -> None:
    """Its own retry is refused in favour of the parent's: the page offers no Retry, and the
    why panel names the parent. A retry posted anyway shows the refusal above the title, clear
    of the action bar (which sat over it until 2026-12-05)."""
    pid = ProjectId(seed.project)
    parent = await enqueue.enqueue(conn, pid, JobCreate(handler="noop", delay_ms=3_600_000))
    parent_id = int(parent.job["id"])
    child = await enqueue.enqueue(conn, pid, JobCreate(handler="noop", depends_on=[parent_id]))
    child_id = int(child.job["id"])
    await transitions.cancel(conn, pid, JobId(parent_id))
    await ui_sign_in(page, seed.a, Role.MEMBER)
    await page.goto(f"/p/{seed.project}/jobs/{child_id}")
    cancelled = page.locator("li[data-code=cancelled]")
    await expect(cancelled).to_contain_text(f"parent job {parent_id} ended cancelled")
    await expect(cancelled).to_contain_text("retry that parent")
    await expect(page.locator("#retry-job")).to_have_count(0)
    await page.screenshot(path=screenshot_path("job-why-parent-cancelled.png"), full_page=True)
    # The parent's page does offer Retry once it is cancelled; this one is refused if posted.
    await page.evaluate(
        """([url]) => {
            const form = document.createElement("form");
            form.method = "post";
            form.action = url;
            form.appendChild(document.querySelector("input[name=csrf_token]").cloneNode());
            document.body.appendChild(form);
            form.submit();
        }""",
        [f"/p/{seed.project}/jobs/{child_id}/retry"],
    )
    refusal = page.locator("p.error")
    await expect(refusal).to_contain_text("retry that parent")
    await page.screenshot(path=screenshot_path("job-retry-refused.png"), full_page=True)
    error_box = await refusal.bounding_box()
    title_box = await page.locator("h1").bounding_box()
    assert error_box is not None and title_box is not None
    assert error_box["y"] + error_box["height"] <= title_box["y"]
    status = await scalar(conn, "SELECT status::text FROM jobs WHERE id = %s", child_id)
    assert status == "cancelled"


async def test_logs_are_newest_first_with_fields_and_page_back(
    page: Page, seed: Seed, conn: Conn
) -> None:
    held_id = seed.failed_job_id
    await conn.execute(
        """INSERT INTO job_logs (job_id, execution_seq, level, message, fields)
           SELECT %s, 1, 'info', 'line ' || g, jsonb_build_object('n', g, 'card', 'visa')
           FROM generate_series(1, 150) g""",
        (held_id,),
    )
    await ui_sign_in(page, seed.a, Role.VIEWER)
    await page.goto(f"/p/{seed.project}/jobs/{held_id}")
    rows = page.locator("#logs tr")
    await expect(rows).to_have_count(100)
    await expect(rows.first).to_contain_text("line 150")
    await expect(rows.first.locator("dl.fields")).to_contain_text("visa")
    await page.click("#older-logs")
    await expect(rows).to_have_count(52)  # 50 older lines and the seed's 2
    await expect(rows.first).to_contain_text("line 50")
    await expect(rows.last).to_contain_text("charging card ending 4242")


async def test_bulk_cancel_on_a_filter_confirms_the_count_then_reports_it(
    page: Page, seed: Seed, conn: Conn
) -> None:
    await ui_sign_in(page, seed.a, Role.MEMBER)
    await page.goto(f"/p/{seed.project}/jobs?status=queued&queue=default")
    await page.select_option("#bulk select[name=action]", "cancel")
    await page.click("#bulk-review")
    await expect(page.locator("#confirm h1")).to_have_text("Cancel: 60 jobs")
    await expect(page.locator("#confirm-button")).to_have_text("Cancel 60 jobs")
    await page.screenshot(path=screenshot_path("bulk-confirm.png"), full_page=True)
    await page.click("#confirm-button")
    await expect(page.locator("#bulk-result")).to_contain_text(
        "Cancel: 60 of 60 matching job(s) changed"
    )
    left = await scalar(
        conn,
        "SELECT count(*) FROM jobs WHERE project_id = %s AND status = 'queued'",
        seed.project,
    )
    assert left == 0
    # Delete is admin's: a member is not offered it.
    assert await page.locator("#bulk option[value=delete]").count() == 0


async def test_failure_groups_list_and_retry_a_group_after_a_counted_confirmation(
    page: Page, seed: Seed, conn: Conn
) -> None:
    fp = await scalar(
        conn, "SELECT error_fingerprint FROM dead_letter_jobs WHERE id = %s", seed.dlq_id
    )
    await ui_sign_in(page, seed.a, Role.ADMIN)
    # The explorer's fingerprint link leads to the group.
    await page.goto(f"/p/{seed.project}/jobs?status=dead_letter")
    await page.click(f"#jobs a[href*='failures?fingerprint={fp}']")
    group = page.locator(f"#group-{fp}")
    await expect(group).to_contain_text("1 job")
    await expect(group.locator("pre.sample")).to_contain_text("CardError: card 4242 declined")
    await expect(group).to_contain_text("charge")
    await page.goto(f"/p/{seed.project}/failures")
    await expect(page.locator("#groups .group")).to_have_count(2)
    await page.screenshot(path=screenshot_path("failure-groups.png"), full_page=True)
    await page.click(f"#retry-{fp}")
    await expect(page.locator("#confirm-button")).to_have_text("Retry 1 job")
    await page.click("#confirm-button")
    await expect(page.locator("#group-result")).to_contain_text("Retry: 1 of 1 job(s) changed")
    await expect(page.locator(f"#group-{fp}")).to_have_count(0)
    # The DLQ page and the overview agree: the letter moved to "Replayed".
    await page.goto(f"/p/{seed.project}/dlq")
    await expect(page.locator("#dlq-waiting")).to_have_text("0")
    await expect(page.locator("#dlq-replayed")).to_have_text("1")


async def test_schedules_are_created_edited_disabled_fired_and_deleted(
    page: Page, seed: Seed, conn: Conn
) -> None:
    await ui_sign_in(page, seed.a, Role.ADMIN)
    await page.goto(f"/p/{seed.project}/schedules")
    nightly = page.locator("tr[data-schedule=nightly]")
    await expect(nightly.locator(".words")).to_contain_text("At 03:00 (Europe/Paris)")
    await page.click("#new-schedule")
    await page.fill("input[name=name]", "weekday-digest")
    await page.fill("input[name=cron]", "0 9 * * 1-5")
    await page.fill("input[name=timezone]", "Not/AZone")
    await page.fill("input[name=handler]", "digest")
    await page.click("#save-schedule")
    await expect(page.locator(".error")).to_contain_text("timezone")  # refused, text kept
    await expect(page.locator("input[name=name]")).to_have_value("weekday-digest")
    await page.fill("input[name=timezone]", "America/New_York")
    await page.screenshot(path=screenshot_path("schedule-form.png"), full_page=True)
    await page.click("#save-schedule")
    row = page.locator("tr[data-schedule=weekday-digest]")
    await expect(row.locator(".words")).to_contain_text("At 09:00, Monday through Friday")
    await page.screenshot(path=screenshot_path("schedules.png"), full_page=True)

    await row.locator("a.edit").click()
    await page.fill("input[name=cron]", "30 8 * * *")
    await page.click("#save-schedule")
    await expect(row.locator(".words")).to_contain_text("At 08:30")
    await row.locator("button.toggle").click()
    await expect(page.locator(".notice")).to_contain_text("Schedule disabled")
    enabled = await scalar(conn, "SELECT enabled FROM scheduled_jobs WHERE name = 'weekday-digest'")
    assert enabled is False
    await row.locator("button.trigger").click()
    await expect(page.locator(".notice")).to_contain_text("Schedule fired by hand")
    await expect(page.locator("#job-status")).to_contain_text("queued")
    await page.goto(f"/p/{seed.project}/schedules")
    await row.locator("button.delete").click()
    await expect(page.locator(".notice")).to_contain_text("Schedule deleted")
    await expect(row).to_have_count(0)


async def test_queue_settings_are_edited_from_the_queue_page(
    page: Page, seed: Seed, conn: Conn
) -> None:
    queue = seed.queues["reports"]
    await conn.execute(
        "INSERT INTO retry_policies (project_id, name, backoff) VALUES (%s, 'patient', 'linear')",
        (seed.project,),
    )
    await ui_sign_in(page, seed.a, Role.ADMIN)
    await page.goto(f"/p/{seed.project}/queues/{queue}")
    await page.fill("#queue-settings input[name=priority]", "7")
    await page.fill("#queue-settings input[name=max_concurrency]", "3")
    await page.select_option(
        "#queue-settings select[name=retry_policy_id]",
        label="patient — linear, 5 attempts, 1.00 s → 3600.00 s",
    )
    await page.screenshot(path=screenshot_path("queue-settings.png"), full_page=True)
    await page.click("#save-queue")
    await expect(page.locator(".notice")).to_contain_text("Queue settings saved")
    row = await scalar(
        conn,
        """SELECT q.priority || '/' || q.max_concurrency || '/' || p.name FROM queues q
           JOIN retry_policies p ON p.id = q.retry_policy_id WHERE q.id = %s""",
        queue,
    )
    assert row == "7/3/patient"


async def test_an_unknown_dashboard_path_is_the_404_page_and_the_api_stays_json(
    page: Page, seed: Seed, server: ApiProcess
) -> None:
    await ui_sign_in(page, seed.a)
    for path in (f"/p/{seed.project}/no-such-screen", "/nowhere"):
        response = await page.goto(path)
        assert response is not None and response.status == 404
        await expect(page.locator("h1")).to_have_text("Not found")
    async with httpx.AsyncClient() as client:
        api = await client.get(f"{server.base_url}/api/v1/no-such-route")
    assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("screen", ["overview", "jobs", "job", "failures", "schedules", "dlq"])
async def test_every_screen_is_usable_390_px_wide(
    browser: Browser, server: ApiProcess, seed: Seed, screen: str
) -> None:
    context = await browser.new_context(
        base_url=server.base_url, viewport={"width": 390, "height": 844}, is_mobile=True
    )
    page = await context.new_page()
    try:
        await ui_sign_in(page, seed.a)
        p = f"/p/{seed.project}"
        path = {
            "overview": p, "jobs": f"{p}/jobs", "job": f"{p}/jobs/{seed.failed_job_id}",
            "failures": f"{p}/failures", "schedules": f"{p}/schedules", "dlq": f"{p}/dlq",
        }[screen]  # fmt: skip
        await page.goto(path)
        # Usable: the page itself never scrolls sideways (wide tables scroll inside their card)
        # and the navigation stays reachable.
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{screen}: the page is {width} px wide"
        await expect(page.locator("header nav.tabs")).to_be_visible()
        await page.screenshot(path=screenshot_path(f"phone-{screen}.png"), full_page=True)
    finally:
        await context.close()
