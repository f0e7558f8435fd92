"""The pressure scenario (an idle transaction holding an xid while jobs flow) on the schema as
migrated and on schema experiments, in turns at one offered rate (docs/BENCHMARKS.md).

    .venv/bin/python benchmarks/profile/pressure_variant.py \
        --variant hot=hot_completion.sql \
        [--turns 1] [--rate-fraction 0.8 | --rate N] [--baseline-s 60 --hold-s 300 --recovery-s 90]
        [--json-dir DIR] [--setting NAME=VALUE …]

A variant's files are named as paths or by their names in benchmarks/profile/variants.
Starts its own embedded PostgreSQL 18 in .jobyard/profile/pressure-pgdata. Each variant gets a
template of its own: the migrated template cloned once and the variant's SQL files run on it in
order; `base` is the template as migrated. The offered rate is one number for every run: either
`--rate`, or `--rate-fraction` of a 2-process drain measured once on `base` before the first
turn (as `jobyard bench --scenario pressure --rate-fraction` does for its one run). Each turn runs
every variant once, alternating the order from turn to turn, through the scenario's own runner
(`jobyard.benchmarks.timeline`), and prints one markdown row per run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Final

from profiling_server import start_with
from psycopg import sql

from jobyard.benchmarks import harness, scenarios, timeline
from jobyard.db import embedded, testing
from jobyard.db.pool import connect_sync
from jobyard.db.urls import with_database

ROOT: Final = Path(__file__).resolve().parents[2]
DATA_DIR: Final = ROOT / ".jobyard" / "profile" / "pressure-pgdata"
VARIANTS: Final = Path(__file__).resolve().parent / "variants"
HOT: Final = ("jobs", "job_ready*")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def variant_arg(text: str) -> tuple[str, list[Path]]:
    name, _, files = text.partition("=")
    paths = [f if f.is_file() else VARIANTS / f for f in map(Path, filter(None, files.split(",")))]
    if not name or not paths or any(not p.is_file() for p in paths):
        raise argparse.ArgumentTypeError(f"{text!r}: want NAME=FILE[,FILE…] of existing files")
    return name, paths


def setting_arg(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not name or not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: want NAME=VALUE")
    return name, value


def variant_template(admin_url: str, base: str, name: str, files: list[Path]) -> str:
    """A template database for one variant: the migrated template with `files` applied."""
    target = f"jy_variant_{name}"
    with connect_sync(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(target)))
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(target), sql.Identifier(base)
            )
        )
    with connect_sync(with_database(admin_url, target), autocommit=True) as conn:
        for path in files:
            log(f"{name}: applying {path}")
            conn.execute(path.read_text(encoding="utf-8").encode())
    return target


def mb(n: int | None) -> str:
    return "—" if n is None else f"{n / 1e6:,.1f}"


def row(name: str, turn: int, result: timeline.TimelineResult) -> str:
    phases = {p.name: p for p in result.phases}
    base, hold, rec = phases["baseline"], phases["hold"], phases["recovery"]

    def ms(v: float | None) -> str:
        return "—" if v is None else f"{v:,.1f}"

    ratio = "—" if hold.completion_ratio is None else f"{hold.completion_ratio:.1%}"
    vs = "—" if hold.p99_vs_baseline is None else f"{hold.p99_vs_baseline:.1f}×"
    back = "no" if rec.recovery_s is None else f"{rec.recovery_s:.0f} s"
    sizes = " / ".join(mb(hold.bytes_at_end.get(r)) for r in HOT)
    dead = f"{hold.dead_peak.get('jobs', 0):,}"
    return (
        f"| {name} | {turn} | {result.rate or 0:,.0f} | {ms(base.p50_ms)} / {ms(base.p99_ms)} | "
        f"{ms(hold.p50_ms)} / {ms(hold.p99_ms)} | {vs} | {ms(hold.window_p99_median_ms)} | "
        f"{ratio} | {back} | {sizes} | {dead} |"
    )


async def measure_rate(admin_url: str, template: str, fraction: float) -> float:
    url = testing.create_clone(admin_url, template, "jy_profile_")
    try:
        drained = await scenarios.drain(url, 20_000, 2, 50)
    finally:
        testing.drop_database(admin_url, url)
    log(f"2-process drain on base: {drained.per_s:,.0f} jobs/s")
    return fraction * drained.per_s


async def one_run(
    admin_url: str, template: str, config: timeline.TimelineConfig
) -> timeline.TimelineResult:
    url = testing.create_clone(admin_url, template, "jy_profile_")
    try:
        result = await timeline._Run(url, config, config.rate, log).run()
    finally:
        testing.drop_database(admin_url, url)
    # The settings of this run (max_wal_size, checksums, …) go into its JSON, as the scenario's own.
    result.server = await harness.server_info(admin_url)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--variant",
        type=variant_arg,
        action="append",
        default=[],
        help="NAME=FILE[,FILE…]: a schema experiment (repeatable)",
    )
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument("--rate", type=float, default=None, help="offered jobs/s")
    parser.add_argument("--rate-fraction", type=float, default=0.8)
    parser.add_argument("--baseline-s", type=float, default=60.0)
    parser.add_argument("--hold-s", type=float, default=300.0)
    parser.add_argument("--recovery-s", type=float, default=90.0)
    parser.add_argument(
        "--json-dir",
        type=Path,
        default=None,
        help="also write each run's whole result (every window) as NAME-turnN.json here",
    )
    parser.add_argument(
        "--setting",
        action="append",
        type=setting_arg,
        default=[],
        metavar="NAME=VALUE",
        help="a server setting for every run, by ALTER SYSTEM (e.g. log_autovacuum_min_duration=0)",
    )
    args = parser.parse_args()
    admin_url = start_with(DATA_DIR, dict(args.setting))
    try:
        base = testing.ensure_template(admin_url)
        templates = {"base": base}
        for name, files in args.variant:
            templates[name] = variant_template(admin_url, base, name, files)
        rate = args.rate or asyncio.run(measure_rate(admin_url, base, args.rate_fraction))
        config = timeline.TimelineConfig(
            scenario="pressure",
            rate=rate,
            baseline_s=args.baseline_s,
            hold_s=args.hold_s,
            recovery_s=args.recovery_s,
        )
        rows = []
        names = list(templates)
        for turn in range(1, args.turns + 1):
            order = names if turn % 2 else names[::-1]
            for name in order:
                log(f"turn {turn}: {name} at {rate:,.0f} jobs/s offered")
                result = asyncio.run(one_run(admin_url, templates[name], config))
                if args.json_dir is not None:
                    args.json_dir.mkdir(parents=True, exist_ok=True)
                    out = args.json_dir / f"{name}-turn{turn}.json"
                    out.write_text(json.dumps(result.json_object(), indent=1), encoding="utf-8")
                rows.append(row(name, turn, result))
                log(rows[-1])
        print(
            "| variant | turn | offered /s | baseline p50 / p99 ms | hold p50 / p99 ms | "
            "hold p99 / baseline | median window p99, hold | completed / offered, hold | "
            "back to baseline | `jobs` / `job_ready*` MB, end of hold | `jobs` dead, peak |"
        )
        print("|---|---:|---:|---|---|---:|---:|---:|---|---|---:|")
        print("\n".join(rows))
    finally:
        embedded.stop(DATA_DIR)


if __name__ == "__main__":
    main()
