"""Handlers that misbehave in ways a worker must survive.

Each job below once escaped the worker's completion callback (or the event loop itself): the
job stayed `running` until its lease expired, or the worker process ended with every other run
in it. Now each is recorded as the job's own failure, and the jobs beside it finish.
"""

from __future__ import annotations

import sys
from typing import Any

from jobyard.db.pool import Conn
from jobyard.domain.limits import MAX_JSON_DEPTH
from jobyard.worker.app import App
from jobyard.worker.context import JobContext
from tests.worker.helpers import PROJECT, eventually, job_status, rows, running_worker, scalar


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for this one")


async def _final(conn: Conn, job_id: int) -> bool:
    return await job_status(conn, job_id) in ("done", "dead_letter")


async def test_a_misbehaving_handler_fails_its_own_job_and_the_worker_goes_on(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)

    @app.task(max_attempts=1)
    async def unprintable(ctx: JobContext) -> Any:
        raise UnprintableError()

    @app.task(max_attempts=1)
    async def too_deep(ctx: JobContext) -> Any:
        nested: Any = []
        for _ in range(sys.getrecursionlimit() * 2):
            nested = [nested]
        return nested

    @app.task(max_attempts=1)
    async def odd_fields(ctx: JobContext) -> Any:
        deep: Any = 1
        for _ in range(sys.getrecursionlimit() * 2):
            deep = [deep]
        await ctx.logger.info("fields JSON has no form for", nan=float("nan"), items={1}, deep=deep)
        await ctx.logger.info("fields larger than a line keeps", blob="x" * 20_000)

    @app.task(max_attempts=1)
    def exits(ctx: JobContext) -> Any:
        sys.exit(3)

    @app.task(max_attempts=1)
    async def exits_async(ctx: JobContext) -> Any:
        raise SystemExit(4)

    @app.task(max_attempts=1)
    async def interrupts(ctx: JobContext) -> Any:
        raise KeyboardInterrupt

    @app.task(max_attempts=1)
    async def fine(ctx: JobContext) -> Any:
        return 1

    tasks = (unprintable, too_deep, odd_fields, exits, exits_async, interrupts)
    jobs = {task.name: await task.defer() for task in tasks}
    neighbours = [await fine.defer() for _ in range(5)]
    async with running_worker(db_url, app):
        for job in [*jobs.values(), *neighbours]:
            await eventually(lambda job=job: _final(conn, job.id), timeout=20)
        # Still running: a job enqueued now is taken too.
        later = await fine.defer()
        await eventually(lambda: _final(conn, later.id), timeout=20)

    async def error(name: str) -> str:
        return str(await scalar(conn, "SELECT last_error FROM jobs WHERE id = %s", jobs[name].id))

    assert await error("unprintable") == (
        "UnprintableError: <the exception's str() failed: RuntimeError>"
    )
    assert await error("too_deep") == (
        "InvalidResult: the handler's result cannot be stored: "
        "it is nested more than 100 levels deep"
    )
    assert await error("exits") == "SystemExit: 3"
    assert await error("exits_async") == "SystemExit: 4"
    assert await error("interrupts") == "KeyboardInterrupt: KeyboardInterrupt()"
    for name in ("unprintable", "too_deep", "exits", "exits_async", "interrupts"):
        assert await job_status(conn, jobs[name].id) == "dead_letter", name
    assert await job_status(conn, jobs["odd_fields"].id) == "done"
    line, big = await rows(
        conn, "SELECT fields FROM job_logs WHERE job_id = %s ORDER BY id", jobs["odd_fields"].id
    )
    assert big["fields"] == {
        "fields_dropped": "20,012 bytes of fields, more than the 16 KB a log line keeps"
    }
    deep = line["fields"].pop("deep")
    assert line["fields"] == {"nan": "nan", "items": "{1}"}
    for _ in range(MAX_JSON_DEPTH - 1):  # the fields object is the first level
        (deep,) = deep
    assert deep == "[nested more than 100 levels deep]"
    for job in [*neighbours, later]:
        assert await job_status(conn, job.id) == "done"


async def test_a_result_the_database_refuses_fails_that_job_only(db_url: str, conn: Conn) -> None:
    """A rule only the database knows (here a test's own constraint on the result's domain):
    the success's completion is refused alone, and the job is recorded as InvalidResult
    instead of staying `running` until its lease expires (then again on every worker)."""
    await conn.execute(
        "ALTER DOMAIN job_result ADD CONSTRAINT test_no_forbidden CHECK (NOT VALUE ? 'forbidden')"
    )
    app = App(project=PROJECT, database_url=db_url)

    @app.task(max_attempts=3)
    async def refused(ctx: JobContext) -> Any:
        return {"forbidden": True}

    @app.task(max_attempts=1)
    async def fine(ctx: JobContext) -> Any:
        return {"ok": True}

    job = await refused.defer()
    neighbours = [await fine.defer() for _ in range(5)]
    async with running_worker(db_url, app):
        for each in [job, *neighbours]:
            await eventually(lambda each=each: _final(conn, each.id), timeout=20)
    assert await job_status(conn, job.id) == "dead_letter"
    error = str(await scalar(conn, "SELECT last_error FROM jobs WHERE id = %s", job.id))
    assert error == (
        "InvalidResult: the database refused the result: value out of range"
        " (constraint test_no_forbidden)"
    )
    for each in neighbours:
        assert await job_status(conn, each.id) == "done"
