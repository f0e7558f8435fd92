from __future__ import annotations

import doctest

import pytest

import jobyard.core.backoff
import jobyard.core.fingerprint
from jobyard.domain.enums import JobStatus as S
from jobyard.domain.errors import IllegalTransition
from jobyard.domain.lifecycle import ALLOWED, TERMINAL, assert_transition


def test_every_status_has_an_entry_in_the_allowed_map() -> None:
    assert set(ALLOWED) == set(S)


def test_terminal_states_are_done_dead_letter_and_cancelled() -> None:
    assert {S.DONE, S.DEAD_LETTER, S.CANCELLED} == TERMINAL


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (S.DONE, S.QUEUED),
        (S.QUEUED, S.DONE),
        (S.SCHEDULED, S.RUNNING),
        (S.CANCELLED, S.QUEUED),
        (S.DEAD_LETTER, S.RUNNING),
        (S.WAITING, S.RUNNING),
    ],
)
def test_illegal_transitions_raise(current: S, target: S) -> None:
    with pytest.raises(IllegalTransition):
        assert_transition(current, target)


def test_the_map_cannot_be_mutated() -> None:
    with pytest.raises(TypeError):
        ALLOWED[S.DONE] = frozenset({S.QUEUED})  # type: ignore[index]


@pytest.mark.parametrize("module", [jobyard.core.backoff, jobyard.core.fingerprint])
def test_doctests(module: object) -> None:
    result = doctest.testmod(module)  # type: ignore[arg-type]
    assert result.failed == 0 and result.attempted > 0
