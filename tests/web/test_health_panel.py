"""The overview's database-health panel: the oldest xmin holder's age and hot tables' dead-tuple
ratio, each with a warning past its configurable threshold (issue 15 point 6)."""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import Page, expect

from jobyard.db.pool import Conn, connect
from tests.web.conftest import Seed, screenshot_path, ui_sign_in

# The panel names the oldest holder of the horizon, which another test's xid of any database
# would be: with the horizon tests.
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("horizon")]


@pytest.fixture
def strict_health(monkeypatch: pytest.MonkeyPatch) -> None:
    # Read by the API process the `server` fixture starts after this one.
    monkeypatch.setenv("JOBYARD_HEALTH_XMIN_WARN_S", "1")
    monkeypatch.setenv("JOBYARD_HEALTH_DEAD_RATIO_WARN", "0.1")


async def test_a_held_xmin_and_dead_rows_raise_warnings(
    strict_health: None, page: Page, seed: Seed, conn: Conn, db_url: str
) -> None:
    await ui_sign_in(page, seed.a)
    await page.goto(f"/p/{seed.project}")
    panel = page.locator("#db-health")
    await expect(panel).to_be_visible()
    await expect(panel).not_to_have_class("card health warn")

    # The horizon is held before the rows die, so no vacuum can remove them before the panel
    # reads the counts (autovacuum did, once in CI: 0 dead, "vacuumed 1s ago").
    holder = await connect(db_url, application_name="forgotten-session")
    try:
        await holder.execute("SELECT txid_current()")  # holds the horizon, idle in transaction
        await conn.execute(
            "INSERT INTO jobs (project_id, queue_id, handler) SELECT %s, %s, 'bulk'"
            " FROM generate_series(1, 3000)",
            (seed.project, seed.queues["reports"]),
        )
        await conn.execute(  # 2000 dead of ~3070: over the 10 % threshold and the 1000-row floor
            "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE handler = 'bulk' LIMIT 2000)"
        )
        # Stats are flushed at most once a second; make this backend's next flush immediate.
        await conn.execute("SELECT pg_stat_force_next_flush()")
        await asyncio.sleep(1.5)
        await page.reload()
        await expect(panel).to_have_class("card health warn")
        await expect(panel).to_contain_text("forgotten-session")
        await expect(panel.locator("[role=alert]")).to_contain_text("held the xmin horizon")
        await expect(panel.locator("tr[data-relation='jobs']")).to_have_class("warn", timeout=8000)
        await page.screenshot(path=screenshot_path("overview-health-warning.png"), full_page=True)
    finally:
        await holder.rollback()
        await holder.close()
