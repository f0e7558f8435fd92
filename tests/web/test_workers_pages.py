"""Worker detail page and the workers topology, in Chromium against a real API process."""

from __future__ import annotations

from dataclasses import replace

import pytest
from playwright.async_api import Page, expect

from jobyard.core import lease, workers
from jobyard.core.worker_views import HELD_SHOWN
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import WorkerId
from jobyard.domain.models import LoopStall
from tests.api.engine_helpers import claim_one, make_worker
from tests.web.conftest import Seed, scalar, screenshot_path, ui_sign_in

pytestmark = pytest.mark.browser


async def _dead_worker(conn: Conn, seed: Seed) -> int:
    wid = await make_worker(conn, seed.project)
    await conn.execute(
        """UPDATE workers SET name = 'old-box', status = 'dead', queues = '{reports}',
                  started_at = now() - interval '3 hours',
                  stopped_at = now() - interval '1 hour',
                  last_heartbeat_at = now() - interval '1 hour'
           WHERE id = %s""",
        (wid,),
    )
    return int(wid)


async def test_worker_detail_shows_identity_held_jobs_and_recent_runs(
    page: Page, seed: Seed, conn: Conn
) -> None:
    await conn.execute(
        "UPDATE workers SET hostname = 'box-1', pid = 4242 WHERE id = %s", (seed.worker_id,)
    )
    held = await claim_one(conn, seed.project, seed.worker_id, "default")
    await ui_sign_in(page, seed.a)
    await page.goto(f"/p/{seed.project}/workers")
    await page.click(f"#workers a[href='/p/{seed.project}/workers/{seed.worker_id}']")
    facts = page.locator("#worker-facts")
    await expect(facts).to_contain_text("box-1")
    await expect(facts).to_contain_text("4242")
    await expect(facts).to_contain_text("default")
    await expect(page.locator("[data-fact='in-flight']")).to_contain_text("1 / 4")
    await expect(page.locator(f"#held-jobs tr[data-job='{held.id}']")).to_have_count(1)
    runs = await scalar(
        conn, "SELECT count(*) FROM job_executions WHERE worker_id = %s", seed.worker_id
    )
    await expect(page.locator("#recent-runs tr[data-run]")).to_have_count(runs)
    await expect(page.locator("#recent-runs")).to_contain_text("card declined")
    await page.screenshot(path=screenshot_path("worker-detail.png"), full_page=True)


async def test_topology_draws_queues_workers_and_greys_dead_workers(
    page: Page, seed: Seed, conn: Conn
) -> None:
    dead = await _dead_worker(conn, seed)
    await claim_one(conn, seed.project, seed.worker_id, "default")
    await ui_sign_in(page, seed.a)
    await page.goto(f"/p/{seed.project}/workers")
    await page.click("#topology-link")
    svg = page.locator("#topology svg")
    await expect(svg.locator("[data-queue]")).to_have_count(3)
    await expect(svg.locator("[data-worker]")).to_have_count(2)
    live = svg.locator(f"[data-worker='{seed.worker_id}']")
    await expect(live).to_contain_text("in flight 1 / 4")
    await expect(svg.locator("[data-queue='default']")).to_contain_text("in flight 1 / 4")
    gone = svg.locator(f"[data-worker='{dead}']")
    await expect(gone).to_have_attribute("data-status", "dead")
    await expect(gone).to_contain_text("up 2h 0m (frozen at stop)")
    assert await gone.locator("rect").get_attribute("fill") == "#edf2f7"
    # One connector per (worker, queue it serves): w → default, critical; old-box → reports.
    await expect(svg.locator("path[data-edge]")).to_have_count(3)
    await page.screenshot(path=screenshot_path("topology.png"), full_page=True)


async def test_a_worker_holding_many_jobs_lists_the_longest_held_and_counts_them_all(
    page: Page, seed: Seed, conn: Conn
) -> None:
    """The page lists HELD_SHOWN rows (rendering hundreds cost the 1,000,000-job benchmark its
    budget), and the count still covers every held job."""
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, worker_id, attempt,
                             execution_seq, claimed_at, started_at, lock_expires_at)
           SELECT q.project_id, q.id, 'bulk', 'running', %s, 1, 1,
                  now() - g * interval '1 s', now() - g * interval '1 s', now() + interval '30 s'
           FROM queues q, generate_series(1, 105) g
           WHERE q.project_id = %s AND q.name = 'default'""",
        (seed.worker_id, seed.project),
    )
    await ui_sign_in(page, seed.a)
    await page.goto(f"/p/{seed.project}/workers/{seed.worker_id}")
    await expect(page.locator("#held-jobs tr[data-job]")).to_have_count(HELD_SHOWN)
    await expect(page.locator("[data-fact='in-flight']")).to_contain_text("105 /")
    await expect(page.locator("#held-more")).to_contain_text(
        f"The {HELD_SHOWN} held longest of 105"
    )
    await page.locator("#held-more").scroll_into_view_if_needed()
    await page.screenshot(path=screenshot_path("worker-detail-many-held.png"), full_page=True)


async def test_a_worker_s_blocked_loop_and_orphan_threads_are_shown_with_what_to_do(
    page: Page, seed: Seed, conn: Conn
) -> None:
    held = await claim_one(conn, seed.project, seed.worker_id, "default")
    await lease.heartbeat(
        conn, WorkerId(seed.worker_id), [], lease_s=30, capacity=4, orphan_threads=2
    )
    stall = LoopStall(
        number=3, blocked_s=1.5, ongoing=True, handler="resize", job_ids=(held.id,),
        at="/srv/shop/tasks.py:13 in resize",
    )  # fmt: skip
    await workers.record_loop_stall(conn, WorkerId(seed.worker_id), stall)
    await ui_sign_in(page, seed.a)
    await page.goto(f"/p/{seed.project}/workers")
    listed = page.locator(f"#workers [data-health='{seed.worker_id}']")
    await expect(listed).to_contain_text("loop blocked by resize")
    await page.screenshot(path=screenshot_path("workers-health.png"), full_page=True)
    # The overview, the page an operator lands on, says it too.
    await page.goto(f"/p/{seed.project}")
    landing = page.locator(f"[data-health='{seed.worker_id}']")
    await expect(landing).to_contain_text("loop blocked by resize")
    # (No scrolling to it: the overview's live part is replaced every 2 s.)
    await page.screenshot(path=screenshot_path("overview-worker-health.png"), full_page=True)
    await page.goto(f"/p/{seed.project}/topology")
    node = page.locator(f"#topology svg [data-worker='{seed.worker_id}']")
    await expect(node).to_contain_text("loop blocked by resize · 2 orphan thread(s)")
    await page.screenshot(path=screenshot_path("topology-health.png"), full_page=True)

    await page.goto(f"/p/{seed.project}/workers/{seed.worker_id}")
    health = page.locator("#worker-health")
    await expect(health.locator("h2")).to_contain_text("event loop blocked")
    loop = health.locator("[data-health='loop']")
    await expect(loop).to_contain_text("blocked since")
    await expect(loop).to_contain_text("handler resize")
    await expect(loop).to_contain_text("/srv/shop/tasks.py:13 in resize")
    await expect(loop).to_contain_text("3 stalls since it started")
    await expect(loop.locator(f"a[href='/p/{seed.project}/jobs/{held.id}']")).to_have_count(1)
    await expect(health.locator("[data-health='orphans']")).to_contain_text(
        "2 handler threads still running after their run ended, holding 2 of 4 slots"
    )
    await expect(health.locator("ul.warnings li")).to_have_count(2)
    await health.scroll_into_view_if_needed()
    await page.screenshot(path=screenshot_path("worker-health.png"), full_page=True)

    # The job it runs: running, but not normally, so the why panel says why it takes so long.
    await page.goto(f"/p/{seed.project}/jobs/{held.id}")
    panel = page.locator(".why")
    await expect(panel.locator("h2")).to_have_text("Why isn't this job finishing?")
    await expect(panel).to_contain_text("its event loop has stood still for")
    await expect(panel).to_contain_text("blocked by handler 'resize'")
    await page.screenshot(path=screenshot_path("job-on-a-blocked-worker.png"), full_page=True)

    # Once the loop turns again and the threads return: the last stall, no warning.
    await workers.record_loop_stall(
        conn, WorkerId(seed.worker_id), replace(stall, blocked_s=4.25, ongoing=False)
    )
    await lease.heartbeat(conn, WorkerId(seed.worker_id), [], lease_s=30, capacity=4)
    await page.goto(f"/p/{seed.project}/workers/{seed.worker_id}")
    await expect(health.locator("h2")).to_contain_text("ok")
    await expect(loop).to_contain_text("last stood still 4.25 s")
    await expect(health.locator("[data-health='orphans']")).to_have_text("none")
    await expect(health.locator("ul.warnings")).to_have_count(0)
    await page.goto(f"/p/{seed.project}/workers")
    await expect(listed).to_have_text("ok")


async def test_an_admin_pauses_and_resumes_a_worker_a_member_cannot(
    page: Page, seed: Seed, conn: Conn
) -> None:
    await ui_sign_in(page, seed.a, Role.MEMBER)
    await page.goto(f"/p/{seed.project}/workers/{seed.worker_id}")
    await expect(page.locator("#worker-facts")).to_be_visible()
    await expect(page.locator("#worker-toggle")).to_have_count(0)

    await ui_sign_in(page, seed.a, Role.ADMIN)
    await page.goto(f"/p/{seed.project}/workers/{seed.worker_id}")
    await expect(page.locator("#worker-toggle")).to_have_text("Pause")
    await page.click("#worker-toggle")
    await expect(page.locator(".notice")).to_contain_text("Worker paused")
    await expect(page.locator("#worker-status")).to_contain_text("paused")
    await expect(page.locator("[data-fact='paused']")).to_contain_text("claims nothing")
    await expect(page.locator("[data-fact='paused']")).to_contain_text(
        f"by {seed.a.users[Role.ADMIN].email}"
    )
    paused = "SELECT paused_at IS NOT NULL FROM workers WHERE id = %s"
    assert await scalar(conn, paused, seed.worker_id) is True
    await page.screenshot(path=screenshot_path("worker-paused.png"), full_page=True)
    await page.goto(f"/p/{seed.project}/workers")
    await expect(page.locator(f"#workers [data-health='{seed.worker_id}']")).to_have_text("paused")

    await page.goto(f"/p/{seed.project}/workers/{seed.worker_id}")
    await page.click("#worker-toggle")
    await expect(page.locator(".notice")).to_contain_text("Worker resumed")
    await expect(page.locator("#worker-toggle")).to_have_text("Pause")
    assert await scalar(conn, paused, seed.worker_id) is False
