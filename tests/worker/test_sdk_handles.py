"""SDK completeness: defer_many in one statement, job handles (status, result, cancel),
ctx.progress from a handler, a failed run's traceback recorded and logged, run_until_idle."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from jobyard.db.pool import Conn
from jobyard.domain.errors import (
    ConfigurationError,
    JobCancelled,
    JobFailed,
    ResultTimeout,
    ValidationFailed,
)
from jobyard.worker.app import App
from jobyard.worker.context import JobContext
from tests.worker.helpers import PROJECT, job_status, rows, running_worker, scalar


async def test_defer_many_inserts_every_job_in_one_batch_in_order(db_url: str, conn: Conn) -> None:
    app = App(project=PROJECT, database_url=db_url)

    @app.task(queue="mail", priority=3)
    async def send(ctx: JobContext, to: str) -> None: ...

    deferred = await send.defer_many([{"to": f"u{i}@example.com"} for i in range(5)])
    assert [d.status for d in deferred] == ["queued"] * 5
    found = await rows(
        conn,
        "SELECT j.id, j.payload, j.priority, j.batch_id, q.name FROM jobs j"
        " JOIN queues q ON q.id = j.queue_id ORDER BY j.id",
    )
    assert [r["id"] for r in found] == [d.id for d in deferred]
    assert [r["payload"]["to"] for r in found] == [f"u{i}@example.com" for i in range(5)]
    assert {(r["priority"], r["name"]) for r in found} == {(3, "mail")}
    assert len({r["batch_id"] for r in found}) == 1 and found[0]["batch_id"] is not None
    assert await send.defer_many([]) == []
    with pytest.raises(ValidationFailed, match="list of payloads"):
        await send.defer_many({"to": "x"})  # type: ignore[arg-type]
    with pytest.raises(ValidationFailed, match="payload"):
        await send.defer_many([{"to": "x" * 70_000}])
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 5


async def test_defer_many_with_a_delay_holds_every_job_back_by_the_database_clock(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)

    @app.task
    async def remind(ctx: JobContext, who: str) -> None: ...

    before = await scalar(conn, "SELECT now()")
    deferred = await remind.defer_many([{"who": "a"}, {"who": "b"}], delay=timedelta(minutes=2))
    after = await scalar(conn, "SELECT now()")
    assert [d.status for d in deferred] == ["scheduled"] * 2
    found = await rows(conn, "SELECT status::text, run_at FROM jobs ORDER BY id")
    assert {r["status"] for r in found} == {"scheduled"}
    assert len({r["run_at"] for r in found}) == 1  # one instant for the batch
    due = found[0]["run_at"]
    assert before + timedelta(minutes=2) <= due <= after + timedelta(minutes=2)
    now = await app.defer_many("remind", [{"who": "c"}], delay=0)
    assert [d.status for d in now] == ["queued"]
    with pytest.raises(ValidationFailed, match="run_at or delay, not both"):
        await remind.defer_many([{"who": "x"}], delay=5, run_at=due)
    with pytest.raises(ValidationFailed, match="non-negative number of seconds"):
        await remind.defer_many([{"who": "x"}], delay=-1)
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 3


async def test_a_handle_waits_for_the_result_and_reports_failure_and_cancel(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)

    @app.task
    async def add(ctx: JobContext, a: int, b: int) -> int:
        return a + b

    @app.task(max_attempts=1)
    async def broken(ctx: JobContext) -> None:
        raise RuntimeError("boom")

    ok = await add.defer(a=2, b=3)
    bad = await broken.defer()
    later = await add.defer(a=1, b=1, delay=3600)
    assert await ok.job.status() == "queued"
    with pytest.raises(ResultTimeout, match="still queued"):
        await ok.job.result(timeout=0.2)
    async with running_worker(db_url, app):
        assert await ok.job.result(timeout=20) == 5
        with pytest.raises(JobFailed, match="RuntimeError: boom"):
            await bad.job.result(timeout=20)
    assert await ok.job.status() == "done"
    assert await later.job.cancel() == "cancelled"
    with pytest.raises(JobCancelled):
        await later.job.result(timeout=1)
    # A job that already ended keeps its status; cancel says which.
    assert await app.job(ok.id).cancel() == "done"


def test_handles_have_blocking_flavours(db_url: str) -> None:
    app = App(project=PROJECT, database_url=db_url)

    @app.task
    def report(ctx: JobContext, month: str) -> None: ...

    deferred = report.defer_sync(month="11")
    handle = deferred.job
    assert handle.status_sync() == "queued"
    with pytest.raises(ResultTimeout):
        handle.result_sync(timeout=0.1)
    assert handle.cancel_sync() == "cancelled"
    assert app.job(deferred.id).status_sync() == "cancelled"


async def test_progress_from_async_and_thread_handlers_is_stored(db_url: str, conn: Conn) -> None:
    app = App(project=PROJECT, database_url=db_url)
    seen: list[str] = []

    async def _progress_message(job_id: int) -> str:
        (row,) = await rows(conn, "SELECT progress_message FROM jobs WHERE id = %s", job_id)
        return str(row["progress_message"])

    @app.task
    async def crunch(ctx: JobContext) -> None:
        await ctx.progress(0.5, "half way")
        with pytest.raises(ValidationFailed, match="from 0 to 1"):
            ctx.progress(1.5)
        # A long message is cut, as a log line is, never an error that fails the job; escaping
        # NUL lengthens a message that fitted, and the escapes are cut too.
        await ctx.progress(0.2, "x" * 501)
        seen.append(await _progress_message(ctx.job_id))
        await ctx.progress(0.3, "\x00" * 500)
        seen.append(await _progress_message(ctx.job_id))
        await ctx.progress(1)

    @app.task
    def crunch_sync(ctx: JobContext) -> None:
        ctx.progress(0.75, "from a thread")

    one = await crunch.defer()
    two = await crunch_sync.defer()
    outcomes = await app.run_until_idle()
    assert outcomes == {"succeeded": 2}
    assert seen == ["x" * 499 + "…", "\\x00" * 125], [len(m) for m in seen]
    stored = await rows(conn, "SELECT id, progress, progress_message FROM jobs ORDER BY id")
    assert stored == [
        {"id": one.id, "progress": 1.0, "progress_message": None},
        {"id": two.id, "progress": 0.75, "progress_message": "from a thread"},
    ]
    hand_made = JobContext(
        job_id=1, attempt=1, execution_seq=1, max_attempts=1, payload={}, queue="q",
        handler="h", logger=None,  # type: ignore[arg-type]
    )  # fmt: skip
    with pytest.raises(ConfigurationError, match="run by a worker"):
        hand_made.progress(0.5)


async def test_a_failing_handlers_traceback_is_stored_with_its_run_and_logged(
    db_url: str, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    app = App(project=PROJECT, database_url=db_url)

    def deep(n: int) -> None:
        if n == 0:
            raise RuntimeError("boom")
        deep(n - 1)

    @app.task(max_attempts=1)
    async def fails(ctx: JobContext) -> None:
        deep(3)

    job = await fails.defer()
    with caplog.at_level(logging.INFO, logger="jobyard.worker"):
        await app.run_until_idle()
    assert await job_status(conn, job.id) == "dead_letter"
    (run,) = await rows(
        conn, "SELECT error, traceback FROM job_executions WHERE job_id = %s", job.id
    )
    assert run["error"] == "RuntimeError: boom"
    tb = run["traceback"]
    assert tb.startswith("Traceback (most recent call last):")
    assert "in fails" in tb and tb.count("in deep") == 4
    assert tb.rstrip().endswith("RuntimeError: boom")
    # The worker's log line carries the same traceback (structlog hands the event as a dict).
    failed = [r.msg for r in caplog.records if isinstance(r.msg, dict)
              and r.msg.get("event") == "job failed"]  # fmt: skip
    assert len(failed) == 1 and "RuntimeError: boom" in failed[0]["traceback"]


async def test_run_until_idle_runs_retries_that_fall_due_and_stops_when_nothing_is_left(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    calls: list[int] = []

    # A 300 ms backoff: each retry is not due yet when the failed run ends, so only the
    # due_within window keeps run_until_idle from stopping before it (the CI flake at 10 ms).
    @app.task(retry={"backoff": "fixed", "base_delay_ms": 300, "jitter": False}, max_attempts=3)
    async def flaky(ctx: JobContext) -> str:
        calls.append(ctx.attempt)
        if ctx.attempt < 3:
            raise RuntimeError("not yet")
        return "ok"

    @app.task(queue="other")
    async def elsewhere(ctx: JobContext) -> None: ...

    job = await flaky.defer()
    other = await elsewhere.defer()
    outcomes = await app.drain("default")
    assert calls == [1, 2, 3]
    assert outcomes == {"failed": 2, "succeeded": 1}
    assert await job_status(conn, job.id) == "done"
    assert await job_status(conn, other.id) == "queued"  # another queue: not drained
    assert await app.run_until_idle() == {"succeeded": 1}
    later = await elsewhere.defer(delay=30)  # due after the window: not waited for
    assert await app.run_until_idle() == {}
    assert await job_status(conn, later.id) == "scheduled"


async def test_run_until_idle_gives_up_after_its_timeout(db_url: str) -> None:
    app = App(project=PROJECT, database_url=db_url)
    release = asyncio.Event()

    @app.task(timeout=30)
    async def slow(ctx: JobContext) -> None:
        await release.wait()

    await slow.defer()
    with pytest.raises(ResultTimeout, match="still running or due"):
        await app.run_until_idle(timeout=0.5)
    release.set()
