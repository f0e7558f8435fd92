"""The library API: App, @app.task, defer (in the caller's transaction), defer_sync, JobContext."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

import jobyard
from jobyard.db.pool import Conn, connect
from jobyard.domain.errors import ConfigurationError, ValidationFailed
from jobyard.worker.app import App
from jobyard.worker.context import JobContext
from tests.worker.helpers import PROJECT, eventually, job_status, rows, running_worker, scalar


def test_package_reexports_the_library_api() -> None:
    assert jobyard.App is App
    assert jobyard.JobContext is JobContext
    assert issubclass(jobyard.LeaseLost, jobyard.JobyardError)
    with pytest.raises(AttributeError):
        _ = jobyard.not_a_thing  # type: ignore[attr-defined]


async def test_defer_in_a_rolled_back_caller_transaction_leaves_no_job(db_url: str) -> None:
    app = App(project=PROJECT, database_url=db_url)

    @app.task
    async def send(ctx: JobContext, to: str) -> None: ...

    # First defer creates the project and queue (committed), the next ones reuse them.
    await send.defer(to="setup")
    conn = await connect(db_url)  # not autocommit: the caller owns a transaction
    try:
        deferred = await send.defer(conn=conn, to="a@example.com")
        assert deferred.created
        await conn.rollback()
        kept = await send.defer(conn=conn, to="b@example.com")
        await conn.commit()
    finally:
        await conn.close()
    check = await connect(db_url, autocommit=True)
    try:
        found = await rows(check, "SELECT id, payload FROM jobs ORDER BY id")
    finally:
        await check.close()
    assert [r["payload"] for r in found] == [{"to": "setup"}, {"to": "b@example.com"}]
    assert deferred.id not in {r["id"] for r in found}
    assert kept.id in {r["id"] for r in found}


def test_defer_sync_works_outside_any_event_loop(db_url: str) -> None:
    app = App(project=PROJECT, database_url=db_url)

    @app.task(queue="reports", priority=7, max_attempts=2, timeout=3, retry={"backoff": "fixed"})
    def build(ctx: JobContext, month: str) -> None: ...

    first = build.defer_sync(month="2026-11", idempotency_key="nov")
    again = build.defer_sync(month="2026-11", idempotency_key="nov")
    later = build.defer_sync(month="2026-12", delay=60)
    assert first.created and not again.created and again.id == first.id
    assert first.status == "queued" and later.status == "scheduled"

    async def stored() -> dict[str, Any]:
        conn = await connect(db_url, autocommit=True)
        try:
            (row,) = await rows(
                conn,
                "SELECT j.priority, j.max_attempts, j.timeout_ms, j.retry_override, q.name"
                " FROM jobs j JOIN queues q ON q.id = j.queue_id WHERE j.id = %s",
                first.id,
            )
            return row
        finally:
            await conn.close()

    assert asyncio.run(stored()) == {
        "priority": 7,
        "max_attempts": 2,
        "timeout_ms": 3000,
        "retry_override": {"backoff": "fixed"},
        "name": "reports",
    }


async def test_defer_sync_inside_a_running_loop_says_to_await(db_url: str) -> None:
    app = App(project=PROJECT, database_url=db_url)
    with pytest.raises(ConfigurationError, match="await"):
        app.defer_sync("noop")


def test_bad_task_options_fail_at_decoration_naming_the_field() -> None:
    app = App(project=PROJECT, database_url="postgresql://unused")
    with pytest.raises(ValidationFailed, match=r"retry\.backoff"):
        app.task(retry={"backoff": "sideways"})(lambda ctx: None)
    with pytest.raises(ValidationFailed, match="timeout"):
        app.task(timeout=-1)(lambda ctx: None)
    with pytest.raises(ValidationFailed, match="queue"):
        app.task(queue="no spaces allowed")(lambda ctx: None)
    with pytest.raises(ConfigurationError, match="JobContext"):
        app.task(lambda: None)


def test_a_payload_field_as_first_parameter_is_refused_at_decoration() -> None:
    """The payload goes in as keywords after the context: `def f(n: int)` could never run."""
    app = App(project=PROJECT, database_url="postgresql://unused")

    async def takes_n_first(n: int) -> None: ...

    # This module's annotations are strings (PEP 563); evaluated ones are judged the same way.
    async def evaluated(n): ...  # type: ignore[no-untyped-def]

    evaluated.__annotations__ = {"n": int}
    for fn in (takes_n_first, evaluated):
        with pytest.raises(ConfigurationError, match=r"first parameter 'n' is annotated int"):
            app.task(fn)

    # Unannotated, Any, or the context itself are all accepted.
    app.task(name="plain")(lambda ctx: None)

    async def typed(ctx: JobContext, n: int) -> None: ...

    async def as_any(ctx: Any, n: int) -> None: ...

    async def evaluated_ctx(ctx, n): ...  # type: ignore[no-untyped-def]

    evaluated_ctx.__annotations__ = {"ctx": JobContext, "n": int}
    for fn in (typed, as_any, evaluated_ctx):
        app.task(name=fn.__name__)(fn)


async def test_bad_defer_input_names_the_field(db_url: str) -> None:
    app = App(project=PROJECT, database_url=db_url)
    with pytest.raises(ValidationFailed, match="payload"):
        await app.defer("noop", {"blob": "x" * 70_000})
    with pytest.raises(ValidationFailed, match="delay"):
        await app.defer("noop", delay=-5)
    with pytest.raises(ValidationFailed, match="priority"):
        await app.defer("noop", priority=5000)
    # A Python value JSON has no form for: the field and the fix, never a bare TypeError.
    stamp = datetime.now(UTC)
    fix = r"payload: payload must be JSON: Object of type datetime .*\(convert it first"
    with pytest.raises(ValidationFailed, match=fix):
        await app.defer("noop", {"when": stamp})
    with pytest.raises(ValidationFailed, match=fix):
        await app.defer_many("noop", [{"when": stamp}])
    # An int Python will not write as text: said so, not "NaN and Infinity".
    with pytest.raises(ValidationFailed, match=r"an integer has more digits than Python will"):
        await app.defer("noop", {"n": 10**5000})
    # NUL, which no text or jsonb holds: the place named, as the API does.
    with pytest.raises(ValidationFailed, match=r"payload\.note\[1\]: must not contain the NUL"):
        await app.defer("noop", {"note": ["ok", "a\x00b"]})
    with pytest.raises(ValidationFailed, match=r"payloads\[1\]\.s: must not contain the NUL"):
        await app.defer_many("noop", [{"s": "fine"}, {"s": "\x00"}])
    nested: Any = []
    for _ in range(sys.getrecursionlimit() * 2):
        nested = [nested]
    with pytest.raises(ValidationFailed, match="payload cannot be stored: it is nested more than"):
        await app.defer("noop", {"nested": nested})


async def test_handler_signatures_ctx_only_and_payload_as_keywords(db_url: str, conn: Conn) -> None:
    app = App(project=PROJECT, database_url=db_url)
    seen: dict[str, Any] = {}

    @app.task
    async def ctx_only(ctx: JobContext) -> None:
        seen["ctx_only"] = ctx.payload

    @app.task
    async def keywords(ctx: JobContext, a: int, b: int = 2) -> int:
        seen["keywords"] = (a, b)
        return a + b

    @app.task
    def blocking(ctx: JobContext, n: int) -> dict[str, Any]:
        seen["blocking_thread"] = threading.current_thread().name
        return {"n": n * 2}

    class Resizer:
        """A callable object with an async __call__: run on the loop, like an async def."""

        async def __call__(self, ctx: JobContext, width: int) -> int:
            seen["callable_thread"] = threading.current_thread().name
            return width // 2

    resize = app.task(name="resize")(Resizer())
    a = await ctx_only.defer(x=1)
    b = await keywords.defer(a=40)
    c = await blocking.defer(n=21)
    d = await resize.defer(width=640)
    # Payload keys the handler does not declare: a permanent mismatch, not retried.
    bad = await keywords.defer(a=1, surprise=True)
    async with running_worker(db_url, app):
        for job in (a, b, c, d):
            await eventually(lambda job=job: _is(conn, job.id, "done"))
        await eventually(lambda: _is(conn, bad.id, "dead_letter"))
    assert seen["ctx_only"] == {"x": 1}
    assert seen["keywords"] == (40, 2)
    assert seen["blocking_thread"].startswith("jobyard-handler")
    assert await scalar(conn, "SELECT result FROM jobs WHERE id = %s", b.id) == 42
    assert await scalar(conn, "SELECT result FROM jobs WHERE id = %s", c.id) == {"n": 42}
    assert await scalar(conn, "SELECT result FROM jobs WHERE id = %s", d.id) == 320
    assert seen["callable_thread"] == "MainThread"
    error = await scalar(conn, "SELECT last_error FROM jobs WHERE id = %s", bad.id)
    assert error.startswith("ValidationFailed: payload does not fit handler 'keywords'")
    assert "surprise" in error


async def test_job_logger_writes_job_logs_from_async_and_thread_handlers(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)

    @app.task
    async def chatty(ctx: JobContext) -> None:
        await ctx.logger.info("starting", step=1)
        await ctx.logger.warning("halfway", step=2)

    @app.task
    def chatty_sync(ctx: JobContext) -> None:
        ctx.logger.error("from a thread", step=3)

    one = await chatty.defer()
    two = await chatty_sync.defer()
    async with running_worker(db_url, app):
        await eventually(lambda: _is(conn, one.id, "done"))
        await eventually(lambda: _is(conn, two.id, "done"))
    logged = await rows(
        conn,
        "SELECT job_id, execution_seq, level, message, fields FROM job_logs ORDER BY job_id, id",
    )
    assert logged == [
        {"job_id": one.id, "execution_seq": 1, "level": "info", "message": "starting",
         "fields": {"step": 1}},
        {"job_id": one.id, "execution_seq": 1, "level": "warning", "message": "halfway",
         "fields": {"step": 2}},
        {"job_id": two.id, "execution_seq": 1, "level": "error", "message": "from a thread",
         "fields": {"step": 3}},
    ]  # fmt: skip


async def test_context_carries_the_run_identity(db_url: str, conn: Conn) -> None:
    app = App(project=PROJECT, database_url=db_url)
    seen: list[tuple[Any, ...]] = []

    @app.task(max_attempts=4)
    async def who(ctx: JobContext) -> None:
        seen.append((ctx.job_id, ctx.attempt, ctx.execution_seq, ctx.max_attempts, ctx.queue))
        assert not ctx.is_cancelled() and not ctx.cancelled.is_set()

    job = await who.defer()
    async with running_worker(db_url, app):
        await eventually(lambda: _is(conn, job.id, "done"))
    assert seen == [(job.id, 1, 1, 4, "default")]


async def test_is_cancelled_reaches_a_thread_handler(db_url: str, conn: Conn) -> None:
    app = App(project=PROJECT, database_url=db_url)
    stopped = threading.Event()

    @app.task(timeout=0.5)
    def polite(ctx: JobContext) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if ctx.is_cancelled():
                stopped.set()
                return
            time.sleep(0.02)

    job = await polite.defer()
    async with running_worker(db_url, app):
        await eventually(lambda: _is(conn, job.id, "scheduled", "queued", "dead_letter"))
        await asyncio.to_thread(stopped.wait, 10)
    assert stopped.is_set()
    outcome = await scalar(
        conn, "SELECT outcome::text FROM job_executions WHERE job_id = %s", job.id
    )
    assert outcome == "timed_out"


async def _is(conn: Conn, job_id: int, *statuses: str) -> bool:
    return await job_status(conn, job_id) in statuses


async def test_an_open_app_reuses_its_pool_for_defers(db_url: str, conn: Conn) -> None:
    app = App(project=PROJECT, database_url=db_url)
    async with app:
        ids = [(await app.defer("noop", {"i": i})).id for i in range(3)]
    assert await scalar(conn, "SELECT count(*) FROM jobs WHERE id = ANY(%s)", ids) == 3


def test_a_task_may_not_take_a_built_in_handler_s_name() -> None:
    from jobyard.worker.commands import worker_registry

    app = App(project=PROJECT, database_url="postgresql://unused")

    @app.task(name="sleep")
    async def my_sleep(ctx: JobContext) -> None: ...

    with pytest.raises(ConfigurationError, match="clashes with the built-in"):
        worker_registry(app)
    with pytest.raises(ConfigurationError, match="already registered"):
        app.task(name="sleep")(lambda ctx: None)
