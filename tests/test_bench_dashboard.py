"""`jobyard bench-dashboard` end to end on a tiny data set: it builds, folds, starts a real API,
signs in and gets a 200 from every page and API it times. Never a timing assertion."""

from __future__ import annotations

import pytest

from jobyard.benchmarks import dashboard

pytestmark = pytest.mark.xdist_group("explain")


def test_the_dashboard_benchmark_times_every_url_with_a_200(pg_admin_url: str) -> None:
    size = dashboard.Size(jobs=2_000, executions=4_000, logs_for=100, requests=2, warmup=1)
    progress: list[str] = []
    result = dashboard.run_dashboard_bench(pg_admin_url, size, progress.append)
    assert result.built == {"jobs": 2_000, "executions": 4_000, "dead_letters": 60, "logs": 200}
    statuses = {t.name: t.status for t in result.timings}
    assert set(statuses.values()) == {200}, statuses
    assert len(result.timings) == len(dashboard.urls({k: 1 for k in ("project_id", "queue_id",
                                                                       "worker_id", "job_id")}))  # fmt: skip
    table = dashboard.markdown(result)
    assert "| overview |" in table and "2,000 jobs, 4,000 executions" in table
