"""Constants of the per-queue statistics rollup (no I/O).

Run time and queue wait are counted into fixed histogram buckets: slot i holds values in
(BOUNDS_MS[i-1], BOUNDS_MS[i]] and the last slot everything above the last bound, which is what
Prometheus histograms (`le`) need and what percentile estimates interpolate within.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

BOUNDS_MS: Final[tuple[float, ...]] = (
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 1_800_000,
)  # fmt: skip
SLOTS: Final = len(BOUNDS_MS) + 1
# db/sql/stats.sql counts each slot with its own FILTER (fast, no per-row function) and sums
# them slot by slot in stats_series: 16 of them.
assert SLOTS == 16, "stats_fold_executions counts exactly 16 histogram slots"
OUTCOMES: Final = ("succeeded", "failed", "timed_out", "lease_lost", "released", "cancelled")
# Rows newer than this are left for the next pass: a row committed late by a slow transaction
# with a smaller id than one already folded would otherwise be skipped forever.
FOLD_LAG_S: Final = 2.0
RETAIN_DAYS: Final = 8


def hist_slots(hist: Sequence[int] | None) -> list[int]:
    """A stored histogram padded to SLOTS (an empty array is an empty histogram)."""
    got = [int(x) for x in (hist or [])]
    return (got + [0] * SLOTS)[:SLOTS]


def percentile(hist: Sequence[int] | None, q: float) -> float | None:
    """Estimate the q-quantile (0..1) from bucket counts, interpolating linearly inside the
    bucket (as Prometheus' histogram_quantile); None when the histogram is empty. The open
    last bucket reports its lower bound."""
    counts = hist_slots(hist)
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            lo = 0.0 if i == 0 else BOUNDS_MS[i - 1]
            if i >= len(BOUNDS_MS):
                return float(lo)
            hi = BOUNDS_MS[i]
            return lo + (hi - lo) * max(0.0, rank - seen) / n
        seen += n
    return float(BOUNDS_MS[-1])
