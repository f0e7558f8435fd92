"""`jobyard bench`: the command runs end to end and prints the promised JSON. Never timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jobyard.benchmarks import report
from jobyard.benchmarks.harness import JSON_KEYS, QUICK, Report


def test_bench_quick_json_prints_one_object_with_the_seven_numbers(
    pg_admin_url: str, tmp_path: Path
) -> None:
    env = {**os.environ, "JOBYARD_DATABASE_URL": pg_admin_url, "JOBYARD_LOG_LEVEL": "warning"}
    done = subprocess.run(
        [sys.executable, "-m", "jobyard", "bench", "--quick", "--json"],
        env=env,
        cwd=tmp_path,  # --quick must not write docs/BENCHMARKS.md anywhere
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout
    numbers = json.loads(lines[0])
    assert list(numbers) == list(JSON_KEYS)
    for key, value in numbers.items():
        assert isinstance(value, int | float) and not isinstance(value, bool), key
        assert value > 0, key
    assert not (tmp_path / "docs").exists()


def _report() -> Report:
    numbers = {m.key: 1000.0 if m.unit == "/s" else 2.0 for m in report.METRICS}
    return Report(sizes=QUICK, runs=[numbers, {**numbers, "drain_2proc_per_s": 30_000.0}])


def test_report_rewrites_only_the_generated_block(tmp_path: Path) -> None:
    target = tmp_path / "BENCHMARKS.md"
    target.write_text(
        f"# Benchmarks\n\nhand-written intro\n\n{report.BEGIN}\nold numbers\n{report.END}\n\n"
        "## Notes\nkept\n",
        encoding="utf-8",
    )
    report.write_report(_report(), target)
    text = target.read_text(encoding="utf-8")
    assert "hand-written intro" in text
    assert "## Notes\nkept" in text
    assert "old numbers" not in text
    assert text.count(report.BEGIN) == 1 and text.count(report.END) == 1
    # Median of 1,000 and 30,000 is 15,500: above the 25,000 target? No; the table says so.
    assert "**15,500** /s (1,000–30,000) | ≥ 25,000 | **no**" in text


def test_metric_judges_rates_up_and_latencies_down() -> None:
    by_key = {m.key: m for m in report.METRICS}
    assert by_key["enqueue_batch_per_s"].meets(80_000) is True
    assert by_key["enqueue_batch_per_s"].meets(79_999) is False
    assert by_key["pickup_p50_ms"].meets(3.0) is True
    assert by_key["pickup_p50_ms"].meets(3.1) is False
    assert by_key["pickup_p50_ms"].ratio(1.6, 3.2) == "2.00×"
    assert by_key["drain_2proc_per_s"].ratio(42_000, 21_000) == "2.00×"
