"""`jobyard scheduler`: run every loop until SIGTERM/SIGINT, then exit 0.

Start as many replicas as you like, on any machines: there is no leader to elect. Each loop
takes its own pooled connection per pass; when the database is away the loops back off and the
reaper and sweep hold off for one lease once it returns.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from jobyard.db.pool import (
    CONNECTION_ERRORS,
    Conn,
    Pool,
    connect,
    open_pool,
    resolve_database_url,
)
from jobyard.domain.settings import Settings
from jobyard.logs import get_logger
from jobyard.scheduler.cron_materializer import CronConfig, CronMaterializer
from jobyard.scheduler.promoter import Promoter, PromoterConfig
from jobyard.scheduler.reaper import Reaper, ReaperConfig
from jobyard.scheduler.retention import Retention, RetentionConfig
from jobyard.scheduler.service import ConnectionSource, LoopService
from jobyard.scheduler.stats_rollup import StatsConfig, StatsRollup
from jobyard.scheduler.sweeper import Sweeper, SweeperConfig

log = get_logger("jobyard.scheduler")

APPLICATION_NAME = "jobyard-scheduler"
# How long a pass waits for a pooled connection before counting as "database unavailable".
CONNECT_TIMEOUT_S = 5.0
# After the stop signal, passes in progress get this long to finish before being cancelled.
SHUTDOWN_GRACE_S = 10.0


def build_services(settings: Settings) -> list[LoopService]:
    """The six loops, configured from Settings (each Config validates its own fields)."""
    return [
        CronMaterializer(CronConfig(interval_s=settings.cron_interval_s)),
        Promoter(PromoterConfig(interval_s=settings.promoter_interval_s)),
        Reaper(
            ReaperConfig(
                interval_s=settings.reaper_interval_s,
                lease_s=settings.lease_s,
                poison_threshold=settings.poison_pill_threshold,
                suspect_delay_s=settings.poison_pill_delay_s,
            )
        ),
        Sweeper(
            SweeperConfig(
                interval_s=settings.sweep_interval_s,
                sweep_after_s=settings.sweep_after_s,
                lease_s=settings.lease_s,
                poison_threshold=settings.poison_pill_threshold,
            )
        ),
        Retention(
            RetentionConfig(
                interval_s=settings.retention_interval_s,
                batch=settings.retention_batch,
                jobs_age_s=settings.retention_jobs_s,
                heartbeats_age_s=settings.retention_heartbeats_s,
                workers_age_s=settings.retention_workers_s,
                batches_age_s=settings.retention_batches_s,
            )
        ),
        StatsRollup(StatsConfig(interval_s=settings.stats_interval_s)),
    ]


def run_scheduler(settings: Settings) -> int:
    """Run every loop until SIGTERM/SIGINT; returns the exit code (0)."""
    services = build_services(settings)  # bad config fails here, before anything starts
    url = resolve_database_url(settings)
    return asyncio.run(serve(url, services))


async def serve(url: str, services: list[LoopService], stop: asyncio.Event | None = None) -> int:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    signalled = 0

    def _on_signal(signum: int) -> None:
        nonlocal signalled
        signalled += 1
        log.info("stop signal", signal=signal.Signals(signum).name, count=signalled)
        stop.set()
        if signalled > 1:  # a second signal: stop at once
            for task in tasks:
                task.cancel()

    tasks: list[asyncio.Task[None]] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _on_signal, signum)
    try:
        pool = await _open_pool(url, len(services), stop)
        if pool is None:
            return 0
        try:
            source = _connector(pool)
            tasks = [
                asyncio.create_task(svc.run(source, stop), name=f"jobyard-{svc.name}")
                for svc in services
            ]
            log.info("scheduler started", loops=[s.name for s in services])
            await stop.wait()
            _, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await pool.close()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    log.info("scheduler stopped")
    return 0


async def _open_pool(url: str, n_loops: int, stop: asyncio.Event) -> Pool | None:
    """Open the pool, retrying while the database is unreachable (None if stopped first)."""
    delay = 1.0
    while not stop.is_set():
        try:
            # Probe with one plain connection first: a pool that cannot open keeps retrying
            # in the background, and we would rather own the retry (and its backoff) here.
            probe = await connect(url, autocommit=True, application_name=APPLICATION_NAME)
            await probe.close()
            return await open_pool(url, min_size=1, max_size=n_loops + 1, name=APPLICATION_NAME)
        except CONNECTION_ERRORS as exc:
            log.warning("database unavailable at start", error=type(exc).__name__)
        try:
            await asyncio.wait_for(stop.wait(), timeout=delay)
        except TimeoutError:
            delay = min(delay * 2, 30.0)
    return None


def _connector(pool: Pool) -> ConnectionSource:
    @asynccontextmanager
    async def connect() -> AsyncIterator[Conn]:
        async with pool.connection(timeout=CONNECT_TIMEOUT_S) as conn:
            yield conn

    return connect
