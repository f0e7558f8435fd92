"""The job lifecycle as one frozen map. Pure: the SQL in core enforces the same edges as
compare-and-set updates; this map is what code consults before it writes, and what tests check.

    scheduled ──due──▶ queued ──claim──▶ claimed ──start──▶ running ──ok──▶ done
        ▲                 ▲  ▲                                  │
        │ retry (backoff) │  └── lease expired / drained ───────┤ (attempt refunded)
        └──── failed ◀────┼─────────────── error ───────────────┘
                 │        └── DLQ replay enqueues a new job (see core/dlq.py)
                 └── attempts exhausted ──▶ dead_letter
    waiting (unmet dependencies) ──parents done──▶ queued
    waiting/scheduled/queued/claimed/running ──▶ cancelled

A worker takes queued → claimed → running in one statement (`claim_batch(start=True)`): it
claims only as many jobs as it has free slots, so it starts every job it claims, and a second
UPDATE per job bought nothing (docs/BENCHMARKS.md has the numbers). Both edges still hold and
the claim's compare-and-set still names `queued`. `claimed` remains the state of a two-step
claim (`claim_batch` without start, then `transitions.start_many`), which core offers to callers
that start jobs later; a job found `claimed` is held exactly like a running one (lease, reaper,
fencing, cancel).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from jobyard.domain.enums import JobStatus as S
from jobyard.domain.errors import IllegalTransition

ALLOWED: Final[Mapping[S, frozenset[S]]] = MappingProxyType(
    {
        S.WAITING: frozenset({S.QUEUED, S.CANCELLED}),
        S.SCHEDULED: frozenset({S.QUEUED, S.CANCELLED}),
        S.QUEUED: frozenset({S.CLAIMED, S.CANCELLED}),
        # claimed → queued: released on drain or reaped; → dead_letter: poison pill.
        S.CLAIMED: frozenset({S.RUNNING, S.QUEUED, S.CANCELLED, S.DEAD_LETTER}),
        S.RUNNING: frozenset({S.DONE, S.FAILED, S.QUEUED, S.CANCELLED, S.DEAD_LETTER}),
        S.FAILED: frozenset({S.SCHEDULED, S.QUEUED, S.DEAD_LETTER}),
        S.DONE: frozenset(),
        S.DEAD_LETTER: frozenset(),
        S.CANCELLED: frozenset(),
    }
)

TERMINAL: Final = frozenset(s for s, nxt in ALLOWED.items() if not nxt)
HELD: Final = frozenset({S.CLAIMED, S.RUNNING})
CANCELLABLE_AT_ONCE: Final = frozenset({S.WAITING, S.SCHEDULED, S.QUEUED})


def can_transition(current: S, target: S) -> bool:
    return target in ALLOWED[current]


def assert_transition(current: S, target: S) -> None:
    """Raise IllegalTransition unless current → target is an edge of the lifecycle."""
    if not can_transition(current, target):
        raise IllegalTransition(
            f"a job cannot go from {current.value} to {target.value}",
            current=current.value,
            target=target.value,
        )


# Operator actions (API, dashboard, CLI): the edges a person may take that the engine never takes
# on its own. Each action names the states it starts from; its UPDATE is a compare-and-set on
# exactly these (core/actions.py passes them to the SQL), so a job that moved meanwhile is
# skipped, never overwritten. Retrying a finished job re-opens it (it is not an engine edge:
# ALLOWED keeps dead_letter and cancelled terminal for the engine).
OPERATOR_ACTIONS: Final[Mapping[str, tuple[frozenset[S], S]]] = MappingProxyType(
    {
        "retry": (frozenset({S.FAILED, S.DEAD_LETTER, S.CANCELLED}), S.QUEUED),
        "run_now": (frozenset({S.SCHEDULED}), S.QUEUED),
        "cancel": (CANCELLABLE_AT_ONCE | HELD, S.CANCELLED),
    }
)
# Deleting is not a transition: any job no worker holds may go (a held one is cancelled first).
DELETABLE: Final = frozenset(S) - HELD


def operator_sources(action: str) -> frozenset[S]:
    """The states `action` applies to; ValueError for an unknown action."""
    if action == "delete":
        return DELETABLE
    if action not in OPERATOR_ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    return OPERATOR_ACTIONS[action][0]


def assert_operator_action(action: str, current: S) -> None:
    """Raise IllegalTransition unless an operator may apply `action` to a job in `current`."""
    sources = operator_sources(action)
    if current not in sources:
        allowed = ", ".join(sorted(s.value for s in sources))
        raise IllegalTransition(
            f"cannot {action.replace('_', ' ')} a job that is {current.value} (only {allowed})",
            current=current.value,
            action=action,
        )
