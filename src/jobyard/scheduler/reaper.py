"""The lease reaper loop: held jobs whose lease expired go back to queued (attempt refunded) or,
on their poison_threshold-th lost lease, to the dead-letter queue.

After a database outage (and at start) it holds off for one lease (`OutageGrace`): no worker
could heartbeat while the database was away, so leases that expired meanwhile are not proof of
death until live workers have had a full lease to extend them.

It keeps a position (`PassPosition`, scheduler/position.py): once a pass has taken back every
expired lease, the next takes only leases that expired since, less a few seconds. It was made
when the candidates came from a partial index of held jobs on `jobs`, whose dead entries a held
xmin horizon kept, so that a pass walked them all (docs/DATABASE.md, "The scheduler's passes keep
a position"); since migration 0029 they come from the held set, which rotation keeps small. A
full pass, at start, after an outage and every `full_every_s` (or 20 times its own last duration),
takes back what the position passed over: a lease skipped while another session held its row, which
then let go without extending it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from jobyard.core import clock
from jobyard.core.maintenance import db_now, reap_expired_leases
from jobyard.db.pool import Conn
from jobyard.scheduler.position import PassPosition
from jobyard.scheduler.service import (
    Config,
    LoopService,
    OutageGrace,
    PassResult,
    check_int,
    check_number,
)


@dataclass(frozen=True)
class ReaperConfig(Config):
    interval_s: float = 10.0
    batch: int = 500
    lease_s: float = 30.0
    poison_threshold: int = 3
    # After a death pinned on a job (its worker ran it alone), it waits this long before its
    # next run, so a crash loop leaves the workers time for other work (docs/WORKER.md).
    suspect_delay_s: float = 10.0
    # Extra slack on every expiry; 0 because only the database clock is compared with itself.
    grace_s: float = 0.0
    # A full pass (every lease, not only those that expired since the last pass) this often.
    full_every_s: float = 300.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number("lease_s", self.lease_s, 0, 86_400, lo_open=True)
        check_int("poison_threshold", self.poison_threshold, 1, 100)
        check_number("suspect_delay_s", self.suspect_delay_s, 0, 86_400, lo_open=False)
        check_number("grace_s", self.grace_s, 0, 86_400, lo_open=False)
        check_number("full_every_s", self.full_every_s, 0, 86_400, lo_open=False)


# How far behind the last complete pass's cutoff the next pass starts: a heartbeat or claim that
# committed after that pass's snapshot wrote a lease computed from its own start, a little
# earlier than its commit.
REAP_SLACK_S = 5.0


class Reaper(LoopService):
    name = "reaper"
    config: ReaperConfig

    def __init__(self, config: ReaperConfig | None = None) -> None:
        super().__init__(config or ReaperConfig())
        self.grace = OutageGrace(self.config.lease_s)
        self.position = PassPosition(self.config.full_every_s, REAP_SLACK_S)

    def on_unavailable(self) -> None:
        self.grace.lost()
        self.position.forget()

    async def run_once(self, conn: Conn, now: datetime | None = None) -> PassResult:
        started = await db_now(conn, now)
        if self.grace.active and self.grace.holding_off(started):
            return PassResult(
                counts={"requeued": 0, "dead_lettered": 0, "cancelled": 0, "held_off": 1}
            )
        began = clock.monotonic()
        since = self.position.start(began)
        requeued = lettered = cancelled = 0
        more = False
        for _ in range(self.config.max_batches):
            result = await reap_expired_leases(
                conn,
                batch=self.config.batch,
                grace_s=self.config.grace_s,
                poison_threshold=self.config.poison_threshold,
                suspect_delay_s=self.config.suspect_delay_s,
                now=now,
                since=since,
            )
            requeued += result.requeued
            lettered += result.dead_lettered
            cancelled += result.cancelled
            more = result.reaped >= self.config.batch
            if not more:
                break
        if not more:
            self.position.completed(
                started - timedelta(seconds=self.config.grace_s),
                full=since is None,
                at=began,
                took_s=clock.monotonic() - began,
            )
        return PassResult(
            counts={
                "requeued": requeued,
                "dead_lettered": lettered,
                "cancelled": cancelled,
                "held_off": 0,
            },
            more=more,
        )
