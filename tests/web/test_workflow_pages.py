"""The workflow and batch screens in Chromium (issue 14 point 4): the DAG drawn server-side
with each step's state and linked from a member job's page; retry a failed step; a batch's
progress bar and its cancel action."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from jobyard.core import claim, enqueue, transitions, workflows
from jobyard.core.claim import queues_by_names
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.schemas import BatchCreate, WorkflowCreate
from tests.web.conftest import Seed, screenshot_path, ui_sign_in

pytestmark = pytest.mark.browser


async def _etl(conn: Conn, seed: Seed) -> dict[str, int]:
    """extract → (clean, enrich) → load → notify, plus audit that runs anyway; clean fails."""
    pid = ProjectId(seed.project)
    steps = [
        {"key": "extract", "handler": "etl.extract", "queue": "reports"},
        {"key": "clean", "handler": "etl.clean", "queue": "reports", "after": ["extract"],
         "max_attempts": 1},
        {"key": "enrich", "handler": "etl.enrich", "queue": "reports", "after": ["extract"]},
        {"key": "load", "handler": "etl.load", "queue": "reports", "after": ["clean", "enrich"]},
        {"key": "notify", "handler": "etl.notify", "queue": "reports", "after": ["load"]},
        {"key": "audit", "handler": "etl.audit", "queue": "reports", "after": ["clean"],
         "run_anyway": True},
    ]  # fmt: skip
    ids = (
        await workflows.enqueue_workflow(conn, pid, WorkflowCreate.model_validate({"steps": steps}))
    ).job_ids
    (ref,) = await queues_by_names(conn, pid, ["reports"])
    await conn.execute("UPDATE workers SET queues = '{reports}' WHERE id = %s", (seed.worker_id,))
    worker = WorkerId(seed.worker_id)
    (extract,) = await claim.claim_batch(conn, ref, worker, 1, lease_s=30, start=True)
    await transitions.complete_many(conn, [extract], [{"rows": 120}])
    running = {
        j.id: j for j in await claim.claim_batch(conn, ref, worker, 2, lease_s=30, start=True)
    }
    await transitions.fail(conn, running[ids["clean"]], "ValueError", "bad row 17", retryable=False)
    await transitions.complete_many(conn, [running[ids["enrich"]]])
    return ids


async def test_a_job_page_links_to_its_workflow_drawn_with_each_step_s_state(
    page: Page, seed: Seed, conn: Conn
) -> None:
    ids = await _etl(conn, seed)
    await ui_sign_in(page, seed.a)
    await page.goto(f"/p/{seed.project}/jobs/{ids['load']}")
    await expect(page.locator("#cancel-reason")).to_have_text(
        f"dependency failed: parent job {ids['clean']} ended dead_letter"
    )
    await expect(page.locator("#parents a")).to_have_count(2)
    await page.click("#workflow-link")
    await page.wait_for_url(f"**/workflows/{ids['load']}")
    nodes = page.locator("#dag a.dag-node")
    await expect(nodes).to_have_count(6)
    want = {"extract": "done", "clean": "dead_letter", "enrich": "done", "load": "cancelled",
            "notify": "cancelled", "audit": "queued"}  # fmt: skip
    for key, state in want.items():
        await expect(page.locator(f"#dag a[data-job='{ids[key]}']")).to_have_attribute(
            "data-status", state
        )
    await expect(page.locator("#dag path.dag-edge")).to_have_count(6)
    await expect(page.locator("#dag path.dag-edge.anyway")).to_have_count(1)
    await page.screenshot(path=screenshot_path("workflow.png"), full_page=True)
    # Retry the failed step: the steps cancelled because of it wait again.
    await page.click(f"#steps tr[data-job='{ids['clean']}'] button.retry-step")
    await expect(page.locator(".notice, [role=status]").first).to_contain_text("runs again")
    for key, state in (("clean", "queued"), ("load", "waiting"), ("notify", "waiting")):
        await expect(page.locator(f"#dag a[data-job='{ids[key]}']")).to_have_attribute(
            "data-status", state
        )
    await page.screenshot(path=screenshot_path("workflow-retried.png"), full_page=True)
    # A node links to its job page.
    await page.click(f"#dag a[data-job='{ids['extract']}']")
    await page.wait_for_url(f"**/jobs/{ids['extract']}")


async def test_a_batch_page_shows_progress_and_cancels_the_pending_jobs(
    page: Page, seed: Seed, conn: Conn
) -> None:
    pid = ProjectId(seed.project)
    body = BatchCreate.model_validate({
        "queue": "reports", "jobs": [{"handler": "thumb", "payload": {"i": i}} for i in range(10)],
        "on_complete": {"handler": "thumbs.report", "queue": "reports"},
    })  # fmt: skip
    batch = await enqueue.enqueue_batch(conn, pid, body)
    (ref,) = await queues_by_names(conn, pid, ["reports"])
    await conn.execute("UPDATE workers SET queues = '{reports}' WHERE id = %s", (seed.worker_id,))
    jobs = await claim.claim_batch(conn, ref, WorkerId(seed.worker_id), 7, lease_s=30, start=True)
    await transitions.complete_many(conn, jobs[:6])
    await transitions.fail(conn, jobs[6], "IOError", "disk full", retryable=False)
    await ui_sign_in(page, seed.a)
    await page.goto(f"/p/{seed.project}/jobs/{batch.job_ids[0]}")
    await page.click("#batch-link")
    await page.wait_for_url(f"**/batches/{batch.batch_id}")
    await expect(page.locator("#batch-finished")).to_have_text("70.0 % finished")
    await expect(page.locator("#batch-progress rect.bar-done")).to_have_attribute("width", "60.0%")
    await expect(page.locator("#batch-progress rect.bar-failed")).to_have_attribute(
        "width", "10.0%"
    )
    await page.screenshot(path=screenshot_path("batch.png"), full_page=True)
    await page.click("#cancel-batch")
    await expect(page.locator("#batch-finished")).to_have_text("100.0 % finished")
    await expect(page.locator("#batch-callbacks a")).to_have_count(1)
    await page.screenshot(path=screenshot_path("batch-cancelled.png"), full_page=True)
