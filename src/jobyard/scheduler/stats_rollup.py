"""The stats loop: fold finished runs, enqueues and dead letters into the per-queue minute
buckets that charts and /metrics read (core.stats), prune buckets past their retention, and
NOTIFY the dashboards' listener which queues changed. Replicas split nothing and repeat nothing:
each fold locks its source's watermark row FOR UPDATE SKIP LOCKED."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobyard.core import stats
from jobyard.db.pool import Conn
from jobyard.domain.stats import FOLD_LAG_S
from jobyard.scheduler.service import Config, LoopService, PassResult, check_number


@dataclass(frozen=True)
class StatsConfig(Config):
    interval_s: float = 1.0
    batch: int = 10_000
    max_batches: int = 20
    lag_s: float = FOLD_LAG_S

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number("lag_s", self.lag_s, 0, 3600, lo_open=False)


class StatsRollup(LoopService):
    name = "stats"
    config: StatsConfig

    def __init__(self, config: StatsConfig | None = None) -> None:
        super().__init__(config or StatsConfig())
        self._prune_every = 60  # passes

    async def run_once(self, conn: Conn, now: datetime | None = None) -> PassResult:
        c = self.config
        result = await stats.fold(
            conn, batch=c.batch, max_batches=c.max_batches, lag_s=c.lag_s, now=now
        )
        pruned = 0
        if self.passes % self._prune_every == 0:
            pruned = await stats.prune(conn, batch=c.batch, now=now)
        return PassResult(
            counts={
                "runs": result.runs,
                "enqueued": result.enqueued,
                "dead_lettered": result.dead_lettered,
                "pruned": pruned,
            },
            more=result.more,
        )
