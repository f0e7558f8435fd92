"""The dead-worker sweep: workers silent for `sweep_after_s` are marked dead and the jobs they
hold are taken back at once, by the reaper's own statement (refund, `lease_lost`, poison rule).

Default `sweep_after_s` = 90 s = 3 leases = 18 missed heartbeats: by then every lease such a
worker held has expired, so the sweep never takes a job a live-but-slow worker could still
extend; it records the death and backstops the reaper. Like the reaper, it holds off for one
lease after a database outage (no worker could heartbeat during it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobyard.core.maintenance import db_now, sweep_dead_workers
from jobyard.db.pool import Conn
from jobyard.scheduler.service import (
    Config,
    LoopService,
    OutageGrace,
    PassResult,
    check_int,
    check_number,
)


@dataclass(frozen=True)
class SweeperConfig(Config):
    interval_s: float = 15.0
    batch: int = 100
    sweep_after_s: float = 90.0
    lease_s: float = 30.0
    poison_threshold: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number("sweep_after_s", self.sweep_after_s, 0, 86_400, lo_open=True)
        check_number("lease_s", self.lease_s, 0, 86_400, lo_open=True)
        check_int("poison_threshold", self.poison_threshold, 1, 100)


class Sweeper(LoopService):
    name = "sweeper"
    config: SweeperConfig

    def __init__(self, config: SweeperConfig | None = None) -> None:
        super().__init__(config or SweeperConfig())
        self.grace = OutageGrace(self.config.lease_s)

    def on_unavailable(self) -> None:
        self.grace.lost()

    async def run_once(self, conn: Conn, now: datetime | None = None) -> PassResult:
        if self.grace.active and self.grace.holding_off(await db_now(conn, now)):
            return PassResult(
                counts={
                    "workers_dead": 0,
                    "requeued": 0,
                    "dead_lettered": 0,
                    "cancelled": 0,
                    "held_off": 1,
                }
            )
        workers = requeued = lettered = cancelled = 0
        more = False
        for _ in range(self.config.max_batches):
            result = await sweep_dead_workers(
                conn,
                sweep_after_s=self.config.sweep_after_s,
                batch=self.config.batch,
                poison_threshold=self.config.poison_threshold,
                now=now,
            )
            workers += len(result.workers)
            requeued += result.jobs.requeued
            lettered += result.jobs.dead_lettered
            cancelled += result.jobs.cancelled
            more = len(result.workers) >= self.config.batch
            if not more:
                break
        return PassResult(
            counts={
                "workers_dead": workers,
                "requeued": requeued,
                "dead_lettered": lettered,
                "cancelled": cancelled,
                "held_off": 0,
            },
            more=more,
        )
