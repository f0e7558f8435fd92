"""The job page shows a handler's progress and each failed run's traceback (real Chromium)."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from jobyard.core import enqueue, transitions
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId
from jobyard.domain.schemas import JobCreate
from tests.api.engine_helpers import claim_one
from tests.web.conftest import HOSTILE, Seed, screenshot_path, ui_sign_in

pytestmark = pytest.mark.browser

TRACEBACK = f"""Traceback (most recent call last):
  File "/app/shop/tasks.py", line 41, in import_catalog
    rows = parse(blob)
  File "/app/shop/parsing.py", line 12, in parse
    raise ValueError("row 17: {HOSTILE}")
ValueError: row 17: {HOSTILE}
"""


async def test_job_page_shows_progress_and_the_traceback_of_a_failed_run(
    page: Page, seed: Seed, conn: Conn
) -> None:
    result = await enqueue.enqueue(
        conn,
        ProjectId(seed.a.project_id),
        JobCreate(queue="critical", handler="import_catalog", max_attempts=3),
    )
    job_id = result.job["id"]
    await conn.execute("UPDATE jobs SET priority = 100 WHERE id = %s", (job_id,))
    first = await claim_one(conn, seed.a.project_id, seed.worker_id, "critical")
    assert first.id == job_id
    await transitions.set_progress(conn, first, 0.1, "reading the file")
    await transitions.fail(conn, first, "ValueError", f"row 17: {HOSTILE}", traceback=TRACEBACK)
    await conn.execute("UPDATE jobs SET status = 'queued', run_at = now() WHERE id = %s", (job_id,))
    second = await claim_one(conn, seed.a.project_id, seed.worker_id, "critical")
    await transitions.set_progress(conn, second, 0.4, "step 2 of 5: prices")

    await ui_sign_in(page, seed.a)
    await page.goto(f"/p/{seed.project}/jobs/{job_id}")
    progress = page.locator("#job-progress")
    await expect(progress).to_contain_text("40%")
    await expect(progress).to_contain_text("step 2 of 5: prices")
    assert await progress.locator("progress").get_attribute("value") == "0.4"
    tb = page.locator("#executions pre.traceback")
    await expect(tb).to_have_count(1)
    await expect(tb).to_contain_text('File "/app/shop/parsing.py", line 12, in parse')
    await expect(tb).to_contain_text(f"ValueError: row 17: {HOSTILE}")  # shown as text
    assert await page.locator("#executions pre.traceback b").count() == 0
    assert await page.title() != "pwned"
    await page.screenshot(path=screenshot_path("job-progress-traceback.png"), full_page=True)
