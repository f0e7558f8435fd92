"""The position a scheduler pass starts from (scheduler.position.PassPosition), shared by the
reaper and the promoter: full first, then from the last cutoff less the slack, full again when
due, and a slow full pass stretches the wait for the next."""

from __future__ import annotations

from datetime import timedelta

from jobyard.scheduler.position import FULL_PASS_COST_FACTOR, PassPosition
from tests.scheduler.helpers import T0

SLACK_S = 5.0


def test_the_position_starts_full_then_from_the_last_cutoff_and_full_again_when_due() -> None:
    position = PassPosition(full_every_s=300.0, slack_s=SLACK_S)
    assert position.start(at=0.0) is None  # no position yet: a full pass
    position.completed(T0, full=True, at=0.0, took_s=0.01)
    assert position.start(at=10.0) == T0 - timedelta(seconds=SLACK_S)
    position.completed(T0 + timedelta(seconds=10), full=False, at=10.0, took_s=0.01)
    assert position.start(at=20.0) == T0 + timedelta(seconds=10 - SLACK_S)
    assert position.start(at=300.0) is None  # full_every_s after the last full pass
    position.forget()  # an outage: nothing is known about what happened meanwhile
    assert position.start(at=21.0) is None


def test_a_slow_full_pass_stretches_the_wait_for_the_next() -> None:
    """Under a long hold a full pass walks every entry since the hold began; the next one waits
    FULL_PASS_COST_FACTOR times as long, so the net never becomes most of the loop's work."""
    position = PassPosition(full_every_s=300.0, slack_s=SLACK_S)
    position.completed(T0, full=True, at=0.0, took_s=30.0)
    assert position.start(at=300.0) is not None
    assert position.start(at=FULL_PASS_COST_FACTOR * 30.0) is None
