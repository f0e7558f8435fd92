"""Statistics pages: SVG charts with labelled axes from the rollup, per project and per queue."""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import Page, expect

from jobyard.core import stats
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from tests.web.conftest import Seed, screenshot_path, sign_in, ui_sign_in


async def _runs(conn: Conn, seed: Seed, queue: str, n: int, minutes_ago: int, ms: int) -> None:
    await conn.execute(
        """WITH j AS (
               INSERT INTO jobs (project_id, queue_id, handler, status, run_at, execution_seq,
                                 attempt, finished_at)
               SELECT %(p)s, %(q)s, 'chart', 'done',
                      now() - make_interval(mins => %(m)s, secs => 2), 1, 1,
                      now() - make_interval(mins => %(m)s)
               FROM generate_series(1, %(n)s) RETURNING id)
           INSERT INTO job_executions (job_id, execution_seq, attempt, outcome, started_at,
                                       finished_at, duration_ms)
           SELECT j.id, 1, 1, 'succeeded', now() - make_interval(mins => %(m)s, secs => 1),
                  now() - make_interval(mins => %(m)s), %(ms)s FROM j""",
        {"p": seed.project, "q": seed.queues[queue], "n": n, "m": minutes_ago, "ms": ms},
    )


@pytest.mark.browser
async def test_queue_statistics_draw_throughput_and_percentiles_with_axes(
    page: Page, seed: Seed, conn: Conn
) -> None:
    await _runs(conn, seed, "default", 40, 3, 30)
    await _runs(conn, seed, "default", 10, 100, 1500)
    await _runs(conn, seed, "critical", 7, 5, 10)
    await stats.fold(conn, lag_s=0)
    await ui_sign_in(page, seed.a, Role.VIEWER)
    await page.goto(f"/p/{seed.project}/queues/{seed.queues['default']}")
    await page.click("#queue-stats")
    chart = page.locator("#chart-throughput svg")
    await expect(chart).to_contain_text("runs per minute")
    await expect(chart).to_contain_text("time (UTC)")
    await expect(page.locator("[data-total='succeeded']")).to_have_text("40")  # last hour
    await page.click("#windows a:has-text('24h')")
    await expect(page.locator("#chart-throughput svg")).to_contain_text("runs per hour")
    await expect(page.locator("[data-total='succeeded']")).to_have_text("50")
    await expect(page.locator("#chart-run svg")).to_contain_text("run time (seconds)")
    await expect(page.locator("#chart-run svg path[data-series='p99']")).to_have_count(1)
    await page.screenshot(path=screenshot_path("queue-stats-24h.png"), full_page=True)
    await page.goto(f"/p/{seed.project}/stats?window=7d")
    await expect(page.locator("[data-total='succeeded']")).to_have_text(
        "58"
    )  # + the seed's done job
    await expect(page.locator("#chart-throughput svg")).to_contain_text("runs per 2 hours")
    await page.goto(f"/p/{seed.project}")
    overview_chart = page.locator("svg.chart").first
    await expect(overview_chart).to_contain_text("runs per minute")
    await expect(overview_chart.locator("rect[data-series='succeeded']")).to_have_count(3)
    await page.screenshot(path=screenshot_path("overview-chart.png"), full_page=True)


async def test_an_unknown_window_is_a_clear_422(client: httpx.AsyncClient, seed: Seed) -> None:
    await sign_in(client, seed.a, Role.VIEWER)
    r = await client.get(f"/p/{seed.project}/stats?window=1y")
    assert r.status_code == 422
    assert "window: &#39;1y&#39; is not one of 1h, 24h, 7d" in r.text
    other = await client.get(f"/p/{seed.b.project_id}/stats")
    assert other.status_code == 404
