"""The LoopService base: validated configs, start/stop, error backoff, outage hook."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest

from jobyard.db.pool import Conn
from jobyard.domain.errors import ConfigurationError
from jobyard.domain.settings import Settings
from jobyard.scheduler.cron_materializer import CronConfig
from jobyard.scheduler.promoter import PromoterConfig
from jobyard.scheduler.reaper import Reaper, ReaperConfig
from jobyard.scheduler.retention import RetentionConfig
from jobyard.scheduler.runner import build_services
from jobyard.scheduler.service import Config, LoopService, PassResult
from jobyard.scheduler.sweeper import SweeperConfig
from tests.scheduler.helpers import dead_database, pooled, wait_until


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Config(interval_s=0, batch=10), "interval_s"),
        (lambda: Config(interval_s=-1, batch=10), "interval_s"),
        (lambda: Config(interval_s=True, batch=10), "interval_s"),
        (lambda: Config(interval_s="1", batch=10), "interval_s"),
        (lambda: Config(interval_s=1, batch=0), "batch"),
        (lambda: Config(interval_s=1, batch=10, max_batches=0), "max_batches"),
        (lambda: CronConfig(batch=1.5), "batch"),
        (lambda: PromoterConfig(interval_s=1e9), "interval_s"),
        (lambda: ReaperConfig(lease_s=0), "lease_s"),
        (lambda: ReaperConfig(poison_threshold=0), "poison_threshold"),
        (lambda: ReaperConfig(grace_s=-1), "grace_s"),
        (lambda: SweeperConfig(sweep_after_s=0), "sweep_after_s"),
        (lambda: RetentionConfig(jobs_age_s=0), "jobs_age_s"),
        (lambda: RetentionConfig(refresh_tokens_age_s=-5), "refresh_tokens_age_s"),
    ],
)
def test_config_refuses_bad_values_naming_the_field(make: Any, field: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        make()
    assert caught.value.details["field"] == field
    assert caught.value.message.startswith(field + ":")


def test_defaults_match_the_documented_intervals() -> None:
    services = {s.name: s for s in build_services(Settings())}
    assert {n: s.config.interval_s for n, s in services.items()} == {
        "cron": 1.0,
        "promoter": 1.0,
        "reaper": 10.0,
        "sweeper": 15.0,
        "retention": 3600.0,
        "stats": 1.0,
    }
    reaper = services["reaper"].config
    assert isinstance(reaper, ReaperConfig)
    assert (reaper.lease_s, reaper.poison_threshold) == (30.0, 3)
    sweeper = services["sweeper"].config
    assert isinstance(sweeper, SweeperConfig)
    assert sweeper.sweep_after_s == 90.0


def test_intervals_come_from_settings() -> None:
    settings = Settings(cron_interval_s=0.2, reaper_interval_s=2, sweep_after_s=45, lease_s=20)
    services = {s.name: s for s in build_services(settings)}
    assert services["cron"].config.interval_s == 0.2
    assert services["reaper"].config.interval_s == 2
    sweeper = services["sweeper"].config
    assert isinstance(sweeper, SweeperConfig)
    assert (sweeper.sweep_after_s, sweeper.lease_s) == (45, 20)


class Counting(LoopService):
    name = "counting"

    def __init__(self, config: Config, results: list[PassResult]) -> None:
        super().__init__(config)
        self.results = results
        self.calls = 0
        self.unavailable = 0

    async def run_once(self, conn: Conn, now: datetime | None = None) -> PassResult:
        self.calls += 1
        await conn.execute("SELECT 1")
        return self.results.pop(0) if self.results else PassResult()

    def on_unavailable(self) -> None:
        self.unavailable += 1


async def test_run_stops_promptly_when_stop_is_set_even_with_a_long_interval(conn: Conn) -> None:
    svc = Counting(Config(interval_s=3600, batch=1), [])
    stop = asyncio.Event()
    task = asyncio.create_task(svc.run(pooled(conn), stop))
    await wait_until(lambda: svc.passes >= 1)
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    assert svc.calls == 1


async def test_more_work_runs_the_next_pass_at_once(conn: Conn) -> None:
    svc = Counting(
        Config(interval_s=3600, batch=1),
        [PassResult({"n": 1}, more=True), PassResult({"n": 1}, more=True), PassResult()],
    )
    stop = asyncio.Event()
    task = asyncio.create_task(svc.run(pooled(conn), stop))
    await wait_until(lambda: svc.passes >= 3)
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    assert svc.calls == 3  # the third pass had no more work: it sleeps the hour (until stop)


def test_next_due_hint_shortens_the_sleep_but_never_below_the_floor() -> None:
    svc = Counting(Config(interval_s=1.0, batch=1), [])
    assert svc.delay_after(PassResult(next_in_s=0.25)) == 0.25
    assert svc.delay_after(PassResult(next_in_s=-3)) == 0.005
    assert 0.89 <= svc.delay_after(PassResult(next_in_s=50)) <= 1.11
    assert svc.delay_after(PassResult(more=True)) == 0.0


async def test_an_unreachable_database_counts_as_a_failure_and_calls_the_hook() -> None:
    svc = Counting(Config(interval_s=0.5, batch=1), [])
    assert await svc.step(lambda: dead_database()) is None
    assert await svc.step(lambda: dead_database()) is None
    assert (svc.failures, svc.unavailable, svc.calls) == (2, 2, 0)
    assert svc.backoff() == 2.0  # 0.5 × 2²


async def test_a_failing_pass_is_logged_and_the_loop_survives(conn: Conn) -> None:
    class Broken(Counting):
        async def run_once(self, conn: Conn, now: datetime | None = None) -> PassResult:
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("boom")
            return PassResult()

    svc = Broken(Config(interval_s=0.01, batch=1), [])
    stop = asyncio.Event()
    task = asyncio.create_task(svc.run(pooled(conn), stop))
    await wait_until(lambda: svc.passes >= 1)
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    assert svc.calls >= 2
    assert svc.unavailable == 0  # a bug is not an outage: the reaper grace is not restarted


async def test_reaper_outage_hook_reopens_the_grace_window() -> None:
    reaper = Reaper(ReaperConfig())
    reaper.grace.holding_off(datetime(2026, 1, 1).astimezone())
    reaper.grace.holding_off(datetime(2027, 1, 1).astimezone())  # window long over
    assert not reaper.grace.active
    await reaper.step(lambda: dead_database())
    assert reaper.grace.active
