"""Scenarios over time (`jobyard bench --scenario steady|pressure|burndown`).

Each runs on a fresh clone of the migrated template with real worker processes (no-op handler)
and samples the database every few seconds: the database clock, the age of the oldest
transaction holding the xmin horizon, and every table's dead tuples, writes and total size. What
the engine records itself (executions' started_at and finished_at, jobs' run_at/created_at) is
read back at the end and cut into the same windows, so completions and pickup latency per window
are exact and cost the running system nothing.

The hot relations are not named in advance: `jobs` and `job_executions` are always shown, the
partitions of `job_ready` and `job_held` as one family each whenever the run wrote them, plus
any other table written at least once for every twenty jobs completed. The same run therefore
measures whichever storage design the schema has.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any, Final

from jobyard.benchmarks import harness, scenarios
from jobyard.benchmarks.activity import Activity, ActivitySampler
from jobyard.benchmarks.load import Producer, Readers, XidHolder
from jobyard.benchmarks.processes import BenchError, WorkerProcesses
from jobyard.benchmarks.scenarios import (
    HANDLER,
    PROJECT,
    QUEUE,
    STALL_TIMEOUT_S,
    Progress,
    _setup,
    _wait_listening,
)
from jobyard.core import admin, enqueue
from jobyard.db import run, testing
from jobyard.db.pool import Conn, connect
from jobyard.domain import limits
from jobyard.domain.schemas import BatchCreate, BatchItem

SCENARIOS: Final = ("steady", "pressure", "burndown")
# The families always shown: exact names, and a prefix for a design's partitioned tables (the
# ready set, the held set; each shown only when the run wrote it).
NAMED: Final = ("jobs", "job_executions")
PREFIXES: Final = ("job_ready", "job_held")
# Any other table is hot when it is written at least once for every 20 jobs completed.
HOT_WRITES_PER_JOB: Final = 0.05
# "Back to baseline" after the release: every later window's p99 within this factor of the
# baseline's typical window p99 (the target), and the backlog no larger than it was in
# the baseline…
RECOVERY_P99_FACTOR: Final = 2.0
# …where a window's p99 is the median of it and the next few (10 s at the default sampling), or
# of the phase's last few for the windows that have fewer after them.
RECOVERY_SMOOTHING: Final = 5


@dataclass(frozen=True)
class TimelineConfig:
    scenario: str
    rate: float = 800.0
    # When set, the offered rate is this fraction of a 2-process drain measured just before.
    rate_fraction: float | None = None
    duration_s: float = 120.0  # steady
    baseline_s: float = 120.0  # pressure
    hold_s: float = 600.0
    recovery_s: float = 120.0
    readers: int = 0
    idle_hold: bool = True
    # steady, pressure: the queue's max_concurrency (None: unlimited). Every claim of a limited
    # queue takes the queue's row lock and counts its held jobs first (core.claim).
    max_concurrency: int | None = None
    jobs: int = 1_000_000  # burndown
    processes: int = 2
    concurrency: int = 50
    sample_s: float = 2.0
    calibrate_jobs: int = 20_000
    # The offered rate of --rate-fraction is a fraction of the median of this many drains: one
    # drain of 20,000 jobs lasts about a second, and on a host that drifts one second's rate
    # can be a lucky one (17,845/s once, where the same host sustained under 14,000/s).
    calibrate_runs: int = 3
    progress_every_s: float = 10.0


FULL: Final = TimelineConfig(scenario="steady")
QUICK: Final = TimelineConfig(
    scenario="steady",
    rate=200.0,
    duration_s=3.0,
    baseline_s=2.0,
    hold_s=3.0,
    recovery_s=2.0,
    jobs=2_000,
    sample_s=0.5,
    calibrate_jobs=300,
    calibrate_runs=1,
    progress_every_s=1.0,
)


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float | None  # None: until every pre-inserted job is done (the burn-down)


def phases_for(config: TimelineConfig) -> list[Phase]:
    if config.scenario == "steady":
        return [Phase("steady", config.duration_s)]
    if config.scenario == "pressure":
        return [
            Phase("baseline", config.baseline_s),
            Phase("hold", config.hold_s),
            Phase("recovery", config.recovery_s),
        ]
    if config.scenario == "burndown":
        return [Phase("burndown", None)]
    raise ValueError(f"unknown scenario {config.scenario!r}; one of {', '.join(SCENARIOS)}")


@dataclass(frozen=True)
class RelationStat:
    dead: int
    live: int
    writes: int
    bytes: int


@dataclass(frozen=True)
class Sample:
    """The state at one moment; `phase` is the phase of the window that ends here."""

    at: datetime
    phase: str
    offered: int  # cumulative, what the schedule said
    enqueued: int  # cumulative, what was inserted
    executions: int  # the highest execution id (live progress only)
    xmin_age: int | None
    oldest_xact_s: float | None
    relations: dict[str, RelationStat]
    # The oldest hold by a session of this database (the run's own): another database's xid
    # holds the horizon too and counts in xmin_age, but is not this run's doing.
    xmin_age_here: int | None = None
    # What the sessions did since the sample before (benchmarks/activity.py).
    activity: Activity = field(default_factory=Activity)
    # The server's WAL so far: bytes, and full-page images (None in runs saved before).
    wal_bytes: int | None = None
    wal_fpi: int | None = None


@dataclass(frozen=True)
class Window:
    phase: str
    start_s: float
    end_s: float
    offered: int
    enqueued: int
    completions: int
    backlog: int  # inserted and not yet finished, at the window's end
    pickups: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    xmin_age: int | None
    oldest_xact_s: float | None
    dead: dict[str, int]
    bytes: dict[str, int]
    xmin_age_here: int | None = None
    activity: Activity = field(default_factory=Activity)
    # WAL the server wrote in the window: bytes and full-page images.
    wal_bytes: int | None = None
    wal_fpi: int | None = None

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class PhaseSummary:
    name: str
    start_s: float
    end_s: float
    offered_per_s: float
    completed_per_s: float
    completion_ratio: float | None
    pickups: int
    p50_ms: float | None
    p99_ms: float | None
    p99_vs_baseline: float | None
    max_xmin_age: int | None
    dead_at_end: dict[str, int]
    bytes_at_end: dict[str, int]
    dead_peak: dict[str, int]  # the most any sample of the phase saw (autovacuum may follow)
    # Recovery phase only: seconds from the release until every later window is back to the
    # baseline (RECOVERY_P99_FACTOR); None when it never was within the phase.
    recovery_s: float | None = None
    # The median of the phase's per-window p99s: one burst (an autovacuum pass) moves the
    # phase's own p99 a lot and this little; "back to baseline" is judged against it.
    window_p99_median_ms: float | None = None


@dataclass(frozen=True)
class Quarter:
    quarter: int
    jobs: int
    seconds: float

    @property
    def per_s(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0


@dataclass
class TimelineResult:
    config: TimelineConfig
    rate: float | None  # the offered rate (None: burn-down)
    calibrated_drain_per_s: float | None
    started_at: datetime
    samples: list[Sample]
    windows: list[Window]
    phases: list[PhaseSummary]
    families: list[str]
    quarters: list[Quarter] = field(default_factory=list)
    load_avg: dict[str, list[float]] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    held_xid: int | None = None
    reader_scans: int = 0
    # Each calibration drain (jobs/s); calibrated_drain_per_s is their median.
    calibration_drains_per_s: list[float] = field(default_factory=list)

    @property
    def last_quarter_vs_first(self) -> float | None:
        if len(self.quarters) != 4 or self.quarters[0].per_s <= 0:
            return None
        return self.quarters[3].per_s / self.quarters[0].per_s

    @property
    def burndown_per_s(self) -> float | None:
        if not self.quarters:
            return None
        seconds = sum(q.seconds for q in self.quarters)
        return sum(q.jobs for q in self.quarters) / seconds if seconds > 0 else None

    def json_object(self) -> dict[str, Any]:
        """Everything, raw samples included, as plain JSON values."""

        def plain(value: Any) -> Any:
            if isinstance(value, datetime):
                return value.isoformat()
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [plain(v) for v in value]
            return value

        return {
            "scenario": self.config.scenario,
            "config": asdict(self.config),
            "rate_per_s": self.rate,
            "calibrated_drain_per_s": self.calibrated_drain_per_s,
            "calibration_drains_per_s": self.calibration_drains_per_s,
            "started_at": self.started_at.isoformat(),
            "families": self.families,
            "phases": [asdict(p) for p in self.phases],
            "quarters": [{**asdict(q), "per_s": q.per_s} for q in self.quarters],
            "last_quarter_vs_first": self.last_quarter_vs_first,
            "load_avg": self.load_avg,
            "machine": self.machine,
            "server": plain(self.server),
            "held_xid": self.held_xid,
            "reader_scans": self.reader_scans,
            "windows": [asdict(w) for w in self.windows],
            # Every hot relation (each partition on its own); the quiet tables left out.
            "samples": [
                plain(
                    {
                        **asdict(s),
                        "relations": {
                            r: asdict(stat)
                            for r, stat in s.relations.items()
                            if family(r) in self.families
                        },
                    }
                )
                for s in self.samples
            ],
        }

    def summary(self) -> dict[str, Any]:
        """The key numbers (`--json`)."""
        out: dict[str, Any] = {"scenario": self.config.scenario, "rate_per_s": self.rate}
        for p in self.phases:
            out[p.name] = {
                "offered_per_s": round(p.offered_per_s, 1),
                "completed_per_s": round(p.completed_per_s, 1),
                "completion_ratio": _round(p.completion_ratio, 3),
                "pickup_p50_ms": _round(p.p50_ms, 2),
                "pickup_p99_ms": _round(p.p99_ms, 2),
                "p99_vs_baseline": _round(p.p99_vs_baseline, 2),
                "max_xmin_age": p.max_xmin_age,
                "dead_at_end": p.dead_at_end,
                "bytes_at_end": p.bytes_at_end,
                "dead_peak": p.dead_peak,
                "recovery_s": _round(p.recovery_s, 1),
                "window_p99_median_ms": _round(p.window_p99_median_ms, 2),
            }
        if self.quarters:
            out["quarters_per_s"] = [round(q.per_s, 1) for q in self.quarters]
            out["last_quarter_vs_first"] = _round(self.last_quarter_vs_first, 3)
            out["burndown_per_s"] = _round(self.burndown_per_s, 1)
        return out


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def family(relation: str) -> str:
    """The name a relation is shown under: a design's numbered partitions add up as one."""
    for prefix in PREFIXES:
        if relation.startswith(prefix):
            return prefix + "*"
    return relation


def hot_families(samples: list[Sample], completed: int) -> list[str]:
    """NAMED and PREFIXES families present, then every other busy table, by writes."""
    first, last = samples[0].relations, samples[-1].relations
    writes = {r: stat.writes - (first[r].writes if r in first else 0) for r, stat in last.items()}
    named: list[str] = [f for f in NAMED if f in last]
    named += [
        p + "*" for p in PREFIXES if any(family(r) == p + "*" and writes[r] > 0 for r in last)
    ]
    floor = max(100.0, completed * HOT_WRITES_PER_JOB)
    busy = sorted(((w, r) for r, w in writes.items() if family(r) not in named), reverse=True)
    # A family of PREFIXES left out above was not written, so it is below the floor here.
    return named + [r for w, r in busy if w >= floor]


def _by_family(
    relations: dict[str, RelationStat], families: list[str]
) -> tuple[dict[str, int], dict[str, int]]:
    dead = dict.fromkeys(families, 0)
    size = dict.fromkeys(families, 0)
    for name, stat in relations.items():
        f = family(name)
        if f in dead:
            dead[f] += stat.dead
            size[f] += stat.bytes
    return dead, size


async def run_timeline(
    admin_url: str, config: TimelineConfig, progress: Progress
) -> TimelineResult:
    """Run one scenario on fresh clones of the migrated template (dropped afterwards)."""
    phases_for(config)  # an unknown scenario fails before any database work
    template = testing.ensure_template(admin_url)
    server = await harness.server_info(admin_url)
    load_start = list(os.getloadavg())
    rate: float | None = None if config.scenario == "burndown" else config.rate
    calibrated: float | None = None
    calibration: list[float] = []
    if rate is not None and config.rate_fraction is not None:
        drains: list[float] = []
        for n in range(1, config.calibrate_runs + 1):
            progress(
                f"measuring the drain rate ({n}/{config.calibrate_runs}): "
                f"{config.calibrate_jobs:,} jobs, "
                f"{config.processes} processes × --concurrency {config.concurrency}"
            )
            url = testing.create_clone(admin_url, template, harness.CLONE_PREFIX)
            try:
                drained = await scenarios.drain(
                    url, config.calibrate_jobs, config.processes, config.concurrency
                )
            finally:
                testing.drop_database(admin_url, url)
            drains.append(drained.per_s)
        calibrated = statistics.median(drains)
        rate = config.rate_fraction * calibrated
        each = " / ".join(f"{d:,.0f}" for d in drains)
        progress(f"drain {calibrated:,.0f}/s (median of {each}) → offering {rate:,.0f} jobs/s")
        calibration = drains
    url = testing.create_clone(admin_url, template, harness.CLONE_PREFIX)
    try:
        result = await _Run(url, config, rate, progress).run()
    finally:
        testing.drop_database(admin_url, url)
    result.calibrated_drain_per_s = calibrated
    result.calibration_drains_per_s = calibration
    result.server = server
    result.machine = harness.machine_info()
    result.load_avg = {"start": load_start, "end": list(os.getloadavg())}
    return result


class _Run:
    def __init__(self, url: str, config: TimelineConfig, rate: float | None, progress: Progress):
        self.url = url
        self.config = config
        self.rate = rate
        self.progress = progress
        self.phases = phases_for(config)
        self.producer: Producer | None = None
        self.preinserted = 0
        self.samples: list[Sample] = []
        self.phase_starts: list[int] = []  # index of each phase's first sample
        self.holder = XidHolder(url)
        self.readers = Readers(url, config.readers) if config.readers else None
        self.activity = ActivitySampler(url)
        self._last_report = (0.0, 0)  # monotonic time, sample index

    async def run(self) -> TimelineResult:
        config = self.config
        conn = await connect(self.url, autocommit=True, application_name="jobyard-bench-sample")
        producer_conn = await connect(self.url, autocommit=True)
        workers = WorkerProcesses(self.url, PROJECT, QUEUE, config.concurrency, config.processes)
        producer_task: asyncio.Task[None] | None = None
        started_at = datetime.now(UTC)
        try:
            await self.activity.start()
            project_id, queue = await _setup(conn)
            if config.max_concurrency is not None:
                limit = {"max_concurrency": config.max_concurrency}
                await admin.update_queue(conn, project_id, queue.id, limit)
            item = BatchItem(handler=HANDLER)

            async def insert(n: int) -> None:
                batch = BatchCreate(queue=QUEUE, jobs=[item] * n)
                await enqueue.enqueue_batch(producer_conn, project_id, batch)

            if self.rate is None:
                await self._preinsert(insert)
                self.samples.append(await self._sample(conn, self.phases[0].name))
                workers.start()
            else:
                workers.start()
                # The baseline starts with every worker ready, not with their start-up.
                await _wait_listening(conn, workers, config.processes)
                self.producer = Producer(self.rate, insert, max_chunk=limits.MAX_BATCH_SIZE)
                self.samples.append(await self._sample(conn, self.phases[0].name))
                producer_task = asyncio.create_task(self.producer.run())
            self._last_report = (time.monotonic(), 0)
            for phase in self.phases:
                await self._enter(phase.name)
                self.phase_starts.append(len(self.samples) - 1)
                await self._phase(conn, phase, workers, producer_task)
            if self.producer is not None and producer_task is not None:
                self.producer.stop()
                await producer_task
        finally:
            # Each step runs whatever the one before raised: no worker may outlive the run.
            try:
                if self.producer is not None:
                    self.producer.stop()
                if producer_task is not None and not producer_task.done():
                    producer_task.cancel()
                await self._release()
            finally:
                workers.stop()
                await producer_conn.close()
                await self.activity.stop()
        try:
            return await self._analyse(conn, started_at)
        finally:
            await conn.close()

    async def _preinsert(self, insert: Callable[[int], Awaitable[None]]) -> None:
        total = self.config.jobs
        step = max(limits.MAX_BATCH_SIZE, total // 20)
        started = time.monotonic()
        for at in range(0, total, limits.MAX_BATCH_SIZE):
            await insert(min(limits.MAX_BATCH_SIZE, total - at))
            done = min(total, at + limits.MAX_BATCH_SIZE)
            if done % step < limits.MAX_BATCH_SIZE or done == total:
                rate = done / max(time.monotonic() - started, 1e-9)
                self.progress(f"pre-inserted {done:,}/{total:,} jobs ({rate:,.0f}/s)")
        self.preinserted = total

    async def _enter(self, phase: str) -> None:
        if phase == "hold":
            if self.config.idle_hold:
                await self.holder.hold()
            if self.readers is not None:
                await self.readers.start()
        elif phase == "recovery":
            await self._release()

    async def _release(self) -> None:
        await self.holder.release()
        if self.readers is not None:
            await self.readers.stop()

    async def _phase(
        self,
        conn: Conn,
        phase: Phase,
        workers: WorkerProcesses,
        producer_task: asyncio.Task[None] | None,
    ) -> None:
        ends = None if phase.seconds is None else time.monotonic() + phase.seconds
        last_change = (time.monotonic(), self.samples[-1].executions)
        while True:
            wait = self.config.sample_s
            if ends is not None:
                wait = min(wait, max(ends - time.monotonic(), 0.0))
            await asyncio.sleep(wait)
            workers.check_alive()
            if producer_task is not None and producer_task.done():
                producer_task.result()  # the producer failed: raise its error here
                raise BenchError("the producer stopped before the scenario ended")
            sample = await self._sample(conn, phase.name)
            self.samples.append(sample)
            self._report(phase)
            if ends is not None:
                if time.monotonic() >= ends:
                    return
                continue
            # The burn-down ends when every pre-inserted job is done.
            if sample.executions >= self.preinserted:
                row = await run.one(conn, "bench_timeline_done")
                if row is not None and row["done"] >= self.preinserted:
                    return
            if sample.executions != last_change[1]:
                last_change = (time.monotonic(), sample.executions)
            elif time.monotonic() - last_change[0] > STALL_TIMEOUT_S:
                raise BenchError(f"no job finished for {STALL_TIMEOUT_S:g} s")

    async def _sample(self, conn: Conn, phase: str) -> Sample:
        row = await run.one(conn, "bench_timeline_sample")
        assert row is not None
        offered = self.producer.offered() if self.producer is not None else 0
        enqueued = self.producer.enqueued if self.producer is not None else self.preinserted
        relations = {
            r["relation"]: RelationStat(
                dead=int(r["dead"]), live=int(r["live"]), writes=int(r["writes"]),
                bytes=int(r["bytes"]),
            )
            for r in await run.all_rows(conn, "bench_timeline_relations")
        }  # fmt: skip
        return Sample(
            at=row["at"],
            phase=phase,
            offered=offered,
            enqueued=enqueued,
            executions=int(row["executions"]),
            xmin_age=None if row["xmin_age"] is None else int(row["xmin_age"]),
            oldest_xact_s=row["oldest_xact_s"],
            relations=relations,
            xmin_age_here=None if row["xmin_age_here"] is None else int(row["xmin_age_here"]),
            activity=self.activity.take(),
            wal_bytes=int(row["wal_bytes"]),
            wal_fpi=None if row["wal_fpi"] is None else int(row["wal_fpi"]),
        )

    def _report(self, phase: Phase) -> None:
        """A progress line every progress_every_s: live rates from the samples."""
        since, index = self._last_report
        if time.monotonic() - since < self.config.progress_every_s:
            return
        then, now = self.samples[index], self.samples[-1]
        start = self.samples[self.phase_starts[-1]].at
        seconds = max((now.at - then.at).total_seconds(), 1e-9)
        elapsed = (now.at - start).total_seconds()
        dead = sum(s.dead for r, s in now.relations.items() if family(r) in _SHOWN)
        size = sum(s.bytes for r, s in now.relations.items() if family(r) in _SHOWN)
        done = (now.executions - then.executions) / seconds
        if phase.seconds is None:
            where = f"{now.executions:,}/{self.preinserted:,} done, {done:,.0f}/s"
        else:
            offered = (now.offered - then.offered) / seconds
            where = (
                f"{elapsed:.0f}/{phase.seconds:g} s, offered {offered:,.0f}/s, "
                f"completed {done:,.0f}/s"
            )
        age = "—" if now.xmin_age is None else f"{now.xmin_age:,}"
        self.progress(
            f"{self.config.scenario} · {phase.name}: {where} · xmin age {age} · "
            f"dead tuples {dead:,} · {size / 2**20:,.1f} MB"
        )
        self._last_report = (time.monotonic(), len(self.samples) - 1)

    async def _analyse(self, conn: Conn, started_at: datetime) -> TimelineResult:
        samples = self.samples
        bounds = [s.at for s in samples]
        completions = await _buckets(conn, "bench_timeline_completions", bounds)
        pickups = await _buckets(conn, "bench_timeline_pickup", bounds)
        total_completed = sum(int(r["completions"]) for r in completions.values())
        families = hot_families(samples, total_completed)
        t0 = samples[0].at
        # Finished before the first sample: none in practice (the workers had no jobs).
        done = int(completions[0]["completions"]) if 0 in completions else 0
        windows: list[Window] = []
        for i in range(1, len(samples)):
            prev, cur = samples[i - 1], samples[i]
            c = int(completions[i]["completions"]) if i in completions else 0
            done += c
            # A burn-down's jobs were all due at the start: its latencies say nothing.
            p = pickups.get(i) if self.rate is not None else None
            dead, size = _by_family(cur.relations, families)
            windows.append(
                Window(
                    phase=cur.phase,
                    start_s=(prev.at - t0).total_seconds(),
                    end_s=(cur.at - t0).total_seconds(),
                    offered=cur.offered - prev.offered,
                    enqueued=cur.enqueued - prev.enqueued,
                    completions=c,
                    backlog=cur.enqueued - done,
                    pickups=int(p["jobs"]) if p else 0,
                    p50_ms=_float(p, "p50"),
                    p99_ms=_float(p, "p99"),
                    max_ms=_float(p, "max"),
                    xmin_age=cur.xmin_age,
                    oldest_xact_s=cur.oldest_xact_s,
                    dead=dead,
                    bytes=size,
                    xmin_age_here=cur.xmin_age_here,
                    activity=cur.activity,
                    wal_bytes=_delta(prev.wal_bytes, cur.wal_bytes),
                    wal_fpi=_delta(prev.wal_fpi, cur.wal_fpi),
                )
            )
        phase_bounds = [samples[i].at for i in self.phase_starts] + [samples[-1].at]
        phase_done = await _buckets(conn, "bench_timeline_completions", phase_bounds)
        phase_pickups = await _buckets(conn, "bench_timeline_pickup", phase_bounds)
        summaries: list[PhaseSummary] = []
        for k, phase in enumerate(self.phases, start=1):
            first = samples[self.phase_starts[k - 1]]
            last = samples[self.phase_starts[k] if k < len(self.phases) else -1]
            seconds = max((last.at - first.at).total_seconds(), 1e-9)
            completed = int(phase_done[k]["completions"]) if k in phase_done else 0
            p = phase_pickups.get(k)
            offered_per_s = (last.offered - first.offered) / seconds
            dead, size = _by_family(last.relations, families)
            mine = [w for w in windows if w.phase == phase.name]
            p99s = [w.p99_ms for w in mine if w.p99_ms is not None]
            ages = [w.xmin_age for w in mine if w.xmin_age]
            peak = {f: max((w.dead[f] for w in mine), default=0) for f in families}
            summaries.append(
                PhaseSummary(
                    name=phase.name,
                    start_s=(first.at - t0).total_seconds(),
                    end_s=(last.at - t0).total_seconds(),
                    offered_per_s=offered_per_s,
                    completed_per_s=completed / seconds,
                    completion_ratio=(completed / seconds) / offered_per_s
                    if offered_per_s > 0
                    else None,
                    pickups=int(p["jobs"]) if p else 0,
                    p50_ms=_float(p, "p50") if self.rate is not None else None,
                    p99_ms=_float(p, "p99") if self.rate is not None else None,
                    p99_vs_baseline=None,
                    max_xmin_age=max(ages) if ages else None,
                    dead_at_end=dead,
                    bytes_at_end=size,
                    dead_peak=peak,
                    window_p99_median_ms=statistics.median(p99s) if p99s else None,
                )
            )
        summaries = _judge(summaries, windows, self.rate)
        quarters = await _quarters(conn) if self.rate is None else []
        return TimelineResult(
            config=self.config,
            rate=self.rate,
            calibrated_drain_per_s=None,
            started_at=started_at,
            samples=samples,
            windows=windows,
            phases=summaries,
            families=families,
            quarters=quarters,
            held_xid=self.holder.xid,
            reader_scans=self.readers.scans if self.readers is not None else 0,
        )


_SHOWN: Final = (*NAMED, *(p + "*" for p in PREFIXES))


def _delta(before: int | None, after: int | None) -> int | None:
    """A counter's growth between two samples; None when either is unknown. Counters reset
    with the server's statistics, so a fall reads as unknown, not as negative."""
    if before is None or after is None or after < before:
        return None
    return after - before


def _float(row: dict[str, Any] | None, key: str) -> float | None:
    return None if row is None or row[key] is None else float(row[key])


async def _buckets(conn: Conn, query: str, bounds: list[datetime]) -> dict[int, dict[str, Any]]:
    return {int(r["bucket"]): r for r in await run.all_rows(conn, query, {"bounds": bounds})}


def _judge(
    phases: list[PhaseSummary], windows: list[Window], rate: float | None
) -> list[PhaseSummary]:
    """Each phase's p99 against the first phase's (the baseline); the recovery phase's time
    back to the baseline after the release."""
    if rate is None or not phases:
        return phases
    base = phases[0]
    judged = [
        replace(
            p,
            p99_vs_baseline=p.p99_ms / base.p99_ms
            if p.p99_ms is not None and base.p99_ms
            else None,
        )
        for p in phases
    ]
    recovery = next((i for i, p in enumerate(judged) if p.name == "recovery"), None)
    if recovery is None or base.p99_ms is None:
        return judged
    release_s = judged[recovery].start_s
    base_backlog = max((w.backlog for w in windows if w.phase == base.name), default=0)
    backlog_limit = max(base_backlog, math.ceil(rate))  # one second of work is no backlog
    p99_limit = RECOVERY_P99_FACTOR * (base.window_p99_median_ms or base.p99_ms)
    after = [w for w in windows if w.phase == "recovery"]

    def typical_p99(j: int) -> float | None:
        # One slow window on a shared host is not a relapse: the median of a few in a row from
        # this one, or the phase's last few once fewer are left (a median of the last one or two
        # windows alone would make one slow window near the end a relapse after all).
        start = max(0, min(j, len(after) - RECOVERY_SMOOTHING))
        p99s = [w.p99_ms for w in after[start : start + RECOVERY_SMOOTHING] if w.p99_ms is not None]
        return statistics.median(p99s) if p99s else None

    recovered_s: float | None = None
    for k in range(len(after)):
        if all(
            after[j].backlog <= backlog_limit
            and ((p99 := typical_p99(j)) is None or p99 <= p99_limit)
            for j in range(k, len(after))
        ):
            recovered_s = after[k].end_s - release_s
            break
    judged[recovery] = replace(judged[recovery], recovery_s=recovered_s)
    return judged


async def _quarters(conn: Conn) -> list[Quarter]:
    rows = await run.all_rows(conn, "bench_timeline_quarters")
    quarters: list[Quarter] = []
    previous: datetime | None = None
    for row in rows:
        start = previous if previous is not None else row["first_started"]
        quarters.append(
            Quarter(
                quarter=int(row["quarter"]),
                jobs=int(row["jobs"]),
                seconds=(row["last_finished"] - start).total_seconds(),
            )
        )
        previous = row["last_finished"]
    return quarters


def run_scenario(admin_url: str, config: TimelineConfig, progress: Progress) -> TimelineResult:
    return asyncio.run(run_timeline(admin_url, config, progress))


def result_from_json(data: dict[str, Any]) -> TimelineResult:
    """A run back from its saved JSON (json_object()), judged again by the current rules: the
    report and the plot can be redrawn without minutes of measuring again."""
    # Runs saved before calibrate_runs existed measured one drain.
    config = TimelineConfig(**{"calibrate_runs": 1, **data["config"]})
    samples = [
        Sample(
            at=datetime.fromisoformat(s["at"]),
            phase=s["phase"],
            offered=s["offered"],
            enqueued=s["enqueued"],
            executions=s["executions"],
            xmin_age=s["xmin_age"],
            oldest_xact_s=s["oldest_xact_s"],
            relations={r: RelationStat(**stat) for r, stat in s["relations"].items()},
            xmin_age_here=s.get("xmin_age_here"),  # absent from runs saved before it existed
            activity=Activity(**s.get("activity", {})),
            wal_bytes=s.get("wal_bytes"),
            wal_fpi=s.get("wal_fpi"),
        )
        for s in data["samples"]
    ]
    windows = [
        Window(**{**w, "activity": Activity(**w.get("activity", {}))}) for w in data["windows"]
    ]
    known = {f.name for f in fields(PhaseSummary)}
    phases: list[PhaseSummary] = []
    for raw in data["phases"]:
        mine = [w for w in windows if w.phase == raw["name"]]
        p99s = [w.p99_ms for w in mine if w.p99_ms is not None]
        derived = {
            "dead_peak": {
                f: max((w.dead.get(f, 0) for w in mine), default=0) for f in data["families"]
            },
            "window_p99_median_ms": statistics.median(p99s) if p99s else None,
        }
        phases.append(PhaseSummary(**{**derived, **{k: v for k, v in raw.items() if k in known}}))
    rate = data["rate_per_s"]
    return TimelineResult(
        config=config,
        rate=rate,
        calibrated_drain_per_s=data["calibrated_drain_per_s"],
        calibration_drains_per_s=data.get("calibration_drains_per_s", []),
        started_at=datetime.fromisoformat(data["started_at"]),
        samples=samples,
        windows=windows,
        phases=_judge(phases, windows, rate),
        families=data["families"],
        quarters=[Quarter(q["quarter"], q["jobs"], q["seconds"]) for q in data["quarters"]],
        load_avg=data["load_avg"],
        machine=data["machine"],
        server=data["server"],
        held_xid=data["held_xid"],
        reader_scans=data["reader_scans"],
    )
