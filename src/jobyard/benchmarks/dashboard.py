"""`jobyard bench-dashboard`: every dashboard page and list/aggregate API at 1,000,000 jobs.

Builds the data set with set-based SQL on a fresh database (db/sql/bench_dashboard.sql: one
statement per table), VACUUM ANALYZEs it, folds the statistics rollup as the scheduler would,
starts a real `jobyard api` process on it, signs in like an operator (cookies for pages, a bearer
token for the API), and times `requests` sequential requests per URL after `warmup` unmeasured
ones. The time is measured by the client on loopback, so it is an upper bound of server time
(it includes the HTTP round trip, well under a millisecond here). docs/BENCHMARKS.md
("Dashboard at 1,000,000 jobs") holds the figures.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx

from jobyard.db import testing
from jobyard.db.pool import connect_sync
from jobyard.db.queries import sql
from jobyard.db.seed import DEMO_EMAIL, DEMO_PASSWORD, seed_demo

BUDGET_MS: Final = 200.0
EXTRA_QUEUES: Final = ("emails", "webhooks", "billing", "exports", "thumbnails")
CLONE_PREFIX: Final = "jy_dash_"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Size:
    jobs: int = 1_000_000
    executions: int = 2_000_000
    workers: int = 20
    live_workers: int = 15
    logs_for: int = 100_000
    requests: int = 20
    warmup: int = 2


FULL: Final = Size()
QUICK: Final = Size(jobs=20_000, executions=40_000, logs_for=2_000, requests=5, warmup=1)


@dataclass
class Timing:
    name: str
    url: str
    ms: list[float] = field(default_factory=list)
    status: int = 0
    # The host's 1-minute load average when this URL's requests ended: the machine is shared,
    # and a p95 read next to it says how much of it was waiting for a CPU.
    load: float = 0.0

    @property
    def p50(self) -> float:
        return statistics.median(self.ms)

    @property
    def p95(self) -> float:
        ordered = sorted(self.ms)
        return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.p95 <= BUDGET_MS


@dataclass
class Result:
    size: Size
    built: dict[str, int]
    build_s: float
    fold_s: float
    timings: list[Timing]


def build(url: str, size: Size, progress: Progress) -> tuple[dict[str, Any], float, float]:
    """Fill a fresh database; returns (ids and counts, build seconds, fold seconds)."""
    started = time.monotonic()
    terminal = size.jobs // 1000 * 950
    extra = size.executions - 2 * terminal
    if size.jobs % 1000 or not 0 <= extra <= terminal:
        raise ValueError("jobs must be a multiple of 1000 and executions 2–3× the terminal jobs")
    with connect_sync(url) as conn:
        seeded = seed_demo(conn, sample_jobs=False)
        pid = seeded.project_id
        conn.execute(sql("dash_queues"), {"project_id": pid, "names": list(EXTRA_QUEUES)})
        workers = conn.execute(
            sql("dash_workers"),
            {"project_id": pid, "workers": size.workers, "live": size.live_workers},
        ).fetchall()
        progress(f"inserting {size.jobs:,} jobs")
        made = conn.execute(
            sql("dash_jobs"), {"project_id": pid, "n": size.jobs, "extra": extra}
        ).fetchone()
        assert made is not None
        progress(f"inserting {size.executions:,} executions")
        conn.execute(
            sql("dash_executions"),
            {
                "n": size.executions,
                "terminal": terminal,
                "extra": extra,
                "jobs": size.jobs,
                "first_id": made["first_id"],
                "worker_id": workers[0]["id"],
            },
        )
        conn.execute(sql("dash_dead_letters"), {"project_id": pid})
        conn.execute(sql("dash_logs"), {"project_id": pid, "n": size.logs_for})
        progress("vacuum analyze")
        conn.execute(sql("dash_vacuum"))
        counts = conn.execute(sql("dash_counts"), {"project_id": pid}).fetchone()
        assert counts is not None
    build_s = time.monotonic() - started
    progress("folding the statistics rollup (as the scheduler's stats loop would)")
    started = time.monotonic()
    _fold_all(url)
    fold_s = time.monotonic() - started
    sample = {
        "project_id": pid,
        "queue_id": seeded.queues["default"],
        "worker_id": int(workers[0]["id"]),
        "job_id": int(made["first_id"]) + size.jobs // 2,
        **{k: int(v) for k, v in counts.items()},
    }
    return sample, build_s, fold_s


def _fold_all(url: str) -> None:
    import asyncio

    from jobyard.core import stats
    from jobyard.db.pool import connect

    async def go() -> None:
        conn = await connect(url, autocommit=True)
        try:
            while (await stats.fold(conn, batch=50_000, max_batches=10, lag_s=0)).more:
                pass
        finally:
            await conn.close()

    asyncio.run(go())


def urls(s: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(name, path, is_api) of every page and list/aggregate API measured."""
    p, q, w, j = s["project_id"], s["queue_id"], s["worker_id"], s["job_id"]
    api = f"/api/v1/projects/{p}"
    return [
        ("overview", f"/p/{p}", False),
        ("overview fragment (live)", f"/partials/p/{p}/overview", False),
        ("queues", f"/p/{p}/queues", False),
        ("queue", f"/p/{p}/queues/{q}", False),
        ("statistics 1 h", f"/p/{p}/stats?window=1h", False),
        ("statistics 7 d", f"/p/{p}/stats?window=7d", False),
        ("queue statistics 24 h", f"/p/{p}/queues/{q}/stats?window=24h", False),
        ("jobs", f"/p/{p}/jobs", False),
        ("jobs status=dead_letter", f"/p/{p}/jobs?status=dead_letter", False),
        ("jobs status=running", f"/p/{p}/jobs?status=running", False),
        ("jobs queue=default", f"/p/{p}/jobs?queue=default", False),
        ("jobs handler=charge_card", f"/p/{p}/jobs?handler=charge_card", False),
        ("jobs fingerprint", f"/p/{p}/jobs?fingerprint=" + _fingerprint(), False),
        (
            "jobs from/to (one day)",
            f"/p/{p}/jobs?from=" + _day_ago(3) + "&to=" + _day_ago(2),
            False,
        ),
        ("job", f"/p/{p}/jobs/{j}", False),
        ("workers", f"/p/{p}/workers", False),
        ("worker", f"/p/{p}/workers/{w}", False),
        ("topology", f"/p/{p}/topology", False),
        ("schedules", f"/p/{p}/schedules", False),
        ("dead letters", f"/p/{p}/dlq", False),
        ("API jobs", f"{api}/jobs", True),
        ("API jobs status=failed", f"{api}/jobs?status=failed", True),
        ("API jobs status=queued", f"{api}/jobs?status=queued", True),
        ("API job executions", f"{api}/jobs/{j}/executions", True),
        ("API job logs", f"{api}/jobs/{j}/logs", True),
        ("API queues", f"{api}/queues", True),
        ("API workers", f"{api}/workers", True),
        ("API dead letters", f"{api}/dead-letters", True),
        ("API metrics (JSON)", f"{api}/metrics", True),
        ("API metrics queue=default", f"{api}/metrics?queue=default", True),
        ("/metrics (Prometheus)", "/metrics", True),
    ]


def _fingerprint() -> str:
    import hashlib

    return hashlib.md5(b"fp3", usedforsecurity=False).hexdigest()


def _day_ago(days: int) -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%S")


def _start_api(url: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    # The scrape is timed too; on this throwaway database it needs no credential.
    env = {
        **os.environ,
        "JOBYARD_DATABASE_URL": url,
        "JOBYARD_LOG_LEVEL": "warning",
        "JOBYARD_METRICS_PUBLIC": "true",
    }
    with log.open("wb") as out:
        return subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "jobyard", "api", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )


def _wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("api exited: " + log.read_text(errors="replace")[-2000:])
        try:
            if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError("api did not become ready in 60 s")


def _sign_in(client: httpx.Client) -> str:
    """Dashboard cookies in `client`; returns an API access token."""
    page = client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    r = client.post(
        "/login",
        data={"email": DEMO_EMAIL, "password": DEMO_PASSWORD, "csrf_token": token.group(1)},
    )
    if r.status_code != 303:
        raise RuntimeError(f"dashboard sign-in failed: {r.status_code}")
    api = client.post("/api/v1/auth/login", json={"email": DEMO_EMAIL, "password": DEMO_PASSWORD})
    api.raise_for_status()
    return str(api.json()["access_token"])


def measure(base: str, sample: dict[str, Any], size: Size, progress: Progress) -> list[Timing]:
    timings = []
    with httpx.Client(base_url=base, headers={"Origin": base}, timeout=60) as client:
        token = _sign_in(client)
        bearer = {"Authorization": f"Bearer {token}"}
        for name, path, is_api in urls(sample):
            progress(f"timing {name}")
            t = Timing(name, path)
            headers = bearer if is_api else {}
            for i in range(size.warmup + size.requests):
                started = time.perf_counter()
                r = client.get(path, headers=headers)
                elapsed = (time.perf_counter() - started) * 1000
                t.status = r.status_code
                if i >= size.warmup:
                    t.ms.append(elapsed)
            t.load = os.getloadavg()[0]
            timings.append(t)
    return timings


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_dashboard_bench(
    admin_url: str, size: Size, progress: Progress, *, keep: bool = False
) -> Result:
    template = testing.ensure_template(admin_url)
    url = testing.create_clone(admin_url, template, CLONE_PREFIX)
    log = Path(tempfile.gettempdir()) / f"jobyard-bench-dashboard-{os.getpid()}.log"
    try:
        sample, build_s, fold_s = build(url, size, progress)
        port = free_port()
        proc = _start_api(url, port, log)
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_ready(base, proc, log)
            timings = measure(base, sample, size, progress)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    finally:
        if keep:
            progress(f"kept the data set: {url}")
        else:
            testing.drop_database(admin_url, url)
    built = {k: v for k, v in sample.items() if k in {"jobs", "executions", "dead_letters", "logs"}}
    return Result(size, built, build_s, fold_s, timings)


def markdown(result: Result) -> str:
    b = result.built
    lines = [
        f"{b['jobs']:,} jobs, {b['executions']:,} executions, {b['dead_letters']:,} dead letters, "
        f"{b['logs']:,} log lines; built in {result.build_s:.0f} s (set-based SQL + VACUUM "
        f"ANALYZE), statistics rollup folded in {result.fold_s:.0f} s. "
        f"{result.size.requests} requests per URL after {result.size.warmup} warm-up.",
        "",
        f"Host: {os.cpu_count()} CPUs; `load` is the 1-minute load average as each URL's "
        "requests ended.",
        "",
        "| page / API | p50 ms | p95 ms | max ms | load | ≤ 200 ms |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for t in result.timings:
        verdict = "yes" if t.ok else ("**no**" if t.status == 200 else f"**HTTP {t.status}**")
        lines.append(
            f"| {t.name} | {t.p50:.1f} | {t.p95:.1f} | {max(t.ms):.1f} | {t.load:.1f} | {verdict} |"
        )
    return "\n".join(lines) + "\n"
