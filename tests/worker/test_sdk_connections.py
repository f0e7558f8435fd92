"""Transactional defer with the connections people have (issue 11, point 4).

For every kind — psycopg 3 async and sync with the default (tuple) row factory and with
dict_row, SQLAlchemy 2 Connection and AsyncConnection on psycopg — a defer inside the caller's
transaction: rolled back leaves no job, committed leaves exactly one, and before the commit a
worker's claim on another connection does not see it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import psycopg
import pytest
import sqlalchemy
from psycopg.rows import dict_row
from sqlalchemy.ext.asyncio import create_async_engine

from jobyard.core import claim, workers
from jobyard.db.pool import connect
from jobyard.domain.errors import ConfigurationError
from jobyard.domain.ids import ProjectId
from jobyard.worker.app import App, Task
from jobyard.worker.context import JobContext
from tests.worker.helpers import PROJECT, rows


class Caller(Protocol):
    """One kind of caller connection with an open transaction."""

    conn: Any

    async def commit(self) -> None: ...
    async def rollback(self) -> None: ...


class _Psycopg:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def commit(self) -> None:
        result = self.conn.commit()
        if result is not None:
            await result

    async def rollback(self) -> None:
        result = self.conn.rollback()
        if result is not None:
            await result


def _sa_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


@asynccontextmanager
async def psycopg_async(url: str, row_factory: Any) -> AsyncIterator[Caller]:
    kwargs = {"row_factory": row_factory} if row_factory else {}
    conn = await psycopg.AsyncConnection.connect(url, **kwargs)
    try:
        yield _Psycopg(conn)
    finally:
        await conn.close()


@asynccontextmanager
async def psycopg_sync(url: str, row_factory: Any) -> AsyncIterator[Caller]:
    kwargs = {"row_factory": row_factory} if row_factory else {}
    conn = psycopg.Connection.connect(url, **kwargs)
    try:
        yield _Psycopg(conn)
    finally:
        conn.close()


@asynccontextmanager
async def sqlalchemy_sync(url: str, _: Any) -> AsyncIterator[Caller]:
    engine = sqlalchemy.create_engine(_sa_url(url))
    try:
        with engine.connect() as conn:
            yield _Psycopg(conn)
    finally:
        engine.dispose()


@asynccontextmanager
async def sqlalchemy_async(url: str, _: Any) -> AsyncIterator[Caller]:
    engine = create_async_engine(_sa_url(url))
    try:
        async with engine.connect() as conn:
            yield _Psycopg(conn)
    finally:
        await engine.dispose()


KINDS = {
    "psycopg-async-tuple": (psycopg_async, None),
    "psycopg-async-dict": (psycopg_async, dict_row),
    "psycopg-sync-tuple": (psycopg_sync, None),
    "psycopg-sync-dict": (psycopg_sync, dict_row),
    "sqlalchemy-sync": (sqlalchemy_sync, None),
    "sqlalchemy-async": (sqlalchemy_async, None),
}


async def _app(db_url: str) -> tuple[App, Task]:
    app = App(project=PROJECT, database_url=db_url)

    @app.task(queue="mail")
    async def send(ctx: JobContext, to: str) -> None: ...

    # The project and queue exist (committed) before the caller's transactions start.
    await send.defer(to="setup")
    return app, send


async def _payloads(db_url: str) -> list[Any]:
    check = await connect(db_url, autocommit=True)
    try:
        found = await rows(check, "SELECT payload FROM jobs ORDER BY id")
    finally:
        await check.close()
    return [r["payload"] for r in found]


@pytest.mark.parametrize("kind", KINDS)
async def test_defer_then_rollback_leaves_no_job(db_url: str, kind: str) -> None:
    _, send = await _app(db_url)
    opener, factory = KINDS[kind]
    async with opener(db_url, factory) as caller:
        deferred = await send.defer(conn=caller.conn, to="gone@example.com")
        assert deferred.created and deferred.status == "queued"
        await caller.rollback()
    assert await _payloads(db_url) == [{"to": "setup"}]


@pytest.mark.parametrize("kind", KINDS)
async def test_defer_then_commit_leaves_exactly_one_job_unseen_by_a_claim_until_then(
    db_url: str, kind: str
) -> None:
    app, send = await _app(db_url)
    opener, factory = KINDS[kind]
    worker_conn = await connect(db_url, autocommit=True)
    try:
        project_id = ProjectId(await app.project_id(worker_conn))
        worker_id = await workers.register(
            worker_conn, project_id, name="w", queues=["mail"], concurrency=10
        )
        (queue,) = await claim.queues_by_names(worker_conn, project_id, ["mail"])
        # The setup job is claimed away first, so any later claim can only find the new one.
        assert len(await claim.claim_batch(worker_conn, queue, worker_id, 10, lease_s=30)) == 1
        async with opener(db_url, factory) as caller:
            deferred = await send.defer(conn=caller.conn, to="kept@example.com")
            before = await claim.claim_batch(worker_conn, queue, worker_id, 10, lease_s=30)
            assert before == [], "a worker claimed a job its caller had not committed"
            await caller.commit()
        after = await claim.claim_batch(worker_conn, queue, worker_id, 10, lease_s=30)
        assert [j.id for j in after] == [deferred.id]
    finally:
        await worker_conn.close()
    assert await _payloads(db_url) == [{"to": "setup"}, {"to": "kept@example.com"}]


def test_defer_sync_takes_a_blocking_connection(db_url: str) -> None:
    app = App(project=PROJECT, database_url=db_url)

    @app.task
    def build(ctx: JobContext, month: str) -> None: ...

    with psycopg.Connection.connect(db_url) as conn:  # default tuple rows, a transaction
        first = build.defer_sync(conn=conn, month="11")
        conn.rollback()
        kept = build.defer_sync(conn=conn, month="12")
        conn.commit()
    engine = sqlalchemy.create_engine(_sa_url(db_url))
    try:
        with engine.begin() as sa_conn:  # commits on leaving the block
            also = build.defer_sync(conn=sa_conn, month="01")
    finally:
        engine.dispose()
    with psycopg.Connection.connect(db_url, row_factory=dict_row) as check:
        found = check.execute("SELECT id, payload FROM jobs ORDER BY id").fetchall()
    assert [r["id"] for r in found] == [kept.id, also.id]
    assert first.id not in {r["id"] for r in found}


async def test_an_unknown_connection_kind_is_refused_with_what_is_accepted(db_url: str) -> None:
    _, send = await _app(db_url)
    with pytest.raises(ConfigurationError, match="psycopg 3 Connection or AsyncConnection"):
        await send.defer(conn=object(), to="x")
    async with psycopg_async(db_url, None) as caller:
        with pytest.raises(ConfigurationError, match="blocking connection"):
            send.defer_sync(conn=caller.conn, to="x")
