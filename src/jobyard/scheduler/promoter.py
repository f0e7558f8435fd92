"""The promoter loop: scheduled jobs (delays, retry backoff) whose run_at is due → queued, in
bounded SKIP LOCKED batches; each promoted queue is NOTIFYed once per batch. Each pass also
empties the job_ready partition that becomes current next (claim.rotate_ready).

It keeps a position (`PassPosition`, scheduler/position.py): once a pass has promoted every job
due by its start, the next looks only at jobs due since, less a few seconds. Under a held xmin
horizon jobs_due_idx keeps a dead entry for every job promoted since the hold began, and a
pass from the start walks them all, every second (docs/DATABASE.md, "The scheduler's passes keep
a position"). A full pass, at start, after an outage and every `full_every_s` (or 20 times its
own last duration), promotes what the position passed over: a job whose enqueue committed more
than the slack after its run_at, or one skipped while another session held its row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobyard.core import clock
from jobyard.core.claim import rotate_ready
from jobyard.core.maintenance import db_now, promote_due
from jobyard.db.pool import Conn
from jobyard.scheduler.position import PassPosition
from jobyard.scheduler.service import Config, LoopService, PassResult, check_number

# How far behind the last complete pass's start the next pass looks: a delayed enqueue or a
# retry computes its run_at from its transaction's start, and may commit after a pass has moved
# past that run_at. Such a job is promoted at once if its transaction took less than this (plus
# its delay), and by the next full pass otherwise.
PROMOTE_SLACK_S = 5.0


@dataclass(frozen=True)
class PromoterConfig(Config):
    interval_s: float = 1.0
    batch: int = 1000
    max_batches: int = 20
    # A full pass (every due job, not only those due since the last pass) this often: the
    # longest a job the position passed over waits.
    full_every_s: float = 10.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number("full_every_s", self.full_every_s, 0, 86_400, lo_open=False)


class Promoter(LoopService):
    name = "promoter"
    config: PromoterConfig

    def __init__(self, config: PromoterConfig | None = None) -> None:
        super().__init__(config or PromoterConfig())
        self.position = PassPosition(self.config.full_every_s, PROMOTE_SLACK_S)

    def on_unavailable(self) -> None:
        self.position.forget()

    async def run_once(self, conn: Conn, now: datetime | None = None) -> PassResult:
        started = await db_now(conn, now)
        began = clock.monotonic()
        since = self.position.start(began)
        promoted = 0
        more = False
        for _ in range(self.config.max_batches):
            result = await promote_due(conn, batch=self.config.batch, now=now, since=since)
            promoted += result.promoted
            # A full batch means more may be due; a short one means the backlog is drained.
            more = result.promoted >= self.config.batch
            if not more:
                break
        if not more:
            self.position.completed(
                started, full=since is None, at=began, took_s=clock.monotonic() - began
            )
        # Promotion fills job_ready; the same pass (every second) empties its next partition.
        await rotate_ready(conn)
        return PassResult(counts={"promoted": promoted}, more=more)
