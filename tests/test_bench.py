"""`jobyard bench`: the command runs end to end and prints the promised JSON. Never timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobyard.benchmarks import harness, reference, report
from jobyard.benchmarks.harness import JSON_KEYS, QUICK, Report
from jobyard.cli import app
from jobyard.db import embedded


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


def test_bench_stops_the_embedded_server_it_started(tmp_path: Path) -> None:
    # No database URL: the bench's own embedded server, started for the command. A user who
    # runs `jobyard bench` once in a project must not be left with a PostgreSQL in the background.
    env = {k: v for k, v in os.environ.items() if k not in ("JOBYARD_DATABASE_URL", "DATABASE_URL")}
    env.update(JOBYARD_DATA_DIR=str(tmp_path / ".jobyard"), JOBYARD_LOG_LEVEL="warning")
    pgdata = tmp_path / ".jobyard" / "bench-pgdata"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "jobyard", "bench", "--quick", "--json"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert (pgdata / "PG_VERSION").exists()  # it did run on its own server
        assert not embedded.status(pgdata).running
    finally:
        embedded.stop(pgdata)


def test_a_server_already_running_is_used_and_left_running(tmp_path: Path) -> None:
    pgdata = tmp_path / "pgdata"
    url = embedded.start(pgdata)
    try:
        with embedded.started(pgdata) as inside:
            assert inside == url
        assert embedded.status(pgdata).running
    finally:
        embedded.stop(pgdata)
    with embedded.started(pgdata):
        assert embedded.status(pgdata).running
    assert not embedded.status(pgdata).running


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


MACHINE = {"cpu": "Bench CPU", "cores": 2, "memory_gib": 23.5, "os": "Linux 6.1"}


def _peer_file(tmp_path: Path, **changes: object) -> Path:
    """A `make bench-peers` file: PgQueuer exactly half as fast as _report()'s numbers."""
    numbers: dict[str, object] = {
        key: 500.0 if key.endswith("_per_s") else 4.0
        for key in (*JSON_KEYS, *reference.OPTIONAL_KEYS)
    }
    data = {
        **numbers,
        "peer": "PgQueuer",
        "version": "1.6.0",
        "measured_at": "2026-12-03T01:02:03+00:00",
        "runs": 3,
        "quick": False,
        "machine": MACHINE,
        "details": {"sizes": {}},
        **changes,
    }
    path = tmp_path / "pgqueuer.json"
    path.write_text(json.dumps({k: v for k, v in data.items() if v is not None}), "utf-8")
    return path


def test_a_measured_reference_replaces_the_quoted_figures(tmp_path: Path) -> None:
    quoted = report.render_block(_report())
    assert "| PgQueuer 1.6 | vs PgQueuer |" in quoted
    assert "| 2,400 | 0.42× |" in quoted  # 1,000 single enqueues/s against the 2,400
    assert "quoted in the issue, measured on another machine" in quoted

    peer = reference.load(_peer_file(tmp_path), machine=MACHINE)
    block = report.render_block(_report(), peer)
    assert "| PgQueuer 1.6.0 | vs PgQueuer |" in block
    assert "single enqueue, 1 connection (key) | **1,000** /s" in block
    assert "| 500 | 2.00× |" in block  # every rate: ours 1,000 against 500
    assert "| 4.00 | 2.00× |" in block  # every latency: ours 2 ms against 4 ms
    assert "2,400" not in block and "quoted in the issue" not in block
    # Metrics the peer file has no number for stay empty.
    assert "single enqueue, 4 connections | **1,000** /s (1,000–1,000) | — | — | — | — | — |" in (
        block
    )
    assert "measured on this machine at 2026-12-03 01:02 UTC by `make bench-peers`" in block
    assert "(PgQueuer 1.6.0, median of 3 runs;" in peer.source

    elsewhere = reference.load(_peer_file(tmp_path, quick=True), machine={**MACHINE, "cores": 8})
    assert "measured on another machine (Bench CPU, 2 cores, Linux 6.1)" in elsewhere.source
    assert "`--quick` smoke run" in elsewhere.source


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"drain_2proc_per_s": None}, 'has no "drain_2proc_per_s"'),
        ({"pickup_p99_ms": "fast"}, '"pickup_p99_ms" in the reference file'),
        ({"enqueue_batch_per_s": 0}, "not a positive number"),
        ({"version": None}, 'has no "version"'),
        ({"measured_at": "yesterday"}, 'has no "measured_at"'),
    ],
)
def test_a_bad_reference_file_is_a_clear_cli_error_before_any_benchmark(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    # No database is reachable at this URL: the file must be refused before one is needed.
    cli = CliRunner(env={"JOBYARD_DATABASE_URL": "postgresql://nobody@/none?host=/nonexistent"})
    bad = _peer_file(tmp_path, **changes)
    done = cli.invoke(app, ["bench", "--quick", "--json", "--reference", str(bad)])
    text = " ".join(done.output.split())  # rich wraps long lines
    assert done.exit_code == 2, text
    assert isinstance(done.exception, SystemExit)  # typer.Exit, not a stack trace
    assert "Traceback" not in text
    assert message in text
    assert "hint: regenerate it with `make bench-peers`" in text
    assert "{" not in done.stdout  # no JSON: nothing was measured


def test_a_missing_reference_file_says_how_to_make_one(tmp_path: Path) -> None:
    cli = CliRunner(env={"JOBYARD_DATABASE_URL": "postgresql://nobody@/none?host=/nonexistent"})
    done = cli.invoke(app, ["bench", "--quick", "--reference", str(tmp_path / "none.json")])
    text = " ".join(done.output.split())
    assert done.exit_code == 2, text
    assert "cannot read the reference file" in text
    assert "measure PgQueuer on this machine with `make bench-peers`" in text


def test_bench_reference_flag_feeds_the_report_and_leaves_the_json_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's wiring, with the measurement itself replaced by _report()'s numbers."""
    monkeypatch.setattr(harness, "run_bench", lambda *_args: _report())
    monkeypatch.setattr(reference, "machine_info", lambda: MACHINE)
    cli = CliRunner(env={"JOBYARD_DATABASE_URL": "postgresql://nobody@/none?host=/nonexistent"})
    target = tmp_path / "BENCHMARKS.md"
    args = ["bench", "--json", "--output", str(target), "--reference", str(_peer_file(tmp_path))]
    done = cli.invoke(app, args)
    assert done.exit_code == 0, done.output
    assert list(json.loads(done.stdout)) == list(JSON_KEYS)
    text = target.read_text(encoding="utf-8")
    assert "| PgQueuer 1.6.0 | vs PgQueuer |" in text
    assert "| 500 | 2.00× |" in text
    assert "measured on this machine at 2026-12-03 01:02 UTC by `make bench-peers`" in text


def _peer_script(tmp_path: Path) -> str:
    """A stand-in peer benchmark: prints a `make bench-peers` object whose rates grow by 100
    per run (a counter file), the way run.sh prints PgQueuer's; the command line for it."""
    peer = _peer_file(tmp_path)
    script = tmp_path / "peer.py"
    script.write_text(
        "import json, pathlib, sys\n"
        f"counter = pathlib.Path({str(tmp_path / 'count')!r})\n"
        "n = int(counter.read_text()) if counter.exists() else 0\n"
        "counter.write_text(str(n + 1))\n"
        f"data = json.loads(pathlib.Path({str(peer)!r}).read_text())\n"
        "data['enqueue_single_per_s'] = 400.0 + 100 * n\n"
        "print('progress goes to stderr', file=sys.stderr)\n"
        "print(json.dumps(data))\n",
        "utf-8",
    )
    return f"{sys.executable} {script}"


def test_a_peer_command_runs_before_each_round_and_its_median_is_the_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds: list[str] = []

    def fake_run_bench(*args: object) -> Report:
        before_run = args[4]
        assert callable(before_run)
        for _ in range(3):
            before_run()
            rounds.append((tmp_path / "count").read_text())
        return _report()

    monkeypatch.setattr(harness, "run_bench", fake_run_bench)
    monkeypatch.setattr(reference, "machine_info", lambda: MACHINE)
    cli = CliRunner(env={"JOBYARD_DATABASE_URL": "postgresql://nobody@/none?host=/nonexistent"})
    target = tmp_path / "BENCHMARKS.md"
    command = _peer_script(tmp_path)
    done = cli.invoke(app, ["bench", "--output", str(target), "--peer-command", command])
    assert done.exit_code == 0, done.output
    assert rounds == ["1", "2", "3"]  # the peer ran once before each of jobyard's rounds
    text = " ".join(target.read_text(encoding="utf-8").split())
    # Single enqueue: peer runs 400, 500, 600 → median 500 → ours 1,000 is 2.00×.
    assert (
        "single enqueue, 1 connection (key) | **1,000** /s (1,000–1,000) | ≥ 2,500 | **no** | 0.40× | 500 | 2.00× |"
        in text
    )
    assert f"measured on this machine by `{command}`, one run just before each of jobyard's" in text
    assert "median of 3 runs" in text


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (f"{sys.executable} -c 'import sys; sys.exit(3)'", "failed (exit 3)"),
        (f"{sys.executable} -c 'print(42)'", "is not a JSON object"),
        ("/nonexistent/peer-bench", "cannot run the peer command"),
    ],
)
def test_a_failing_peer_command_is_a_clear_cli_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, message: str
) -> None:
    def fake_run_bench(*args: object) -> Report:
        before_run = args[4]
        assert callable(before_run)
        before_run()
        return _report()

    monkeypatch.setattr(harness, "run_bench", fake_run_bench)
    cli = CliRunner(env={"JOBYARD_DATABASE_URL": "postgresql://nobody@/none?host=/nonexistent"})
    target = tmp_path / "BENCHMARKS.md"
    done = cli.invoke(app, ["bench", "--output", str(target), "--peer-command", command])
    text = " ".join(done.output.split())
    assert done.exit_code == 2, text
    assert isinstance(done.exception, SystemExit)
    assert "Traceback" not in text
    assert message in text
    assert "hint: run `" in text
    assert not target.exists()  # nothing half-measured is written


def test_reference_and_peer_command_together_are_refused(tmp_path: Path) -> None:
    cli = CliRunner(env={"JOBYARD_DATABASE_URL": "postgresql://nobody@/none?host=/nonexistent"})
    args = ["bench", "--reference", str(_peer_file(tmp_path)), "--peer-command", "true"]
    done = cli.invoke(app, args)
    text = " ".join(done.output.split())
    assert done.exit_code == 2, text
    assert "--reference and --peer-command both name the PgQueuer column" in text


def _json_printer(tmp_path: Path, name: str, data: dict[str, object]) -> str:
    """A stand-in peer command printing `data`, logging its name to tmp_path/order per run."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data), "utf-8")
    script = tmp_path / f"{name}.py"
    script.write_text(
        "import pathlib\n"
        f"with open({str(tmp_path / 'order')!r}, 'a') as f: f.write({name!r} + ' ')\n"
        f"print(pathlib.Path({str(path)!r}).read_text())\n",
        "utf-8",
    )
    return f"{sys.executable} {script}"


def test_several_peer_commands_take_turns_and_each_gets_a_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_run_bench(*args: object) -> Report:
        before_run = args[4]
        assert callable(before_run)
        for _ in range(2):
            before_run()
        return _report()

    monkeypatch.setattr(harness, "run_bench", fake_run_bench)
    monkeypatch.setattr(reference, "machine_info", lambda: MACHINE)
    pgq = json.loads(_peer_file(tmp_path).read_text("utf-8"))  # every rate 500, latency 4 ms
    celery = {**pgq, "peer": "Celery", "version": "5.7.0", "enqueue_batch_per_s": 250.0}
    # The ceiling has only the drains, and says so; jobyard's 1,000/s is a quarter of it.
    ceiling = {
        "drain_1proc_per_s": 4000.0,
        "drain_2proc_per_s": 4000.0,
        "not_applicable": [k for k in JSON_KEYS if not k.startswith("drain_")],
        "peer": "ceiling",
        "version": "(pgbench 18.6, n=100)",
        "measured_at": "2026-12-03T01:02:03+00:00",
        "machine": MACHINE,
    }
    commands = [
        _json_printer(tmp_path, "pgqueuer", pgq),
        _json_printer(tmp_path, "celery", celery),
        _json_printer(tmp_path, "ceiling", ceiling),
    ]
    cli = CliRunner(env={"JOBYARD_DATABASE_URL": "postgresql://nobody@/none?host=/nonexistent"})
    target = tmp_path / "BENCHMARKS.md"
    args = ["bench", "--output", str(target)]
    for command in commands:
        args += ["--peer-command", command]
    done = cli.invoke(app, args)
    assert done.exit_code == 0, done.output
    # Each peer once before each of jobyard's rounds, in the order given.
    assert (tmp_path / "order").read_text().split() == ["pgqueuer", "celery", "ceiling"] * 2
    text = " ".join(target.read_text(encoding="utf-8").split())
    assert (
        "| metric | jobyard | target | met | vs target | PgQueuer 1.6.0 | vs PgQueuer | "
        "Celery 5.7.0 | vs Celery | ceiling (pgbench 18.6, n=100) | vs ceiling |" in text
    )
    assert "| batch enqueue | **1,000** /s (1,000–1,000) | ≥ 80,000 | **no** | 0.01× | " in text
    assert "| 500 | 2.00× | 250 | 4.00× | — | — |" in text  # batch: no ceiling number
    assert "| 500 | 2.00× | 500 | 2.00× | 4,000 | 0.25× |" in text  # drain 1 process
    assert "- Celery 5.7.0 column: measured on this machine by" in text
    assert "- ceiling (pgbench 18.6, n=100) column: measured on this machine by" in text


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"not_applicable": ["drain_9proc_per_s"]}, '"not_applicable" in the reference file'),
        ({"not_applicable": "pickup_p50_ms"}, '"not_applicable" in the reference file'),
        ({"not_applicable": list(JSON_KEYS)}, "has no number at all"),
        ({"not_applicable": ["pickup_p50_ms"], "pickup_p99_ms": None}, 'no "pickup_p99_ms"'),
    ],
)
def test_a_peer_leaves_out_only_the_scenarios_it_names(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    with pytest.raises(reference.ReferenceFileError, match=message):
        reference.load(_peer_file(tmp_path, **changes), machine=MACHINE)
    skipped = reference.load(
        _peer_file(tmp_path, not_applicable=["pickup_p50_ms"], pickup_p50_ms=None), machine=MACHINE
    )
    assert "pickup_p50_ms" not in skipped.numbers
