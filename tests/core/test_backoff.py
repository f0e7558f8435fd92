from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from jobyard.core.backoff import RetryPolicy, computed_delay_ms, delay_ms
from jobyard.domain.enums import BackoffKind


def test_fixed_linear_and_exponential_grow_as_named() -> None:
    fixed = RetryPolicy(BackoffKind.FIXED, 500, 10_000, jitter=False)
    linear = RetryPolicy(BackoffKind.LINEAR, 500, 10_000, jitter=False)
    expo = RetryPolicy(BackoffKind.EXPONENTIAL, 500, 10_000, jitter=False)
    assert [delay_ms(fixed, a) for a in (1, 2, 3)] == [500, 500, 500]
    assert [delay_ms(linear, a) for a in (1, 2, 3)] == [500, 1000, 1500]
    assert [delay_ms(expo, a) for a in (1, 2, 3, 4)] == [500, 1000, 2000, 4000]


def test_delay_is_clamped_to_max_delay() -> None:
    expo = RetryPolicy(BackoffKind.EXPONENTIAL, 1000, 5000, jitter=False)
    assert delay_ms(expo, 30) == 5000
    assert delay_ms(expo, 10_000) == 5000  # no overflow on absurd attempt numbers


@given(
    kind=st.sampled_from(list(BackoffKind)),
    base=st.integers(0, 100_000),
    cap=st.integers(0, 1_000_000),
    attempt=st.integers(1, 200),
    seed=st.integers(0, 2**32),
)
def test_full_jitter_stays_within_zero_and_the_clamped_delay(
    kind: BackoffKind, base: int, cap: int, attempt: int, seed: int
) -> None:
    policy = RetryPolicy(kind, base, cap, jitter=True)
    computed = computed_delay_ms(policy, attempt)
    assert 0 <= computed <= cap
    assert 0 <= delay_ms(policy, attempt, random.Random(seed)) <= computed


def test_full_jitter_spreads_delays() -> None:
    policy = RetryPolicy(BackoffKind.FIXED, 10_000, 10_000, jitter=True)
    rng = random.Random(1)
    samples = [delay_ms(policy, 1, rng) for _ in range(1000)]
    assert min(samples) < 1000 and max(samples) > 9000  # spread over the whole window


def test_job_override_wins_over_queue_policy() -> None:
    queue = {"backoff": "fixed", "base_delay_ms": 100, "max_delay_ms": 1000, "jitter": True}
    merged = RetryPolicy.from_row(queue, {"backoff": "linear", "jitter": False})
    assert merged == RetryPolicy(BackoffKind.LINEAR, 100, 1000, jitter=False)
    assert RetryPolicy.from_row(None, None) == RetryPolicy()
