"""`jobyard bench --scenario steady|pressure|burndown`: each runs end to end at tiny sizes on
real PostgreSQL with real worker processes and writes its JSON, PNG and Markdown block; the held
phase really holds the xmin horizon; the producer's wall-clock crediting, with a fake clock.
Never a timing assertion."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from jobyard.benchmarks import timeline, timeline_report
from jobyard.benchmarks.load import Producer
from jobyard.benchmarks.timeline import RelationStat, Sample, Window
from jobyard.cli import app

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class FakeClock:
    """A monotonic clock that moves only when the code under test sleeps (or a test says);
    it stops the producer once it reaches `until`."""

    def __init__(self, until: float) -> None:
        self.now = 0.0
        self.until = until
        self.producer: Producer | None = None

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)
        if self.now >= self.until and self.producer is not None:
            self.producer.stop()
        await asyncio.sleep(0)


def _produce(clock: FakeClock, producer: Producer) -> None:
    clock.producer = producer
    asyncio.run(producer.run())


def test_a_producer_that_falls_behind_catches_up_in_the_next_tick() -> None:
    clock = FakeClock(until=3.0)
    inserts: list[tuple[float, int]] = []
    behind_after_stall: list[int] = []

    async def insert(n: int) -> None:
        inserts.append((clock.now, n))
        if len(inserts) == 5:
            # This insert takes a whole second (a stalled host): the schedule keeps running.
            clock.now += 1.0
            behind_after_stall.append(producer.offered() - producer.enqueued)

    producer = Producer(100, insert, max_chunk=10_000, tick_s=0.1, clock=clock, sleep=clock.sleep)
    _produce(clock, producer)

    sizes = [n for _, n in inserts]
    # On schedule: 10 jobs a tick (100/s × 0.1 s); after the stall, the second's 100 at once.
    assert sizes[1:5] == [10, 10, 10, 10]
    assert sizes[5] >= 100, sizes
    assert all(n <= 11 for n in sizes[6:]), sizes
    # What the schedule offered counts, not what was managed: the stall is in `offered`.
    assert behind_after_stall[0] >= 100
    # Caught up: everything offered up to the stop was inserted.
    assert producer.enqueued == producer.offered()
    assert producer.offered() == pytest.approx(100 * clock.now, abs=11)


def test_a_producer_splits_a_backlog_into_chunks_and_stops_offering_at_stop() -> None:
    clock = FakeClock(until=2.5)
    sizes: list[int] = []

    async def insert(n: int) -> None:
        sizes.append(n)
        if len(sizes) == 1:
            clock.now += 2.0  # 2,000 jobs behind at 1,000/s

    producer = Producer(1_000, insert, max_chunk=500, tick_s=0.05, clock=clock, sleep=clock.sleep)
    _produce(clock, producer)
    assert max(sizes) <= 500
    assert sizes[1:5] == [500, 500, 500, 500]
    frozen = producer.offered()
    clock.now += 10.0
    assert producer.offered() == frozen  # the schedule ended at stop()
    assert producer.enqueued == frozen


def test_hot_relations_are_found_by_name_and_by_activity() -> None:
    at = datetime(2026, 12, 3, tzinfo=UTC)

    def sample(writes: dict[str, int]) -> Sample:
        relations = {n: RelationStat(dead=1, live=1, writes=w, bytes=8192) for n, w in writes.items()}  # fmt: skip
        return Sample(at, "steady", 0, 0, 0, None, None, relations)

    first = sample({"jobs": 0, "job_executions": 0, "job_ready_0": 0, "job_ready_1": 0,
                    "job_held_0": 0, "job_batches": 0, "queues": 0, "users": 5})  # fmt: skip
    last = sample({"jobs": 9_000, "job_executions": 3_000, "job_ready_0": 2_000, "job_ready_1": 1,
                   "job_held_0": 0, "job_batches": 400, "queues": 2, "users": 90})  # fmt: skip
    families = timeline.hot_families([first, last], completed=3_000)
    # Named ones first (partitions as one family), then busy tables (≥ 1 write per 20 jobs); the
    # held set of limited queues only when written.
    assert families == ["jobs", "job_executions", "job_ready*", "job_batches"]
    limited = sample({"jobs": 9_000, "job_executions": 3_000, "job_ready_0": 2_000,
                      "job_held_0": 3_000, "job_held_1": 5})  # fmt: skip
    assert timeline.hot_families([first, limited], completed=3_000) == [
        "jobs", "job_executions", "job_ready*", "job_held*"]  # fmt: skip
    assert timeline.family("job_ready_17") == "job_ready*"
    assert timeline.family("job_ready") == "job_ready*"
    dead, size = timeline._by_family(last.relations, families)
    assert dead["job_ready*"] == 2 and size["job_ready*"] == 16384
    # Without any job_ready table (today's schema) the family is simply absent.
    plain = sample({"jobs": 10, "job_executions": 10})
    assert timeline.hot_families([plain, plain], completed=0) == ["jobs", "job_executions"]


def _window(phase: str, end_s: float, p99: float | None, backlog: int = 0) -> Window:
    return Window(phase, end_s - 1, end_s, 100, 100, 100, backlog, 100, 1.0, p99, p99, None,
                  None, {}, {})  # fmt: skip


def test_recovery_is_where_the_typical_window_p99_stays_back_at_the_baseline() -> None:
    phases = [
        # One burst (an autovacuum pass) made the baseline's own p99 100 ms; its windows' 4 ms.
        timeline.PhaseSummary("baseline", 0, 10, 100, 100, 1.0, 1000, 1.0, 100.0, None, None, {}, {}, {}, window_p99_median_ms=4.0),
        timeline.PhaseSummary("hold", 10, 20, 100, 90, 0.9, 900, 5.0, 400.0, None, None, {}, {}, {}),
        timeline.PhaseSummary("recovery", 20, 40, 100, 110, 1.1, 1100, 1.0, 6.0, None, None, {}, {}, {}),
    ]  # fmt: skip
    p99s = [30.0, 30.0, 30.0, 5.0, 40.0, 5.0, 5.0, 5.0, None]
    windows = [_window("baseline", 5, 4.0, backlog=50)] + [
        _window("recovery", 22 + 2 * i, p99) for i, p99 in enumerate(p99s)
    ]
    judged = timeline._judge(phases, windows, rate=100.0)
    assert judged[1].p99_vs_baseline == pytest.approx(4.0)  # the phases' own p99s
    # Limit 2 × 4 ms. From the 24–26 s window on, the median of each five in a row is 5 ms:
    # the single 40 ms window later is not a relapse.
    assert judged[2].recovery_s == pytest.approx(6.0)
    windows.append(_window("recovery", 40, 5.0, backlog=1_000))  # a backlog left at the end
    assert timeline._judge(phases, windows, rate=100.0)[2].recovery_s is None


def test_one_slow_window_near_the_end_of_the_recovery_is_not_a_relapse() -> None:
    # The last windows are judged by the median of the phase's last five, as every other window
    # is by five in a row: a median of the last two alone (27.4 and 11.6 ms against a 18.4 ms
    # limit in pressure-amd-0034) made one slow window a relapse at the very end.
    phases = [
        timeline.PhaseSummary("baseline", 0, 10, 100, 100, 1.0, 1000, 1.0, 10.0, None, None, {}, {}, {}, window_p99_median_ms=4.0),
        timeline.PhaseSummary("hold", 10, 20, 100, 100, 1.0, 1000, 1.0, 10.0, None, None, {}, {}, {}),
        timeline.PhaseSummary("recovery", 20, 40, 100, 100, 1.0, 1000, 1.0, 10.0, None, None, {}, {}, {}),
    ]  # fmt: skip
    p99s = [30.0, 30.0, 30.0, 5.0, 5.0, 5.0, 5.0, 5.0, 40.0, 5.0]
    windows = [_window("baseline", 5, 4.0)] + [
        _window("recovery", 22 + 2 * i, p99) for i, p99 in enumerate(p99s)
    ]
    # From the second window on every median of five is 5 ms (the old rule said 20 s: the end).
    assert timeline._judge(phases, windows, rate=100.0)[2].recovery_s == pytest.approx(4.0)
    # A relapse at the end is still one: two slow windows among the last five.
    windows[-3] = _window("recovery", 36, 40.0)
    windows[-2] = _window("recovery", 38, 40.0)
    windows[-1] = _window("recovery", 40, 40.0)
    assert timeline._judge(phases, windows, rate=100.0)[2].recovery_s is None


def _bench(pg_admin_url: str, cwd: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "JOBYARD_DATABASE_URL": pg_admin_url, "JOBYARD_LOG_LEVEL": "warning"}
    done = subprocess.run(
        [sys.executable, "-m", "jobyard", "bench", "--quick", "--json", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout
    summary: dict[str, Any] = json.loads(lines[0])
    return summary


def _outputs(markdown: Path, name: str) -> tuple[dict[str, Any], str]:
    """The JSON written for `name`, the Markdown block; the PNG checked on the way."""
    out = timeline_report.outputs_for(markdown, name)
    assert out.plot.read_bytes().startswith(PNG_SIGNATURE)
    data: dict[str, Any] = json.loads(out.samples.read_text(encoding="utf-8"))
    text = markdown.read_text(encoding="utf-8")
    begin, end = timeline_report.markers(name)
    assert text.count(begin) == 1 and text.count(end) == 1
    block = text[text.index(begin) : text.index(end)]
    assert f"![{name} over time](bench/{name}.png)" in block
    return data, block


DOCS_BENCH = Path(__file__).resolve().parent.parent / "docs" / "bench"


@pytest.mark.parametrize(
    ("run", "verdict"),
    [
        # 11,851 jobs/s offered: the baseline kept a median backlog of ~13,700 jobs.
        ("pressure-fraction-amd-0024", "was saturated"),
        # 10,403 jobs/s: a median backlog of 2,525 over the baseline, 14,593 over its last
        # quarter; the hold began ~20,000 jobs behind.
        ("pressure-fraction-amd-8gb", "fell behind"),
        # 8,802 jobs/s: loaded (p99 937 ms) but 445 / 817 jobs behind, under a second of work.
        ("pressure-fraction-amd-0033", None),
        # 7,867 jobs/s on the Intel host: loaded (p50 23 ms) but no backlog (median ~190 jobs).
        ("pressure-fraction-intel", None),
        ("pressure-xid-amd", None),
    ],
)
def test_a_saturated_baseline_is_named_in_the_report(run: str, verdict: str | None) -> None:
    """Redrawn from committed runs: a baseline whose backlog exceeds a second of the offered
    rate, over all its windows or over its last quarter, is at the host's capacity, and the
    report says the hold cannot be judged apart from that."""
    loaded = timeline.result_from_json(json.loads((DOCS_BENCH / f"{run}.json").read_text()))
    block = timeline_report.render_block(loaded, run, f"bench/{run}.png", f"bench/{run}.json")
    named = [v for v in ("was saturated", "fell behind") if f"**The baseline {v}**" in block]
    assert named == ([] if verdict is None else [verdict])


def test_steady_runs_end_to_end_and_writes_json_png_and_markdown(
    pg_admin_url: str, tmp_path: Path
) -> None:
    markdown = tmp_path / "docs" / "BENCHMARKS.md"
    markdown.parent.mkdir()
    markdown.write_text("# Benchmarks\n\nkept by hand\n", encoding="utf-8")
    summary = _bench(
        pg_admin_url, tmp_path, "--scenario", "steady", "--rate-fraction", "0.05",
        "--calibrate-runs", "3", "--output", str(markdown),
    )  # fmt: skip
    data, block = _outputs(markdown, "steady")
    assert "kept by hand" in markdown.read_text(encoding="utf-8")
    # The offered rate was a fraction of the median of three drains measured just before.
    drains = data["calibration_drains_per_s"]
    assert len(drains) == 3 and all(d > 0 for d in drains)
    assert data["calibrated_drain_per_s"] == pytest.approx(sorted(drains)[1])
    assert data["rate_per_s"] == pytest.approx(0.05 * data["calibrated_drain_per_s"])
    assert summary["rate_per_s"] == pytest.approx(data["rate_per_s"])
    steady = summary["steady"]
    assert steady["offered_per_s"] > 0 and steady["completed_per_s"] > 0
    assert steady["pickup_p50_ms"] is not None and steady["pickup_p99_ms"] is not None
    assert {"jobs", "job_executions"} <= set(steady["bytes_at_end"])
    assert steady["dead_peak"]["jobs"] >= 0
    windows = data["windows"]
    assert windows and all(w["phase"] == "steady" for w in windows)
    assert sum(w["completions"] for w in windows) > 0
    assert sum(w["offered"] for w in windows) > 0
    assert len(data["samples"]) == len(windows) + 1
    assert "| steady | " in block and "the median of 3 2-process drains" in block
    # Three is the full run's default: the command that repeats it does not name it.
    assert "--calibrate-runs" not in block
    # Redrawn from its JSON (no database), the block comes out the same.
    loaded = timeline.result_from_json(data)
    out = timeline_report.outputs_for(markdown, "steady")
    assert timeline_report.render_block(
        loaded, "steady", "bench/steady.png", "bench/steady.json"
    ).startswith(block)
    cli = CliRunner(env={"JOBYARD_DATABASE_URL": "postgresql://nobody@/none?host=/nonexistent"})
    redraw = tmp_path / "again" / "BENCHMARKS.md"
    done = cli.invoke(app, ["bench", "--scenario", "steady", "--from-json", str(out.samples),
                            "--output", str(redraw)])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert _outputs(redraw, "steady")[1] == block
    wrong = cli.invoke(app, ["bench", "--scenario", "burndown", "--from-json", str(out.samples)])
    assert wrong.exit_code == 2 and "holds a steady run, not burndown" in " ".join(
        wrong.output.split()
    )


def test_steady_with_a_limited_queue_claims_through_the_limit(
    pg_admin_url: str, tmp_path: Path
) -> None:
    markdown = tmp_path / "BENCHMARKS.md"
    summary = _bench(
        pg_admin_url, tmp_path, "--scenario", "steady", "--rate", "100",
        "--max-concurrency", "2", "--tag", "limited", "--output", str(markdown),
    )  # fmt: skip
    data, block = _outputs(markdown, "steady-limited")
    assert data["config"]["max_concurrency"] == 2
    assert summary["steady"]["completed_per_s"] > 0
    assert "`max_concurrency` 2" in block
    assert "--max-concurrency 2" in block.split("\n\n")[1], block.split("\n\n")[1]


@pytest.mark.parametrize(
    ("hold", "name"),
    [
        ([], "pressure-idle"),  # the idle transaction alone
        (["--no-idle", "--readers", "2"], "pressure-readers"),  # REPEATABLE READ readers alone
    ],
)
@pytest.mark.xdist_group("horizon")
def test_pressure_holds_the_xmin_horizon_only_during_the_hold(
    pg_admin_url: str, tmp_path: Path, hold: list[str], name: str
) -> None:
    markdown = tmp_path / "BENCHMARKS.md"
    tag = name.removeprefix("pressure-")
    summary = _bench(
        pg_admin_url, tmp_path, "--scenario", "pressure", *hold, "--tag", tag,
        "--output", str(markdown),
    )  # fmt: skip
    data, block = _outputs(markdown, name)
    assert [p["name"] for p in data["phases"]] == ["baseline", "hold", "recovery"]
    assert (data["reader_scans"] >= 1) == ("--readers" in hold)
    assert (data["held_xid"] is not None) == ("--no-idle" not in hold)

    def ages(phase: str, key: str = "xmin_age_here") -> list[int]:
        return [w[key] or 0 for w in data["windows"] if w["phase"] == phase]

    # The windows carry two ages: of every holder of the horizon (xmin_age, the report's), and
    # of the holders in this run's database (xmin_age_here). Another test's xid in another
    # database holds the horizon too, for a minute at times (a 200,000-row UPDATE), and shows in
    # the first from before this run's hold to after its release (fresh-clone CI, 2026-12-04:
    # [716, …, 870] then [907, …, 1000]); this run's own hold is the second.
    assert all((w["xmin_age"] or 0) >= (w["xmin_age_here"] or 0) for w in data["windows"])
    hold_ages, recovery_ages = ages("hold"), ages("recovery")
    assert len(hold_ages) >= 2, data["windows"]
    # The horizon stays where the hold took it while transactions go on: its age grows…
    assert hold_ages[-1] > hold_ages[0] > 0, hold_ages
    assert min(hold_ages) == hold_ages[0], hold_ages
    # …and drops as soon as it is released. The samples report whoever holds the horizon, and
    # on a shared server that is not only this run: a snapshot's xmin is the oldest xid running
    # anywhere in the cluster, so a statement of this database's workers that starts while a
    # test in another database holds a transaction shows that transaction's age (PostgreSQL 15
    # in CI, two test processes: [1, 1375, 0, 1], [0, 0, 0, 1453] and [1, 1, 0, 1433] after a
    # release). Autovacuum workers, whose VACUUM shows an old backend_xmin while it runs, are left
    # out by the sample itself, as by the health query. The two variants of this test run in
    # one xdist group, so that one's hold cannot fall in the other's recovery ([1340, 0, 0,
    # 1430] when they did); other tests may still hold an xid for a moment. So the test asks
    # that the age falls below the hold's last once the hold is released, and a hold never
    # released (its age only grows) still fails it.
    assert min(recovery_ages) < hold_ages[-1], (hold_ages, recovery_ages)
    assert summary["hold"]["max_xmin_age"] == max(ages("hold", "xmin_age"))
    assert "Back to baseline" in block and "Targets (issue 15, point 1)" in block
    # Every window carries what the activity sampler saw in it (what it sees is
    # test_bench_activity.py's; a tiny run may catch no session active), and the block shows
    # the slowest windows with it.
    assert all(w["activity"]["samples"] >= 1 for w in data["windows"]), data["windows"]
    assert "The slowest windows by pickup p99" in block
    # The server's WAL, every window: a figure in each, and WAL in every phase and in most
    # windows (every commit writes some). Not in every window: on a loaded host a half-second
    # window can pass with no commit at all (CI on PostgreSQL 15, 2026-12-07 18:30 UTC).
    wal = [w["wal_bytes"] for w in data["windows"]]
    assert all(b is not None and b >= 0 for b in wal), wal
    assert sum(b > 0 for b in wal) * 2 >= len(wal), wal
    for phase in ("baseline", "hold", "recovery"):
        assert sum(w["wal_bytes"] for w in data["windows"] if w["phase"] == phase) > 0, phase
    assert "WAL written by the server" in block and "data_checksums=" in block


def test_burndown_drains_every_preinserted_job_and_reports_quarters(
    pg_admin_url: str, tmp_path: Path
) -> None:
    markdown = tmp_path / "BENCHMARKS.md"
    summary = _bench(
        pg_admin_url, tmp_path, "--scenario", "burndown", "--jobs", "2000",
        "--output", str(markdown),
    )  # fmt: skip
    data, block = _outputs(markdown, "burndown")
    assert [q["jobs"] for q in data["quarters"]] == [500, 500, 500, 500]
    assert all(q["seconds"] > 0 for q in data["quarters"])
    assert len(summary["quarters_per_s"]) == 4
    assert summary["last_quarter_vs_first"] > 0
    assert sum(w["completions"] for w in data["windows"]) == 2_000
    assert data["windows"][-1]["backlog"] == 0
    assert all(w["p99_ms"] is None for w in data["windows"])  # no latency for a burn-down
    assert "| quarter | jobs | seconds | jobs/s |" in block


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hold-s", "5"], "--hold-s only with --scenario"),
        (["--scenario", "steady", "--hold-s", "5"], "--hold-s does not apply to --scenario steady"),
        (
            ["--scenario", "burndown", "--rate", "100"],
            "--rate does not apply to --scenario burndown",
        ),
        (
            ["--scenario", "steady", "--rate", "5", "--rate-fraction", "0.5"],
            "both set the offered rate",
        ),
        (
            ["--scenario", "pressure", "--rate", "5", "--calibrate-runs", "2"],
            "--calibrate-runs measures the drain of --rate-fraction",
        ),
        (["--scenario", "pressure", "--no-idle"], "--no-idle leaves nothing to hold the horizon"),
        (["--scenario", "steady", "--tag", "../x"], "letters, digits, - and _ only"),
        (["--scenario", "steady", "--workflows"], "--scenario runs alone"),
        (
            ["--scenario", "burndown", "--max-concurrency", "5"],
            "--max-concurrency does not apply to --scenario burndown",
        ),
    ],
)
def test_bad_scenario_options_are_one_line_errors_before_any_database_work(
    args: list[str], message: str
) -> None:
    # No database answers at this URL: every refusal must come first.
    cli = CliRunner(env={"JOBYARD_DATABASE_URL": "postgresql://nobody@/none?host=/nonexistent"})
    done = cli.invoke(app, ["bench", *args])
    text = " ".join(done.output.split())
    assert done.exit_code == 2, text
    assert isinstance(done.exception, SystemExit)
    assert "Traceback" not in text
    assert message in text


def test_an_unknown_scenario_is_refused_by_name() -> None:
    cli = CliRunner(env={"JOBYARD_DATABASE_URL": "postgresql://nobody@/none?host=/nonexistent"})
    done = cli.invoke(app, ["bench", "--scenario", "storm"])
    assert done.exit_code == 2
    assert "storm" in done.output and "steady" in done.output


def test_a_block_is_replaced_in_place_and_other_blocks_survive(tmp_path: Path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    begin, end = timeline_report.markers("steady")
    other_begin, other_end = timeline_report.markers("steady-before")
    path.write_text(
        f"intro\n\n{other_begin}\nbefore numbers\n{other_end}\n\n{begin}\nold\n{end}\n\ntail\n",
        encoding="utf-8",
    )
    timeline_report.replace_block(path, "steady", f"{begin}\nnew\n{end}")
    text = path.read_text(encoding="utf-8")
    assert "new" in text and "old" not in text
    assert "before numbers" in text and text.endswith("tail\n") and text.startswith("intro")
    timeline_report.replace_block(path, "burndown", "\n".join(timeline_report.markers("burndown")))
    assert (
        path.read_text(encoding="utf-8").rstrip().endswith(timeline_report.markers("burndown")[1])
    )


def test_windows_are_cut_at_the_samples(tmp_path: Path) -> None:
    """Sanity of the JSON shape a reader of the raw samples relies on (no database)."""
    at = datetime(2026, 12, 3, tzinfo=UTC)
    s = Sample(
        at + timedelta(seconds=1), "steady", 10, 10, 5, 3, 0.5, {"jobs": RelationStat(1, 2, 3, 4)}
    )
    plain = timeline.TimelineResult(
        config=timeline.QUICK, rate=10.0, calibrated_drain_per_s=None, started_at=at,
        samples=[s], windows=[], phases=[], families=["jobs"],
    ).json_object()  # fmt: skip
    assert plain["samples"][0]["at"] == "2026-12-03T00:00:01+00:00"
    assert plain["samples"][0]["relations"]["jobs"] == {
        "dead": 1,
        "live": 2,
        "writes": 3,
        "bytes": 4,
    }
    json.dumps(plain)  # plain JSON all the way down


def test_a_run_without_matplotlib_keeps_its_block_and_json_and_says_how_to_plot_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """matplotlib is a development dependency: from an installed wheel a scenario's measurements
    must still be written, with the command that draws the plot where it is installed."""
    saved = Path(__file__).parents[1] / "docs" / "bench" / "pressure-limited-held-set.json"
    result = timeline.result_from_json(json.loads(saved.read_text(encoding="utf-8")))
    # Every matplotlib import now fails, also of submodules an earlier test left in sys.modules
    # (in CI a test that plots ran first in the same process, and only `matplotlib` was blocked).
    loaded = [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]
    for name in {*loaded, "matplotlib", "matplotlib.figure", "matplotlib.ticker"}:
        monkeypatch.setitem(sys.modules, name, None)
    markdown = tmp_path / "BENCHMARKS.md"
    out = timeline_report.write_all(result, markdown, "user")
    assert not out.plotted and not out.plot.exists() and out.samples.exists()
    assert out.written() == f"{markdown}, {out.samples}"
    block = markdown.read_text(encoding="utf-8")
    assert "](bench/pressure-user.png)" not in block
    assert (
        "`jobyard bench --scenario pressure --from-json bench/pressure-user.json --tag user`"
        in block
    )
