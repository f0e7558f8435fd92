"""Workflows run by real `python -m jobyard worker` processes (issue 14 point 5).

The batch test repeats JOBYARD_BATCH_REPEATS times (3 by default, so CI stays bounded;
`make test-workflows-slow` runs 20). JOBYARD_BREAK_BATCH_LOCK=1 installs the unserialized
variant of the callback step (tests/workflows/broken.py) to show what the batch row lock
prevents: see docs/TESTING.md.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from jobyard.core import workflows
from jobyard.db.pool import Conn
from jobyard.domain.ids import JobId, ProjectId
from jobyard.worker.app import App, Task
from jobyard.worker.canvas import chain, group
from tests.worker.helpers import PROJECT, eventually, maintenance_loop, rows, scalar
from tests.workflows import broken
from tests.workflows.apps import add, batch_done, tick
from tests.workflows.conftest import REPO

pytestmark = pytest.mark.slow

REPEATS = int(os.environ.get("JOBYARD_BATCH_REPEATS", "3"))
BATCH_SIZE = 1000


def _bind(app: App, url: str) -> App:
    """The test app's tasks on an App bound to this test's database."""
    bound = App(project=PROJECT, database_url=url)
    for task in app.tasks.values():
        bound.registry.add(task.spec)
        bound.tasks[task.name] = Task(bound, task.spec)
    return bound


async def _finished(conn: Conn, ids: list[int]) -> bool:
    n = await scalar(
        conn,
        "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status IN ('done','dead_letter','cancelled')",
        ids,
    )
    return bool(n == len(ids))


async def _status(conn: Conn, job_id: int) -> str:
    return str(await scalar(conn, "SELECT status::text FROM jobs WHERE id = %s", job_id))


async def _result(conn: Conn, job_id: int) -> Any:
    return await scalar(conn, "SELECT result FROM jobs WHERE id = %s", job_id)


@pytest.mark.timeout(120 + 60 * REPEATS)
async def test_a_1000_job_batch_finished_by_4_workers_fires_its_callback_exactly_once(
    db_url: str, conn: Conn, workers: Any
) -> None:
    broken_on_purpose = os.environ.get("JOBYARD_BREAK_BATCH_LOCK") == "1"
    if broken_on_purpose:
        await broken.install(conn)
    workers(db_url, 4, concurrency=20)
    fired_per_batch: list[int] = []
    async with App(project=PROJECT, database_url=db_url) as app:
        for _ in range(REPEATS):
            run = await app.batch(
                [tick.s(i=i) for i in range(BATCH_SIZE)],
                on_complete=batch_done.s(tag="complete"),
                on_success=batch_done.s(tag="success"),
                on_failure=batch_done.s(tag="failure"),
            )
            await eventually(lambda r=run: _finished(conn, r.job_ids), timeout=120)
            # The callbacks are enqueued in the last completion's transaction: no wait needed.
            fired = await rows(
                conn,
                "SELECT payload->>'tag' AS tag FROM jobs WHERE handler = 'batch_done'"
                " AND (payload->'batch'->>'id')::bigint = %s ORDER BY 1",
                run.batch_id,
            )
            fired_per_batch.append(len(fired))
            if broken_on_purpose:
                continue
            assert [r["tag"] for r in fired] == ["complete", "success"]
            status = await workflows.batch_status(
                conn, ProjectId(await _project(conn)), run.batch_id
            )
            assert (status["done"], status["pending"]) == (BATCH_SIZE, 0)
    lost = sum(1 for n in fired_per_batch if n < 2)
    extra = sum(n - 2 for n in fired_per_batch if n > 2)
    assert (lost, extra) == (0, 0), (
        f"{REPEATS} batches: {lost} lost their callbacks, {extra} duplicate callbacks "
        f"(callbacks per batch: {fired_per_batch})"
    )


async def _project(conn: Conn) -> int:
    return int(await scalar(conn, "SELECT id FROM projects ORDER BY id LIMIT 1"))


async def test_diamond_dag_passes_results_along(db_url: str, conn: Conn, workers: Any) -> None:
    workers(db_url, 2)
    app = _bind(add.app, db_url)
    # top=1; left = 10 + 1; right = 100 + 1 (a thread handler); join = 1000 + 11 + 101
    flow = chain(app.tasks["add"].s(n=1),
                 group(app.tasks["add"].s(n=10), app.tasks["add_blocking"].s(n=100)),
                 app.tasks["add"].s(n=1000))  # fmt: skip
    run = await flow.defer()
    (join,) = run.last
    await eventually(lambda: _finished(conn, list(run.job_ids.values())), timeout=60)
    assert await _result(conn, join) == 1112


async def test_a_chain_of_100_steps_completes_in_order(
    db_url: str, conn: Conn, workers: Any
) -> None:
    workers(db_url, 2)
    app = _bind(add.app, db_url)
    run = await chain(*[app.tasks["add"].s(n=1) for _ in range(100)]).defer()
    ids = [run.job_ids[f"s{i}"] for i in range(100)]
    await eventually(lambda: _finished(conn, ids), timeout=120)
    assert await _result(conn, ids[-1]) == 100
    order = await rows(
        conn,
        "SELECT j.id, e.started_at, e.finished_at FROM jobs j JOIN job_executions e ON e.job_id = j.id"
        " WHERE j.id = ANY(%s) ORDER BY j.id",
        ids,
    )
    assert [r["id"] for r in order] == ids  # one run each
    for before, after in itertools.pairwise(order):
        assert after["started_at"] >= before["finished_at"]


async def test_a_failed_step_cancels_the_rest_and_retrying_it_lets_the_workflow_continue(
    db_url: str, conn: Conn, workers: Any
) -> None:
    workers(db_url, 1)
    app = _bind(add.app, db_url)
    run = await chain(app.tasks["fails_first_run"].s().set(max_attempts=1),
                      app.tasks["add"].s(n=1), app.tasks["add"].s(n=1)).defer()  # fmt: skip
    a, b, c = (run.job_ids[k] for k in ("s0", "s1", "s2"))
    await eventually(lambda: _finished(conn, [a, b, c]), timeout=60)
    assert [await _status(conn, j) for j in (a, b, c)] == ["dead_letter", "cancelled", "cancelled"]
    reason = await scalar(conn, "SELECT cancel_reason FROM jobs WHERE id = %s", b)
    assert reason == f"dependency failed: parent job {a} ended dead_letter"
    project = ProjectId(await _project(conn))
    await workflows.retry_step(conn, project, JobId(a))
    await eventually(lambda: _finished(conn, [a, b, c]), timeout=60)
    assert [await _status(conn, j) for j in (a, b, c)] == ["done", "done", "done"]
    assert await _result(conn, c) == 2


async def test_jobyard_jobs_retry_of_a_failed_middle_step_lets_the_chain_continue(
    db_url: str, conn: Conn, workers: Any
) -> None:
    """Issue 14 point 3 from the CLI: a → b → c, b dead-lettered (c cancelled naming b);
    `jobyard jobs retry b`, a real process, revives c, and both run."""
    workers(db_url, 2)
    app = _bind(add.app, db_url)
    run = await chain(app.tasks["add"].s(n=1), app.tasks["fails_first_run"].s().set(max_attempts=1),
                      app.tasks["add"].s(n=1)).defer()  # fmt: skip
    a, b, c = (run.job_ids[k] for k in ("s0", "s1", "s2"))
    await eventually(lambda: _finished(conn, [a, b, c]), timeout=60)
    assert [await _status(conn, j) for j in (a, b, c)] == ["done", "dead_letter", "cancelled"]
    reason = await scalar(conn, "SELECT cancel_reason FROM jobs WHERE id = %s", c)
    assert reason == f"dependency failed: parent job {b} ended dead_letter"
    # c on its own is refused, naming its failed parent: it waits again when b is retried.
    refused = _cli(db_url, "jobs", "retry", str(c))
    assert refused.returncode == 2 and "retry that parent" in refused.stderr, refused.stderr
    assert await _status(conn, c) == "cancelled"

    cli = _cli(db_url, "jobs", "retry", str(b))
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.strip() == f"job {b} queued again; job {c} waiting again"
    await eventually(lambda: _finished(conn, [a, b, c]), timeout=60)
    assert [await _status(conn, j) for j in (a, b, c)] == ["done", "done", "done"]
    assert await _result(conn, b) == "recovered"
    assert await _result(conn, c) == 1  # n=1 plus its parent's result, a string, not counted
    runs = await rows(
        conn,
        "SELECT job_id, outcome::text AS o FROM job_executions WHERE job_id = ANY(%s)"
        " ORDER BY job_id, execution_seq",
        [b, c],
    )
    assert [(r["job_id"], r["o"]) for r in runs] == [
        (b, "failed"),
        (b, "succeeded"),
        (c, "succeeded"),
    ]
    letter = await scalar(conn, "SELECT replay_job_id FROM dead_letter_jobs WHERE job_id = %s", b)
    assert letter == b  # the dead letter left the pending list


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JOBYARD_DATABASE_URL": url, "JOBYARD_PROJECT": PROJECT,
           "COLUMNS": "200"}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "jobyard", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


async def test_cancelling_a_workflow_cancels_its_pending_steps(
    db_url: str, conn: Conn, workers: Any
) -> None:
    workers(db_url, 1)
    app = _bind(add.app, db_url)
    run = await chain(app.tasks["slow_add"].s(seconds=3), app.tasks["add"].s(n=1),
                      app.tasks["add"].s(n=1)).defer()  # fmt: skip
    a, b, c = (run.job_ids[k] for k in ("s0", "s1", "s2"))
    await eventually(lambda: _status_in(conn, a, "running"), timeout=30)
    out = await workflows.cancel_workflow(conn, ProjectId(await _project(conn)), JobId(c))
    assert out == {"cancelled": [b, c], "requested": [a]}
    await eventually(lambda: _finished(conn, [a]), timeout=30)
    assert [await _status(conn, j) for j in (a, b, c)] == ["cancelled"] * 3


async def _status_in(conn: Conn, job_id: int, *statuses: str) -> bool:
    return await _status(conn, job_id) in statuses


async def test_a_worker_sigkilled_mid_step_recovers_like_a_plain_job(
    db_url: str, conn: Conn, workers: Any
) -> None:
    (first,) = workers(db_url, 1)
    app = _bind(add.app, db_url)
    run = await chain(app.tasks["add"].s(n=1), app.tasks["slow_add"].s(seconds=2),
                      app.tasks["add"].s(n=1)).defer()  # fmt: skip
    a, b, c = (run.job_ids[k] for k in ("s0", "s1", "s2"))
    await eventually(lambda: _status_in(conn, b, "running"), timeout=30)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    async with maintenance_loop(db_url, interval_s=0.5):
        await eventually(lambda: _status_in(conn, b, "queued"), timeout=30)
        assert await _status(conn, c) == "waiting"
        workers(db_url, 1)
        await eventually(lambda: _finished(conn, [a, b, c]), timeout=60)
    assert await _result(conn, c) == 3  # a = 1; b = 1 + a = 2; c = 1 + b = 3
    outcomes = await rows(
        conn,
        "SELECT outcome::text AS o FROM job_executions WHERE job_id = %s ORDER BY execution_seq",
        b,
    )
    assert [r["o"] for r in outcomes] == ["lease_lost", "succeeded"]


async def test_the_sdk_after_parameter_accepts_jobs_and_ids(
    db_url: str, conn: Conn, workers: Any
) -> None:
    workers(db_url, 1)
    app = _bind(add.app, db_url)
    first = await app.tasks["add"].defer(n=5)
    second = await app.tasks["add"].defer(n=1, after=[first])
    third = await app.tasks["add"].defer(n=1, after=[second.id, first.id])
    await eventually(lambda: _finished(conn, [first.id, second.id, third.id]), timeout=60)
    assert await _result(conn, third.id) == 1 + 6 + 5
