"""`jobyard scheduler`: every loop running together, stopping cleanly on SIGTERM/SIGINT."""

from __future__ import annotations

import ast
import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jobyard.core.schedules import ScheduleFields, create_schedule
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId
from jobyard.domain.settings import Settings
from jobyard.scheduler.runner import APPLICATION_NAME, build_services, serve
from tests.factories import make_queue
from tests.scheduler.helpers import one, wait_until

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "jobyard"


def scheduler_env(db_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBYARD_")}
    env.update(
        JOBYARD_DATABASE_URL=db_url,
        JOBYARD_LOG_LEVEL="warning",
        JOBYARD_CRON_INTERVAL_S="0.2",
        JOBYARD_PROMOTER_INTERVAL_S="0.2",
    )
    env.update(extra)
    return env


async def connections_named(conn: Conn, name: str) -> int:
    row = await one(
        conn,
        """SELECT count(*) AS n FROM pg_stat_activity
           WHERE datname = current_database() AND application_name = %s""",
        name,
    )
    return int(row["n"])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_scheduler_process_exits_0_on_a_stop_signal(
    conn: Conn, db_url: str, signum: int
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jobyard",
        "scheduler",
        cwd=ROOT,
        env=scheduler_env(db_url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        for _ in range(600):
            if await connections_named(conn, APPLICATION_NAME):
                break
            assert proc.returncode is None, await proc.communicate()
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("scheduler never connected")
        await asyncio.sleep(0.5)  # let every loop run a pass
        proc.send_signal(signum)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err


def test_bad_scheduler_setting_is_a_clear_error_naming_it(db_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "jobyard", "scheduler"],
        cwd=ROOT,
        env=scheduler_env(db_url, JOBYARD_CRON_INTERVAL_S="0"),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert "cron_interval_s" in err
    assert "Traceback" not in err


async def test_serve_runs_every_loop_and_stops_when_told(conn: Conn, db_url: str) -> None:
    queue = await make_queue(conn)
    await create_schedule(
        conn,
        ProjectId(queue["project_id"]),
        ScheduleFields.from_mapping(
            {"name": "tick", "queue_id": queue["id"], "cron": "* * * * * *", "handler": "h"}
        ),
    )
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, run_at)
           VALUES (%s, %s, 'later', 'scheduled', now() - interval '1 s')""",
        (queue["project_id"], queue["id"]),
    )
    settings = Settings(cron_interval_s=0.1, promoter_interval_s=0.1)
    services = build_services(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(serve(db_url, services, stop))
    await wait_until(lambda: all(s.passes >= 1 for s in services), within_s=30)
    for _ in range(300):
        fired = await one(conn, "SELECT count(*) AS n FROM jobs WHERE schedule_id IS NOT NULL")
        if fired["n"] >= 2:
            break
        await asyncio.sleep(0.1)
    stop.set()
    assert await asyncio.wait_for(task, timeout=15) == 0
    promoted = await one(conn, "SELECT status::text FROM jobs WHERE handler = 'later'")
    assert promoted["status"] == "queued"
    # The pool was closed. A backend leaves pg_stat_activity a moment after its client hangs
    # up, so give the server a few seconds to notice rather than racing it.
    for _ in range(50):
        if await connections_named(conn, APPLICATION_NAME) == 0:
            break
        await asyncio.sleep(0.1)
    assert await connections_named(conn, APPLICATION_NAME) == 0


# Calls that read this host's clock. Scheduling code may only use durations (sleep) and the
# database clock; a skewed host clock must change nothing.
_HOST_CLOCK = {"now", "utcnow", "today", "time", "time_ns", "localtime", "gmtime"}
_SCHEDULING_MODULES = [
    *sorted((SRC / "scheduler").glob("*.py")),
    SRC / "core" / "cron.py",
    SRC / "core" / "schedules.py",
    SRC / "core" / "maintenance.py",
]


@pytest.mark.parametrize("path", _SCHEDULING_MODULES, ids=lambda p: p.name)
def test_scheduling_code_never_reads_the_host_clock(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    offenders = [
        f"{path.name}:{node.lineno} {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _HOST_CLOCK
        and ast.unparse(node.func.value) in {"datetime", "date", "time", "dt", "datetime.datetime"}
    ]
    assert offenders == []
