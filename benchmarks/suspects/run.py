"""What a poison pill costs the healthy work: the same drain of short jobs by 2 real worker
processes, without a pill and with one, in turns (docs/WORKER.md, "Poison pills").

Each round gets a fresh database cloned from the migrated template. N healthy `quick` jobs (and,
in a pill round, one `exits_137` job as the 21st) are enqueued, then 2 `python -m jobyard worker`
processes start; a process that exits is started again (what a supervisor does), and the reaper
runs in this process every 0.3 s (`core.maintenance`, as `jobyard scheduler` does), with the
poison-pill cap given. The figure is the healthy jobs' throughput over first claim → last healthy
completion, by the database clock; a pill round also reports the worker deaths, the pill's solo
deaths and dead letter, and checks that no healthy job was dead-lettered, charged an attempt or
given a solo death.

    .venv/bin/python benchmarks/suspects/run.py [--jobs 3000] [--seconds 0.02]
        [--concurrency 4] [--rounds 3] [--cap 3]

Runs against the embedded test server (or JOBYARD_TEST_DATABASE_URL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jobyard.core import maintenance
from jobyard.db import testing
from jobyard.db.pool import Conn, connect
from jobyard.worker.app import App

HERE = Path(__file__).resolve().parent
PROJECT = "bench/suspects"
PILL_AT = 21  # the pill's place in the queue (claimed with the first batches)
LEASE_S = 2.0
SUSPECT_DELAY_S = 2.0
DEADLINE_S = 600.0


def _spawn(url: str, concurrency: int, log_dir: Path, n: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "JOBYARD_DATABASE_URL": url,
        "JOBYARD_PROJECT": PROJECT,
        "JOBYARD_HEARTBEAT_INTERVAL_S": "0.5",
        "JOBYARD_LEASE_S": str(LEASE_S),
        "JOBYARD_POLL_INTERVAL_S": "0.5",
        "JOBYARD_DRAIN_GRACE_S": "2",
        "JOBYARD_LOG_LEVEL": "warning",
    }
    with (log_dir / f"worker-{n}.log").open("wb") as log:
        return subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            [sys.executable, "-m", "jobyard", "worker", "--app", "tasks:app",
             "--queues", "default", "--concurrency", str(concurrency)],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


async def _one(conn: Conn, query: str, *args: Any) -> dict[str, Any]:
    cur = await conn.execute(query, args)  # type: ignore[arg-type]
    row = await cur.fetchone()
    assert row is not None
    return dict(row)


async def _enqueue(url: str, conn: Conn, jobs: int, seconds: float, pill: bool) -> None:
    # The first defer creates the project and its default queue (outside production).
    async with App(project=PROJECT, database_url=url) as app:
        await app.defer("quick", {"seconds": seconds})
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, payload)
           SELECT q.project_id, q.id, CASE WHEN %s AND g = %s THEN 'exits_137' ELSE 'quick' END,
                  CASE WHEN %s AND g = %s THEN '{}'::jsonb
                       ELSE jsonb_build_object('seconds', %s::float8) END
           FROM queues q, generate_series(2, %s) g WHERE q.name = 'default'
           ORDER BY g""",
        (pill, PILL_AT, pill, PILL_AT, seconds, jobs + (1 if pill else 0)),
    )


async def one_round(
    admin: str, template: str, args: argparse.Namespace, pill: bool
) -> dict[str, Any]:
    url = testing.create_clone(admin, template, prefix="jy_bench_")
    conn = await connect(url, autocommit=True)
    log_dir = Path(tempfile.mkdtemp(prefix="jy-suspects-"))
    procs: list[subprocess.Popen[bytes]] = []
    spawned = deaths = 0
    try:
        await _enqueue(url, conn, args.jobs, args.seconds, pill)
        for _ in range(2):
            procs.append(_spawn(url, args.concurrency, log_dir, spawned))
            spawned += 1
        deadline = time.monotonic() + DEADLINE_S
        last_reap = 0.0
        while True:
            for i, proc in enumerate(procs):
                code = proc.poll()
                if code is not None:
                    if code != 137:
                        raise SystemExit(f"a worker exited {code}; logs in {log_dir}")
                    deaths += 1
                    procs[i] = _spawn(url, args.concurrency, log_dir, spawned)
                    spawned += 1
            if time.monotonic() - last_reap >= 0.3:
                await maintenance.promote_due(conn)
                await maintenance.reap_expired_leases(
                    conn, poison_threshold=args.cap, suspect_delay_s=SUSPECT_DELAY_S
                )
                last_reap = time.monotonic()
            state = await _one(
                conn,
                "SELECT count(*) FILTER (WHERE handler = 'quick' AND status = 'done') AS done,"
                " bool_and(status IN ('done', 'dead_letter')) AS settled FROM jobs",
            )
            if state["done"] == args.jobs and state["settled"]:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"the round did not settle: {state}; logs in {log_dir}")
            await asyncio.sleep(0.1)
        row = await _one(
            conn,
            """SELECT count(*) FILTER (WHERE j.handler = 'quick') AS healthy,
                      extract(epoch FROM max(j.finished_at) FILTER (WHERE j.handler = 'quick')
                              - (SELECT min(e.started_at) FROM job_executions e)) AS window_s,
                      count(*) FILTER (WHERE j.handler = 'quick' AND j.status <> 'done')
                          AS healthy_not_done,
                      count(*) FILTER (WHERE j.handler = 'quick' AND j.solo_deaths > 0)
                          AS healthy_solo_deaths,
                      (SELECT count(*) FROM job_executions e JOIN jobs h ON h.id = e.job_id
                       WHERE h.handler = 'quick' AND e.attempt_charged
                         AND e.outcome <> 'succeeded') AS healthy_charged,
                      (SELECT count(*) FROM job_executions e JOIN jobs h ON h.id = e.job_id
                       WHERE h.handler = 'quick' AND e.outcome = 'lease_lost')
                          AS healthy_runs_lost,
                      (SELECT count(*) FROM dead_letter_jobs d JOIN jobs h ON h.id = d.job_id
                       WHERE h.handler = 'quick') AS healthy_dead_lettered
               FROM jobs j""",
        )
        out: dict[str, Any] = {
            "pill": pill,
            "healthy_per_s": round(float(row["healthy"]) / float(row["window_s"]), 1),
            "window_s": round(float(row["window_s"]), 2),
            "worker_deaths": deaths,
            "healthy_dead_lettered": row["healthy_dead_lettered"],
            "healthy_charged": row["healthy_charged"],
            "healthy_solo_deaths": row["healthy_solo_deaths"],
            "healthy_runs_lost": row["healthy_runs_lost"],
        }
        if pill:
            p = await _one(
                conn,
                "SELECT j.status::text AS status, j.solo_deaths, j.last_error,"
                " (SELECT d.reason::text FROM dead_letter_jobs d WHERE d.job_id = j.id) AS reason,"
                " (SELECT count(*) FROM job_executions e WHERE e.job_id = j.id) AS runs"
                " FROM jobs j WHERE j.handler = 'exits_137'",
            )
            out |= {"pill_" + k: v for k, v in p.items()}
        bad = [
            k for k in ("healthy_dead_lettered", "healthy_charged", "healthy_solo_deaths") if out[k]
        ]
        if bad or (
            pill and (out["pill_status"], out["pill_solo_deaths"]) != ("dead_letter", args.cap)
        ):
            raise SystemExit(f"attribution broke: {out}; logs in {log_dir}")
        return out
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        await conn.close()
        testing.drop_database(admin, url)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=0.02)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="pairs: without, with the pill")
    parser.add_argument("--cap", type=int, default=3, help="the poison-pill threshold")
    args = parser.parse_args()
    admin = testing.server_url(os.environ.get("JOBYARD_TEST_DATABASE_URL"))
    template = testing.ensure_template(admin)
    ratios: list[float] = []
    for n in range(args.rounds):
        # In turns, and which goes first alternates, so both meet the same drift of the host.
        order = (False, True) if n % 2 == 0 else (True, False)
        got = {pill: await one_round(admin, template, args, pill) for pill in order}
        for pill in order:
            print(json.dumps({"round": n + 1, **got[pill]}), flush=True)
        ratios.append(got[True]["healthy_per_s"] / got[False]["healthy_per_s"])
    print(
        f"healthy throughput with the pill / without, per round: "
        f"{', '.join(f'{r:.2f}' for r in ratios)}; median {statistics.median(ratios):.2f}",
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main())
