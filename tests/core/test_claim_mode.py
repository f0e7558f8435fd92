"""The worker's claim mode: normal claims while job_ready rotates, claims past a position (and a
full claim every few seconds) while the rotation stays blocked (docs/DATABASE.md, "Claim
position"). Pure logic on a virtual clock; tests/concurrency/test_claim_position.py runs it
against PostgreSQL with a reader holding the ready set."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobyard.core.claim import ClaimMode, ClaimPosition, _parse
from jobyard.domain.ids import QueueId

Q = QueueId(1)
R = QueueId(2)
T0 = datetime(2026, 12, 3, 18, 0, tzinfo=UTC)


def _pos(job_id: int, npriority: int = 0, seconds: float = 0.0) -> ClaimPosition:
    return ClaimPosition(npriority, T0 + timedelta(seconds=seconds), job_id)


def test_normal_mode_never_positions_but_keeps_the_position() -> None:
    mode = ClaimMode(blocked_after_s=5, full_every_s=5, slack_s=1, now=0)
    mode.claimed(Q, _pos(10))
    for t in range(0, 20):
        assert mode.rotated("rotated" if t % 2 else "clean", float(t)) is None
        assert mode.after(Q, float(t)) is None
    assert not mode.degraded


def test_blocked_rotation_enters_after_the_delay_and_a_working_one_leaves_at_once() -> None:
    mode = ClaimMode(blocked_after_s=5, full_every_s=5, slack_s=1, now=0)
    mode.claimed(Q, _pos(10))
    # 'busy' (another session rotates) and 'locked' alike: no success for 5 s.
    assert mode.rotated("busy", 2.0) is None
    assert mode.rotated("locked", 5.0) is None
    assert mode.rotated("locked", 5.5) == "entered"
    assert mode.degraded
    assert mode.rotated("locked", 6.5) is None
    assert mode.rotated("rotated", 7.0) == "left"
    assert mode.after(Q, 7.0) is None
    # The timer starts again from the last success.
    assert mode.rotated("locked", 11.0) is None
    assert mode.rotated("locked", 12.5) == "entered"


def test_a_held_horizon_enters_at_once_though_the_rotation_works_and_its_end_leaves() -> None:
    # The rotation still empties each partition every six seconds, but until then every claim
    # walks the dead entries of the jobs claimed since the horizon was taken.
    mode = ClaimMode(blocked_after_s=5, full_every_s=5, slack_s=1, now=0)
    mode.claimed(Q, _pos(10))
    assert mode.rotated("rotated", 1.0, horizon_held=True) == "entered"
    assert mode.reason == "xmin horizon held"
    assert mode.after(Q, 1.0) is not None
    assert mode.rotated("clean", 2.0, horizon_held=True) is None
    assert mode.rotated("clean", 3.0, horizon_held=False) == "left"
    assert mode.after(Q, 3.0) is None


def test_a_held_horizon_alone_gets_a_full_claim_every_second_a_blocked_rotation_every_five() -> (
    None
):
    # With the rotation working a full claim walks at most two slot periods of dead rows, so it
    # comes often; behind a reader its walk grows with the hold, so it comes rarely.
    mode = ClaimMode(blocked_after_s=5, full_every_s=5, full_every_held_s=1, slack_s=0, now=0)
    mode.claimed(Q, _pos(10))
    assert mode.rotated("rotated", 1.0, horizon_held=True) == "entered"
    full = [t / 4 for t in range(4, 20) if mode.after(Q, t / 4) is None]
    assert full == [2.0, 3.0, 4.0]
    # No success since 1.0: the reason, and the period with it, change (the worker logs it).
    assert mode.rotated("locked", 7.0, horizon_held=True) == "changed"
    assert mode.reason == "job_ready not rotating"
    assert mode.full_period_s == 5
    full = [t / 4 for t in range(28, 72) if mode.after(Q, t / 4) is None]
    assert full == [9.0, 14.0]


def test_a_blocked_rotation_keeps_the_mode_after_the_horizon_is_released() -> None:
    mode = ClaimMode(blocked_after_s=5, full_every_s=5, slack_s=1, now=0)
    assert mode.rotated("locked", 1.0, horizon_held=True) == "entered"
    assert mode.rotated("locked", 6.0, horizon_held=False) == "changed"
    assert mode.degraded and mode.reason == "job_ready not rotating"
    assert mode.rotated("locked", 6.5, horizon_held=False) is None
    assert mode.rotated("rotated", 7.0, horizon_held=False) == "left"


def test_a_spell_says_when_its_reason_changes_back_and_keeps_it_while_it_holds() -> None:
    mode = ClaimMode(blocked_after_s=5, full_every_s=5, full_every_held_s=1, slack_s=1, now=0)
    assert mode.rotated("locked", 6.0, horizon_held=False) == "entered"
    assert (mode.reason, mode.full_period_s) == ("job_ready not rotating", 5)
    # The reader ends and the rotation works again, but a transaction still holds the horizon.
    assert mode.rotated("rotated", 7.0, horizon_held=True) == "changed"
    assert (mode.reason, mode.full_period_s) == ("xmin horizon held", 1)
    assert mode.rotated("clean", 8.0, horizon_held=True) is None
    assert mode.rotated("clean", 9.0, horizon_held=False) == "left"
    # The last spell's reason stays readable after it ends.
    assert mode.reason == "xmin horizon held"


def test_degraded_mode_claims_past_the_position_with_a_full_claim_every_period() -> None:
    mode = ClaimMode(blocked_after_s=5, full_every_s=5, slack_s=1, now=0)
    mode.claimed(Q, _pos(10, seconds=30))
    assert mode.rotated("locked", 6.0) == "entered"
    # First claim of degraded mode: positioned, lowered by the slack (to the instant's first id).
    assert mode.after(Q, 6.0) == ClaimPosition(0, T0 + timedelta(seconds=29), 0)
    kinds = []
    for step in range(1, 21):
        now = 6.0 + step * 0.5
        after = mode.after(Q, now)
        kinds.append(after is None)
        mode.claimed(Q, _pos(10 + step, seconds=30 + step))
    # A full claim every 5 s of the virtual clock (at 11.0 and 16.0), positioned otherwise.
    assert [6.0 + (i + 1) * 0.5 for i, full in enumerate(kinds) if full] == [11.0, 16.0]
    # The position follows the last job claimed, full claims included.
    assert mode.after(Q, 16.5) == ClaimPosition(0, T0 + timedelta(seconds=49), 0)


def test_a_queue_without_a_position_gets_full_claims() -> None:
    mode = ClaimMode(blocked_after_s=5, full_every_s=5, slack_s=1, now=0)
    assert mode.rotated("locked", 6.0) == "entered"
    assert mode.after(R, 6.0) is None
    # A claim that took nothing leaves no position: still full claims.
    mode.claimed(R, None)
    assert mode.after(R, 6.5) is None
    mode.claimed(R, _pos(3))
    assert mode.after(R, 7.0) is not None


def test_a_full_claim_that_found_stragglers_moves_the_position_back_to_them() -> None:
    mode = ClaimMode(blocked_after_s=5, full_every_s=5, slack_s=0, now=0)
    mode.claimed(Q, _pos(500, seconds=100))
    assert mode.rotated("locked", 6.0) == "entered"
    assert mode.after(Q, 11.0) is None  # full
    # It took the first n jobs in claim order: all of a higher priority burst.
    mode.claimed(Q, _pos(900, npriority=-5, seconds=90))
    # The next positioned claims go on through the burst, not back past it.
    assert mode.after(Q, 11.5) == ClaimPosition(-5, T0 + timedelta(seconds=90), 0)


def _row(job_id: int, priority: int, seconds: float, *, suspect: bool = False) -> dict[str, object]:
    return {
        "id": job_id,
        "project_id": 1,
        "queue_id": 1,
        "handler": "noop",
        "payload": {},
        "priority": priority,
        "attempt": 1,
        "max_attempts": 3,
        "execution_seq": 1,
        "timeout_ms": None,
        "lock_expires_at": T0,
        "worker_id": 1,
        "suspect": suspect,
        "run_at": T0 + timedelta(seconds=seconds),
        "suspect_waiting": False,
    }


def test_the_position_is_the_last_job_in_claim_order_not_a_suspect() -> None:
    rows = [_row(7, 5, 9.0), _row(3, 0, 1.0), _row(4, 0, 1.0), _row(9, -1, 0.0, suspect=True)]
    got = _parse(rows)
    assert got.position == ClaimPosition(0, T0 + timedelta(seconds=1), 4)
    flag = {k: None for k in rows[0]} | {"suspect_waiting": True}
    got = _parse([_row(3, 0, 1.0), flag])
    assert got.suspect_waiting and got.position == ClaimPosition(0, T0 + timedelta(seconds=1), 3)
    assert _parse([]).position is None


def test_a_slow_full_claim_stretches_the_wait_for_the_next_one() -> None:
    # Behind a backlog the walk of a full claim grows; full claims then come at most every
    # full_cost_factor times their own duration, so they keep a twentieth of the worker's time.
    mode = ClaimMode(
        blocked_after_s=5, full_every_s=5, full_every_held_s=1, full_cost_factor=20, slack_s=0
    )
    mode.claimed(Q, _pos(10))
    assert mode.rotated("rotated", 0.0, horizon_held=True) == "entered"
    assert mode.after(Q, 1.0) is None  # a full claim, which took half a second
    mode.claimed(Q, _pos(20), took_s=0.5)
    assert mode.full_period_of(Q) == 10.0
    assert mode.slowest_full_claim_s == 0.5
    full = [t / 2 for t in range(3, 30) if mode.after(Q, t / 2) is None]
    assert full == [11.0]
    # A positioned claim's duration does not count; the next full one was quick again.
    mode.claimed(Q, _pos(30), took_s=0.01)
    assert mode.full_period_of(Q) == 1.0
    assert mode.after(Q, 11.5) is not None
    mode.claimed(Q, _pos(31), took_s=3.0)
    assert mode.full_period_of(Q) == 1.0
    assert mode.after(Q, 12.0) is None


def test_a_new_spell_forgets_the_last_spells_slow_full_claims() -> None:
    mode = ClaimMode(blocked_after_s=5, full_every_s=5, full_every_held_s=1, slack_s=0)
    mode.claimed(Q, _pos(10))
    assert mode.rotated("rotated", 0.0, horizon_held=True) == "entered"
    assert mode.after(Q, 1.0) is None
    mode.claimed(Q, _pos(20), took_s=2.0)
    assert mode.full_period_of(Q) == 40.0
    assert mode.rotated("rotated", 2.0, horizon_held=False) == "left"
    assert mode.slowest_full_claim_s == 2.0  # still readable for the log line of the end
    assert mode.rotated("rotated", 3.0, horizon_held=True) == "entered"
    assert mode.full_period_of(Q) == 1.0
    assert mode.slowest_full_claim_s == 0.0
