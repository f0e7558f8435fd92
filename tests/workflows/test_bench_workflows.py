"""`jobyard bench --workflows --quick` runs end to end and prints its numbers. Never timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_bench_workflows_quick_json_prints_every_workflow_number(
    pg_admin_url: str, tmp_path: Path
) -> None:
    env = {**os.environ, "JOBYARD_DATABASE_URL": pg_admin_url, "JOBYARD_LOG_LEVEL": "warning"}
    done = subprocess.run(
        [sys.executable, "-m", "jobyard", "bench", "--workflows", "--quick", "--json"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    numbers = json.loads(done.stdout.strip())
    for key in ("chain_step_p50_ms", "chain_step_p99_ms", "pickup_p50_ms", "pickup_p99_ms",
                "fan_in_callback_ms", "plain_drain_per_s", "dependency_drain_per_s"):  # fmt: skip
        assert numbers[key] > 0, key
    assert "bookkeeping_pct" in numbers and "bookkeeping_us_per_job" in numbers
