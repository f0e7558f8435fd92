"""The per-queue statistics rollup: fold new rows into minute buckets, read them as charts.

The scheduler's `stats` loop calls `fold` every second or so. Each fold statement reads the next
rows of one source table by primary key above a watermark (job_executions for finished runs,
jobs for enqueues, dead_letter_jobs for dead letters), so its cost is bounded by the batch, never
by the history. Charts and /metrics read only `queue_stats` / `queue_stats_totals`: they never
scan `jobs`. See docs/METRICS.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.errors import ValidationFailed
from jobyard.domain.ids import ProjectId, QueueId
from jobyard.domain.stats import (
    BOUNDS_MS,
    FOLD_LAG_S,
    RETAIN_DAYS,
    percentile,
)

# Counters summed per step; `failed` includes timed-out runs (the chart's red bars).
COUNTS: Final = (
    "succeeded", "failed", "enqueued", "dead_lettered", "timed_out", "lease_lost", "released",
    "cancelled",
)  # fmt: skip
# Chart windows: name → (range, step, read hour buckets) in seconds; 24–84 points each.
WINDOWS: Final[dict[str, tuple[int, int, bool]]] = {
    "1h": (3600, 60, False),
    "24h": (86400, 3600, True),
    "7d": (7 * 86400, 7200, True),
}


@dataclass
class FoldResult:
    runs: int = 0
    enqueued: int = 0
    dead_lettered: int = 0
    more: bool = False
    queue_ids: set[int] = field(default_factory=set)


async def fold(
    conn: Conn,
    *,
    batch: int = 10_000,
    max_batches: int = 20,
    lag_s: float = FOLD_LAG_S,
    now: datetime | None = None,
) -> FoldResult:
    """Fold every source until it is caught up (or `max_batches` statements each); autocommit
    `conn`, so each statement commits its batch and its watermark together."""
    result = FoldResult()
    params: dict[str, Any] = {"batch": batch, "lag_s": lag_s, "now": sql_now(now)}
    for _ in range(max_batches):
        row = await run.one(conn, "stats_fold_executions", {**params, "bounds": list(BOUNDS_MS)})
        assert row is not None
        result.runs += int(row["folded"])
        result.queue_ids.update(int(q) for q in row["queue_ids"])
        if int(row["seen"]) < batch or not row["moved"]:
            break
    else:
        result.more = True
    for source, attr in (("jobs", "enqueued"), ("dead_letters", "dead_lettered")):
        for _ in range(max_batches):
            row = await run.one(conn, "stats_fold_counts", {**params, "source": source})
            assert row is not None
            setattr(result, attr, getattr(result, attr) + int(row["folded"]))
            result.queue_ids.update(int(q) for q in row["queue_ids"])
            if int(row["seen"]) < batch or not row["moved"]:
                break
        else:
            result.more = True
    if result.queue_ids:
        await run.one(conn, "stats_notify", {"queue_ids": sorted(result.queue_ids)})
    return result


async def prune(
    conn: Conn, *, days: int = RETAIN_DAYS, batch: int = 10_000, now: datetime | None = None
) -> int:
    row = await run.one(conn, "stats_prune", {"days": days, "batch": batch, "now": sql_now(now)})
    return int(row["n"]) if row else 0


def _window(name: str) -> tuple[int, int, bool]:
    try:
        return WINDOWS[name]
    except KeyError:
        choices = ", ".join(WINDOWS)
        raise ValidationFailed(
            f"window: {name!r} is not one of {choices}", field="window"
        ) from None


def _pcts(hist: Sequence[int] | None) -> dict[str, float | None]:
    return {f"p{int(q * 100)}": percentile(hist, q) for q in (0.5, 0.95, 0.99)}


async def series(
    conn: Conn,
    project_id: ProjectId,
    *,
    window: str = "1h",
    queue_id: QueueId | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """One chart's data: per step, runs succeeded/failed, enqueued, dead-lettered, and run-time
    and queue-wait percentiles (estimated from the histograms, in ms); plus window totals."""
    range_s, step_s, hourly = _window(window)
    rows = await run.all_rows(
        conn,
        "stats_series",
        {
            "project_id": project_id,
            "queue_id": queue_id,
            "range_s": range_s,
            "step_s": step_s,
            "hourly": hourly,
            "now": sql_now(now),
        },
    )
    # One row per step, already summed in SQL; a histogram slot no bucket filled is NULL.
    steps = [
        {
            **{key: int(r[key]) for key in COUNTS},
            "t": r["t"],
            "run_hist": [int(n or 0) for n in r["run_hist"]],
            "wait_hist": [int(n or 0) for n in r["wait_hist"]],
        }
        for r in rows
    ]
    points = [
        {
            "t": v["t"],
            "succeeded": v["succeeded"],
            "failed": v["failed"],
            "enqueued": v["enqueued"],
            "dead_lettered": v["dead_lettered"],
            "run_ms": _pcts(v["run_hist"]),
            "wait_ms": _pcts(v["wait_hist"]),
        }
        for v in steps
    ]
    run_all = [sum(slot) for slot in zip(*(v["run_hist"] for v in steps), strict=True)]
    wait_all = [sum(slot) for slot in zip(*(v["wait_hist"] for v in steps), strict=True)]
    return {
        "window": window,
        "step_s": step_s,
        "points": points,
        "totals": {
            # `failed` counts failed and timed-out runs (as the chart draws them); the other
            # outcomes are totals only (the JSON metrics' last hour).
            **{key: sum(v[key] for v in steps) for key in COUNTS},
            "run_ms": _pcts(run_all),
            "wait_ms": _pcts(wait_all),
        },
    }


async def totals(conn: Conn) -> list[dict[str, Any]]:
    """Every queue's counters and histograms since creation (for /metrics)."""
    return await run.all_rows(conn, "stats_totals_all")


async def watermarks(conn: Conn) -> list[dict[str, Any]]:
    return await run.all_rows(conn, "stats_watermarks_all")
