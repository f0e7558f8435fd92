"""Workflows from the SDK: signatures, chains, groups (fan-out) and fan-in, and batches with
callbacks.

    a.s(x=1)                                  # a signature: a task and its payload, not yet sent
    await chain(a.s(x=1), b.s(), c.s()).defer()          # a, then b, then c
    await chain(a.s(), group(b.s(), c.s()), d.s()).defer()  # fan-out to b and c, fan-in to d
    await app.batch([a.s(i=i) for i in range(100)], on_success=report.s())

A workflow is enqueued in one transaction (all of its steps or none). A child reads its
parents' results with `await ctx.parent_results()` (`ctx.parent_results_sync()` in a plain `def`
handler). docs/WORKFLOWS.md has runnable examples.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from pydantic import ValidationError

from jobyard.core import enqueue, projects, workflows
from jobyard.db import pool as dbpool
from jobyard.domain.errors import JobyardError, ValidationFailed
from jobyard.domain.ids import ProjectId
from jobyard.domain.schemas import BatchCreate, WorkflowCreate

if TYPE_CHECKING:
    from jobyard.worker.app import App, Task

T = TypeVar("T")


class HasId(Protocol):
    @property
    def id(self) -> int: ...


class HasJobId(Protocol):
    @property
    def job_id(self) -> int: ...


# What `after=` accepts: job ids, or anything with `.id` or `.job_id` (a defer's result).
JobRef = int | HasId | HasJobId


def job_ids(refs: Iterable[JobRef] | None) -> list[int]:
    """The ids of `after=[...]`; anything else is a ValidationFailed naming the field."""
    ids: list[int] = []
    for ref in refs or ():
        value = ref if isinstance(ref, int) else getattr(ref, "id", getattr(ref, "job_id", None))
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationFailed(
                f"after: expected job ids or jobs (with .id), got {ref!r}", field="after"
            )
        ids.append(value)
    return ids


@dataclass(frozen=True)
class Signature:
    """A task with its payload and options, to be enqueued later (in a chain, a group, a
    batch, or alone with `defer`)."""

    task: Task
    payload: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)

    def set(self, **options: Any) -> Signature:
        """Per-job options: queue, priority, max_attempts, timeout_ms, run_anyway."""
        return Signature(self.task, self.payload, {**self.options, **options})

    def step(self) -> dict[str, Any]:
        spec = self.task.spec
        return {
            "handler": spec.name,
            "queue": self.options.get("queue", spec.queue),
            "payload": self.payload,
            "priority": self.options.get("priority", spec.priority),
            "max_attempts": self.options.get("max_attempts", spec.max_attempts),
            "timeout_ms": self.options.get(
                "timeout_ms", None if spec.timeout_s is None else round(spec.timeout_s * 1000)
            ),
            "run_anyway": self.options.get("run_anyway", False),
        }

    def callback(self) -> dict[str, Any]:
        step = self.step()
        step.pop("run_anyway")
        return step

    async def defer(self, *, conn: dbpool.Conn | None = None, after: Sequence[JobRef] = ()) -> int:
        """Enqueue this one job; returns its id."""
        run = await chain(self).defer(conn=conn, after=after)
        return run.last[0]


@dataclass(frozen=True)
class _Part:
    steps: list[dict[str, Any]]
    heads: list[str]  # steps that wait for what comes before the part
    tails: list[str]  # steps that what comes after the part waits for


FINAL: Final = frozenset({"done", "dead_letter", "cancelled"})


@dataclass(frozen=True)
class WorkflowRun:
    """The enqueued workflow: job ids by step key (`s0`, `s1`, … in the order written), and the
    ids of its last steps (what a job after the whole workflow would wait for)."""

    job_ids: dict[str, int]
    last: list[int]
    app: App | None = field(default=None, repr=False, compare=False)

    async def wait(
        self,
        timeout: float = 60.0,  # noqa: ASYNC109 - a polling deadline, not a cancel scope
        *,
        poll_s: float = 0.2,
    ) -> dict[int, Any]:
        """Wait until every step is final; the last steps' results by job id. Raises
        TimeoutError, or WorkflowFailed when a last step did not end done."""
        assert self.app is not None
        ids = sorted(self.job_ids.values())
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            rows = await using(self.app, None, (), lambda c, p: workflows.outcomes(c, p, ids))
            if all(r["status"] in FINAL for r in rows):
                break
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"workflow not finished within {timeout} s")
            await asyncio.sleep(poll_s)
        by_id = {r["id"]: r for r in rows}
        failed = {i: by_id[i]["status"] for i in self.last if by_id[i]["status"] != "done"}
        if failed:
            raise WorkflowFailed(f"the workflow's last steps did not succeed: {failed}")
        return {i: by_id[i]["result"] for i in self.last}


class WorkflowFailed(JobyardError):
    """A workflow's last steps did not end done."""

    code = "workflow_failed"


class _Composite:
    def __init__(self, *parts: Signature | _Composite) -> None:
        if not parts:
            raise ValidationFailed("a chain or group needs at least one signature", field="steps")
        for p in parts:
            if not isinstance(p, Signature | _Composite):
                raise ValidationFailed(
                    f"expected task.s(...) signatures, chains or groups, got {p!r}", field="steps"
                )
        self.parts = parts

    def _compile(self, keys: Iterable[int]) -> _Part:
        raise NotImplementedError

    def _app(self) -> App:
        first = self.parts[0]
        return first.task.app if isinstance(first, Signature) else first._app()

    async def defer(
        self, *, conn: dbpool.Conn | None = None, after: Sequence[JobRef] = ()
    ) -> WorkflowRun:
        """Enqueue every step in one transaction; `after` makes the first steps wait for jobs
        that already exist."""
        part = self._compile(count())
        existing = job_ids(after)
        heads = set(part.heads)
        steps = [
            {**s, "after": s["after"] + (existing if s["key"] in heads else [])} for s in part.steps
        ]
        try:
            body = WorkflowCreate.model_validate({"steps": steps})
        except ValidationError as exc:
            raise ValidationFailed(str(exc.errors()[0]["msg"]), field="steps") from None
        app = self._app()

        async def go(c: dbpool.Conn, project_id: ProjectId) -> WorkflowRun:
            result = await workflows.enqueue_workflow(c, project_id, body)
            return WorkflowRun(result.job_ids, [result.job_ids[k] for k in part.tails], app)

        return await using(app, conn, {s["queue"] for s in steps}, go)


def _one(part: Signature | _Composite, keys: Iterable[int]) -> _Part:
    if isinstance(part, Signature):
        key = f"s{next(iter(keys))}"
        return _Part([{**part.step(), "key": key, "after": []}], [key], [key])
    return part._compile(keys)


class Chain(_Composite):
    """Each part runs after the previous one has finished (all its last steps)."""

    def _compile(self, keys: Iterable[int]) -> _Part:
        it = iter(keys)
        steps: list[dict[str, Any]] = []
        heads: list[str] = []
        tails: list[str] = []
        for i, p in enumerate(self.parts):
            part = _one(p, it)
            if i == 0:
                heads = part.heads
            else:
                for s in part.steps:
                    if s["key"] in part.heads:
                        s["after"] = [*s["after"], *tails]
            steps.extend(part.steps)
            tails = part.tails
        return _Part(steps, heads, tails)


class Group(_Composite):
    """The parts run side by side (fan-out); whatever follows waits for all of them (fan-in)."""

    def _compile(self, keys: Iterable[int]) -> _Part:
        it = iter(keys)
        parts = [_one(p, it) for p in self.parts]
        return _Part(
            [s for p in parts for s in p.steps],
            [k for p in parts for k in p.heads],
            [k for p in parts for k in p.tails],
        )


def chain(*parts: Signature | _Composite) -> Chain:
    """`chain(a.s(), b.s(), c.s())`: a, then b, then c."""
    return Chain(*parts)


def group(*parts: Signature | _Composite) -> Group:
    """`group(a.s(), b.s())`: a and b in parallel; a step after the group waits for both."""
    return Group(*parts)


@dataclass(frozen=True)
class BatchRun:
    batch_id: int
    job_ids: list[int]
    app: App | None = field(default=None, repr=False, compare=False)

    async def wait(
        self,
        timeout: float = 60.0,  # noqa: ASYNC109 - a polling deadline, not a cancel scope
        *,
        poll_s: float = 0.2,
    ) -> dict[str, Any]:
        """Wait until every job of the batch is final; its status (size, done, failed,
        cancelled, pending, callback_job_ids). Raises TimeoutError."""
        assert self.app is not None
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            status = await using(
                self.app, None, (), lambda c, p: workflows.batch_status(c, p, self.batch_id)
            )
            if status["completed_at"] is not None:
                return status
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"batch {self.batch_id} not finished within {timeout} s")
            await asyncio.sleep(poll_s)


async def batch(
    app: App,
    items: Sequence[Signature],
    *,
    on_success: Signature | None = None,
    on_failure: Signature | None = None,
    on_complete: Signature | None = None,
    conn: dbpool.Conn | None = None,
) -> BatchRun:
    """Many jobs of one queue in one statement; each callback is enqueued exactly once, when
    the last of them reaches a final state (on_success: all done; on_failure: some
    dead-lettered or cancelled; on_complete: either way). The callback's payload gets
    `batch={"id", "size", "done", "failed", "cancelled"}`."""
    if not items:
        raise ValidationFailed("a batch needs at least one job", field="jobs")
    queues = {s.step()["queue"] for s in items}
    if len(queues) > 1:
        raise ValidationFailed(
            f"a batch's jobs share one queue, got {sorted(queues)}", field="jobs"
        )
    callbacks = {
        k: v.callback()
        for k, v in (
            ("on_success", on_success),
            ("on_failure", on_failure),
            ("on_complete", on_complete),
        )
        if v is not None
    }
    jobs = []
    for s in items:
        step = s.step()
        step.pop("queue")
        step.pop("run_anyway")
        jobs.append(step)
    try:
        body = BatchCreate.model_validate({"queue": queues.pop(), "jobs": jobs, **callbacks})
    except ValidationError as exc:
        raise ValidationFailed(str(exc.errors()[0]["msg"]), field="jobs") from None
    names = {body.queue, *(c["queue"] for c in callbacks.values())}

    async def go(c: dbpool.Conn, project_id: ProjectId) -> BatchRun:
        result = await enqueue.enqueue_batch(c, project_id, body)
        return BatchRun(result.batch_id, result.job_ids, app)

    return await using(app, conn, names, go)


async def using(
    app: App,
    conn: dbpool.Conn | None,
    queues: Iterable[str],
    fn: Callable[[dbpool.Conn, ProjectId], Awaitable[T]],
) -> T:
    """Run `fn` on the caller's connection, the app's pool, or a connection of its own (as
    `defer` does); outside production the queues are created on first use."""

    async def on(c: dbpool.Conn) -> T:
        project_id = await app.project_id(c)
        if app.settings.env != "prod":
            await projects.ensure_queues(c, project_id, sorted(set(queues)))
        return await fn(c, project_id)

    if conn is not None:
        return await on(conn)
    if app._pool is not None:
        async with app._pool.connection() as pooled:
            return await on(pooled)
    own = await dbpool.connect(app.database_url(), autocommit=True)
    try:
        return await on(own)
    finally:
        await own.close()
