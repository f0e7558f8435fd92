"""The worker process: wait (LISTEN + poll) → claim → dispatch → record, with heartbeats and drain.

Connections: a small pool for claims, completions, failures and handler logs; one dedicated
connection that LISTENs; one dedicated connection for heartbeats, so a busy pool can never
starve the heartbeat that keeps this worker's leases alive.

Every loop rides out a database restart: a connection error is logged, backed off (0.5 s
doubling to 5 s) and retried on a fresh connection. Handlers keep running meanwhile and their
results are retried until they land; fencing makes a retried record safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import gc
import logging
import os
import socket
import sys
import threading
import traceback as traceback_module
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from jobyard.core import claim, lease, projects, transitions, workers, workflows
from jobyard.core.clock import monotonic
from jobyard.db import run
from jobyard.db.pool import Conn, Pool, connect, open_pool
from jobyard.domain import limits
from jobyard.domain.enums import ExecutionOutcome
from jobyard.domain.errors import JobyardError, LeaseLost, ValidationFailed
from jobyard.domain.ids import JobId, ProjectId, QueueId, WorkerId
from jobyard.domain.models import ClaimedJob, HeartbeatResult, QueueRef
from jobyard.domain.schemas import UnstorableText, payload_size
from jobyard.domain.settings import Settings
from jobyard.domain.text import reject_nul
from jobyard.logs import bind_job, get_logger
from jobyard.worker.completer import Completer
from jobyard.worker.context import JobContext, JobLogger
from jobyard.worker.drain import SignalDrain
from jobyard.worker.health import StallRecorder
from jobyard.worker.loop_watch import LoopWatch, handler_codes
from jobyard.worker.registry import Registry, TaskSpec
from jobyard.worker.retrying import RETRYABLE, Backoff
from jobyard.worker.running import Running, StopReason

JOBS_CHANNEL: Final = "jobyard_jobs"
CANCEL_CHANNEL: Final = "jobyard_cancel"
QUEUES_CHANNEL: Final = "jobyard_queues"
# How long a stopped handler gets to unwind before the runtime stops waiting for it.
CANCEL_WAIT_S: Final = 2.0
# Marking the worker stopped is a courtesy (the sweep would mark it dead); do not hang on it.
STOP_RETRY_S: Final = 15.0
# After SIGTERM the worker exits within drain_grace_s + EXIT_MARGIN_S whatever the database
# does: handlers get the grace, then CANCEL_WAIT_S to unwind, then what is left of the margin
# to record their release. What cannot be recorded by then (database down) is left to the
# reaper, as after a crash.
EXIT_MARGIN_S: Final = CANCEL_WAIT_S + 1.0
# A claim round in flight when the drain starts gets this long to finish (it answers in
# milliseconds when the database is up) before it is cancelled.
CLAIM_ROUND_WAIT_S: Final = 1.0
# Allocations (minus frees) between young-generation collections; Python's default is 700.
GC_THRESHOLD_YOUNG: Final = 20_000

log = get_logger("jobyard.worker")
_stdlog = logging.getLogger("jobyard.worker")


@dataclass(frozen=True)
class WorkerConfig:
    url: str
    project: str
    queues: tuple[str, ...]
    concurrency: int
    heartbeat_interval_s: float = 5.0
    lease_s: float = 30.0
    poll_interval_s: float = 1.0
    drain_grace_s: float = 30.0
    pool_max_size: int = 10
    create_project: bool = True
    # Re-read queue priority, pause and max_concurrency this often.
    queue_refresh_s: float = 5.0
    name: str = ""
    # Warn when the event loop stands this long (an async handler that blocks); 0: never.
    loop_block_warn_s: float = 1.0

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        url: str,
        queues: list[str],
        concurrency: int | None = None,
        project: str | None = None,
    ) -> WorkerConfig:
        return cls(
            url=url,
            project=project or settings.project,
            queues=tuple(queues),
            concurrency=concurrency or settings.worker_concurrency,
            heartbeat_interval_s=settings.heartbeat_interval_s,
            lease_s=settings.lease_s,
            poll_interval_s=settings.poll_interval_s,
            drain_grace_s=settings.drain_grace_s,
            loop_block_warn_s=settings.loop_block_warn_s,
            pool_max_size=settings.pool_max_size,
            # Outside production a worker may create its project (local development).
            create_project=settings.env != "prod",
        )


class Worker:
    def __init__(self, config: WorkerConfig, registry: Registry) -> None:
        if not config.queues:
            raise ValidationFailed("a worker needs at least one queue", field="queues")
        self.config = config
        self.registry = registry
        self.name = config.name or f"{socket.gethostname()}:{os.getpid()}"
        self.worker_id = WorkerId(0)
        self.project_id = ProjectId(0)
        # Keyed by run, not job: a reaped job may be re-claimed here while its stale run unwinds.
        self.running: dict[tuple[JobId, int], Running] = {}
        # Runs per job id, so a dispatch finds an older run of its job without scanning every
        # run (the scan was the worker's top Python cost at --concurrency 100: O(n²) a batch).
        self._runs_per_job: dict[JobId, int] = {}
        self.queue_refs: list[QueueRef] = []
        self._queue_ids: set[QueueId] = set()
        self._queues_read_at = -1e9
        # When this process last tried to empty a job_ready partition (claim.rotate_ready);
        # None until the first claim round, which rotates before it claims.
        self._rotated_at: float | None = None
        # The VACUUM of crowded ready partitions that the last rotation started, off the claim
        # loop (claim.vacuum_ready): at most one at a time per process.
        self._vacuum_task: asyncio.Task[None] | None = None
        # Normal claims, or claims past a position while the rotation is blocked.
        self._claim_mode = claim.ClaimMode(
            blocked_after_s=claim.POSITION_AFTER_BLOCKED_S,
            full_every_s=claim.FULL_CLAIM_EVERY_S,
            full_every_held_s=claim.FULL_CLAIM_EVERY_HELD_S,
            slack_s=claim.POSITION_SLACK_S,
            now=monotonic(),
        )
        self._wake = asyncio.Event()
        self._drain_requested = asyncio.Event()
        # monotonic() by which a drain must have ended (set by request_drain).
        self._exit_by: float | None = None
        self._saturated = False
        # Runs whose handler succeeded and whose completion waits in the completer. They hold
        # no handler slot, so the next claim overlaps their completion statement instead of
        # waiting a round trip for it. At most `concurrency` such runs are held on top of the
        # running handlers, so a slow database still throttles claiming.
        self._recording = 0
        # Queues (by name) whose last claim found their max_concurrency used up: a finished run
        # of one of them wakes the claim loop (see _finish).
        self._room_bound: set[str] = set()
        # Poison-pill attribution (docs/WORKER.md): a suspect runs alone. While one runs, this
        # worker claims nothing; once a claim reports a suspect waiting, it stops claiming until
        # it holds nothing, then claims with `solo`.
        self._suspect_run: tuple[JobId, int] | None = None
        self._make_room = False
        # A worker earns a suspect run with `concurrency` other runs first (or by finding
        # nothing else to claim): a pill that kills every worker it meets then still leaves
        # each (restarted) worker some other work, instead of taking it first at every start.
        self._earned = 0
        self._starved = False
        self._pool: Pool | None = None
        self._completer: Completer | None = None
        self._background: list[asyncio.Task[None]] = []
        self._executor = ThreadPoolExecutor(
            max_workers=config.concurrency, thread_name_prefix="jobyard-handler"
        )
        self._busy_threads = 0
        self._busy_lock = threading.Lock()
        # Threads still running a handler whose run was recorded without it (a timeout or a
        # cancel it ignored). Each holds a slot: the executor has `concurrency` threads, and a
        # job claimed without a free one would wait for it and time out without having run.
        self._orphan_threads = 0
        # An operator paused this worker (read from each heartbeat): it claims nothing.
        self._paused = False
        self._abandoned: set[asyncio.Task[Any]] = set()
        # Tasks recording a failure, stop or release (kept referenced until they end).
        self._settling: set[asyncio.Task[None]] = set()
        # Set while nothing runs: what a drain waits for.
        self._idle = asyncio.Event()
        self._idle.set()
        self.outcomes: dict[str, int] = {}
        self.ready = asyncio.Event()
        # Set while the LISTEN connection is subscribed (tests wait for it).
        self.listening = asyncio.Event()
        # Bound once: every JobContext gets the same writer.
        self._progress_writer = self._set_progress
        self.loop_watch = LoopWatch(
            warn_after_s=config.loop_block_warn_s or 1.0,
            codes=handler_codes((spec.name, spec.body) for spec in registry if spec.is_async),
            jobs_of=self._jobs_running,
            on_stall=StallRecorder(config.url, lambda: self.worker_id),
        )

    def _jobs_running(self, handler: str) -> list[int]:
        """Ids of the jobs this worker runs with `handler` (read by the loop watch's thread)."""
        return sorted(r.job.id for r in list(self.running.values()) if r.job.handler == handler)

    # ------------------------------------------------------------------ lifecycle

    def wake(self) -> None:
        """Claim now instead of at the next poll (in-process runs that just enqueued)."""
        self._wake.set()

    def request_drain(self) -> None:
        """Stop claiming and drain (what the first SIGTERM/SIGINT does)."""
        if self._exit_by is None:
            self._exit_by = monotonic() + self.config.drain_grace_s + EXIT_MARGIN_S
        self._drain_requested.set()
        self._wake.set()

    def _time_left(self) -> float | None:
        """Seconds until the drain must end (None while not draining)."""
        return None if self._exit_by is None else max(0.0, self._exit_by - monotonic())

    @property
    def _debug(self) -> bool:
        # Per-job lines are debug and skipped before structlog is entered at all: at info they
        # cost more CPU than the claim and completion SQL of a no-op job, and job_executions
        # already records every run.
        return _stdlog.isEnabledFor(logging.DEBUG)

    @property
    def abandoned(self) -> int:
        """Handlers that ignored cancellation and are still running (tasks or threads)."""
        with self._busy_lock:
            threads = self._busy_threads
        return threads + sum(1 for t in self._abandoned if not t.done())

    async def run(self) -> int:
        """Run until drained; returns the process exit code (0 after a clean drain)."""
        self._pool = await open_pool(
            self.config.url,
            min_size=1,
            max_size=max(2, min(self.config.pool_max_size, self.config.concurrency + 2)),
            name="jobyard-worker",
        )
        try:
            await self._with_retry("register", self._register)
            self._completer = Completer(self._pool, handlers_busy=self._handlers_busy)
            for coro in (self._completer.run(), self._heartbeat_loop(), self._listen_loop()):
                self._background.append(asyncio.create_task(coro))
            if self.config.loop_block_warn_s > 0:
                self._background.append(asyncio.create_task(self.loop_watch.run()))
            log.info(
                "worker started",
                worker_id=self.worker_id,
                worker=self.name,
                queues=list(self.config.queues),
                concurrency=self.config.concurrency,
                handlers=self.registry.names(),
            )
            self.ready.set()
            await self._claim_until_drained()
            await self._drain()
            # Heartbeats stop first: one landing after worker_stop would read as "declared dead".
            await self._stop_background()
            left = self._time_left()
            await self._with_retry(
                "stop", self._stop_row, give_up_after_s=STOP_RETRY_S if left is None else left
            )
            log.info("worker stopped", worker_id=self.worker_id, outcomes=self.outcomes)
            return 0
        finally:
            await self._stop_background()
            # Closing waits for the pool's own tasks; never past the drain's end.
            left = self._time_left()
            await self._pool.close(timeout=5.0 if left is None else max(0.1, min(5.0, left)))
            self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def unrecorded(self) -> int:
        """Runs still held when the drain ended (their release could not be recorded)."""
        return len(self.running)

    async def _stop_background(self) -> None:
        tasks = [*self._background, *([self._vacuum_task] if self._vacuum_task else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._background.clear()
        self._vacuum_task = None

    async def _register(self, conn: Conn) -> None:
        self.project_id = await projects.resolve_project(
            conn, self.config.project, create=self.config.create_project
        )
        await projects.ensure_queues(conn, self.project_id, list(self.config.queues))
        self.worker_id = await workers.register(
            conn,
            self.project_id,
            name=self.name,
            queues=list(self.config.queues),
            concurrency=self.config.concurrency,
            handlers=self.registry.names(),
        )
        await self._read_queues(conn)

    async def _stop_row(self, conn: Conn) -> None:
        await workers.stop(conn, self.worker_id)

    async def _read_queues(self, conn: Conn) -> None:
        self.queue_refs = await claim.queues_by_names(
            conn, self.project_id, list(self.config.queues)
        )
        self._queue_ids = {q.id for q in self.queue_refs}
        self._queues_read_at = monotonic()

    async def _with_retry(
        self,
        what: str,
        op: Callable[[Conn], Awaitable[None]],
        *,
        give_up_after_s: float | None = None,
    ) -> None:
        assert self._pool is not None
        backoff = Backoff(what)
        give_up_at = None if give_up_after_s is None else monotonic() + give_up_after_s
        while True:
            try:
                # Waiting for a pool connection is bounded too: while the database is down the
                # pool would otherwise wait its default 30 s per attempt.
                timeout = None if give_up_at is None else max(0.1, give_up_at - monotonic())
                async with self._pool.connection(timeout=timeout) as conn:
                    await op(conn)
                backoff.reset()
                return
            except RETRYABLE as exc:  # PoolTimeout is an OperationalError
                if give_up_at is not None and monotonic() + backoff.delay_s > give_up_at:
                    log.warning(f"{what} not recorded: database unavailable; giving up")
                    return
                await backoff.wait(exc)

    # ------------------------------------------------------------------ claim

    async def _claim_until_drained(self) -> None:
        """The claim loop, cut short by a drain: a round stuck on an unreachable database (a
        pool connection wait, a backoff) must not delay the drain (it once took 33 s)."""
        loop_task = asyncio.create_task(self._claim_loop())
        drain = asyncio.create_task(self._drain_requested.wait())
        try:
            await asyncio.wait({loop_task, drain}, return_when=asyncio.FIRST_COMPLETED)
            if not loop_task.done():
                await asyncio.wait({loop_task}, timeout=CLAIM_ROUND_WAIT_S)
            if not loop_task.done():
                # A claim cut off mid-statement may have committed: its jobs are held by this
                # worker in the database only, and the reaper gives them back after the lease.
                log.warning("claim round cancelled: the database did not answer in time")
                loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop_task
        finally:
            drain.cancel()

    async def _claim_loop(self) -> None:
        backoff = Backoff("claim")
        while not self._drain_requested.is_set():
            # asyncio.timeout, not wait_for: wait_for runs the wait in a task of its own, one
            # more trip through the event loop between a NOTIFY and the claim it wakes.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.poll_interval_s):
                    await self._wake.wait()
            self._wake.clear()
            if self._drain_requested.is_set():
                break
            try:
                await self._claim_round()
                backoff.reset()
            except RETRYABLE as exc:
                await backoff.wait(exc)
            except Exception:
                log.exception("claim round failed")
                await backoff.wait(RuntimeError("claim round failed"))

    def _handlers_busy(self) -> bool:
        """Whether a handler is still running (and may soon add a success to the batch)."""
        return len(self.running) > self._recording

    def _free_slots(self) -> int:
        if self._paused or self._suspect_run is not None or (self._make_room and self.running):
            return 0
        # Handler slots free, and at most `concurrency` more runs held awaiting their record.
        working = len(self.running) - self._recording + self._orphan_threads
        return min(
            self.config.concurrency - working, 2 * self.config.concurrency - len(self.running)
        )

    def _slot_freed(self) -> None:
        # A saturated claim loop sleeps until a slot frees; wake it rather than wait for a poll.
        if self._saturated and not self._drain_requested.is_set():
            self._wake.set()

    async def _claim_round(self) -> None:
        if self._rotated_at is None:
            # The first round rotates first: its refresh of the ready set's statistics is what
            # makes a backlog enqueued before this worker started look like one to the planner.
            # On the statistics from before it, the claim sorts the whole backlog and its lock
            # filter, below the sort, locks every job in it to take n (docs/DATABASE.md,
            # "Statistics that see a burst").
            await self._rotate_ready()
        await self._claim_queues()
        if self._rotated_at is None or monotonic() - self._rotated_at >= claim.ROTATE_EVERY_S:
            # After the claims, so the job that woke this round does not wait for the rotation;
            # the claim mode it sets holds from the next round on.
            await self._rotate_ready()

    async def _rotate_ready(self) -> None:
        # Workers rotate the ready set too, so a cluster without a scheduler stays flat; the
        # database elects one rotation at a time, and a no-op costs one short statement.
        assert self._pool is not None
        self._rotated_at = monotonic()
        async with self._pool.connection() as conn:
            outcome = await claim.rotate_ready(conn)
            held = await claim.horizon_held(conn, held_s=claim.POSITION_AFTER_HELD_S)
        self._note_rotation(outcome, held)
        if outcome == "rotated":
            # The TRUNCATE invalidated the claim's cached plan. Claim again at once, so that
            # this process replans now (about a millisecond) rather than in the claim that the
            # next job's NOTIFY wakes.
            self._wake.set()
        # A partition too crowded to rotate is vacuumed instead, in a task of its own: the claims
        # go on while the server works. Not while the horizon is held (it could remove nothing).
        if not held and (self._vacuum_task is None or self._vacuum_task.done()):
            self._vacuum_task = asyncio.create_task(self._vacuum_ready())

    async def _vacuum_ready(self) -> None:
        assert self._pool is not None
        started = monotonic()
        try:
            async with self._pool.connection() as conn:
                vacuumed = await claim.vacuum_ready(
                    conn,
                    min_dead=claim.VACUUM_MIN_DEAD,
                    min_live=claim.REFRESH_MIN_CHANGES,
                    min_interval_s=claim.VACUUM_MIN_INTERVAL_S,
                )
        except RETRYABLE as exc:
            # The next rotation tries again; the claims do not depend on it.
            log.debug("ready partitions not vacuumed", error=str(exc))
            return
        except Exception as exc:  # e.g. a statement_timeout shorter than the VACUUM
            log.warning("ready partitions not vacuumed", error=str(exc))
            return
        if vacuumed and self._debug:
            log.debug(
                "ready partitions vacuumed",
                partitions=vacuumed,
                took_ms=round(1000 * (monotonic() - started), 1),
            )

    async def _claim_queues(self) -> None:
        assert self._pool is not None
        free = self._free_slots()
        if free <= 0:
            self._saturated = True
            return
        # Holding nothing (not even an abandoned handler), this worker may take a suspect.
        may_run_suspect = self._earned >= self.config.concurrency or self._starved
        solo = may_run_suspect and not self.running and not self.abandoned
        async with self._pool.connection() as conn:
            if monotonic() - self._queues_read_at > self.config.queue_refresh_s:
                await self._read_queues(conn)
            for queue in self.queue_refs:
                if free <= 0 or self._drain_requested.is_set():
                    break
                # Paused queues are not skipped from the cache: the claim statement reads the
                # pause (and the limit) itself, so a change holds from the next claim on.
                # Claim and start in one statement (queued → claimed → running): one round
                # trip and one commit, and a dropped connection leaves the jobs queued.
                after = self._claim_mode.after(queue.id, monotonic())
                started = monotonic()
                got = await claim.claim(
                    conn,
                    queue,
                    self.worker_id,
                    free,
                    lease_s=self.config.lease_s,
                    start=True,
                    solo=solo,
                    after=after,
                )
                took_s = monotonic() - started
                self._claim_mode.claimed(queue.id, got.position, took_s=took_s)
                if got.room_bound:
                    self._room_bound.add(queue.name)
                else:
                    self._room_bound.discard(queue.name)
                for job in got.jobs:
                    self._dispatch(job, queue.name)
                    if job.suspect:
                        self._suspect_run = (job.id, job.execution_seq)
                        self._earned = 0
                        self._starved = False
                free -= len(got.jobs)
                if self._suspect_run is not None:
                    free = 0
                elif got.suspect_waiting and may_run_suspect:
                    # Finish what we hold, then claim with solo (a suspect runs alone).
                    self._make_room = True
                    free = 0
                elif got.suspect_waiting and not got.jobs:
                    # Only suspects left to claim here: take one once idle.
                    self._starved = True
                if got.jobs:
                    solo = False
        if solo:
            # A claim with solo took the suspect, or found none left: room made.
            self._make_room = False
        self._saturated = free <= 0

    def _note_rotation(self, outcome: str, horizon_held: bool) -> None:
        change = self._claim_mode.rotated(outcome, monotonic(), horizon_held=horizon_held)
        if change in ("entered", "changed"):
            # A session holds job_ready (e.g. a long REPEATABLE READ reader: 'locked'), a
            # backlog is too large to copy ('crowded', migration 0015), or a long transaction
            # holds the xmin horizon: dead ready rows stay in the claim index, so claims start
            # past the last job claimed (docs/DATABASE.md). A spell whose reason changes (a
            # held horizon, then a reader that blocks the rotation too) says so: the full-claim
            # period changes with the reason.
            log.warning(
                "claim position on" if change == "entered" else "claim position reason changed",
                reason=self._claim_mode.reason,
                outcome=outcome,
                horizon_held=horizon_held,
                blocked_s=self._claim_mode.blocked_after_s,
                full_claim_every_s=self._claim_mode.full_period_s,
            )
        elif change == "left":
            log.info(
                "claim position off: job_ready rotates, no long transaction holds the horizon",
                positioned_claims=self._claim_mode.positioned_claims,
                full_claims=self._claim_mode.full_claims,
                slowest_full_claim_s=round(self._claim_mode.slowest_full_claim_s, 3),
            )

    # ------------------------------------------------------------------ execute
    #
    # A run moves on by callbacks, not by a supervising task: the handler task's done callback
    # decides the outcome, a timer enforces the timeout, and a stop request cancels the handler
    # and arms a second timer that gives up on it. Successes go to the completer with a
    # callback; only failures, stops and releases (the rare paths) get a task to record them.
    # A no-op job costs one task; the supervisor task, asyncio.wait and futures it replaced
    # were about a third of the worker's CPU per job (docs/BENCHMARKS.md).

    def _dispatch(self, job: ClaimedJob, queue: str) -> None:
        loop = asyncio.get_running_loop()
        spec = self.registry.get(job.handler)
        ctx = JobContext(
            job_id=job.id,
            attempt=job.attempt,
            execution_seq=job.execution_seq,
            max_attempts=job.max_attempts,
            payload=job.payload,
            queue=queue,
            handler=job.handler,
            logger=JobLogger(job, self._append_log, loop),
            _progress=self._progress_writer,
            parents_reader=self._parent_results,
        )
        # The job's log fields are bound once, in a context of its own that the handler task
        # and any recording task run in; nothing needs unbinding.
        context = contextvars.copy_context()
        context.run(
            bind_job,
            {
                "job_id": job.id,
                "queue": queue,
                "handler": job.handler,
                "attempt": job.attempt,
                "execution_seq": job.execution_seq,
            },
        )
        r = Running(job=job, queue=queue, spec=spec, ctx=ctx, context=context)
        if job.id in self._runs_per_job:
            for older in self._runs_of(job.id):
                # This worker still runs an earlier execution of the job: it lost its lease.
                self._request_stop(older, StopReason.LEASE_LOST)
        self._runs_per_job[job.id] = self._runs_per_job.get(job.id, 0) + 1
        self.running[r.key] = r
        self._idle.clear()
        r.started = monotonic()
        if self._debug:
            context.run(log.debug, "job started")
        if spec is None:
            r.settled = True
            message = (
                f"no handler named {job.handler!r} in this worker "
                f"(it has: {', '.join(self.registry.names())})"
            )
            self._settle(r, self._record_failure(r, "UnknownHandler", message))
            return
        try:
            kwargs = spec.arguments(ctx)
        except ValidationFailed as exc:
            r.settled = True
            self._settle(
                r, self._record_failure(r, "ValidationFailed", exc.message, retryable=False)
            )
            return
        task = loop.create_task(self._invoke(r, spec, kwargs), context=context)
        r.handler_task = task
        timeout = r.timeout_s
        if timeout is not None:
            r.timer = loop.call_later(timeout, self._request_stop, r, StopReason.TIMEOUT)
        task.add_done_callback(functools.partial(self._on_handler_done, r))

    def _on_handler_done(self, r: Running, task: asyncio.Task[Any]) -> None:
        if r.settled:
            # Stopped and given up on (abandoned) before it ended; its outcome is recorded.
            _consume(task)
            return
        r.settled = True
        r.cancel_timer()
        if r.stop_reason is not None:
            # Stopped from outside and unwound in time: the reason decides what is recorded.
            _consume(task)
            self._settle(r, self._record_stopped(r))
            return
        if task.cancelled():
            self._settle(r, self._record_failure(r, "CancelledError", "the handler was cancelled"))
            return
        exc: BaseException | None = task.exception()
        if isinstance(exc, _HandlerExited):
            exc = exc.__cause__
        if exc is not None:
            if isinstance(exc, LeaseLost):
                r.context.run(log.warning, "lease lost (reported to the handler)")
                self._finish(r, "lease_lost")
                return
            self._settle(
                r,
                self._record_failure(
                    r,
                    type(exc).__name__,
                    _described(exc),
                    retryable=not isinstance(exc, ValidationFailed),
                    traceback=_formatted(exc),
                ),
            )
            return
        result = task.result()
        problem = _result_problem(result)
        if problem is not None:
            self._settle(r, self._record_failure(r, "InvalidResult", problem, retryable=False))
            return
        assert self._completer is not None
        self._completer.submit(r.job, result, functools.partial(self._on_completed, r))
        self._recording += 1
        self._slot_freed()

    def _on_completed(self, r: Running, landed: bool | Exception) -> None:
        self._recording -= 1
        if isinstance(landed, Exception):
            r.context.run(
                log.error, "completion not recorded", error=type(landed).__name__, exc_info=landed
            )
            # The database refused this success alone (the completer retried it by itself): a
            # result no check in Python caught. Recorded as the job's failure, not left
            # running for the reaper to hand to the next worker, which would meet it again.
            self._settle(
                r,
                self._record_failure(
                    r,
                    "InvalidResult",
                    _refusal(landed),
                    retryable=False,
                ),
            )
        elif not landed:
            r.context.run(
                log.warning, "completion not recorded: this worker no longer held the job"
            )
            self._finish(r, "lease_lost")
        else:
            self._finish(r, "succeeded")

    def _request_stop(self, r: Running, reason: StopReason) -> bool:
        """Cancel a run's handler for `reason`; False if its outcome is already decided."""
        if r.settled or r.stop_reason is not None:
            return False
        if r.handler_task is not None and r.handler_task.done():
            # It finished and its done callback is queued: that result stands (a lost lease
            # still shows, as the fenced completion not landing).
            return False
        r.stop_reason = reason
        r.cancel_timer()
        r.ctx._signal_cancel()
        if r.handler_task is not None:
            r.handler_task.cancel()
            r.timer = asyncio.get_running_loop().call_later(CANCEL_WAIT_S, self._give_up_on, r)
        return True

    def _give_up_on(self, r: Running) -> None:
        """The handler ignored cancellation for CANCEL_WAIT_S: record the stop without it."""
        r.timer = None
        if r.settled:
            return
        r.settled = True
        r.context.run(
            log.warning, "handler ignored cancellation; abandoning it", wait_s=CANCEL_WAIT_S
        )
        if r.handler_task is not None:
            self._abandoned.add(r.handler_task)
        self._settle(r, self._record_stopped(r))

    def _settle(self, r: Running, record: Coroutine[Any, Any, str]) -> None:
        """Record a non-success outcome in a task of its own (in the job's context)."""

        async def settle() -> None:
            outcome = "error"
            try:
                outcome = await record
            finally:
                # Already in the job's context: entering it again would raise.
                self._finish(r, outcome, in_job_context=True)

        task = asyncio.get_running_loop().create_task(settle(), context=r.context)
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    def _finish(self, r: Running, outcome: str, *, in_job_context: bool = False) -> None:
        """The run's outcome is recorded (or nothing is to be): forget it. `in_job_context`:
        called from a task running in `r.context` (a Context cannot be entered twice)."""
        if r.key == self._suspect_run:
            self._suspect_run = None
        elif not r.job.suspect:
            self._earned += 1
        if self.running.pop(r.key, None) is not None:
            left = self._runs_per_job.pop(r.job.id) - 1
            if left:
                self._runs_per_job[r.job.id] = left
        if r.spec is not None and not r.spec.is_async:
            self._leave_thread(r)
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if not self.running:
            self._idle.set()
        self._slot_freed()
        if r.queue in self._room_bound:
            # The last claim of this job's queue found its max_concurrency used up, and this
            # run, now recorded, held one of those places: claim now, not at the next poll
            # (which capped a limit below the worker's concurrency at about limit jobs a poll).
            self._wake.set()
        if self._debug:
            duration_ms = round((monotonic() - r.started) * 1000)
            if in_job_context:
                log.debug("job finished", outcome=outcome, duration_ms=duration_ms)
            else:
                r.context.run(log.debug, "job finished", outcome=outcome, duration_ms=duration_ms)

    def _leave_thread(self, r: Running) -> None:
        """A thread handler's run is recorded: if its thread still runs, it holds a slot."""
        with self._busy_lock:
            r.left = True
            if r.in_thread and not r.orphaned:
                r.orphaned = True
                self._orphan_threads += 1
            orphans = self._orphan_threads if r.orphaned else 0
        if orphans:
            log.warning(
                "handler thread still running after its run was recorded (it does not check "
                "ctx.is_cancelled()); this worker claims fewer jobs until it returns",
                handler=r.job.handler,
                job_id=r.job.id,
                orphan_threads=orphans,
            )

    async def _record_stopped(self, r: Running) -> str:
        match r.stop_reason:
            case StopReason.LEASE_LOST:
                # The reaper already recorded this execution as lease_lost; write nothing.
                log.warning("lease lost; handler stopped")
                return "lease_lost"
            case StopReason.TIMEOUT:
                return await self._record_failure(
                    r,
                    "TimeoutError",
                    f"handler did not finish within {r.timeout_s:g} s",
                    outcome=ExecutionOutcome.TIMED_OUT,
                )
            case StopReason.CANCEL_REQUESTED:
                await self._record(r, "cancel", self._finish_cancelled)
                return "cancelled"
            case StopReason.DRAIN | StopReason.WORKER_DEAD | None:
                await self._record(r, "release", self._release)
                return "released"

    async def _invoke(self, r: Running, spec: TaskSpec, kwargs: dict[str, Any]) -> Any:
        try:
            if spec.is_async:
                return await spec.fn(r.ctx, **kwargs)
            loop = asyncio.get_running_loop()
            call = functools.partial(self._in_thread, loop, r, spec, kwargs)
            # copy_context: the job's log bindings follow it into the thread.
            return await loop.run_in_executor(
                self._executor, functools.partial(contextvars.copy_context().run, call)
            )
        except (SystemExit, KeyboardInterrupt) as exc:
            # A handler's sys.exit() fails its job, not the worker: asyncio carries these two
            # out of the event loop, which would end every other run mid-flight. (The
            # worker's own Ctrl-C and SIGTERM arrive as signals, never through a handler.)
            raise _HandlerExited() from exc

    def _in_thread(
        self, loop: asyncio.AbstractEventLoop, r: Running, spec: TaskSpec, kwargs: dict[str, Any]
    ) -> Any:
        with self._busy_lock:
            self._busy_threads += 1
            r.in_thread = True
            if r.left:  # stopped and recorded before this thread picked it up
                r.orphaned = True
                self._orphan_threads += 1
        try:
            return spec.fn(r.ctx, **kwargs)
        finally:
            with self._busy_lock:
                self._busy_threads -= 1
                r.in_thread = False
                orphan_ended = r.orphaned
                if orphan_ended:
                    self._orphan_threads -= 1
            if orphan_ended:
                with contextlib.suppress(RuntimeError):  # the loop closed after a drain
                    loop.call_soon_threadsafe(self._slot_freed)

    # ------------------------------------------------------------------ record

    async def _record(
        self, r: Running, what: str, op: Callable[[Conn, ClaimedJob], Awaitable[bool]]
    ) -> bool:
        """Run a fenced write until it lands (connection errors are retried)."""
        assert self._pool is not None
        backoff = Backoff(what)
        while True:
            try:
                async with self._pool.connection() as conn:
                    held = await op(conn, r.job)
                backoff.reset()
                if not held:
                    log.warning(f"{what} not recorded: this worker no longer held the job")
                return held
            except RETRYABLE as exc:
                await backoff.wait(exc)

    async def _finish_cancelled(self, conn: Conn, job: ClaimedJob) -> bool:
        return await transitions.finish_cancelled(conn, job)

    async def _release(self, conn: Conn, job: ClaimedJob) -> bool:
        return job.id in await transitions.release_many(conn, [job])

    async def _record_failure(
        self,
        r: Running,
        error_type: str,
        message: str,
        *,
        outcome: ExecutionOutcome = ExecutionOutcome.FAILED,
        retryable: bool = True,
        traceback: str | None = None,
    ) -> str:
        # The exception's type, message and traceback are recorded, never the payload.
        async def fail(conn: Conn, job: ClaimedJob) -> bool:
            result = await transitions.fail(
                conn,
                job,
                error_type,
                message,
                outcome=outcome,
                retryable=retryable,
                traceback=traceback,
            )
            log.info(
                "job failed",
                error_type=error_type,
                next_status=result.status.value,
                traceback=traceback,
            )
            return True

        try:
            await self._record(r, "fail", fail)
        except LeaseLost:
            log.warning("failure not recorded: this worker no longer held the job")
            return "lease_lost"
        return outcome.value

    async def _parent_results(self, job_id: int) -> dict[int, Any]:
        assert self._pool is not None
        async with self._pool.connection() as conn:
            return await workflows.parent_results(conn, job_id)

    async def _append_log(
        self, job: ClaimedJob, level: str, message: str, fields: dict[str, Any]
    ) -> None:
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn:
                await transitions.append_log(conn, job, level, message, fields)
        except RETRYABLE as exc:
            # Job logs are best effort during an outage; the handler keeps running.
            log.warning("job log line dropped: database unavailable", error=type(exc).__name__)

    async def _set_progress(self, job: ClaimedJob, fraction: float, message: str | None) -> None:
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn:
                await transitions.set_progress(conn, job, fraction, message)
        except RETRYABLE as exc:
            # Progress is best effort during an outage, like job logs; the next report wins.
            log.warning("job progress dropped: database unavailable", error=type(exc).__name__)

    # ------------------------------------------------------------------ heartbeat

    async def _heartbeat_loop(self) -> None:
        backoff = Backoff("heartbeat")
        conn: Conn | None = None
        try:
            while True:
                try:
                    if conn is None or conn.closed:
                        conn = await connect(
                            self.config.url, autocommit=True, application_name="jobyard-heartbeat"
                        )
                    await self._beat(conn)
                    backoff.reset()
                except RETRYABLE as exc:
                    await _close_quietly(conn)
                    conn = None
                    await backoff.wait(exc)
                    continue
                except Exception:
                    log.exception("heartbeat failed")
                    await _close_quietly(conn)
                    conn = None
                    await backoff.wait(RuntimeError("heartbeat failed"))
                    continue
                await asyncio.sleep(self.config.heartbeat_interval_s)
        finally:
            await _close_quietly(conn)

    async def _beat(self, conn: Conn) -> None:
        worker_id = self.worker_id
        held = [r.job for r in self.running.values() if r.job.worker_id == worker_id]
        result = await lease.heartbeat(
            conn,
            worker_id,
            held,
            lease_s=self.config.lease_s,
            capacity=self.config.concurrency,
            draining=self._drain_requested.is_set(),
            orphan_threads=self._orphan_threads,
        )
        await self._apply_heartbeat(conn, held, result)

    async def _apply_heartbeat(
        self, conn: Conn, held: list[ClaimedJob], result: HeartbeatResult
    ) -> None:
        latest: dict[JobId, int] = {}
        for job in held:
            latest[job.id] = max(latest.get(job.id, 0), job.execution_seq)
        for job in held:
            # `held` names jobs, not runs; only the newest run of a job can be the held one.
            if job.id in result.held and job.execution_seq == latest[job.id]:
                continue
            r = self.running.get((job.id, job.execution_seq))
            if r is not None:
                # Reaped (and maybe re-claimed elsewhere): stop the handler, record nothing.
                self._request_stop(r, StopReason.LEASE_LOST)
        for job_id in result.cancel_requested:
            self._stop_job(job_id, StopReason.CANCEL_REQUESTED)
        if result.alive and result.paused != self._paused:
            self._paused = result.paused
            if result.paused:
                log.warning("paused by an operator: claiming nothing until resumed")
            else:
                log.info("resumed by an operator")
                self._wake.set()
        if not result.alive:
            log.warning("this worker was declared dead; releasing its jobs and re-registering")
            for r in list(self.running.values()):
                if r.job.worker_id == self.worker_id:
                    self._request_stop(r, StopReason.WORKER_DEAD)
            if self._drain_requested.is_set():
                return
            self.worker_id = await workers.register(
                conn,
                self.project_id,
                name=self.name,
                queues=list(self.config.queues),
                concurrency=self.config.concurrency,
                handlers=self.registry.names(),
            )
            self._paused = False  # a new row: a pause was the old one's
            log.info("worker re-registered", worker_id=self.worker_id)

    def _runs_of(self, job_id: JobId) -> list[Running]:
        return [r for r in self.running.values() if r.job.id == job_id]

    def _stop_job(self, job_id: JobId, reason: StopReason) -> None:
        runs = self._runs_of(job_id)
        if runs:
            newest = max(runs, key=lambda r: r.job.execution_seq)
            if self._request_stop(newest, reason):
                log.info("stopping job", job_id=job_id, reason=reason.value)

    # ------------------------------------------------------------------ listen

    async def _listen_loop(self) -> None:
        backoff = Backoff("listen")
        while True:
            conn: Conn | None = None
            try:
                conn = await connect(
                    self.config.url, autocommit=True, application_name="jobyard-listen"
                )
                await run.execute(conn, "read_listen_jobs")
                await run.execute(conn, "read_listen_cancel")
                await run.execute(conn, "read_listen_queues")
                self.listening.set()
                backoff.reset()
                # Anything enqueued while we were not listening is found by this claim.
                self._wake.set()
                async for note in conn.notifies():
                    self._on_notify(note.channel, note.payload)
            except RETRYABLE as exc:
                await backoff.wait(exc)
            except Exception:
                log.exception("listener failed")
                await backoff.wait(RuntimeError("listener failed"))
            finally:
                self.listening.clear()
                await _close_quietly(conn)

    def _on_notify(self, channel: str, payload: str) -> None:
        if channel == JOBS_CHANNEL:
            if payload.isdigit() and QueueId(int(payload)) in self._queue_ids:
                self._wake.set()
        elif channel == QUEUES_CHANNEL:
            if payload.isdigit() and QueueId(int(payload)) in self._queue_ids:
                # Pause, resume or a new limit: re-read the settings before the next claim.
                self._queues_read_at = -1e9
                self._wake.set()
        elif channel == CANCEL_CHANNEL:
            job_part, _, worker_part = payload.partition(":")
            if job_part.isdigit() and worker_part == str(self.worker_id):
                self._stop_job(JobId(int(job_part)), StopReason.CANCEL_REQUESTED)

    # ------------------------------------------------------------------ drain

    async def _drain(self) -> None:
        log.info("draining", in_flight=len(self.running), grace_s=self.config.drain_grace_s)
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=self.config.drain_grace_s)
        except TimeoutError:
            log.info("grace period over; releasing unfinished jobs", count=len(self.running))
            for r in list(self.running.values()):
                self._request_stop(r, StopReason.DRAIN)
            try:
                await asyncio.wait_for(self._idle.wait(), timeout=self._time_left())
            except TimeoutError:
                # The releases could not be recorded (database down): leave them to the reaper.
                log.warning(
                    "drain time over; jobs left to the reaper (their release was not recorded)",
                    count=len(self.running),
                )


def _consume(task: asyncio.Task[Any]) -> None:
    """Retrieve a stopped handler's outcome so asyncio does not report it as unhandled."""
    if not task.cancelled():
        task.exception()


async def _close_quietly(conn: Conn | None) -> None:
    if conn is not None:
        # Closing a connection the server already dropped may raise; there is nothing to do.
        with contextlib.suppress(Exception):
            await conn.close()


def _refusal(exc: Exception) -> str:
    """Why a success could not be recorded, as the job's error: a database error translated at
    the db boundary names the constraint it broke (db/errors.py words a CHECK it has no message
    for as "value out of range"); anything else by its type and message."""
    if isinstance(exc, JobyardError):
        constraint = exc.details.get("constraint")
        where = f" (constraint {constraint})" if constraint else ""
        return f"the database refused the result: {exc.message}{where}"
    return f"the result could not be recorded: {type(exc).__name__}: {_described(exc)}"


class _HandlerExited(Exception):
    """Carries a handler's SystemExit or KeyboardInterrupt (its __cause__) to the run's end."""


def _described(exc: BaseException) -> str:
    """The exception's message; its repr if it has none; a note if neither can be made (a
    handler's exception type may fail in its own __str__)."""
    try:
        return str(exc) or repr(exc)
    except Exception as failed:
        return f"<the exception's str() failed: {type(failed).__name__}>"


def _formatted(exc: BaseException) -> str:
    """The handler's traceback as Python prints it (cut to size when it is stored)."""
    return "".join(traceback_module.format_exception(exc))


def _result_problem(result: Any) -> str | None:
    """Why a handler's return value cannot be stored as the job result (None if it can)."""
    if result is None:
        return None  # most handlers return nothing: skip the JSON encoding per job
    try:
        size = payload_size(result)
    except UnstorableText as exc:
        return f"the handler's result cannot be stored: {exc}"
    except (TypeError, ValueError) as exc:
        return f"the handler returned a value that is not JSON: {exc}"
    try:
        reject_nul(result, "result")
    except ValidationFailed as exc:
        return f"the handler's result cannot be stored: {exc.message}"
    if size > limits.MAX_PAYLOAD_BYTES:
        return f"the handler's result is larger than {limits.MAX_PAYLOAD_BYTES // 1024} KB"
    return None


def run_worker(config: WorkerConfig, registry: Registry) -> int:
    """Process entry point: run a worker with signal-driven drain; returns the exit code."""
    # Start-up objects (modules, settings, the registry) live as long as the process: move
    # them out of the collector's view, and collect young objects less often. Each job makes
    # a few dozen short-lived objects; at the default threshold a collection ran every few
    # jobs and cost about a tenth of the worker's CPU per no-op job (docs/BENCHMARKS.md).
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD_YOUNG, *gc.get_threshold()[1:])
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    worker = Worker(config, registry)
    drain = SignalDrain(worker.request_drain)
    drain.install(loop)
    try:
        code = loop.run_until_complete(worker.run())
    finally:
        drain.uninstall()
    if worker.abandoned or worker.unrecorded:
        # A handler ignored cancellation (its job is already released), or a release is still
        # retrying against a database that is down. Waiting would turn a drain into a hang.
        log.warning(
            "exiting with work unfinished",
            handlers=worker.abandoned,
            unrecorded=worker.unrecorded,
        )
        _flush_and_exit(code)
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
    return code


def _flush_and_exit(code: int) -> None:
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)
