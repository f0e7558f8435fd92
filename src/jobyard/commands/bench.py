"""`jobyard bench`: enqueue, drain and pickup latency, optionally against peers run in turns."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from jobyard.commands.common import DataDir, err, exit_code, fail, load_settings
from jobyard.db import embedded
from jobyard.db.locate import data_dir as data_dir_of
from jobyard.db.pool import CONNECTION_ERRORS
from jobyard.domain.errors import JobyardError
from jobyard.domain.settings import Settings

if TYPE_CHECKING:
    from jobyard.benchmarks.timeline_report import Outputs

root = typer.Typer()


def _bench_server(ctx: typer.Context, settings: Settings, *, keep_running: bool = False) -> str:
    """The server a benchmark runs on: DATABASE_URL's, else the bench's own embedded one
    (PostgreSQL's durable defaults, apart from the demo's). That one is started for this command
    and stopped when the command ends, however it ends, unless it was running already or the
    caller keeps a database on it (`--keep`)."""
    if settings.database_url:
        return settings.database_url
    pgdata = data_dir_of(settings) / "bench-pgdata"
    if keep_running:
        return embedded.start(pgdata)
    return ctx.with_resource(embedded.started(pgdata))


class Scenario(StrEnum):
    steady = "steady"
    pressure = "pressure"
    burndown = "burndown"


_TAG: Final = re.compile(r"[A-Za-z0-9_-]{1,40}")
# Which scenarios take each scenario option (anything else is refused, not ignored).
_APPLIES: Final = {
    "--rate": ("steady", "pressure"),
    "--rate-fraction": ("steady", "pressure"),
    "--calibrate-runs": ("steady", "pressure"),
    "--duration": ("steady",),
    "--baseline-s": ("pressure",),
    "--hold-s": ("pressure",),
    "--recovery-s": ("pressure",),
    "--readers": ("pressure",),
    "--idle/--no-idle": ("pressure",),
    "--max-concurrency": ("steady", "pressure"),
    "--jobs": ("burndown",),
}


@root.command("bench")
def bench_cmd(
    ctx: typer.Context,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object of the key numbers only.")
    ] = False,
    quick: Annotated[
        bool, typer.Option("--quick", help="Tiny sizes (a smoke run); writes no report.")
    ] = False,
    runs: Annotated[
        int | None, typer.Option("--runs", min=1, max=10, help="Repeat; report medians.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", help="Report file (default docs/BENCHMARKS.md; none if --quick)."),
    ] = None,
    reference_file: Annotated[
        Path | None,
        typer.Option(
            "--reference",
            help="PgQueuer's numbers measured on this machine by `make bench-peers` "
            "(.jobyard/peers/pgqueuer.json) for the PgQueuer column and ratios; "
            "default: the figures quoted in the issue.",
        ),
    ] = None,
    peer_command: Annotated[
        list[str] | None,
        typer.Option(
            "--peer-command",
            help="Run this peer benchmark (it prints one JSON object like `make bench-peers` "
            "writes) once before each of jobyard's runs, and compare against the median of its "
            "runs: both meet the same load of a shared host. Repeat for more peers, one column "
            "each, run in the order given. `make bench` passes "
            "'benchmarks/peers/pgqueuer/run.sh --runs 1' and the other peers' scripts.",
        ),
    ] = None,
    workflows: Annotated[
        bool,
        typer.Option(
            "--workflows",
            help="Only the workflow scenarios: chain step latency vs pickup, a 10,000-job "
            "fan-in, dependency bookkeeping vs a plain drain (docs/WORKFLOWS.md).",
        ),
    ] = False,
    scenario: Annotated[
        Scenario | None,
        typer.Option(
            "--scenario",
            help="A scenario over time instead of the key numbers: steady (a fixed offered "
            "rate), pressure (baseline → a held transaction id → release → recovery), "
            "burndown (pre-inserted jobs drained). Writes a block, a PNG plot and the raw "
            "samples (JSON) under docs/ (docs/BENCHMARKS.md).",
        ),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option("--rate", min=1, help="steady, pressure: jobs offered a second (800)."),
    ] = None,
    rate_fraction: Annotated[
        float | None,
        typer.Option(
            "--rate-fraction",
            min=0.01,
            max=2.0,
            help="steady, pressure: offer this fraction of a 2-process drain rate measured "
            "just before (e.g. 0.8), instead of --rate.",
        ),
    ] = None,
    calibrate_runs: Annotated[
        int | None,
        typer.Option(
            "--calibrate-runs",
            min=1,
            max=9,
            help="with --rate-fraction: drains measured before the run; the rate is a "
            "fraction of their median (3).",
        ),
    ] = None,
    duration: Annotated[
        float | None, typer.Option("--duration", min=1, help="steady: seconds (120).")
    ] = None,
    baseline_s: Annotated[
        float | None, typer.Option("--baseline-s", min=1, help="pressure: seconds (120).")
    ] = None,
    hold_s: Annotated[
        float | None,
        typer.Option("--hold-s", min=1, help="pressure: seconds the horizon is held (600)."),
    ] = None,
    recovery_s: Annotated[
        float | None,
        typer.Option("--recovery-s", min=1, help="pressure: seconds after the release (120)."),
    ] = None,
    readers: Annotated[
        int | None,
        typer.Option(
            "--readers",
            min=0,
            max=32,
            help="pressure: also this many REPEATABLE READ transactions counting the queue's "
            "tables through the hold (the active-readers cell).",
        ),
    ] = None,
    idle: Annotated[
        bool | None,
        typer.Option(
            "--idle/--no-idle",
            help="pressure: hold the horizon with an idle transaction (default); --no-idle "
            "with --readers leaves the readers alone.",
        ),
    ] = None,
    max_concurrency: Annotated[
        int | None,
        typer.Option(
            "--max-concurrency",
            min=1,
            help="steady, pressure: give the queue this max_concurrency (the limited claim "
            "path: a queue lock and a count of held jobs per claim); unlimited by default.",
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", min=1, help="burndown: jobs pre-inserted (1,000,000)."),
    ] = None,
    sample_s: Annotated[
        float | None,
        typer.Option("--sample-s", min=0.1, max=60, help="Scenarios: seconds between samples."),
    ] = None,
    tag: Annotated[
        str | None,
        typer.Option(
            "--tag",
            help="Scenarios: name this run (e.g. before) so that its block and files sit "
            "beside the untagged run's instead of replacing them.",
        ),
    ] = None,
    from_json: Annotated[
        Path | None,
        typer.Option(
            "--from-json",
            help="Scenarios: measure nothing; redraw the block and the plot from a run's saved "
            "JSON (docs/bench/NAME.json), judged by the current rules.",
        ),
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Benchmark enqueue, drain (1 and 2 worker processes) and pickup latency; with
    --scenario, watch one run over time (steady, pressure, burndown)."""
    from jobyard.benchmarks import harness, reference, report  # loads only for this command

    scenario_options = {
        "--rate": rate, "--rate-fraction": rate_fraction, "--calibrate-runs": calibrate_runs,
        "--duration": duration,
        "--baseline-s": baseline_s, "--hold-s": hold_s, "--recovery-s": recovery_s,
        "--readers": readers, "--idle/--no-idle": idle, "--max-concurrency": max_concurrency,
        "--jobs": jobs, "--sample-s": sample_s, "--tag": tag, "--from-json": from_json,
    }  # fmt: skip
    if scenario is None:
        given = [name for name, value in scenario_options.items() if value is not None]
        if given:
            raise fail(f"{', '.join(given)} only with --scenario", "add --scenario NAME")
    else:
        if workflows or runs is not None or reference_file is not None or peer_command:
            raise fail(
                "--scenario runs alone: not with --workflows, --runs, --reference or --peer-command"
            )
        _bench_scenario(
            ctx, load_settings(data_dir=data_dir), scenario, scenario_options,
            quick=quick, as_json=as_json, output=output,
        )  # fmt: skip
        return
    settings = load_settings(data_dir=data_dir)
    if workflows:
        _bench_workflows(ctx, settings, quick=quick, runs=runs or 1, as_json=as_json)
        return
    # Checked before minutes of benchmarking, not after.
    peers: list[reference.Reference] = [reference.QUOTED]
    interleaved: reference.PeerCommands | None = None
    try:
        if reference_file is not None and peer_command:
            raise reference.ReferenceFileError(
                "--reference and --peer-command both name the PgQueuer column",
                "use one: --peer-command measures it now, --reference reads an earlier result",
            )
        if reference_file is not None:
            peers = [reference.load(reference_file)]
        if peer_command:
            interleaved = reference.PeerCommands(peer_command)
    except reference.ReferenceFileError as exc:
        raise fail(exc.message, exc.hint) from None
    before_run = interleaved.run_once if interleaved is not None else None
    admin_url = _bench_server(ctx, settings)
    sizes = harness.QUICK if quick else harness.FULL
    target = output if output is not None or quick else Path("docs/BENCHMARKS.md")
    try:
        if as_json:
            result = harness.run_bench(admin_url, sizes, runs or 1, lambda _: None, before_run)
        else:
            with err.status("benchmarking…") as status:

                def progress(message: str) -> None:
                    status.update(message + "…")
                    err.print(f"[dim]·[/] {message}")

                result = harness.run_bench(
                    admin_url, sizes, runs or (1 if quick else 3), progress, before_run
                )
        if interleaved is not None:
            peers = interleaved.references()
    except reference.ReferenceFileError as exc:
        raise fail(exc.message, exc.hint) from None
    except JobyardError as exc:
        raise fail(exc.message, code=exit_code(exc)) from None
    except CONNECTION_ERRORS as exc:
        raise fail(f"lost the database connection ({type(exc).__name__})", "is it up?", 1) from None
    if target is not None:
        report.write_report(result, target, peers)
    if as_json:
        print(json.dumps(result.json_object()))
        return
    err.print(report.summary_table(result, peers))
    for peer in peers:
        err.print(f"{peer.label} column: {peer.source}")
    if target is not None:
        err.print(f"wrote {target}")


def _bench_workflows(
    ctx: typer.Context, settings: Settings, *, quick: bool, runs: int, as_json: bool
) -> None:
    """`jobyard bench --workflows`: medians of `runs` rounds, printed (no report file)."""
    import asyncio
    import statistics

    from jobyard.benchmarks import harness, workflow_scenarios
    from jobyard.db import testing

    admin_url = _bench_server(ctx, settings)
    sizes = workflow_scenarios.QUICK if quick else workflow_scenarios.FULL
    template = testing.ensure_template(admin_url)

    def fresh() -> tuple[str, Callable[[], None]]:
        url = testing.create_clone(admin_url, template, harness.CLONE_PREFIX)
        return url, lambda: testing.drop_database(admin_url, url)

    rounds: list[dict[str, float]] = []
    try:
        for n in range(runs):
            if not as_json:
                err.print(f"[dim]·[/] workflow scenarios, run {n + 1}/{runs}")
            rounds.append(asyncio.run(workflow_scenarios.measure(fresh, sizes)))
    except JobyardError as exc:
        raise fail(exc.message, code=exit_code(exc)) from None
    medians = {k: round(statistics.median(r[k] for r in rounds), 3) for k in rounds[0]}
    if as_json:
        print(json.dumps(medians))
        return
    for key, value in medians.items():
        values = [r[key] for r in rounds]
        err.print(f"{key:28} {value:>12,.3f}   ({min(values):,.3f} – {max(values):,.3f})")


@root.command("bench-dashboard")
def bench_dashboard_cmd(
    ctx: typer.Context,
    quick: Annotated[
        bool, typer.Option("--quick", help="20,000 jobs instead of 1,000,000 (a smoke run).")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", help="Also write the markdown table to this file."),
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the database afterwards (prints its URL).")
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Time every dashboard page and list/aggregate API at 1,000,000 jobs (p50/p95 of 20)."""
    from jobyard.benchmarks import dashboard  # loads only for this command

    settings = load_settings(data_dir=data_dir)
    admin_url = _bench_server(ctx, settings, keep_running=keep)
    size = dashboard.QUICK if quick else dashboard.FULL
    try:
        with err.status("building the data set…") as status:

            def progress(message: str) -> None:
                status.update(message + "…")
                err.print(f"[dim]·[/] {message}")

            result = dashboard.run_dashboard_bench(admin_url, size, progress, keep=keep)
    except (JobyardError, RuntimeError, ValueError) as exc:
        raise fail(str(exc)) from None
    except CONNECTION_ERRORS as exc:
        raise fail(f"cannot reach the database ({type(exc).__name__})", "is it running?") from None
    table = dashboard.markdown(result)
    print(table)
    if output is not None:
        output.write_text(table, encoding="utf-8")
        err.print(f"wrote {output}")
    slow = [t.name for t in result.timings if not t.ok]
    if slow:
        raise fail(f"over {dashboard.BUDGET_MS:.0f} ms at p95 (or not 200): {', '.join(slow)}")


def _bench_scenario(
    ctx: typer.Context,
    settings: Settings,
    scenario: Scenario,
    options: dict[str, Any],
    *,
    quick: bool,
    as_json: bool,
    output: Path | None,
) -> None:
    """`jobyard bench --scenario NAME`: one run over time; block, PNG and JSON (no --quick)."""
    import dataclasses

    from jobyard.benchmarks import timeline, timeline_report

    name = scenario.value
    for option, value in options.items():
        if value is not None and option in _APPLIES and name not in _APPLIES[option]:
            raise fail(f"{option} does not apply to --scenario {name}",
                       f"it applies to: {', '.join(_APPLIES[option])}")  # fmt: skip
    if options["--rate"] is not None and options["--rate-fraction"] is not None:
        raise fail("--rate and --rate-fraction both set the offered rate", "use one")
    if options["--calibrate-runs"] is not None and options["--rate-fraction"] is None:
        raise fail("--calibrate-runs measures the drain of --rate-fraction", "add --rate-fraction")
    if options["--idle/--no-idle"] is False and not options["--readers"]:
        raise fail("--no-idle leaves nothing to hold the horizon", "add --readers N")
    tag = options["--tag"]
    if tag is not None and not _TAG.fullmatch(tag):
        raise fail(f"--tag {tag!r}: letters, digits, - and _ only (it names files)")
    target = output if output is not None or quick else Path("docs/BENCHMARKS.md")
    if options["--from-json"] is not None:
        _redraw(options["--from-json"], name, tag, output or Path("docs/BENCHMARKS.md"))
        return
    base = timeline.QUICK if quick else timeline.FULL
    fields = {
        "rate": options["--rate"], "rate_fraction": options["--rate-fraction"],
        "calibrate_runs": options["--calibrate-runs"],
        "duration_s": options["--duration"], "baseline_s": options["--baseline-s"],
        "hold_s": options["--hold-s"], "recovery_s": options["--recovery-s"],
        "readers": options["--readers"], "idle_hold": options["--idle/--no-idle"],
        "max_concurrency": options["--max-concurrency"],
        "jobs": options["--jobs"], "sample_s": options["--sample-s"],
    }  # fmt: skip
    config = dataclasses.replace(
        base, scenario=name, **{k: v for k, v in fields.items() if v is not None}
    )
    admin_url = _bench_server(ctx, settings)
    try:
        if as_json:
            result = timeline.run_scenario(admin_url, config, lambda _: None)
        else:
            with err.status(f"scenario {name}…") as status:

                def progress(message: str) -> None:
                    status.update(message + "…")
                    err.print(f"[dim]·[/] {message}")

                result = timeline.run_scenario(admin_url, config, progress)
        written = timeline_report.write_all(result, target, tag) if target is not None else None
    except JobyardError as exc:
        raise fail(exc.message, code=exit_code(exc)) from None
    except CONNECTION_ERRORS as exc:
        raise fail(f"lost the database connection ({type(exc).__name__})", "is it up?", 1) from None
    if as_json:
        print(json.dumps(result.summary()))
        return
    err.print(timeline_report.summary_table(result))
    if written is not None:
        _report_written(written)


def _redraw(source: Path, name: str, tag: str | None, target: Path) -> None:
    """`--from-json`: the block, the plot and the JSON again from a saved run."""
    from jobyard.benchmarks import timeline, timeline_report

    try:
        data = json.loads(source.read_text(encoding="utf-8"))
        result = timeline.result_from_json(data)
    except OSError as exc:
        raise fail(f"cannot read {source}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise fail(f"{source} is not a saved scenario run ({type(exc).__name__}: {exc})") from None
    if result.config.scenario != name:
        raise fail(f"{source} holds a {result.config.scenario} run, not {name}")
    try:
        written = timeline_report.write_all(result, target, tag)
    except JobyardError as exc:
        raise fail(exc.message, code=exit_code(exc)) from None
    _report_written(written)


def _report_written(written: Outputs) -> None:
    err.print(f"wrote {written.written()}")
    if not written.plotted:
        err.print(
            "[yellow]no plot:[/] matplotlib is a development dependency (`make install` in a "
            "checkout, or `pip install matplotlib`); the block says how to draw it later"
        )
