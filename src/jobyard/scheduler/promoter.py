"""The promoter loop: scheduled jobs (delays, retry backoff) whose run_at is due → queued, in
bounded SKIP LOCKED batches; each promoted queue is NOTIFYed once per batch. Each pass also
empties the job_ready partition that becomes current next (claim.rotate_ready)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobyard.core.claim import rotate_ready
from jobyard.core.maintenance import promote_due
from jobyard.db.pool import Conn
from jobyard.scheduler.service import Config, LoopService, PassResult


@dataclass(frozen=True)
class PromoterConfig(Config):
    interval_s: float = 1.0
    batch: int = 1000
    max_batches: int = 20


class Promoter(LoopService):
    name = "promoter"
    config: PromoterConfig

    def __init__(self, config: PromoterConfig | None = None) -> None:
        super().__init__(config or PromoterConfig())

    async def run_once(self, conn: Conn, now: datetime | None = None) -> PassResult:
        promoted = 0
        more = False
        for _ in range(self.config.max_batches):
            result = await promote_due(conn, batch=self.config.batch, now=now)
            promoted += result.promoted
            # A full batch means more may be due; a short one means the backlog is drained.
            more = result.promoted >= self.config.batch
            if not more:
                break
        # Promotion fills job_ready; the same pass (every second) empties its next partition.
        await rotate_ready(conn)
        return PassResult(counts={"promoted": promoted}, more=more)
