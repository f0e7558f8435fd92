""" "Why isn't this job running?": each reason built for real — real PostgreSQL, real
`python -m jobyard worker` processes (built-in handlers: sleep, fail, noop) — and checked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobyard.core import actions, admin, enqueue, projects, why
from jobyard.core.why import Explanation
from jobyard.db.pool import Conn
from jobyard.domain.ids import JobId, ProjectId, QueueId
from jobyard.domain.schemas import JobCreate, RetryOverride
from tests.worker.helpers import PROJECT, eventually, rows

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
HEARTBEAT_S = 0.5


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def _spawn(url: str, queues: str = "default", concurrency: int = 2) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "JOBYARD_DATABASE_URL": url,
            "JOBYARD_PROJECT": PROJECT,
            "JOBYARD_HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
            "JOBYARD_LEASE_S": "3",
            "JOBYARD_POLL_INTERVAL_S": "0.3",
            "JOBYARD_DRAIN_GRACE_S": "1",
        }
        with (tmp_path / f"worker-{len(started)}.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "jobyard", "worker", "--queues", queues,
                 "--concurrency", str(concurrency)],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        started.append(proc)
        return proc

    yield _spawn
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(10)


async def _project(conn: Conn) -> ProjectId:
    return await projects.resolve_project(conn, PROJECT, create=True)


async def _live(conn: Conn, proc: subprocess.Popen[bytes]) -> int:
    assert proc.poll() is None, f"worker exited with {proc.returncode}"
    found = await rows(
        conn, "SELECT id FROM workers WHERE pid = %s AND status = 'active'", proc.pid
    )
    return int(found[0]["id"]) if found else 0


async def _status(conn: Conn, job_id: int) -> str:
    found = await rows(conn, "SELECT status::text AS s FROM jobs WHERE id = %s", job_id)
    return str(found[0]["s"])


async def _enqueue(conn: Conn, project: ProjectId, **fields: Any) -> int:
    await projects.ensure_queues(conn, project, [fields.get("queue", "default")])
    result = await enqueue.enqueue(conn, project, JobCreate(**fields))
    return int(result.job["id"])


async def _explain(conn: Conn, project: ProjectId, job_id: int, **kw: Any) -> Explanation:
    return await why.explain(conn, project, JobId(job_id), heartbeat_interval_s=HEARTBEAT_S, **kw)


def _codes(found: Explanation) -> list[str]:
    return [r.code for r in found.reasons]


def _reason(found: Explanation, code: str) -> why.Reason:
    for r in found.reasons:
        if r.code == code:
            return r
    raise AssertionError(f"no {code} reason in {_codes(found)}")


async def _queue_id(conn: Conn, project: ProjectId, name: str) -> QueueId:
    await projects.ensure_queues(conn, project, [name])
    found = await rows(
        conn, "SELECT id FROM queues WHERE project_id = %s AND name = %s", project, name
    )
    return QueueId(found[0]["id"])


async def test_a_paused_queue_is_named_and_the_job_s_place_in_line_counted(
    conn: Conn, db_url: str, spawn: Any
) -> None:
    project = await _project(conn)
    queue = await _queue_id(conn, project, "default")
    worker = spawn(db_url)
    await eventually(lambda: _live(conn, worker))
    # A drain rate first: three jobs finish on the live worker.
    done = [await _enqueue(conn, project, handler="noop") for _ in range(3)]
    for job_id in done:
        await eventually(lambda j=job_id: _is(conn, j, "done"))
    await admin.set_queue_paused(conn, project, queue, True)
    high = await _enqueue(conn, project, handler="noop", priority=5)
    first = await _enqueue(conn, project, handler="noop")
    last = await _enqueue(conn, project, handler="noop")

    found = await _explain(conn, project, last)
    assert found.status == "queued"
    paused = _reason(found, "queue_paused")
    assert "'default' is paused" in paused.sentence and paused.ends_at is None
    position = _reason(found, "position")
    assert position.details["ahead"] == 2, position  # the priority-5 job and the older one
    assert position.details["drain_per_min"] == pytest.approx(3 / 5)
    # No ETA from the rate before the pause: a paused queue drains nothing (an ETA a minute
    # away was shown for a paused queue until 2026-12-05).
    assert position.ends_at is None and "no ETA while the queue is paused" in position.sentence
    assert "2 job(s) ahead" in position.sentence
    assert _reason(await _explain(conn, project, high), "position").details["ahead"] == 0
    assert _reason(await _explain(conn, project, first), "position").details["ahead"] == 1
    assert "no_live_worker" not in _codes(found)

    # Resumed, with the worker stopped so that nothing is claimed: the rate gives an ETA.
    worker.send_signal(signal.SIGSTOP)
    await admin.set_queue_paused(conn, project, queue, False)
    resumed = _reason(await _explain(conn, project, last), "position")
    assert resumed.details["ahead"] == 2
    assert resumed.ends_at is not None and resumed.ends_at > found.at
    assert "should start by about" in resumed.sentence
    worker.send_signal(signal.SIGCONT)


async def _is(conn: Conn, job_id: int, status: str) -> bool:
    return await _status(conn, job_id) == status


async def test_a_queue_at_its_concurrency_limit_names_the_jobs_holding_the_slots(
    conn: Conn, db_url: str, spawn: Any
) -> None:
    project = await _project(conn)
    queue = await _queue_id(conn, project, "default")
    await admin.update_queue(conn, project, queue, {"max_concurrency": 1})
    worker = spawn(db_url, concurrency=4)
    await eventually(lambda: _live(conn, worker))
    holder = await _enqueue(conn, project, handler="sleep", payload={"seconds": 30})
    await eventually(lambda: _is(conn, holder, "running"))
    waiting = await _enqueue(conn, project, handler="noop")

    found = await _explain(conn, project, waiting)
    limit = _reason(found, "concurrency_limit")
    assert [h["id"] for h in limit.details["holders"]] == [holder]
    assert f"#{holder}" in limit.sentence and "1 of 1 slots" in limit.sentence
    assert _reason(await _explain(conn, project, holder), "running").details["worker_id"]


async def test_a_job_backing_off_says_which_retry_comes_when_after_which_error(
    conn: Conn, db_url: str, spawn: Any
) -> None:
    project = await _project(conn)
    worker = spawn(db_url)
    await eventually(lambda: _live(conn, worker))
    job_id = await _enqueue(
        conn, project, handler="fail", payload={"message": "disk on fire"}, max_attempts=3,
        retry=RetryOverride(backoff="fixed", base_delay_ms=600_000, jitter=False),
    )  # fmt: skip
    await eventually(lambda: _is(conn, job_id, "scheduled"))

    found = await _explain(conn, project, job_id)
    backoff = _reason(found, "retry_backoff")
    assert backoff.details["attempt"] == 1 and backoff.details["next_attempt"] == 2
    assert "disk on fire" in backoff.details["error"]
    assert "retry 2 of 3" in backoff.sentence
    run_at = (await rows(conn, "SELECT run_at FROM jobs WHERE id = %s", job_id))[0]["run_at"]
    assert backoff.ends_at == run_at and run_at - found.at > timedelta(minutes=9)


async def test_a_delayed_job_is_scheduled_until_its_run_at(conn: Conn) -> None:
    project = await _project(conn)
    job_id = await _enqueue(conn, project, handler="noop", delay_ms=3_600_000)
    reason = _reason(await _explain(conn, project, job_id), "scheduled")
    assert reason.ends_at is not None and "Scheduled to run at" in reason.sentence


async def test_a_job_due_long_ago_and_never_promoted_asks_for_a_scheduler(
    conn: Conn, db_url: str, spawn: Any
) -> None:
    """Found as a user (2026-12-05): a worker without a scheduler leaves retries scheduled
    forever, and `why` said only that the retry "is due now". Past the promoter's interval by
    more than PROMOTION_OVERDUE_S, a due job says no promoter moved it."""
    project = await _project(conn)
    worker = spawn(db_url)
    await eventually(lambda: _live(conn, worker))
    retried = await _enqueue(
        conn, project, handler="fail", max_attempts=3,
        retry=RetryOverride(backoff="fixed", base_delay_ms=1_000, jitter=False),
    )  # fmt: skip
    delayed = await _enqueue(conn, project, handler="noop", delay_ms=1_000)
    await eventually(lambda: _is(conn, retried, "scheduled"))
    run_at = {
        r["id"]: r["run_at"]
        for r in await rows(
            conn, "SELECT id, run_at FROM jobs WHERE id IN (%s, %s)", retried, delayed
        )
    }

    for job_id, first in ((retried, "retry_backoff"), (delayed, "scheduled_due")):
        soon = await _explain(conn, project, job_id, now=run_at[job_id] + timedelta(seconds=5))
        assert _codes(soon)[0] == first and "promotion_overdue" not in _codes(soon)
        assert "promoter" in soon.reasons[0].sentence
        assert soon.reasons[0].ends_at is None  # due: no end in the past ("until 5 s ago")
        late = await _explain(conn, project, job_id, now=run_at[job_id] + timedelta(minutes=2))
        overdue = _reason(late, "promotion_overdue")
        assert overdue.details == {"overdue_s": 120}
        assert "2 min 0 s" in overdue.sentence and "jobyard scheduler" in overdue.sentence
    ahead = await _explain(conn, project, delayed, now=run_at[delayed] - timedelta(seconds=1))
    assert _codes(ahead)[0] == "scheduled" and "promotion_overdue" not in _codes(ahead)


async def test_a_job_cancelled_because_its_parent_failed_says_to_retry_the_parent(
    conn: Conn,
) -> None:
    """Found as a user (2026-12-05): such a job's `why` said "retry it to queue it again",
    and that retry is refused (409) in favour of the parent's."""
    project = await _project(conn)
    parent = await _enqueue(conn, project, handler="noop", delay_ms=3_600_000)
    child = await _enqueue(conn, project, handler="noop", depends_on=[parent])
    await actions.act_on_job(conn, project, "cancel", JobId(parent))

    reason = _reason(await _explain(conn, project, child), "cancelled")
    assert f"parent job {parent} ended cancelled" in reason.sentence
    assert "retry that parent" in reason.sentence and "retry it to" not in reason.sentence
    assert reason.details["cancel_reason"].startswith(actions.DEPENDENCY_FAILED)
    own = _reason(await _explain(conn, project, parent), "cancelled")
    assert "retry it to queue it again" in own.sentence and "parent" not in own.sentence


async def test_a_waiting_job_lists_each_parent_with_its_state(
    conn: Conn, db_url: str, spawn: Any
) -> None:
    project = await _project(conn)
    worker = spawn(db_url)
    await eventually(lambda: _live(conn, worker))
    quick = await _enqueue(conn, project, handler="noop")
    slow = await _enqueue(conn, project, handler="sleep", payload={"seconds": 30})
    await eventually(lambda: _is(conn, quick, "done"))
    await eventually(lambda: _is(conn, slow, "running"))
    child = await _enqueue(conn, project, handler="noop", depends_on=[quick, slow])
    assert await _status(conn, child) == "waiting"

    reason = _reason(await _explain(conn, project, child), "waiting_on_parents")
    assert {p["id"]: p["status"] for p in reason.details["parents"]} == {
        quick: "done",
        slow: "running",
    }
    assert "1 of 2 parent" in reason.sentence and f"#{slow} running" in reason.sentence


async def test_no_live_worker_on_the_queue_says_when_one_was_last_seen(
    conn: Conn, db_url: str, spawn: Any
) -> None:
    project = await _project(conn)
    worker = spawn(db_url, queues="emails")
    await eventually(lambda: _live(conn, worker))
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    job_id = await _enqueue(conn, project, queue="emails", handler="noop")
    never = await _enqueue(conn, project, queue="reports", handler="noop")

    reason = _reason(await _explain(conn, project, job_id), "no_live_worker")
    assert reason.details["last_seen_at"] is not None and "last seen at" in reason.sentence
    reason = _reason(await _explain(conn, project, never), "no_live_worker")
    assert reason.details["last_seen_at"] is None and "none has ever listened" in reason.sentence


async def test_no_live_worker_with_the_handler_registered_is_reported(
    conn: Conn, db_url: str, spawn: Any
) -> None:
    project = await _project(conn)
    worker = spawn(db_url)
    worker_id = await eventually(lambda: _live(conn, worker))
    registered = await rows(conn, "SELECT handlers FROM workers WHERE id = %s", worker_id)
    assert {"noop", "sleep", "fail"} <= set(registered[0]["handlers"])
    # Paused first: a worker that claimed it would fail it at once (unknown handler).
    await admin.set_queue_paused(conn, project, await _queue_id(conn, project, "default"), True)
    job_id = await _enqueue(conn, project, handler="send_invoice")

    reason = _reason(await _explain(conn, project, job_id), "no_handler")
    assert "'send_invoice'" in reason.sentence and reason.details["live_workers"] == 1


async def test_a_job_held_by_a_silent_worker_says_when_the_reaper_acts(
    conn: Conn, db_url: str, spawn: Any
) -> None:
    project = await _project(conn)
    worker = spawn(db_url)
    worker_id = await eventually(lambda: _live(conn, worker))
    job_id = await _enqueue(conn, project, handler="sleep", payload={"seconds": 60})
    await eventually(lambda: _is(conn, job_id, "running"))
    assert _codes(await _explain(conn, project, job_id)) == ["running"]
    worker.send_signal(signal.SIGSTOP)  # alive but silent: no heartbeat from now on

    async def silent() -> Explanation | None:
        found = await _explain(conn, project, job_id, reaper_interval_s=10.0)
        return found if _codes(found) == ["holder_silent"] else None

    found = await eventually(silent, timeout=20)
    reason = found.reasons[0]
    lease = (await rows(conn, "SELECT lock_expires_at FROM jobs WHERE id = %s", job_id))[0]
    assert reason.details["worker_id"] == worker_id
    assert reason.ends_at == lease["lock_expires_at"] + timedelta(seconds=10)
    assert "has not heartbeated since" in reason.sentence and "reaper" in reason.sentence
