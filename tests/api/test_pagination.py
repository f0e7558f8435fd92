"""Keyset pagination over the real app: every row exactly once, even while rows are inserted."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from jobyard.db.pool import Conn
from tests.api.conftest import Tenant
from tests.api.engine_helpers import base, error_fields, error_of, make_queue, owner, scalar

ROWS = 1_200


async def _insert_jobs(conn: Conn, project_id: int, queue_id: int, n: int) -> None:
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status)
           SELECT %s, %s, 'h', 'queued' FROM generate_series(1, %s)""",
        (project_id, queue_id, n),
    )


async def _walk(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    *,
    limit: int,
    params: dict[str, Any] | None = None,
    between: Any = None,
) -> tuple[list[int], int]:
    """Follow next_cursor to the end; `between` runs after each page. Returns (ids, pages)."""
    seen: list[int] = []
    cursor: str | None = None
    pages = 0
    while True:
        query = {**(params or {}), "limit": limit}
        if cursor:
            query["cursor"] = cursor
        r = await client.get(url, params=query, headers=headers)
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["items"]) <= limit
        seen.extend(item["id"] for item in body["items"])
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return seen, pages
        if between is not None:
            await between()


async def test_walking_1200_jobs_gives_each_exactly_once_newest_first(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    queue = await make_queue(client, tenant_a)
    await _insert_jobs(conn, tenant_a.project_id, queue["id"], ROWS)
    expected = [
        r["id"]
        for r in await (await conn.execute("SELECT id FROM jobs ORDER BY id DESC")).fetchall()
    ]
    seen, pages = await _walk(client, f"{base(tenant_a)}/jobs", owner(tenant_a), limit=100)
    assert pages == 12  # 1200 / 100: the last full page ends with next_cursor null
    assert seen == expected  # no gap, no duplicate, in order


async def test_rows_inserted_between_pages_neither_shift_nor_repeat_the_originals(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    queue = await make_queue(client, tenant_a)
    await _insert_jobs(conn, tenant_a.project_id, queue["id"], ROWS)
    original = {r["id"] for r in await (await conn.execute("SELECT id FROM jobs")).fetchall()}

    async def insert_more() -> None:
        # New jobs land at the head of a newest-first list; with OFFSET they would push
        # already-served rows onto the next page (duplicates).
        await _insert_jobs(conn, tenant_a.project_id, queue["id"], 37)

    seen, _ = await _walk(
        client, f"{base(tenant_a)}/jobs", owner(tenant_a), limit=150, between=insert_more
    )
    assert len(seen) == len(set(seen)), "a row was served twice"
    assert seen == sorted(seen, reverse=True)
    assert set(seen) == original, "an original row was skipped (or a new one leaked in)"
    assert await scalar(conn, "SELECT count(*) FROM jobs") > ROWS


async def test_filtered_walk_stays_stable_under_inserts(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    queue = await make_queue(client, tenant_a)
    await _insert_jobs(conn, tenant_a.project_id, queue["id"], 1_050)
    await conn.execute("UPDATE jobs SET status = 'scheduled' WHERE id % 3 = 0")
    wanted = {
        r["id"]
        for r in await (
            await conn.execute("SELECT id FROM jobs WHERE status = 'queued'")
        ).fetchall()
    }

    async def churn() -> None:
        await _insert_jobs(conn, tenant_a.project_id, queue["id"], 11)

    seen, _ = await _walk(
        client,
        f"{base(tenant_a)}/jobs",
        owner(tenant_a),
        limit=200,
        params={"status": "queued", "queue": "default"},
        between=churn,
    )
    assert len(seen) == len(set(seen)) and set(seen) == wanted


async def test_log_lines_written_while_reading_appear_once_at_the_end(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    queue = await make_queue(client, tenant_a)
    job_id = await scalar(
        conn,
        "INSERT INTO jobs (project_id, queue_id, handler) VALUES (%s, %s, 'h') RETURNING id",
        tenant_a.project_id,
        queue["id"],
    )

    # A run logs while it is in flight, before its execution row exists; lines need only the job.
    async def log(n: int) -> None:
        await conn.execute(
            """INSERT INTO job_logs (job_id, execution_seq, message)
               SELECT %s, 1, 'line ' || i FROM generate_series(1, %s) i""",
            (job_id, n),
        )

    await log(1_001)
    appended = 0

    async def tail() -> None:
        nonlocal appended
        await log(5)
        appended += 5

    seen, _ = await _walk(
        client, f"{base(tenant_a)}/jobs/{job_id}/logs", owner(tenant_a), limit=200, between=tail
    )
    everything = [
        r["id"]
        for r in await (await conn.execute("SELECT id FROM job_logs ORDER BY id")).fetchall()
    ]
    # Oldest first: lines appended meanwhile are picked up at the end, none twice or lost.
    assert seen == everything and len(seen) == 1_001 + appended


@pytest.mark.parametrize(
    "cursor", ["not-base64!", "bm90IGpzb24", "WzEsMiwzXQ", "WyJhIiwieCJd", "x" * 600]
)
async def test_a_cursor_the_api_did_not_issue_is_422_naming_cursor(
    client: httpx.AsyncClient, tenant_a: Tenant, cursor: str
) -> None:
    r = await client.get(
        f"{base(tenant_a)}/jobs", params={"cursor": cursor}, headers=owner(tenant_a)
    )
    err = error_of(r, 422, "validation_error")
    assert error_fields(err) & {"cursor", "query.cursor"}


async def test_limit_out_of_range_is_422(client: httpx.AsyncClient, tenant_a: Tenant) -> None:
    for limit in (0, 201, -1):
        r = await client.get(
            f"{base(tenant_a)}/dead-letters", params={"limit": limit}, headers=owner(tenant_a)
        )
        assert error_fields(error_of(r, 422)) == {"query.limit"}
