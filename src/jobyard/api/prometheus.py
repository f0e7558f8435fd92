"""`GET /metrics`: Prometheus text for the whole cluster, read from PostgreSQL at scrape time.

The database is the system of record, so every API replica reports the same numbers and any one
of them can be scraped: one snapshot (two queries over unfinished jobs and live workers, see
`core.read_models.cluster_snapshot`) per scrape, handed to a custom collector on a throwaway
registry. No counter lives in process memory, so a restart loses nothing.

Access: the scrape names every organization, project and queue of every tenant, so it needs a
credential: `Authorization: Bearer <JOBYARD_METRICS_TOKEN>` (Prometheus `authorization:
{credentials: …}`), compared in constant time. Without a configured token every scrape is a 401,
unless `JOBYARD_METRICS_PUBLIC=true` opens it (a private network where only Prometheus reaches
the API). A project API key is never enough: the scrape is not one project's.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Header, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import SecretStr

from jobyard.api.deps import ConnDep
from jobyard.api.routes import Route, Scope
from jobyard.core import clock, read_models
from jobyard.core.auth import AuthenticationFailed
from jobyard.core.read_models import ClusterSnapshot

STATES = ("queued", "scheduled", "waiting", "claimed", "running")


class SnapshotCollector(Collector):
    """Yields gauges from one database snapshot."""

    def __init__(self, snapshot: ClusterSnapshot, scrape_s: float) -> None:
        self.snapshot = snapshot
        self.scrape_s = scrape_s

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
        for w in self.snapshot.workers:
            key = [w["org"], w["project"], w["status"]]
            workers.add_metric(key, float(w["workers"]))
            capacity.add_metric(key, float(w["capacity"]))
            in_flight.add_metric(key, float(w["in_flight"]))
        yield from (workers, capacity, in_flight)

        yield GaugeMetricFamily(
            "jobyard_scrape_duration_seconds",
            "Time this scrape spent reading the database.",
            value=self.scrape_s,
        )


def render(snapshot: ClusterSnapshot, scrape_s: float) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot, scrape_s))
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
    body = render(snapshot, clock.monotonic() - started)
    return Response(content=body, media_type=CONTENT_TYPE_LATEST)


ROUTES: tuple[Route, ...] = (
    Route("GET", "/metrics", Scope.PUBLIC, scrape, prefix="", tags=("metrics",),
          summary="Prometheus metrics (text exposition)", operation_id="metrics_prometheus",
          media_type="text/plain", security=("bearer", ""),
          responses={401: "JOBYARD_METRICS_TOKEN is set and the request does not send it"}),
)  # fmt: skip
