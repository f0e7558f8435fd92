"""The worker runtime in-process against a real PostgreSQL: retries, timeouts, cancels, fencing,
wake-up, batching, queue order, drain and re-registration."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from jobyard.core import claim, maintenance, transitions
from jobyard.core.enqueue import enqueue_batch
from jobyard.db.pool import Conn, connect
from jobyard.domain.errors import LeaseLost
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.schemas import BatchCreate, BatchItem
from jobyard.worker.app import App
from jobyard.worker.context import JobContext
from tests.factories import make_worker
from tests.worker.helpers import (
    PROJECT,
    eventually,
    executions,
    job_status,
    maintenance_loop,
    rows,
    running_worker,
    scalar,
)

NO_WAIT_RETRY = {"backoff": "fixed", "base_delay_ms": 0, "jitter": False}


async def _is(conn: Conn, job_id: int, *statuses: str) -> bool:
    return await job_status(conn, job_id) in statuses


async def test_failing_twice_then_succeeding_ends_done_with_three_executions(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    calls: list[int] = []

    @app.task(retry=NO_WAIT_RETRY, max_attempts=5)
    async def flaky(ctx: JobContext) -> str:
        calls.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionResetError(f"upstream reset on attempt {ctx.attempt}")
        return "ok"

    job = await flaky.defer(secret="do-not-log")
    async with running_worker(db_url, app), maintenance_loop(db_url):
        await eventually(lambda: _is(conn, job.id, "done"))
    assert calls == [1, 2, 3]
    runs = await executions(conn, job.id)
    assert [(r["execution_seq"], r["attempt"], r["outcome"]) for r in runs] == [
        (1, 1, "failed"),
        (2, 2, "failed"),
        (3, 3, "succeeded"),
    ]
    # The error is the exception's type and message; the payload never appears in it.
    assert runs[0]["error"] == "ConnectionResetError: upstream reset on attempt 1"
    assert all("do-not-log" not in (r["error"] or "") for r in runs)


async def test_a_handler_past_its_timeout_is_cancelled_and_recorded_timed_out(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    cancelled = asyncio.Event()

    @app.task(timeout=0.3, max_attempts=1)
    async def slow(ctx: JobContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job = await slow.defer()
    async with running_worker(db_url, app):
        await eventually(lambda: _is(conn, job.id, "dead_letter"))
    assert cancelled.is_set()
    assert [r["outcome"] for r in await executions(conn, job.id)] == ["timed_out"]
    assert await scalar(conn, "SELECT reason::text FROM dead_letter_jobs") == "timed_out"


async def test_a_handler_that_ignores_cancellation_is_abandoned_and_its_timeout_recorded(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    release = asyncio.Event()
    swallowed: list[int] = []

    @app.task(timeout=0.2, max_attempts=1)
    async def stubborn(ctx: JobContext) -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                swallowed.append(1)  # refuses to stop

    job = await stubborn.defer()
    async with running_worker(db_url, app) as worker:
        # Recorded once the runtime gives up waiting for it (CANCEL_WAIT_S), not never.
        await eventually(lambda: _is(conn, job.id, "dead_letter"), timeout=15)
        assert worker.abandoned == 1
        assert worker.outcomes == {"timed_out": 1}
        release.set()  # let it end, so the drain below leaves nothing behind
    assert swallowed == [1]
    assert [r["outcome"] for r in await executions(conn, job.id)] == ["timed_out"]


async def test_cancel_of_a_running_job_reaches_the_handler_and_ends_cancelled(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    started = asyncio.Event()
    saw_cancel = asyncio.Event()

    @app.task
    async def long(ctx: JobContext) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            if ctx.cancelled.is_set():
                saw_cancel.set()
            raise

    job = await long.defer()
    # A long heartbeat: the cancel must arrive by NOTIFY on jobyard_cancel.
    async with running_worker(db_url, app, heartbeat_interval_s=20, lease_s=60):
        await asyncio.wait_for(started.wait(), 20)
        project = ProjectId(await scalar(conn, "SELECT project_id FROM jobs WHERE id = %s", job.id))
        requested = await transitions.cancel(conn, project, job.id)
        assert requested is not None and requested["status"] == "running"
        await eventually(lambda: _is(conn, job.id, "cancelled"), timeout=10)
    assert saw_cancel.is_set()
    assert [r["outcome"] for r in await executions(conn, job.id)] == ["cancelled"]


async def test_cancel_requested_without_a_notification_arrives_with_the_heartbeat(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    started = asyncio.Event()

    @app.task
    async def long(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(30)

    job = await long.defer()
    async with running_worker(db_url, app):
        await asyncio.wait_for(started.wait(), 20)
        # As if the NOTIFY were lost: only the row says so.
        await conn.execute("UPDATE jobs SET cancel_requested_at = now() WHERE id = %s", (job.id,))
        await eventually(lambda: _is(conn, job.id, "cancelled"), timeout=10)
    assert [r["outcome"] for r in await executions(conn, job.id)] == ["cancelled"]


async def _reap_now(conn: Conn, job_id: int) -> None:
    """Expire one lease and reap it in one transaction (a heartbeat cannot slip in between)."""
    async with conn.transaction():
        await conn.execute(
            "UPDATE jobs SET lock_expires_at = now() - interval '1 second' WHERE id = %s",
            (job_id,),
        )
        reaped = await maintenance.reap_expired_leases(conn)
    assert reaped.requeued == 1


async def test_a_stale_worker_learns_at_its_next_heartbeat_and_its_handler_is_cancelled(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    first_run = asyncio.Event()
    first_cancelled = asyncio.Event()

    @app.task
    async def job_fn(ctx: JobContext) -> str:
        if ctx.execution_seq > 1:
            return "second run"
        first_run.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            first_cancelled.set()
            raise
        return "never"

    job = await job_fn.defer()
    # Concurrency 1: the stale run fills the worker, so only the heartbeat can tell it.
    async with running_worker(db_url, app, concurrency=1) as stale:
        await asyncio.wait_for(first_run.wait(), 20)
        await _reap_now(conn, job.id)
        # The next heartbeat (every 0.3 s) reports the lease lost: the handler is cancelled.
        await asyncio.wait_for(first_cancelled.wait(), 10)
        await eventually(lambda: _is(conn, job.id, "done"))
    assert stale.outcomes.get("lease_lost") == 1
    runs = await executions(conn, job.id)
    assert [(r["outcome"], r["attempt_charged"]) for r in runs] == [
        ("lease_lost", False),
        ("succeeded", True),
    ]
    assert await scalar(conn, "SELECT attempt FROM jobs WHERE id = %s", job.id) == 1


async def test_a_stale_worker_cannot_complete_fail_or_log(db_url: str, conn: Conn) -> None:
    app = App(project=PROJECT, database_url=db_url)
    go = asyncio.Event()
    reached: dict[str, int] = {}
    log_errors: list[str] = []

    @app.task
    async def returns(ctx: JobContext) -> str:
        await ctx.logger.info("before the lease was lost")
        reached["returns"] = ctx.job_id
        await go.wait()
        try:
            await ctx.logger.info("after the lease was lost")
        except LeaseLost as exc:
            log_errors.append(exc.code)
        return "stale result"

    @app.task
    async def raises(ctx: JobContext) -> None:
        reached["raises"] = ctx.job_id
        await go.wait()
        raise RuntimeError("stale failure")

    a = await returns.defer()
    b = await raises.defer()
    # No heartbeat during the test and no free slot to re-claim the jobs, so nothing tells the
    # stale worker: it goes on to record, and is refused.
    async with running_worker(
        db_url, app, heartbeat_interval_s=30, lease_s=60, concurrency=2
    ) as stale:
        await eventually(lambda: _ready(reached))
        project = ProjectId(await scalar(conn, "SELECT project_id FROM jobs WHERE id = %s", a.id))
        for job_id in (a.id, b.id):
            await _reap_now(conn, job_id)
        # Another worker claims both (new execution_seq) while the stale handlers still run.
        other = WorkerId((await make_worker(conn, project_id=project))["id"])
        (queue,) = await claim.queues_by_names(conn, project, ["default"])
        # Reaped, both are suspects now: each is claimed alone (solo), one claim each.
        taken = [
            job
            for _ in range(2)
            for job in (await claim.claim(conn, queue, other, 10, lease_s=60, solo=True)).jobs
        ]
        assert {j.id for j in taken} == {a.id, b.id}
        assert all(j.suspect for j in taken)
        await transitions.start_many(conn, taken)
        go.set()
        await eventually(lambda: _settled(stale, 2))
    assert log_errors == ["lease_lost"]
    assert stale.outcomes == {"lease_lost": 2}
    for job_id in (a.id, b.id):
        state = await rows(
            conn,
            "SELECT status::text, worker_id, execution_seq, result FROM jobs WHERE id = %s",
            job_id,
        )
        assert state == [{"status": "running", "worker_id": other, "execution_seq": 2,
                          "result": None}]  # fmt: skip
        # The lost run is recorded; the other worker's run is in flight on the job row above.
        assert [r["outcome"] for r in await executions(conn, job_id)] == ["lease_lost"]
    logged = await rows(conn, "SELECT message FROM job_logs")
    assert logged == [{"message": "before the lease was lost"}]


async def _ready(reached: dict[str, int]) -> bool:
    return len(reached) == 2


async def _settled(worker: Any, n: int) -> bool:
    return sum(worker.outcomes.values()) >= n


async def test_an_idle_worker_wakes_on_notify_long_before_its_poll_interval(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    poll_s = 30.0
    async with running_worker(db_url, app, poll_interval_s=poll_s) as worker:
        await asyncio.wait_for(worker.listening.wait(), 20)
        await asyncio.sleep(0.3)  # let the claim the LISTEN connect triggered go idle
        job = await app.defer("noop")
        started = time.monotonic()
        await eventually(lambda: _is(conn, job.id, "done"), timeout=10)
        waited = time.monotonic() - started
    # Polling alone would take up to 30 s; the 10 s budget above already proves the NOTIFY.
    assert waited < poll_s


async def test_a_limit_below_the_worker_s_concurrency_claims_again_as_each_job_finishes(
    db_url: str, conn: Conn
) -> None:
    """A queue limited to 2, a worker of concurrency 10 that polls every 30 s, 30 queued jobs
    and no NOTIFY to come. Each claim finds the limit used up with room left in the worker, so
    only the finished runs can tell it to claim again; waiting for the poll would take 7 min."""
    app = App(project=PROJECT, database_url=db_url)
    in_flight = 0
    most = 0

    @app.task(queue="limited")
    async def step(ctx: JobContext) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1

    jobs = [await step.defer() for _ in range(30)]
    await conn.execute("UPDATE queues SET max_concurrency = 2 WHERE name = 'limited'")
    async with running_worker(
        db_url, app, queues=("limited",), concurrency=10, poll_interval_s=30.0
    ):
        for job in jobs:
            await eventually(lambda job=job: _is(conn, job.id, "done"), timeout=20)
    assert most == 2


async def test_a_worker_started_on_a_backlog_locks_only_the_jobs_it_claims(
    db_url: str, conn: Conn
) -> None:
    """10,000 jobs enqueued at once, before any statistics of the ready set know of them, then
    a worker of concurrency 50 whose handlers do not finish: its one claim takes 50. On the
    statistics from before the backlog that claim would sort all of it and lock every queued
    job on the way (a lock-only xmax on 9,950 rows; with n = 10 the planner still walks the
    index); the worker's first round refreshes the statistics first, so it locks what it
    takes."""
    app = App(project=PROJECT, database_url=db_url)
    release = asyncio.Event()

    @app.task()
    async def hold(ctx: JobContext) -> None:
        await release.wait()

    await hold.defer()  # creates the project and the queue
    project = ProjectId(await scalar(conn, "SELECT id FROM projects"))
    backlog = [BatchItem(handler="hold")] * 9_999
    await enqueue_batch(conn, project, BatchCreate(queue="default", jobs=backlog))

    async def counters_published() -> bool:
        # The server publishes a backend's change counters up to a second after its commit;
        # the refresh reads them.
        changed = await scalar(
            conn,
            """SELECT coalesce(sum(n_mod_since_analyze), 0) FROM pg_stat_user_tables
               WHERE relname ~ '^job_ready_[0-9]+$'""",
        )
        return int(changed) >= 10_000

    await eventually(counters_published, timeout=15)
    async with running_worker(db_url, app, concurrency=50, poll_interval_s=30.0):

        async def all_slots_running() -> bool:
            return await scalar(conn, "SELECT count(*) FROM jobs WHERE status = 'running'") == 50

        await eventually(all_slots_running, timeout=20)
        locked_not_taken = await scalar(
            conn, "SELECT count(*) FROM jobs WHERE status = 'queued' AND xmax::text <> '0'"
        )
        release.set()
    assert locked_not_taken == 0


async def test_successes_are_recorded_in_batches(db_url: str, conn: Conn) -> None:
    app = App(project=PROJECT, database_url=db_url)
    await app.defer("noop")  # creates project and queue
    project = ProjectId(await scalar(conn, "SELECT id FROM projects"))
    n = 400
    await enqueue_batch(
        conn, project, BatchCreate(queue="default", jobs=[BatchItem(handler="noop")] * n)
    )
    started = time.monotonic()
    async with running_worker(db_url, app, concurrency=20) as worker:
        await eventually(lambda: _count_done(conn, n + 1), timeout=60, interval=0.1)
        elapsed = time.monotonic() - started
        assert worker._completer is not None
        statements = worker._completer.statements
    print(f"\n{n + 1} noop jobs in {elapsed:.2f} s with {statements} complete statements")
    assert statements <= (n + 1) / 2


async def test_a_success_awaiting_its_record_frees_its_handler_slot_up_to_concurrency_more(
    db_url: str, conn: Conn
) -> None:
    """The next claim overlaps the completion statement, but a database that cannot record
    completions still stops the worker claiming: at most 2 x concurrency runs held."""
    app = App(project=PROJECT, database_url=db_url)
    await app.defer("noop")  # creates project and queue
    project = ProjectId(await scalar(conn, "SELECT id FROM projects"))
    concurrency, n = 5, 30
    await enqueue_batch(
        conn, project, BatchCreate(queue="default", jobs=[BatchItem(handler="noop")] * (n - 1))
    )
    blocker = await connect(db_url)
    # Completions write job_executions; a SHARE lock blocks them and nothing a claim does.
    await blocker.execute("LOCK TABLE job_executions IN SHARE MODE")
    held = "SELECT count(*) FROM jobs WHERE status = 'running'"
    try:
        async with running_worker(db_url, app, concurrency=concurrency) as worker:
            try:
                # Settles once claiming stops; then wait a while longer for any further claim.
                seen = await _settled_count(conn, held, quiet_s=0.5, timeout_s=20)
                recording = worker._recording
                done = int(await scalar(conn, "SELECT count(*) FROM jobs WHERE status = 'done'"))
            finally:
                await blocker.rollback()  # never leave the drain below waiting on the lock
            assert (seen, recording, done) == (2 * concurrency, 2 * concurrency, 0)
            await eventually(lambda: _count_done(conn, n), timeout=30, interval=0.1)
    finally:
        await blocker.close()
    assert int(await scalar(conn, "SELECT count(*) FROM job_executions")) == n
    assert worker.outcomes == {"succeeded": n}


async def _settled_count(conn: Conn, query: str, *, quiet_s: float, timeout_s: float) -> int:
    """The query's count once it is non-zero and has not changed for `quiet_s`."""
    deadline = time.monotonic() + timeout_s
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now_count = int(await scalar(conn, query))
        if now_count != last:
            last, since = now_count, time.monotonic()
        elif last > 0 and time.monotonic() - since >= quiet_s:
            return last
        await asyncio.sleep(0.05)
    return last


async def _count_done(conn: Conn, n: int) -> bool:
    return int(await scalar(conn, "SELECT count(*) FROM jobs WHERE status = 'done'")) >= n


async def test_queues_are_claimed_in_priority_order_and_paused_ones_wait(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    order: list[str] = []

    @app.task
    async def record(ctx: JobContext) -> None:
        order.append(ctx.queue)

    for queue in ("low", "high", "paused"):
        await app.defer("noop", queue=queue)
    await conn.execute("UPDATE queues SET priority = 10 WHERE name = 'high'")
    await conn.execute("UPDATE queues SET is_paused = true WHERE name = 'paused'")
    ids = {}
    for queue in ("low", "high", "paused"):
        for _ in range(3):
            ids.setdefault(queue, []).append((await app.defer("record", queue=queue)).id)
    await conn.execute("DELETE FROM jobs WHERE handler = 'noop'")
    async with running_worker(db_url, app, queues=("low", "high", "paused"), concurrency=1):
        await eventually(lambda: _all(conn, ids["low"] + ids["high"], "done"))
        assert order == ["high"] * 3 + ["low"] * 3
        assert await _all(conn, ids["paused"], "queued")
        await conn.execute("UPDATE queues SET is_paused = false WHERE name = 'paused'")
        # Picked up at the next queue refresh.
        await eventually(lambda: _all(conn, ids["paused"], "done"), timeout=20)


async def _all(conn: Conn, ids: list[int], status: str) -> bool:
    found = await rows(conn, "SELECT status::text AS s FROM jobs WHERE id = ANY(%s)", ids)
    return len(found) == len(ids) and all(r["s"] == status for r in found)


async def test_unknown_handlers_and_unstorable_results_fail_with_a_clear_error(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)

    @app.task(max_attempts=3)
    async def returns_a_set(ctx: JobContext) -> Any:
        return {1, 2}

    job_unknown = await app.defer("no_such_handler")
    job_set = await returns_a_set.defer()
    async with running_worker(db_url, app):
        await eventually(lambda: _is(conn, job_unknown.id, "scheduled"))
        await eventually(lambda: _is(conn, job_set.id, "dead_letter"))
    err = await scalar(conn, "SELECT last_error FROM jobs WHERE id = %s", job_unknown.id)
    assert err.startswith("UnknownHandler: no handler named 'no_such_handler'")
    err = await scalar(conn, "SELECT last_error FROM jobs WHERE id = %s", job_set.id)
    assert err.startswith("InvalidResult: the handler returned a value that is not JSON")


@pytest.mark.parametrize("raises_on_cancel", [False, True], ids=["grace-expiry", "raises"])
async def test_drain_releases_unfinished_jobs_without_charging_the_attempt(
    db_url: str, conn: Conn, raises_on_cancel: bool
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    started = asyncio.Event()

    @app.task
    async def long(ctx: JobContext) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            if raises_on_cancel:
                raise RuntimeError("aborted by shutdown") from None
            raise

    @app.task
    async def quick(ctx: JobContext) -> None:
        await asyncio.sleep(0.2)

    slow_job = await long.defer()
    async with running_worker(db_url, app, drain_grace_s=1.0) as worker:
        await asyncio.wait_for(started.wait(), 20)
        quick_job = await quick.defer()
        await eventually(lambda: _is(conn, quick_job.id, "running", "done"))
        worker.request_drain()
    assert await job_status(conn, quick_job.id) == "done"
    assert await rows(
        conn, "SELECT status::text, attempt FROM jobs WHERE id = %s", slow_job.id
    ) == [{"status": "queued", "attempt": 0}]
    runs = await executions(conn, slow_job.id)
    assert [(r["outcome"], r["attempt_charged"]) for r in runs] == [("released", False)]
    # Exactly one worker row, stopped: no late heartbeat re-registered a ghost.
    assert await rows(conn, "SELECT status::text FROM workers") == [{"status": "stopped"}]


async def test_a_worker_declared_dead_releases_its_jobs_and_registers_again(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    first = asyncio.Event()

    @app.task
    async def job_fn(ctx: JobContext) -> None:
        if ctx.execution_seq == 1:
            first.set()
            await asyncio.sleep(60)

    job = await job_fn.defer()
    async with running_worker(db_url, app) as worker:
        await asyncio.wait_for(first.wait(), 20)
        old_id = worker.worker_id
        await conn.execute(
            "UPDATE workers SET status = 'dead', stopped_at = now() WHERE id = %s", (old_id,)
        )
        await eventually(lambda: _is(conn, job.id, "done"))
        assert worker.worker_id != old_id
    runs = await executions(conn, job.id)
    assert [(r["outcome"], r["attempt_charged"]) for r in runs] == [
        ("released", False),
        ("succeeded", True),
    ]
    assert await scalar(conn, "SELECT count(*) FROM workers") == 2


async def test_debug_logging_of_a_failed_job_raises_nothing(db_url: str, conn: Conn) -> None:
    """Issue 12: at JOBYARD_LOG_LEVEL=debug every failed job logged `RuntimeError: cannot enter
    context` — the "job finished" line re-entered the job's context from inside it."""
    app = App(project=PROJECT, database_url=db_url)

    @app.task(max_attempts=1)
    async def breaks(ctx: JobContext) -> None:
        raise ValueError("boom")

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    stdlog = logging.getLogger("jobyard.worker")
    old_level = stdlog.level
    stdlog.addHandler(handler)
    stdlog.setLevel(logging.DEBUG)
    loop_errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, c: loop_errors.append(c))
    try:
        job = await breaks.defer()
        async with running_worker(db_url, app):
            await eventually(lambda: _is(conn, job.id, "dead_letter"))
        gc.collect()
        await asyncio.sleep(0)
    finally:
        asyncio.get_running_loop().set_exception_handler(None)
        stdlog.removeHandler(handler)
        stdlog.setLevel(old_level)
    finished = [r.msg for r in records if "job finished" in str(r.msg)]
    assert any(f.get("job_id") == job.id for f in finished if isinstance(f, dict)), finished
    assert [str(c.get("exception")) for c in loop_errors] == []


async def test_a_suspect_runs_alone_while_other_work_flows_around_it(
    db_url: str, conn: Conn
) -> None:
    """A suspect (its last run died with its worker) is claimed only by a worker that holds
    nothing: a busy worker finishes what it holds first, then runs the suspect, and claims
    nothing else (even work enqueued meanwhile) until the suspect's run ends."""
    app = App(project=PROJECT, database_url=db_url)

    @app.task
    async def work(ctx: JobContext, seconds: float) -> None:
        await asyncio.sleep(seconds)

    total = 1
    async with running_worker(db_url, app, concurrency=4):
        before = [(await work.defer(seconds=0.3)).id for _ in range(12)]
        # A suspect appears while the worker is busy (held back until it is marked).
        suspect = (await work.defer(seconds=1.0, delay=3600)).id
        await conn.execute(
            "UPDATE jobs SET suspect = true, status = 'queued', run_at = now() WHERE id = %s",
            (suspect,),
        )
        await conn.execute("SELECT pg_notify('jobyard_jobs', queue_id::text) FROM jobs LIMIT 1")
        await eventually(lambda: _is(conn, suspect, "running"), timeout=30)
        during = [(await work.defer(seconds=0.05)).id for _ in range(12)]
        total += len(before) + len(during)
        await eventually(lambda: _all_done(conn, total), timeout=60)
    runs = await rows(
        conn,
        "SELECT job_id, started_at, finished_at FROM job_executions WHERE outcome = 'succeeded'",
    )
    (alone,) = [r for r in runs if r["job_id"] == suspect]
    overlapping = [
        r["job_id"]
        for r in runs
        if r["job_id"] != suspect
        and r["started_at"] < alone["finished_at"]
        and r["finished_at"] > alone["started_at"]
    ]
    assert overlapping == []
    assert (await rows(conn, "SELECT suspect FROM jobs WHERE id = %s", suspect)) == [
        {"suspect": False}
    ]


async def _all_done(conn: Conn, n: int) -> bool:
    return bool(await scalar(conn, "SELECT count(*) = %s FROM jobs WHERE status = 'done'", n))


@pytest.mark.xdist_group("horizon")
async def test_a_worker_claims_past_its_position_behind_a_reader_and_loses_no_job(
    db_url: str, conn: Conn, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Degraded mode after 1 s of blocked rotation, a full claim every second (docs/DATABASE.md,
    # "Claim position"); tests/concurrency/test_claim_position.py has the statement-level cases.
    monkeypatch.setattr(claim, "POSITION_AFTER_BLOCKED_S", 1.0)
    monkeypatch.setattr(claim, "FULL_CLAIM_EVERY_S", 1.0)
    app = App(project=PROJECT, database_url=db_url)
    first = await app.defer("noop")  # creates project and queue
    for slot in range(3):  # dead space in every partition: the rotation must take its lock
        await conn.execute(
            f"INSERT INTO job_ready_{slot} VALUES ({slot}, -1, -1, 0, now(), false)"  # type: ignore[arg-type]
        )
        await conn.execute(f"DELETE FROM job_ready_{slot} WHERE job_id = -1")  # type: ignore[arg-type]
    reader = await connect(db_url)
    await reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    await reader.execute("SELECT count(*) FROM job_ready")
    try:
        await _claims_past_the_position_until_released(
            db_url, conn, app, first.id, reader.rollback, "job_ready not rotating", caplog
        )
    finally:
        await reader.rollback()
        await reader.close()


@pytest.mark.xdist_group("horizon")
async def test_a_worker_claims_past_its_position_while_an_xid_is_held_and_loses_no_job(
    db_url: str, conn: Conn, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The rotation works, but the held xid keeps every claimed job's dead ready row in the
    # claim index until its partition is rotated: the worker claims past its position while
    # the transaction lives, and normally once it ends (docs/DATABASE.md, "Claim position").
    monkeypatch.setattr(claim, "POSITION_AFTER_HELD_S", 0.5)
    app = App(project=PROJECT, database_url=db_url)
    first = await app.defer("noop")  # creates project and queue
    holder = await connect(db_url)  # not autocommit: its transaction stays open
    await holder.execute("SELECT txid_current()")
    try:
        messages = await _claims_past_the_position_until_released(
            db_url, conn, app, first.id, holder.rollback, "xmin horizon held", caplog
        )
        assert any("claim position on" in m and "xmin horizon held" in m for m in messages), (
            messages
        )
    finally:
        await holder.rollback()
        await holder.close()


BACKLOG = 20_000


async def _vacuums_during_a_drain(db_url: str, conn: Conn) -> int:
    """BACKLOG no-op jobs queued in one statement (one crowded ready partition) and drained by a
    worker; the VACUUMs of job_ready's partitions run meanwhile (not counting autovacuum's)."""
    app = App(project=PROJECT, database_url=db_url)
    first = await app.defer("noop")  # creates project and queue
    await conn.execute(
        "INSERT INTO jobs (project_id, queue_id, handler, payload)"
        " SELECT project_id, queue_id, 'noop', '{}' FROM jobs, generate_series(2, %(n)s)"
        " WHERE id = %(id)s",
        {"n": BACKLOG, "id": first.id},
    )
    async with running_worker(db_url, app, concurrency=20):
        await eventually(lambda: _count_done(conn, BACKLOG), timeout=60, interval=0.1)
    return int(
        await scalar(
            conn,
            "SELECT sum(pg_stat_get_vacuum_count(i.inhrelid)) FROM pg_inherits i"
            " WHERE i.inhparent = 'job_ready'::regclass",
        )
    )


@pytest.fixture
def vacuum_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition is due for a VACUUM at 500 dead rows, at every rotation call, and the calls
    come five times a second: more chances in a drain of two or three seconds (the counters
    the choice reads lag up to a second)."""
    monkeypatch.setattr(claim, "VACUUM_MIN_DEAD", 500)
    monkeypatch.setattr(claim, "VACUUM_MIN_INTERVAL_S", 0.0)
    monkeypatch.setattr(claim, "ROTATE_EVERY_S", 0.2)


@pytest.mark.xdist_group("horizon")
@pytest.mark.usefixtures("vacuum_soon")
async def test_a_worker_vacuums_the_ready_partition_a_drain_works_through(
    db_url: str, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A backlog is not rotated away (it is 'crowded'): its claimed rows' dead entries stay at the
    # head of the claim index until a VACUUM, which the worker starts after its rotation call.
    # Another test's transaction of a few seconds (any database's) must not make this worker
    # skip its VACUUMs as under a held horizon: the next test covers that rule (fresh-clone CI,
    # PostgreSQL 18, 2026-12-05: no VACUUM in the whole drain).
    monkeypatch.setattr(claim, "POSITION_AFTER_HELD_S", 3600.0)
    assert await _vacuums_during_a_drain(db_url, conn) >= 1


@pytest.mark.xdist_group("horizon")
@pytest.mark.usefixtures("vacuum_soon")
async def test_a_worker_does_not_vacuum_while_a_transaction_holds_the_horizon(
    db_url: str, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The VACUUM could remove nothing claimed since the holder began; the positions skip it.
    monkeypatch.setattr(claim, "POSITION_AFTER_HELD_S", 0.5)
    holder = await connect(db_url)  # not autocommit: its transaction stays open
    await holder.execute("SELECT txid_current()")
    try:
        assert await _vacuums_during_a_drain(db_url, conn) == 0
    finally:
        await holder.rollback()
        await holder.close()


async def _claims_past_the_position_until_released(
    db_url: str,
    conn: Conn,
    app: App,
    first_id: int,
    release: Callable[[], Awaitable[None]],
    reason: str,
    caplog: pytest.LogCaptureFixture,
) -> list[str]:
    """A worker fed for 4 s while something holds the ready set's dead rows, then a late job of
    a higher priority than any (behind every position): every job is done once, the worker made
    positioned and full claims for `reason`, and it claims normally again after `release`. The
    worker's log messages."""
    project = ProjectId(await scalar(conn, "SELECT id FROM projects"))
    ids = [first_id]
    caplog.set_level(logging.INFO, logger="jobyard.worker")
    async with running_worker(db_url, app, concurrency=10) as worker:
        ids += await _feed(conn, project, seconds=4.0)
        urgent = await app.defer("noop", priority=10)
        ids.append(urgent.id)
        await eventually(lambda: _count_done(conn, len(ids)), timeout=60, interval=0.1)
        mode = worker._claim_mode
        assert mode.degraded and mode.reason == reason
        assert mode.positioned_claims > 0 and mode.full_claims > 0
        await release()
        # 30 s: another test's xid, in any database of the server, counts as a held horizon too
        # (the ready-rotation test holds one for 7 s).
        await eventually(lambda: _not_degraded(worker), timeout=30, interval=0.1)
    assert await scalar(conn, "SELECT count(*) FROM job_executions") == len(ids)
    assert await scalar(conn, "SELECT count(*) FROM jobs WHERE status = 'done'") == len(ids)
    messages = [r.getMessage() for r in caplog.records]
    assert any("claim position on" in m for m in messages), messages
    assert any("claim position off" in m for m in messages), messages
    return messages


async def _feed(conn: Conn, project: ProjectId, *, seconds: float) -> list[int]:
    """Enqueue 20 no-op jobs every 0.1 s for `seconds`; their ids."""
    ids: list[int] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = await enqueue_batch(
            conn, project, BatchCreate(queue="default", jobs=[BatchItem(handler="noop")] * 20)
        )
        ids += result.job_ids
        await asyncio.sleep(0.1)
    return ids


async def _not_degraded(worker: Any) -> bool:
    return not worker._claim_mode.degraded
