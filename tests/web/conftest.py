"""Dashboard fixtures: seeded data, the app over ASGI (httpx), a real API process, and Chromium.

- `seed`: two tenants (tests/api make_tenant: one user per role, the fixture password); tenant
  A has queues default/critical/reports, 60 queued jobs, 2 delayed ones, a job with a failed run
  and log lines, a finished job, a dead letter, a worker and a schedule.
- `client`: httpx over ASGI against `create_app` (fast checks of CSRF, roles and cookies).
- `server`: `python -m jobyard api` on a free loopback port (uvicorn running create_app).
- `page`: a fresh Chromium page (Debian's /usr/bin/chromium, never a downloaded browser).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright

from jobyard.core import admin, enqueue, transitions
from jobyard.core.auth import SigningKeys
from jobyard.core.schedules import ScheduleFields, create_schedule
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import ProjectId
from jobyard.domain.schemas import JobCreate
from tests.api import conftest as api_fixtures
from tests.api.conftest import FIXTURE_PASSWORD, Tenant, make_tenant
from tests.api.engine_helpers import claim_one, dead_letter, make_worker
from tests.api.processes import ApiProcess, api_process

# The API tests' fixtures, reused: the app on this test's database, its pool, settings and keys.
api_settings = api_fixtures.api_settings
api_pool = api_fixtures.api_pool
app = api_fixtures.app
signing_keys = api_fixtures.signing_keys

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
RESULTS = Path(__file__).resolve().parents[2] / "test-results"
# Shown verbatim (escaped) by the job page; would run if anything rendered it unescaped.
HOSTILE = "<script>document.title='pwned'</script><b>bold?</b>"


@dataclass
class Seed:
    a: Tenant
    b: Tenant
    queues: dict[str, int]
    failed_job_id: int
    done_job_id: int
    queued_job_id: int
    dlq_id: int
    worker_id: int

    @property
    def project(self) -> int:
        return self.a.project_id


async def scalar(conn: Conn, query: str, *args: Any) -> Any:
    cur = await conn.execute(query, args)  # type: ignore[arg-type]
    row = await cur.fetchone()
    assert row is not None
    return next(iter(row.values()))


@pytest.fixture
async def seed(conn: Conn, signing_keys: SigningKeys) -> Seed:
    a = await make_tenant(conn, signing_keys, "a")
    b = await make_tenant(conn, signing_keys, "b")
    pid = ProjectId(a.project_id)
    queues = {}
    for name in ("default", "critical", "reports"):
        queues[name] = (await admin.create_queue(conn, pid, name=name))["id"]
    await admin.create_queue(conn, ProjectId(b.project_id), name="b-only-queue")
    worker = await make_worker(conn, a.project_id)
    await conn.execute("UPDATE workers SET queues = '{default,critical}' WHERE id = %s", (worker,))

    # A job that ran once, wrote logs and failed (retry scheduled later).
    await enqueue.enqueue(
        conn,
        pid,
        JobCreate(queue="critical", handler="charge", payload={"note": HOSTILE}, max_attempts=3),
    )
    held = await claim_one(conn, a.project_id, worker, "critical")
    await transitions.append_log(conn, held, "info", "charging card ending 4242")
    await transitions.append_log(conn, held, "error", "gateway said <declined>")
    await transitions.fail(conn, held, "CardError", "card declined by issuer")
    # A job that succeeded.
    await enqueue.enqueue(conn, pid, JobCreate(queue="critical", handler="noop"))
    done = await claim_one(conn, a.project_id, worker, "critical")
    await transitions.complete_many(conn, [done])
    # A dead letter (its own job, max_attempts=1).
    dlq_id = await dead_letter(conn, a.project_id, worker, queue="default", payload={"n": 1})
    # 60 queued jobs (more than one explorer page), 2 delayed ones.
    for i in range(60):
        await enqueue.enqueue(
            conn, pid, JobCreate(queue="default", handler="noop", payload={"i": i})
        )
    for _ in range(2):
        await enqueue.enqueue(
            conn, pid, JobCreate(queue="reports", handler="report", delay_ms=3_600_000)
        )
    queued = await scalar(
        conn, "SELECT max(id) FROM jobs WHERE project_id = %s AND status = 'queued'", pid
    )
    await create_schedule(
        conn,
        pid,
        ScheduleFields(
            name="nightly",
            queue_id=queues["reports"],
            cron="0 3 * * *",
            timezone="Europe/Paris",
            handler="report",
        ),
    )
    return Seed(a, b, queues, held.id, done.id, queued, dlq_id, worker)


# ----------------------------------------------------------------------------- httpx (ASGI)


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://testserver", headers={"Origin": "http://testserver"}
    ) as c:
        yield c


def form_token(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None, "no CSRF token in the page"
    return found.group(1)


async def sign_in(client: httpx.AsyncClient, tenant: Tenant, role: Role) -> str:
    """Sign in through the login form; returns the session's CSRF token (cookies in `client`)."""
    page = await client.get("/login")
    response = await client.post(
        "/login",
        data={
            "email": tenant.users[role].email,
            "password": FIXTURE_PASSWORD,
            "csrf_token": form_token(page.text),
        },
    )
    assert response.status_code == 303, response.text
    projects = await client.get("/projects")
    assert projects.status_code == 200
    return form_token(projects.text)


# ----------------------------------------------------------------------------- real process + Chromium


@pytest.fixture
def server(db_url: str, tmp_path: Path, seed: Seed) -> Iterator[ApiProcess]:
    with api_process(db_url, tmp_path, log_level="warning") as api:
        yield api


def _chromium_missing() -> bool:
    return not Path(CHROMIUM).exists()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if _chromium_missing():
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (Debian's chromium package)")
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
async def page(browser: Browser, server: ApiProcess) -> AsyncIterator[Page]:
    context = await browser.new_context(
        base_url=server.base_url, viewport={"width": 1360, "height": 900}
    )
    p = await context.new_page()
    try:
        yield p
    finally:
        await context.close()


async def ui_sign_in(page: Page, tenant: Tenant, role: Role = Role.OWNER) -> None:
    await page.goto("/login")
    await page.fill("input[name=email]", tenant.users[role].email)
    await page.fill("input[name=password]", FIXTURE_PASSWORD)
    await page.click("button[type=submit]")
    await page.wait_for_url("**/projects")


def screenshot_path(name: str) -> str:
    RESULTS.mkdir(exist_ok=True)
    return str(RESULTS / name)
