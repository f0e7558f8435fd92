"""The SDK's composition helpers compile to the steps the API takes (pure, no database)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from jobyard.domain.errors import ValidationFailed
from jobyard.worker.app import App
from jobyard.worker.canvas import chain, group, job_ids

app = App(project="test/canvas")


@app.task
def a(ctx: object) -> None: ...


@app.task(queue="other", max_attempts=2)
def b(ctx: object) -> None: ...


@dataclass
class Handle:
    job_id: int


def test_after_accepts_ids_and_objects_with_id_or_job_id() -> None:
    @dataclass
    class Deferred:
        id: int

    assert job_ids([1, Deferred(2), Handle(3)]) == [1, 2, 3]
    for bad in ("4", True, object()):
        with pytest.raises(ValidationFailed, match="after: expected job ids"):
            job_ids([bad])  # type: ignore[list-item]


def test_chain_of_groups_fans_out_and_in() -> None:
    part = chain(a.s(x=1), group(b.s(), a.s().set(run_anyway=True)), a.s(x=2))._compile(
        iter(range(9))
    )
    after = {s["key"]: s["after"] for s in part.steps}
    assert after == {"s0": [], "s1": ["s0"], "s2": ["s0"], "s3": ["s1", "s2"]}
    assert (part.heads, part.tails) == (["s0"], ["s3"])
    steps = {s["key"]: s for s in part.steps}
    assert (steps["s1"]["queue"], steps["s1"]["max_attempts"]) == ("other", 2)
    assert steps["s2"]["run_anyway"] is True and steps["s0"]["payload"] == {"x": 1}


def test_empty_or_foreign_parts_are_refused() -> None:
    with pytest.raises(ValidationFailed, match="at least one"):
        chain()
    with pytest.raises(ValidationFailed, match=r"expected task\.s"):
        group(a.s(), "b")  # type: ignore[arg-type]
