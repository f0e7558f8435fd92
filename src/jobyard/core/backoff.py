"""Retry delays: fixed, linear or exponential, clamped to max_delay_ms, then full jitter.

Full jitter (a uniform draw in [0, computed]) spreads a burst of failures from one outage across
the whole window instead of retrying them all at the same instant.

>>> from random import Random
>>> policy = RetryPolicy(BackoffKind.EXPONENTIAL, 1000, 60_000, jitter=False)
>>> [delay_ms(policy, attempt) for attempt in (1, 2, 3, 10)]
[1000, 2000, 4000, 60000]
>>> delay_ms(RetryPolicy(BackoffKind.LINEAR, 500, 10_000, jitter=False), 3)
1500
>>> 0 <= delay_ms(policy, 3, Random(7)) <= 4000
True
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from jobyard.domain.enums import BackoffKind

DEFAULT_MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class RetryPolicy:
    backoff: BackoffKind = BackoffKind.EXPONENTIAL
    base_delay_ms: int = 1000
    max_delay_ms: int = 3_600_000
    jitter: bool = True

    @classmethod
    def from_row(cls, row: dict[str, Any] | None, override: dict[str, Any] | None) -> RetryPolicy:
        """Queue policy (may be absent) with the job's own override on top."""
        merged: dict[str, Any] = {}
        if row:
            merged.update(
                {
                    k: row[k]
                    for k in ("backoff", "base_delay_ms", "max_delay_ms", "jitter")
                    if row.get(k) is not None
                }
            )
        if override:
            merged.update({k: v for k, v in override.items() if v is not None})
        if "backoff" in merged:
            merged["backoff"] = BackoffKind(merged["backoff"])
        return cls(**merged)


def computed_delay_ms(policy: RetryPolicy, attempt: int) -> int:
    """The delay before jitter for the retry after `attempt` (1-based) failed."""
    n = max(1, attempt)
    base = policy.base_delay_ms
    match policy.backoff:
        case BackoffKind.FIXED:
            raw = base
        case BackoffKind.LINEAR:
            raw = base * n
        case BackoffKind.EXPONENTIAL:
            # Cap the exponent so huge attempt numbers cannot overflow into bignums.
            raw = base * (2 ** min(n - 1, 62))
    return int(min(raw, policy.max_delay_ms))


def delay_ms(policy: RetryPolicy, attempt: int, rng: random.Random | None = None) -> int:
    computed = computed_delay_ms(policy, attempt)
    if not policy.jitter:
        return computed
    return int((rng or random).uniform(0, computed))
