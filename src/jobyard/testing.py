"""Testing helpers for applications built on jobyard: a pytest plugin and assertions.

Enable the plugin in your project's top-level conftest.py:

    pytest_plugins = ["jobyard.testing"]

Fixtures
    jobyard_database_url  a fresh, migrated database for one test (dropped afterwards), cloned
                          in milliseconds from a template that is migrated once per schema.
                          The server is JOBYARD_TEST_DATABASE_URL if set, else an embedded
                          PostgreSQL kept in ./.jobyard/test-pgdata.

Helpers (async; the plugin needs pytest-asyncio or anyio to run async tests)
    await enqueued_jobs(task_or_app, queue=None)  the jobs waiting to run, oldest first
    await assert_enqueued(task, **payload)       the waiting job of `task` whose payload has
                                                 these items, or an AssertionError saying what
                                                 was enqueued instead
    await drain(app, queue)                      run that queue's jobs in-process until none is
                                                 left (same as `await app.drain(queue)`;
                                                 `await app.run_until_idle()` runs every queue)

Jobs run through the real worker (claim, run, retry, record), on real PostgreSQL: no fakes.
docs/TESTING_YOUR_APP.md walks through an example project's tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from jobyard.core import outcomes
from jobyard.db import testing as dbtesting
from jobyard.worker.app import App, Task

__all__ = [
    "EnqueuedJob",
    "assert_enqueued",
    "drain",
    "enqueued_jobs",
    "jobyard_database_url",
]

# Clones made by this plugin; distinct from jobyard's own suite so neither drops the other's.
CLONE_PREFIX = "jy_app_t_"


@dataclass(frozen=True)
class EnqueuedJob:
    id: int
    handler: str
    queue: str
    payload: Any
    status: str
    priority: int
    run_at: datetime


@pytest.fixture(scope="session")
def jobyard_test_server_url() -> str:
    """The PostgreSQL server the test databases live on (an admin URL)."""
    return dbtesting.server_url(os.environ.get("JOBYARD_TEST_DATABASE_URL"))


@pytest.fixture(scope="session")
def jobyard_template(jobyard_test_server_url: str) -> str:
    """A database migrated to jobyard's schema, cloned by every test."""
    return dbtesting.ensure_template(jobyard_test_server_url)


@pytest.fixture
def jobyard_database_url(jobyard_test_server_url: str, jobyard_template: str) -> Iterator[str]:
    """A fresh migrated database for this test, dropped when it ends."""
    url = dbtesting.create_clone(jobyard_test_server_url, jobyard_template, CLONE_PREFIX)
    try:
        yield url
    finally:
        dbtesting.drop_database(jobyard_test_server_url, url)


async def enqueued_jobs(
    of: Task | App, *, queue: str | None = None, limit: int = 1000
) -> list[EnqueuedJob]:
    """Jobs waiting to run (queued, scheduled or waiting) of a task, or of every task of an app."""
    app, handler = (of.app, of.name) if isinstance(of, Task) else (of, None)
    async with app.connection() as conn:
        project_id = await app.project_id(conn)
        found = await outcomes.enqueued_jobs(
            conn, project_id, handler=handler, queue=queue, limit=limit
        )
    return [
        EnqueuedJob(
            id=int(r["id"]),
            handler=str(r["handler"]),
            queue=str(r["queue"]),
            payload=r["payload"],
            status=str(r["status"]),
            priority=int(r["priority"]),
            run_at=r["run_at"],
        )
        for r in found
    ]


async def assert_enqueued(task: Task, /, **payload: Any) -> EnqueuedJob:
    """The oldest waiting job of `task` whose payload contains these items; AssertionError
    (listing what `task` has waiting) if there is none."""
    waiting = await enqueued_jobs(task)
    for job in waiting:
        if isinstance(job.payload, dict) and all(
            k in job.payload and job.payload[k] == v for k, v in payload.items()
        ):
            return job
    seen = ", ".join(repr(j.payload) for j in waiting[:10]) or "nothing"
    raise AssertionError(
        f"no waiting job of task {task.name!r} has payload items {payload!r}; it has {seen}"
    )


async def drain(
    app: App,
    queue: str,
    *,
    timeout: float = 60.0,  # noqa: ASYNC109 - a whole run, not one await
    due_within: float = 1.0,
) -> dict[str, int]:
    """Run `queue`'s jobs with a real in-process worker until none is due; runs per outcome."""
    return await app.drain(queue, timeout=timeout, due_within=due_within)
