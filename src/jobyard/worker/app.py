"""The library API: `App`, `@app.task`, and `Task.defer` / `Task.defer_sync`.

    app = jobyard.App(project="acme/shop")

    @app.task(queue="emails", retry={"backoff": "exponential"}, timeout=30)
    async def send_welcome(ctx: jobyard.JobContext, user_id: int) -> None:
        await ctx.logger.info("sending", user_id=user_id)

    await send_welcome.defer(user_id=42)                 # its own short transaction
    await send_welcome.defer(conn=my_conn, user_id=42)   # inside the caller's transaction
    send_welcome.defer_sync(user_id=42)                  # from synchronous code

Run the handlers with `jobyard worker --app mymodule:app --queues emails`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, overload

from pydantic import ValidationError

from jobyard.core import enqueue, projects
from jobyard.db import pool as dbpool
from jobyard.domain.errors import ConfigurationError, NotFound, ValidationFailed
from jobyard.domain.ids import ProjectId
from jobyard.domain.schemas import JobCreate, RetryOverride
from jobyard.domain.settings import Settings
from jobyard.worker.canvas import BatchRun, JobRef, Signature, job_ids
from jobyard.worker.canvas import batch as canvas_batch
from jobyard.worker.registry import Handler, Registry, TaskSpec


@dataclass(frozen=True)
class Deferred:
    """What a defer returns: the job's id and status; created=False for an idempotent repeat."""

    id: int
    status: str
    created: bool


class Task:
    """A registered handler. Call it directly (tests) or `defer` it to run on a worker."""

    def __init__(self, app: App, spec: TaskSpec) -> None:
        self.app = app
        self.spec = spec

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.spec.fn(*args, **kwargs)

    async def defer(
        self,
        *,
        conn: dbpool.Conn | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        after: Sequence[JobRef] | None = None,
        run_anyway: bool = False,
        **payload: Any,
    ) -> Deferred:
        """Enqueue one job for this task; keyword arguments are the payload.

        With `conn`, the insert runs on the caller's connection — inside the caller's open
        transaction, if any — so the job exists only if that transaction commits.
        `after=[job_or_id, ...]` makes it wait until those jobs are done; if one ends
        dead-lettered or cancelled it is cancelled too, unless `run_anyway=True`.
        """
        return await self.app.defer(
            self.name,
            payload,
            conn=conn,
            delay=delay,
            run_at=run_at,
            idempotency_key=idempotency_key,
            priority=priority,
            after=after,
            run_anyway=run_anyway,
        )

    def s(self, **payload: Any) -> Signature:
        """A signature: this task with its payload, for `chain`, `group` and `app.batch`."""
        return Signature(self, payload)

    def defer_sync(
        self,
        *,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        **payload: Any,
    ) -> Deferred:
        """`defer` for synchronous code: a short-lived event loop and connection."""
        return self.app.defer_sync(
            self.name,
            payload,
            delay=delay,
            run_at=run_at,
            idempotency_key=idempotency_key,
            priority=priority,
        )


class App:
    """A set of tasks bound to one project, and the way to enqueue them."""

    def __init__(
        self,
        project: str | None = None,
        database_url: str | None = None,
        *,
        settings: Settings | None = None,
    ) -> None:
        self._project_ref = project
        self._database_url = database_url
        self.registry = Registry()
        self.tasks: dict[str, Task] = {}
        self._settings = settings
        self._project_ids: dict[str, ProjectId] = {}
        self._pool: dbpool.Pool | None = None

    # ------------------------------------------------------------------ registration

    @overload
    def task(self, fn: Handler, /) -> Task: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        retry: RetryOverride | dict[str, Any] | None = None,
        timeout: float | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
    ) -> Callable[[Handler], Task]: ...

    def task(
        self,
        fn: Handler | None = None,
        *,
        name: str | None = None,
        queue: str = "default",
        retry: RetryOverride | dict[str, Any] | None = None,
        timeout: float | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
    ) -> Task | Callable[[Handler], Task]:
        """Register a handler. Usable bare (`@app.task`) or with options (`@app.task(...)`)."""

        def register(handler: Handler) -> Task:
            spec = TaskSpec(
                name=name or handler.__name__,
                fn=handler,
                queue=queue,
                retry=_retry(retry),
                timeout_s=_timeout(timeout),
                priority=priority,
                max_attempts=max_attempts,
            )
            # Validate the defaults now, so a bad decorator fails at import, not at defer.
            _job_create(spec, {}, priority=None, delay=None, run_at=None, idempotency_key=None)
            self.registry.add(spec)
            task = Task(self, spec)
            self.tasks[spec.name] = task
            return task

        if fn is not None:
            return register(fn)
        return register

    # ------------------------------------------------------------------ configuration

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings()
        return self._settings

    @property
    def project(self) -> str:
        return self._project_ref or self.settings.project

    def database_url(self) -> str:
        if self._database_url:
            return self._database_url
        return dbpool.resolve_database_url(self.settings)

    # ------------------------------------------------------------------ enqueue

    async def __aenter__(self) -> App:
        """`async with app:` keeps a small pool open for defers that pass no `conn`."""
        if self._pool is None:
            self._pool = await dbpool.open_pool(
                self.database_url(), min_size=1, max_size=4, name="jobyard-sdk"
            )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def defer(
        self,
        handler: str,
        payload: Any = None,
        *,
        conn: dbpool.Conn | None = None,
        queue: str | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        after: Sequence[JobRef] | None = None,
        run_anyway: bool = False,
    ) -> Deferred:
        """Enqueue a job by handler name (registered here or a built-in such as "sleep")."""
        spec = self.registry.get(handler) or TaskSpec(name=handler, fn=_unregistered)
        if queue is not None:
            spec = replace(spec, queue=queue)
        job = _job_create(
            spec,
            {} if payload is None else payload,
            priority=priority,
            delay=delay,
            run_at=run_at,
            idempotency_key=idempotency_key,
        )
        if after:
            try:
                job = JobCreate.model_validate(
                    {**job.model_dump(), "depends_on": job_ids(after), "run_anyway": run_anyway}
                )
            except ValidationError as exc:
                raise _validation_failed(exc) from None
        if conn is not None:
            return await self._insert(conn, job)
        if self._pool is not None:
            async with self._pool.connection() as pooled:
                return await self._insert(pooled, job)
        own = await dbpool.connect(self.database_url(), autocommit=True)
        try:
            return await self._insert(own, job)
        finally:
            await own.close()

    async def batch(
        self,
        items: Sequence[Signature],
        *,
        on_success: Signature | None = None,
        on_failure: Signature | None = None,
        on_complete: Signature | None = None,
        conn: dbpool.Conn | None = None,
    ) -> BatchRun:
        """Enqueue `[task.s(...), ...]` as one batch (one queue, one statement) with callbacks
        enqueued exactly once when the last job reaches a final state (see canvas.batch)."""
        return await canvas_batch(
            self,
            items,
            on_success=on_success,
            on_failure=on_failure,
            on_complete=on_complete,
            conn=conn,
        )

    def defer_sync(
        self,
        handler: str,
        payload: Any = None,
        *,
        queue: str | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        after: Sequence[JobRef] | None = None,
        run_anyway: bool = False,
    ) -> Deferred:
        """Blocking `defer` for code that is not async (a web view, a script)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise ConfigurationError(
                "defer_sync was called inside a running event loop; use `await ...defer()`"
            )
        return asyncio.run(
            self.defer(
                handler,
                payload,
                queue=queue,
                delay=delay,
                run_at=run_at,
                idempotency_key=idempotency_key,
                priority=priority,
                after=after,
                run_anyway=run_anyway,
            )
        )

    async def project_id(self, conn: dbpool.Conn) -> ProjectId:
        """This app's project on `conn`'s database (created on demand outside production).

        Only ids that were already committed are cached: one created inside a caller's
        transaction might still be rolled back.
        """
        key = conn.info.dsn
        cached = self._project_ids.get(key)
        if cached is not None:
            return cached
        try:
            found = await projects.resolve_project(conn, self.project)
        except NotFound:
            if self.settings.env == "prod":
                raise
            return await projects.resolve_project(conn, self.project, create=True)
        self._project_ids[key] = found
        return found

    async def _insert(self, conn: dbpool.Conn, job: JobCreate) -> Deferred:
        project_id = await self.project_id(conn)
        try:
            result = await enqueue.enqueue(conn, project_id, job, whole_job=False)
        except NotFound as exc:
            if exc.details.get("field") != "queue" or self.settings.env == "prod":
                raise
            # Outside production a task's queue is created on first use, like the worker does.
            await projects.ensure_queues(conn, project_id, [job.queue])
            result = await enqueue.enqueue(conn, project_id, job, whole_job=False)
        return Deferred(
            id=int(result.job["id"]), status=str(result.job["status"]), created=result.created
        )


def _unregistered(ctx: Any) -> None:  # pragma: no cover - never run, only names a handler
    raise NotImplementedError


def _retry(value: RetryOverride | dict[str, Any] | None) -> RetryOverride | None:
    if value is None or isinstance(value, RetryOverride):
        return value
    try:
        return RetryOverride.model_validate(value)
    except ValidationError as exc:
        raise _validation_failed(exc, prefix="retry") from None


def _timeout(value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86_400:
        raise ValidationFailed("timeout must be seconds between 0 and 86400", field="timeout")
    return float(value)


def _job_create(
    spec: TaskSpec,
    payload: Any,
    *,
    priority: int | None,
    delay: float | timedelta | None,
    run_at: datetime | None,
    idempotency_key: str | None,
) -> JobCreate:
    delay_ms: int | None = None
    if delay is not None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise ValidationFailed("delay must be a non-negative number of seconds", field="delay")
        delay_ms = round(seconds * 1000)
    try:
        return JobCreate(
            queue=spec.queue,
            handler=spec.name,
            payload=payload,
            priority=spec.priority if priority is None else priority,
            run_at=run_at,
            delay_ms=delay_ms,
            idempotency_key=idempotency_key,
            max_attempts=spec.max_attempts,
            timeout_ms=None if spec.timeout_s is None else round(spec.timeout_s * 1000),
            retry=spec.retry,
        )
    except ValidationError as exc:
        raise _validation_failed(exc) from None


def _validation_failed(exc: ValidationError, prefix: str = "") -> ValidationFailed:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    field = ".".join(p for p in (prefix, loc) if p) or "input"
    message = str(first["msg"]).removeprefix("Value error, ")
    return ValidationFailed(f"{field}: {message}", field=field)
