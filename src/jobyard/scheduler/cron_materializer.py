"""The cron loop: fire due schedules (core.schedules.materialize_due), then sleep until the next
one is due — never longer than the interval — so an every-second schedule fires on time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobyard.core.schedules import materialize_due, seconds_until_next_due
from jobyard.db.pool import Conn
from jobyard.scheduler.service import Config, LoopService, PassResult


@dataclass(frozen=True)
class CronConfig(Config):
    interval_s: float = 1.0
    batch: int = 100


class CronMaterializer(LoopService):
    name = "cron"
    config: CronConfig

    def __init__(self, config: CronConfig | None = None) -> None:
        super().__init__(config or CronConfig())

    async def run_once(self, conn: Conn, now: datetime | None = None) -> PassResult:
        fired = skipped = duplicates = parked = 0
        more = False
        for _ in range(self.config.max_batches):
            result = await materialize_due(conn, batch=self.config.batch, now=now)
            fired += result.fired
            skipped += result.skipped_overlap
            duplicates += result.duplicates
            parked += result.parked
            more = result.more
            if not more:
                break
        # Wake when the next schedule is due (the database says how far away that is).
        next_in = None if more else await seconds_until_next_due(conn, now=now)
        return PassResult(
            counts={
                "fired": fired,
                "skipped_overlap": skipped,
                "duplicates": duplicates,
                "parked": parked,
            },
            more=more,
            next_in_s=next_in,
        )
