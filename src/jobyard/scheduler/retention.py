"""The retention loop (hourly by default): delete finished jobs (with their executions and logs),
old heartbeats, expired refresh tokens, old rate-limit windows, long-gone workers and emptied
job batches in bounded batches. Dead letters are never deleted here. A pass stops at
`max_batches` statements and, if rows are left, runs again at once instead of waiting an hour."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobyard.core.maintenance import prune_retention
from jobyard.db.pool import Conn
from jobyard.scheduler.service import Config, LoopService, PassResult, check_number


@dataclass(frozen=True)
class RetentionConfig(Config):
    interval_s: float = 3600.0
    batch: int = 5000
    max_batches: int = 100
    jobs_age_s: float = 7 * 86400.0
    heartbeats_age_s: float = 86400.0
    refresh_tokens_age_s: float = 0.0
    rate_limits_age_s: float = 86400.0
    # Workers stopped or dead this long (and holding no job) are deleted, with their heartbeats.
    workers_age_s: float = 14 * 86400.0
    # Job batches this old none of whose jobs is left are deleted.
    batches_age_s: float = 7 * 86400.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in (
            "jobs_age_s",
            "heartbeats_age_s",
            "rate_limits_age_s",
            "workers_age_s",
            "batches_age_s",
        ):
            check_number(name, getattr(self, name), 0, 100 * 365 * 86400.0, lo_open=True)
        check_number(
            "refresh_tokens_age_s", self.refresh_tokens_age_s, 0, 365 * 86400.0, lo_open=False
        )


class Retention(LoopService):
    name = "retention"
    config: RetentionConfig

    def __init__(self, config: RetentionConfig | None = None) -> None:
        super().__init__(config or RetentionConfig())

    async def run_once(self, conn: Conn, now: datetime | None = None) -> PassResult:
        c = self.config
        result = await prune_retention(
            conn,
            jobs_age_s=c.jobs_age_s,
            heartbeats_age_s=c.heartbeats_age_s,
            refresh_tokens_age_s=c.refresh_tokens_age_s,
            rate_limits_age_s=c.rate_limits_age_s,
            workers_age_s=c.workers_age_s,
            batches_age_s=c.batches_age_s,
            batch=c.batch,
            max_batches=c.max_batches,
            now=now,
        )
        return PassResult(
            counts={
                "jobs": result.jobs,
                "heartbeats": result.heartbeats,
                "refresh_tokens": result.refresh_tokens,
                "rate_limits": result.rate_limits,
                "workers": result.workers,
                "batches": result.batches_deleted,
            },
            more=result.more,
        )
