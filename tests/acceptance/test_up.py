"""`jobyard up` as a user runs it: every process starts, and Ctrl-C in the terminal (SIGINT to
the whole foreground process group) drains them all to a clean exit 0."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request

import pytest

from jobyard.db.pool import Conn
from tests.worker.helpers import eventually, scalar

pytestmark = pytest.mark.xdist_group("processes")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _healthy(port: int) -> bool:
    def get() -> bool:
        try:
            url = f"http://127.0.0.1:{port}/healthz"
            with urllib.request.urlopen(url, timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    return await asyncio.to_thread(get)


async def test_ctrl_c_in_a_terminal_drains_every_process_to_exit_0(db_url: str, conn: Conn) -> None:
    port = _free_port()
    env = {**os.environ, "JOBYARD_DATABASE_URL": db_url, "JOBYARD_API_PORT": str(port)}
    with tempfile.TemporaryFile() as output:
        # A session of its own stands in for the terminal's foreground process group.
        proc = subprocess.Popen(  # noqa: ASYNC220 - the process outlives this call by design
            [sys.executable, "-m", "jobyard", "up"],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            await eventually(lambda: _healthy(port), timeout=60, interval=0.2)
            active = "SELECT count(*) FROM workers WHERE status = 'active'"
            await eventually(lambda: scalar(conn, active), timeout=60, interval=0.2)
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        output.seek(0)
        text = output.read().decode(errors="replace")
    assert code == 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert "second signal" not in text  # one Ctrl-C is one graceful stop, not "exit at once"
    # Which database, said once by `up` (its children do not repeat it); issue 11.
    assert text.count("database: ") == 1 and "(from JOBYARD_DATABASE_URL)" in text, text[:2000]
    for child in ("scheduler", "api", "worker"):
        assert f'"child": "{child}", "code": 0' in text, (child, text[-3000:])
    statuses = await scalar(conn, "SELECT string_agg(DISTINCT status::text, ',') FROM workers")
    assert statuses == "stopped"  # drained and said goodbye, not killed
