"""`GET /metrics`: Prometheus text for the whole cluster, read from PostgreSQL at scrape time.

The database is the system of record, so every API replica reports the same numbers and any one
of them can be scraped: one snapshot (two queries over unfinished jobs and live workers, see
`core.read_models.cluster_snapshot`) per scrape, handed to a custom collector on a throwaway
registry. No counter lives in process memory, so a restart loses nothing: the counters and
histograms (finished, enqueued, retried, dead-lettered; run time and queue wait) are the
scheduler's rollup totals (`queue_stats_totals`, core.stats), monotonic by construction, and
the database-health gauges come from pg_stat_activity / pg_stat_user_tables (core.db_health).
docs/METRICS.md lists every metric with an example alert.

Access: the scrape names every organization, project and queue of every tenant, so it needs a
credential: `Authorization: Bearer <JOBYARD_METRICS_TOKEN>` (Prometheus `authorization:
{credentials: …}`), compared in constant time. Without a configured token every scrape is a 401,
unless `JOBYARD_METRICS_PUBLIC=true` opens it (a private network where only Prometheus reaches
the API). A project API key is never enough: the scrape is not one project's.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import Header, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from pydantic import SecretStr

from jobyard.api.deps import ConnDep
from jobyard.api.routes import Route, Scope
from jobyard.core import clock, db_health, read_models, stats
from jobyard.core.auth import AuthenticationFailed
from jobyard.core.db_health import DbHealth
from jobyard.core.read_models import ClusterSnapshot
from jobyard.domain.stats import BOUNDS_MS, OUTCOMES, hist_slots

STATES = ("queued", "scheduled", "waiting", "claimed", "running")


class SnapshotCollector(Collector):
    """Yields gauges from one database snapshot."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        scrape_s: float,
        totals: list[dict[str, Any]] | None = None,
        health: DbHealth | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.scrape_s = scrape_s
        self.totals = totals or []
        self.health = health

    def collect(self) -> Iterator[Metric]:
        queue_labels = ["org", "project", "queue"]
        jobs = GaugeMetricFamily(
            "jobyard_queue_jobs",
            "Unfinished jobs per queue and status (queued = claimable now).",
            labels=[*queue_labels, "status"],
        )
        paused = GaugeMetricFamily(
            "jobyard_queue_paused", "1 if the queue is paused.", labels=queue_labels
        )
        oldest = GaugeMetricFamily(
            "jobyard_queue_oldest_queued_age_seconds",
            "How long the oldest claimable job has been due (0 when none).",
            labels=queue_labels,
        )
        letters = GaugeMetricFamily(
            "jobyard_queue_dead_letters",
            "Dead letters not replayed yet.",
            labels=queue_labels,
        )
        for q in self.snapshot.queues:
            key = [q["org"], q["project"], q["queue"]]
            for state in STATES:
                jobs.add_metric([*key, state], float(q[state]))
            paused.add_metric(key, 1.0 if q["is_paused"] else 0.0)
            oldest.add_metric(key, float(q["oldest_queued_age_s"]))
            letters.add_metric(key, float(q["dead_letters"]))
        yield from (jobs, paused, oldest, letters)

        worker_labels = ["org", "project", "status"]
        workers = GaugeMetricFamily(
            "jobyard_workers", "Live workers (active or draining).", labels=worker_labels
        )
        capacity = GaugeMetricFamily(
            "jobyard_worker_capacity", "Summed concurrency of live workers.", labels=worker_labels
        )
        in_flight = GaugeMetricFamily(
            "jobyard_worker_in_flight", "Jobs live workers hold now.", labels=worker_labels
        )
        orphans = GaugeMetricFamily(
            "jobyard_worker_orphan_threads",
            "Handler threads of live workers still running after their run was recorded (a "
            "timeout or cancel the handler ignored); each holds one of its worker's slots.",
            labels=worker_labels,
        )
        blocked = GaugeMetricFamily(
            "jobyard_workers_loop_blocked",
            "Live workers whose event loop is blocked now by an async handler (their loop "
            "watch reported a stall that has not ended).",
            labels=worker_labels,
        )
        held_back = GaugeMetricFamily(
            "jobyard_workers_paused",
            "Live workers an operator paused: they claim nothing until resumed.",
            labels=worker_labels,
        )
        for w in self.snapshot.workers:
            key = [w["org"], w["project"], w["status"]]
            workers.add_metric(key, float(w["workers"]))
            capacity.add_metric(key, float(w["capacity"]))
            in_flight.add_metric(key, float(w["in_flight"]))
            orphans.add_metric(key, float(w["orphan_threads"]))
            blocked.add_metric(key, float(w["loop_blocked"]))
            held_back.add_metric(key, float(w["paused"]))
        yield from (workers, capacity, in_flight, orphans, blocked, held_back)

        yield from self._counters()
        yield from self._health()
        yield GaugeMetricFamily(
            "jobyard_scrape_duration_seconds",
            "Time this scrape spent reading the database.",
            value=self.scrape_s,
        )

    def _counters(self) -> Iterator[Metric]:
        labels = ["org", "project", "queue"]
        finished = CounterMetricFamily(
            "jobyard_jobs_finished",
            "Runs finished, by outcome (succeeded, failed, timed_out, lease_lost, released, "
            "cancelled).",
            labels=[*labels, "outcome"],
        )
        simple = {
            "enqueued": CounterMetricFamily(
                "jobyard_jobs_enqueued",
                "Jobs enqueued (delayed and batch included).",
                labels=labels,
            ),
            "retried": CounterMetricFamily(
                "jobyard_jobs_retried",
                "Failed runs that left attempts, so the job was scheduled again.",
                labels=labels,
            ),
            "dead_lettered": CounterMetricFamily(
                "jobyard_jobs_dead_lettered", "Jobs moved to the dead-letter queue.", labels=labels
            ),
        }
        run_hist = HistogramMetricFamily(
            "jobyard_job_run_seconds", "Run time of finished runs.", labels=labels
        )
        wait_hist = HistogramMetricFamily(
            "jobyard_job_wait_seconds",
            "Queue wait of finished jobs' last run: from due (run_at) to started.",
            labels=labels,
        )
        for t in self.totals:
            key = [t["org"], t["project"], t["queue"]]
            for outcome in OUTCOMES:
                finished.add_metric([*key, outcome], float(t[outcome]))
            for column, family in simple.items():
                family.add_metric(key, float(t[column]))
            run_hist.add_metric(
                key, buckets=_buckets(t["run_hist"]), sum_value=float(t["run_sum_ms"]) / 1000.0
            )
            wait_hist.add_metric(
                key, buckets=_buckets(t["wait_hist"]), sum_value=float(t["wait_sum_ms"]) / 1000.0
            )
        yield from (finished, *simple.values(), run_hist, wait_hist)

    def _health(self) -> Iterator[Metric]:
        if self.health is None:
            return
        h = self.health
        yield GaugeMetricFamily(
            "jobyard_db_oldest_xmin_age_seconds",
            "Age of the hold that keeps this database's xmin horizon furthest back (0 when none).",
            value=h.xmin_age_s,
        )
        yield GaugeMetricFamily(
            "jobyard_db_oldest_xmin_age_transactions",
            "Transactions since the oldest held xmin (how far vacuum lags behind).",
            value=float(h.xmin_holder["xmin_age_xids"]) if h.xmin_holder else 0.0,
        )
        holders = GaugeMetricFamily(
            "jobyard_db_xmin_horizon_holders",
            "Sessions, prepared transactions and replication slots holding this database's xmin "
            "horizon, by what they hold (xid, snapshot, standby, prepared, slot).",
            labels=["held_by"],
        )
        for held_by, count in sorted(h.holders_by_kind.items()):
            holders.add_metric([held_by], float(count))
        yield holders
        ratio = GaugeMetricFamily(
            "jobyard_db_dead_tuple_ratio",
            "Dead tuples / (live + dead) of the busiest tables (jobs always included).",
            labels=["relation"],
        )
        dead = GaugeMetricFamily(
            "jobyard_db_dead_tuples", "Dead tuples of the busiest tables.", labels=["relation"]
        )
        # The dashboard's warnings as 0/1 gauges, past the same configured thresholds
        # (JOBYARD_HEALTH_XMIN_WARN_S, JOBYARD_HEALTH_DEAD_RATIO_WARN).
        dead_warning = GaugeMetricFamily(
            "jobyard_db_dead_tuple_warning",
            "1 when a table's dead-tuple ratio is past JOBYARD_HEALTH_DEAD_RATIO_WARN.",
            labels=["relation"],
        )
        for r in h.relations:
            ratio.add_metric([r["relation"]], float(r["dead_ratio"]))
            dead.add_metric([r["relation"]], float(r["dead"]))
            dead_warning.add_metric([r["relation"]], float(h.relation_warning(r)))
        yield from (ratio, dead, dead_warning)
        yield GaugeMetricFamily(
            "jobyard_db_oldest_xmin_warning",
            "1 when the oldest xmin holder is older than JOBYARD_HEALTH_XMIN_WARN_S, or a "
            "replication slot with no standby connected holds the horizon.",
            value=float(h.xmin_warning),
        )


def _buckets(hist: list[int] | None) -> list[tuple[str, float]]:
    """Stored per-slot counts → Prometheus' cumulative (le, count) pairs, ms → seconds."""
    counts = hist_slots(hist)
    out: list[tuple[str, float]] = []
    running = 0
    for bound, n in zip([*BOUNDS_MS, None], counts, strict=True):
        running += n
        out.append(("+Inf" if bound is None else repr(bound / 1000.0), float(running)))
    return out


def render(
    snapshot: ClusterSnapshot,
    scrape_s: float,
    totals: list[dict[str, Any]] | None = None,
    health: DbHealth | None = None,
) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot, scrape_s, totals, health))
    return generate_latest(registry)


def _check_token(expected: SecretStr | None, public: bool, authorization: str | None) -> None:
    if public:
        return
    if expected is None:
        raise AuthenticationFailed(
            "metrics need a credential: set JOBYARD_METRICS_TOKEN on the API and send it as "
            "a Bearer token, or set JOBYARD_METRICS_PUBLIC=true"
        )
    scheme, _, given = (authorization or "").partition(" ")
    want = expected.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), want):
        raise AuthenticationFailed("this endpoint needs the metrics token (Bearer)")


async def scrape(
    request: Request,
    conn: ConnDep,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    """Prometheus text exposition of queue depths, dead letters and live workers."""
    settings = request.app.state.settings
    _check_token(settings.metrics_token, settings.metrics_public, authorization)
    started = clock.monotonic()
    snapshot = await read_models.cluster_snapshot(conn)
    totals = await stats.totals(conn)
    settings = request.app.state.settings
    health = await db_health.read(
        conn,
        xmin_warn_s=settings.health_xmin_warn_s,
        dead_ratio_warn=settings.health_dead_ratio_warn,
    )
    body = render(snapshot, clock.monotonic() - started, totals, health)
    return Response(content=body, media_type=CONTENT_TYPE_LATEST)


ROUTES: tuple[Route, ...] = (
    Route("GET", "/metrics", Scope.PUBLIC, scrape, prefix="", tags=("metrics",),
          summary="Prometheus metrics (text exposition)", operation_id="metrics_prometheus",
          media_type="text/plain", security=("bearer", ""),
          responses={401: "JOBYARD_METRICS_TOKEN is set and the request does not send it"}),
)  # fmt: skip
