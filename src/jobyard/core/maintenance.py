"""Cluster-wide maintenance: promote due jobs, reap expired leases, sweep dead workers, prune.

Each function takes a connection first and returns counts; each statement touches a bounded
number of rows (`batch`), so the functions are safe to run from any number of scheduler
replicas at once (`FOR UPDATE SKIP LOCKED` everywhere) and never hold long locks. Call them on
an autocommit connection so every batch commits on its own.

Only the database clock decides due-ness and expiry (`coalesce(%(now)s, now())` in SQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.ids import JobId, WorkerId
from jobyard.logs import get_logger

log = get_logger("jobyard.core.maintenance")

DEFAULT_POISON_THRESHOLD = 3


@dataclass(frozen=True)
class PromoteResult:
    """One promotion batch: how many jobs became queued, across how many queues."""

    promoted: int
    queues: int


@dataclass(frozen=True)
class ReapResult:
    """Held jobs taken back: requeued (attempt refunded), dead-lettered as poison pills, or
    finished as cancelled when their cancel had been requested."""

    requeued: int = 0
    dead_lettered: int = 0
    job_ids: tuple[JobId, ...] = ()
    batches: int = 0
    cancelled: int = 0

    @property
    def reaped(self) -> int:
        return self.requeued + self.dead_lettered + self.cancelled

    def __add__(self, other: ReapResult) -> ReapResult:
        return ReapResult(
            self.requeued + other.requeued,
            self.dead_lettered + other.dead_lettered,
            self.job_ids + other.job_ids,
            self.batches + other.batches,
            self.cancelled + other.cancelled,
        )


@dataclass(frozen=True)
class SweepResult:
    """Workers declared dead in one sweep, and what happened to the jobs they held."""

    workers: tuple[WorkerId, ...] = ()
    jobs: ReapResult = ReapResult()


@dataclass(frozen=True)
class RetentionResult:
    """Rows deleted by one retention pass, in `batches` bounded statements."""

    jobs: int = 0
    heartbeats: int = 0
    refresh_tokens: int = 0
    rate_limits: int = 0
    workers: int = 0
    batches_deleted: int = 0
    batches: int = 0
    # The per-pass cap stopped the pass with rows still due for deletion.
    more: bool = False


async def db_now(conn: Conn, now: datetime | None = None) -> datetime:
    """The injected `now`, else the database's clock (never this host's)."""
    if now is not None:
        return now
    row = await run.one(conn, "clock_now", {})
    assert row is not None
    result: datetime = row["now"]
    return result


async def promote_due(
    conn: Conn,
    *,
    batch: int = 1000,
    now: datetime | None = None,
    since: datetime | None = None,
) -> PromoteResult:
    """Move up to `batch` due scheduled jobs to queued and NOTIFY their queues (one statement);
    with `since`, only jobs due at or after it (the promoter's position)."""
    rows = await run.all_rows(
        conn, "job_promote_due", {"batch": batch, "now": sql_now(now), "since": since}
    )
    return PromoteResult(promoted=sum(int(r["promoted"]) for r in rows), queues=len(rows))


async def _reap(
    conn: Conn,
    *,
    batch: int,
    grace_s: float,
    worker_ids: Sequence[int],
    poison_threshold: int,
    suspect_delay_s: float = 0.0,
    now: datetime | None,
    since: datetime | None = None,
) -> ReapResult:
    rows = await run.all_rows(
        conn,
        "lease_reap",
        {
            "batch": batch,
            "grace_s": float(grace_s),
            "worker_ids": list(worker_ids),
            "poison_threshold": poison_threshold,
            "suspect_delay_s": float(suspect_delay_s),
            "now": sql_now(now),
            "since": since,
        },
    )
    # A job whose death was pinned on it comes back `scheduled` (suspect_delay_s later).
    requeued = [r for r in rows if r["status"] in ("queued", "scheduled")]
    lettered = [r for r in rows if r["status"] == "dead_letter"]
    for r in lettered:
        log.warning("poison pill dead-lettered", job_id=r["job_id"], queue_id=r["queue_id"])
    return ReapResult(
        requeued=len(requeued),
        dead_lettered=len(lettered),
        job_ids=tuple(JobId(r["job_id"]) for r in rows),
        batches=1,
        cancelled=sum(1 for r in rows if r["status"] == "cancelled"),
    )


async def reap_expired_leases(
    conn: Conn,
    *,
    batch: int = 500,
    grace_s: float = 0.0,
    poison_threshold: int = DEFAULT_POISON_THRESHOLD,
    suspect_delay_s: float = 0.0,
    now: datetime | None = None,
    since: datetime | None = None,
) -> ReapResult:
    """One batch: take back held jobs whose lease expired more than `grace_s` ago (and, with
    `since`, not before it: the reaper's position, see scheduler.reaper).

    A death counts toward `poison_threshold` only when the worker held that job alone (its
    `solo_deaths`); every job taken back becomes a suspect, which the claim runs alone. A job
    whose death was pinned on it returns `suspect_delay_s` later (scheduled), if that is > 0.

    Each is requeued with its attempt refunded and its execution closed as `lease_lost`
    (not charged), or — when this is its `poison_threshold`-th lost lease — dead-lettered
    with reason `poison_pill`. A job whose lease a heartbeat extends (or that completes)
    concurrently is never taken: the row lock and the re-check on the locked row decide.
    """
    return await _reap(
        conn,
        batch=batch,
        grace_s=grace_s,
        worker_ids=(),
        poison_threshold=poison_threshold,
        suspect_delay_s=suspect_delay_s,
        now=now,
        since=since,
    )


async def requeue_worker_jobs(
    conn: Conn,
    worker_ids: Sequence[int],
    *,
    batch: int = 500,
    poison_threshold: int = DEFAULT_POISON_THRESHOLD,
    now: datetime | None = None,
) -> ReapResult:
    """Take back every job held by these (dead) workers, lease expired or not, in batches.

    Same statement and rules as `reap_expired_leases`, selected by worker instead of expiry.
    """
    total = ReapResult()
    if not worker_ids:
        return total
    while True:
        # An infinite grace: only the worker match selects rows here.
        step = await _reap(
            conn,
            batch=batch,
            grace_s=_NEVER_S,
            worker_ids=worker_ids,
            poison_threshold=poison_threshold,
            now=now,
        )
        total = total + step
        if step.reaped < batch:
            return total


# make_interval(secs => 1e11) is ~3,000 years: no lease has expired that long ago.
_NEVER_S = 1e11


async def sweep_dead_workers(
    conn: Conn,
    *,
    sweep_after_s: float,
    batch: int = 100,
    poison_threshold: int = DEFAULT_POISON_THRESHOLD,
    now: datetime | None = None,
) -> SweepResult:
    """Mark up to `batch` workers silent for more than `sweep_after_s` as dead, and take back
    the jobs they hold at once (refunded, `lease_lost`), in one transaction."""
    async with conn.transaction():
        rows = await run.all_rows(
            conn,
            "worker_sweep_dead",
            {"batch": batch, "sweep_after_s": float(sweep_after_s), "now": sql_now(now)},
        )
        workers = tuple(WorkerId(r["id"]) for r in rows)
        jobs = await requeue_worker_jobs(
            conn, workers, batch=max(batch, 100), poison_threshold=poison_threshold, now=now
        )
    for r in rows:
        log.warning(
            "worker declared dead", worker_id=r["id"], last_heartbeat_at=str(r["last_heartbeat_at"])
        )
    return SweepResult(workers=workers, jobs=jobs)


async def prune_retention(
    conn: Conn,
    *,
    jobs_age_s: float,
    heartbeats_age_s: float,
    batch: int = 5000,
    max_batches: int = 100,
    refresh_tokens_age_s: float = 0.0,
    rate_limits_age_s: float = 86400.0,
    workers_age_s: float = 14 * 86400.0,
    batches_age_s: float = 7 * 86400.0,
    workers_batch: int = 100,
    now: datetime | None = None,
) -> RetentionResult:
    """Delete old rows in bounded batches (never one huge DELETE), at most `max_batches`
    statements per call; `more` says the cap stopped it early.

    Terminal jobs (done, dead_letter, cancelled) finished more than `jobs_age_s` ago go, and
    their executions and logs with them (ON DELETE CASCADE). `dead_letter_jobs` rows are never
    deleted here — only by a user; their `job_id` is nulled. Heartbeats older than
    `heartbeats_age_s`, refresh tokens expired more than `refresh_tokens_age_s` ago, and
    rate-limit windows older than `rate_limits_age_s` go too; so do workers stopped or dead
    for `workers_age_s` that hold no job (`workers_batch` a statement: each nulls the
    worker_id of what it ran), and job batches older than `batches_age_s` none of whose jobs
    is left (`batches_deleted`).
    """
    # Jobs first: the batches and workers that only they kept go in the same pass.
    plan = (
        ("jobs", "retention_delete_jobs", jobs_age_s, batch),
        ("heartbeats", "retention_delete_heartbeats", heartbeats_age_s, batch),
        ("refresh_tokens", "retention_delete_refresh_tokens", refresh_tokens_age_s, batch),
        ("rate_limits", "retention_delete_rate_limits", rate_limits_age_s, batch),
        ("batches_deleted", "retention_delete_batches", batches_age_s, batch),
        ("workers", "retention_delete_workers", workers_age_s, min(batch, workers_batch)),
    )
    deleted = dict.fromkeys((name for name, _, _, _ in plan), 0)
    batches = 0
    for name, query, age_s, size in plan:
        while True:
            if batches >= max_batches:
                return RetentionResult(**deleted, batches=batches, more=True)
            n = await run.execute(
                conn, query, {"batch": size, "age_s": float(age_s), "now": sql_now(now)}
            )
            batches += 1
            deleted[name] += n
            if n < size:
                break
    return RetentionResult(**deleted, batches=batches, more=False)
