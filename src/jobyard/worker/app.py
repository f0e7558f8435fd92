"""The library API: `App`, `@app.task`, and `Task.defer` / `Task.defer_sync`.

    app = jobyard.App(project="acme/shop")

    @app.task(queue="emails", retry={"backoff": "exponential"}, timeout=30)
    async def send_welcome(ctx: jobyard.JobContext, user_id: int) -> None:
        await ctx.logger.info("sending", user_id=user_id)

    await send_welcome.defer(user_id=42)                 # its own short transaction
    await send_welcome.defer(conn=my_conn, user_id=42)   # inside the caller's transaction
    send_welcome.defer_sync(user_id=42)                  # from synchronous code
    await send_welcome.defer_many([{"user_id": 1}, {"user_id": 2}])   # one statement

    deferred = await send_welcome.defer(user_id=42)
    await deferred.job.result(timeout=30)                # the handler's return value

`conn` may be a psycopg 3 connection (sync or async, any row factory) or a SQLAlchemy 2
Connection / AsyncConnection on psycopg; see jobyard/db/foreign.py.

Run the handlers with `jobyard worker --app mymodule:app --queues emails`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Final, TypeVar, overload

from pydantic import ValidationError

from jobyard.core import enqueue, maintenance, outcomes, projects, transitions
from jobyard.core.clock import monotonic
from jobyard.db import foreign
from jobyard.db import pool as dbpool
from jobyard.domain.errors import (
    ConfigurationError,
    JobCancelled,
    JobFailed,
    NotFound,
    ResultTimeout,
    ValidationFailed,
)
from jobyard.domain.ids import JobId, ProjectId
from jobyard.domain.schemas import BatchCreate, BatchItem, JobCreate, RetryOverride
from jobyard.domain.settings import Settings
from jobyard.domain.text import reject_nul
from jobyard.worker.canvas import BatchRun, JobRef, Signature, job_ids
from jobyard.worker.canvas import batch as canvas_batch
from jobyard.worker.registry import Handler, Registry, TaskSpec

_T = TypeVar("_T")

# How often `JobHandle.result` looks at the job while it waits.
RESULT_POLL_S: Final = 0.1


@dataclass(frozen=True)
class JobHandle:
    """A job enqueued earlier, to ask about or cancel: `await handle.status()`,
    `await handle.result(timeout=30)`, `await handle.cancel()`; `*_sync` from blocking code.

    Each call uses the app's pool when `async with app:` is open, else a short connection.
    """

    id: int
    app: App = field(repr=False, compare=False)

    async def status(self) -> str:
        """The job's status now (queued, running, done, dead_letter, cancelled, ...)."""
        async with self.app.connection() as conn:
            return str((await self._outcome(conn))["status"])

    async def result(self, timeout: float | None = 30.0) -> Any:  # noqa: ASYNC109 - polls
        """Wait for the job to end and return what its handler returned (stored as JSON).

        Raises JobFailed (with the last error) if it was dead-lettered, JobCancelled if it was
        cancelled, ResultTimeout if it has not ended after `timeout` seconds (None: no limit).
        A failed run that will be retried is waited for, not reported.
        """
        deadline = None if timeout is None else monotonic() + timeout
        async with self.app.connection() as conn:
            while True:
                row = await self._outcome(conn)
                status = str(row["status"])
                if status == "done":
                    return row["result"]
                if status == "dead_letter":
                    raise JobFailed(
                        f"job {self.id} failed: {row['last_error'] or 'no error recorded'}",
                        job_id=self.id,
                        error=row["last_error"],
                    )
                if status == "cancelled":
                    raise JobCancelled(f"job {self.id} was cancelled", job_id=self.id)
                if deadline is not None and monotonic() >= deadline:
                    raise ResultTimeout(
                        f"job {self.id} is still {status} after {timeout:g} s",
                        job_id=self.id,
                        status=status,
                    )
                await asyncio.sleep(RESULT_POLL_S)

    async def cancel(self) -> str:
        """Cancel the job: a pending one at once, a running one by asking its worker to stop.

        Returns the status after the request ("cancelled", or "running" while the worker stops
        it); a job that already ended keeps its status, which is returned.
        """
        async with self.app.connection() as conn:
            project_id = await self.app.project_id(conn)
            row = await transitions.cancel(conn, project_id, JobId(self.id))
            if row is not None:
                return str(row["status"])
            return str((await self._outcome(conn))["status"])

    def status_sync(self) -> str:
        return _run_sync(self.status(), "status")

    def result_sync(self, timeout: float | None = 30.0) -> Any:
        return _run_sync(self.result(timeout), "result")

    def cancel_sync(self) -> str:
        return _run_sync(self.cancel(), "cancel")

    async def _outcome(self, conn: dbpool.Conn) -> dict[str, Any]:
        project_id = await self.app.project_id(conn)
        row = await outcomes.job_outcome(conn, project_id, JobId(self.id))
        if row is None:
            raise NotFound(f"job {self.id} does not exist in this project", field="job")
        return row


@dataclass(frozen=True)
class Deferred:
    """What a defer returns: the job's id and status; created=False for an idempotent repeat.

    `status` is the status the job was enqueued with; `job` asks the database about it now.
    """

    id: int
    status: str
    created: bool
    _app: App | None = field(default=None, repr=False, compare=False)

    @property
    def job(self) -> JobHandle:
        """A handle on this job: status(), result(timeout=...), cancel()."""
        if self._app is None:
            raise ConfigurationError("this Deferred was not returned by an App; use app.job(id)")
        return JobHandle(self.id, self._app)


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
        conn: Any = None,
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
        transaction, if any — so the job exists only if that transaction commits. `conn` is a
        psycopg 3 connection (sync or async, any row factory) or a SQLAlchemy 2 Connection /
        AsyncConnection on psycopg.
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

    async def defer_many(
        self,
        payloads: Iterable[Mapping[str, Any]],
        *,
        conn: Any = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
    ) -> list[Deferred]:
        """Enqueue one job per payload (keyword arguments as a dict) in one statement.

        The jobs share a batch and this task's queue and options; they are returned in the
        order given. `conn` works as for `defer`; `delay` (seconds or a timedelta, by the
        database's clock) or `run_at` holds them all back.
        """
        return await self.app.defer_many(
            self.name, payloads, conn=conn, delay=delay, run_at=run_at, priority=priority
        )

    def s(self, **payload: Any) -> Signature:
        """A signature: this task with its payload, for `chain`, `group` and `app.batch`."""
        return Signature(self, payload)

    def defer_sync(
        self,
        *,
        conn: Any = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        **payload: Any,
    ) -> Deferred:
        """`defer` for synchronous code: a short-lived event loop and connection, or the
        caller's blocking `conn` (psycopg `Connection` or SQLAlchemy `Connection`)."""
        return self.app.defer_sync(
            self.name,
            payload,
            conn=conn,
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
        conn: Any = None,
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
            async with foreign.adopted(conn) as adopted:
                return await self._insert(adopted, job)
        async with self.connection() as own:
            return await self._insert(own, job)

    async def defer_many(
        self,
        handler: str,
        payloads: Iterable[Any],
        *,
        conn: Any = None,
        queue: str | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
    ) -> list[Deferred]:
        """Enqueue many jobs of one handler in one statement (core's batch enqueue)."""
        delay_ms = _delay_ms(delay)
        if delay_ms is not None and run_at is not None:
            raise ValidationFailed("give run_at or delay, not both", field="delay")
        spec = self.registry.get(handler) or TaskSpec(name=handler, fn=_unregistered)
        if queue is not None:
            spec = replace(spec, queue=queue)
        if isinstance(payloads, Mapping | str | bytes):
            raise ValidationFailed(
                "defer_many takes a list of payloads (one dict per job)", field="payloads"
            )
        items = list(payloads)
        if not items:
            return []
        try:
            batch = BatchCreate(
                queue=spec.queue,
                jobs=[
                    BatchItem(
                        handler=spec.name,
                        payload=item,
                        priority=spec.priority if priority is None else priority,
                        run_at=run_at,
                        max_attempts=spec.max_attempts,
                        timeout_ms=None if spec.timeout_s is None else round(spec.timeout_s * 1000),
                    )
                    for item in items
                ],
            )
        except ValidationError as exc:
            raise _validation_failed(exc) from None
        for at, item in enumerate(batch.jobs):
            reject_nul(item.payload, f"payloads[{at}]")
        if spec.retry is not None:
            # A batch row carries no per-job retry override; refuse rather than drop it.
            raise ValidationFailed(
                f"task {spec.name!r} has a retry override, which defer_many cannot carry yet; "
                "use defer() per job",
                field="retry",
            )
        if conn is not None:
            async with foreign.adopted(conn) as adopted:
                return await self._insert_batch(adopted, batch, delay_ms)
        async with self.connection() as own:
            return await self._insert_batch(own, batch, delay_ms)

    def job(self, job_id: int) -> JobHandle:
        """A handle on a job of this app's project by id (status, result, cancel)."""
        return JobHandle(int(job_id), self)

    @contextlib.contextmanager
    def using_database(self, database_url: str) -> Iterator[App]:
        """Point this app at another database for a while (tests: a throwaway clone)."""
        saved = (self._database_url, self._project_ids)
        self._database_url, self._project_ids = database_url, {}
        try:
            yield self
        finally:
            self._database_url, self._project_ids = saved

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[dbpool.Conn]:
        """The app's pool when `async with app:` is open, else a short autocommit connection."""
        if self._pool is not None:
            async with self._pool.connection() as pooled:
                yield pooled
            return
        own = await dbpool.connect(self.database_url(), autocommit=True)
        try:
            yield own
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
        conn: Any = None,
        queue: str | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        after: Sequence[JobRef] | None = None,
        run_anyway: bool = False,
    ) -> Deferred:
        """Blocking `defer` for code that is not async (a web view, a script)."""
        if conn is not None and not foreign.is_blocking(conn):
            raise ConfigurationError(
                "defer_sync takes a blocking connection (psycopg Connection or SQLAlchemy "
                "Connection); with an async one use `await ...defer(conn=...)`",
                field="conn",
            )
        return _run_sync(
            self.defer(
                handler,
                payload,
                conn=conn,
                queue=queue,
                delay=delay,
                run_at=run_at,
                idempotency_key=idempotency_key,
                priority=priority,
                after=after,
                run_anyway=run_anyway,
            ),
            "defer_sync",
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
            id=int(result.job["id"]),
            status=str(result.job["status"]),
            created=result.created,
            _app=self,
        )

    async def _insert_batch(
        self, conn: dbpool.Conn, batch: BatchCreate, delay_ms: int | None = None
    ) -> list[Deferred]:
        project_id = await self.project_id(conn)
        if delay_ms is not None:
            # A batch item carries run_at only: the delay is added to the database's clock,
            # as a single defer's delay_ms is, never to this machine's.
            due = await enqueue.database_now(conn) + timedelta(milliseconds=delay_ms)
            batch = batch.model_copy(
                update={"jobs": [j.model_copy(update={"run_at": due}) for j in batch.jobs]}
            )
        try:
            result = await enqueue.enqueue_batch(conn, project_id, batch)
        except NotFound as exc:
            if exc.details.get("field") != "queue" or self.settings.env == "prod":
                raise
            await projects.ensure_queues(conn, project_id, [batch.queue])
            result = await enqueue.enqueue_batch(conn, project_id, batch)
        # One run_at for the whole batch: either every job is queued or every one scheduled.
        status = "queued" if result.queued == len(result.job_ids) else "scheduled"
        return [
            Deferred(id=job_id, status=status, created=True, _app=self) for job_id in result.job_ids
        ]

    # ------------------------------------------------------------------ in-process runs

    async def run_until_idle(
        self,
        queues: Iterable[str] | None = None,
        *,
        timeout: float = 60.0,  # noqa: ASYNC109 - a whole run, not one await
        concurrency: int = 4,
        due_within: float = 1.0,
    ) -> dict[str, int]:
        """Run this app's queued jobs in-process with a real worker until none is left.

        For tests and scripts: the worker claims, runs, retries and records exactly as
        `jobyard worker` does. Jobs due within `due_within` seconds (a short retry backoff)
        are waited for, promoted and run; jobs due later (a longer delay or backoff) are not.
        Returns the count of runs per outcome.
        Raises ResultTimeout if jobs are still running or due after `timeout` seconds.
        """
        # Imported here: the runtime imports this module's neighbours, not the other way.
        from jobyard.worker.commands import worker_registry
        from jobyard.worker.runtime import Worker, WorkerConfig

        names = sorted(
            set(queues)
            if queues is not None
            else {t.spec.queue for t in self.tasks.values()} or {"default"}
        )
        url = self.database_url()
        config = WorkerConfig(
            url=url,
            project=self.project,
            queues=tuple(names),
            concurrency=concurrency,
            heartbeat_interval_s=1.0,
            poll_interval_s=0.05,
            queue_refresh_s=0.5,
            drain_grace_s=5.0,
            create_project=self.settings.env != "prod",
            name="jobyard-run-until-idle",
        )
        worker = Worker(config, worker_registry(self))
        task = asyncio.create_task(worker.run())
        deadline = monotonic() + timeout
        try:
            conn = await dbpool.connect(url, autocommit=True)
            try:
                while True:
                    if task.done():
                        task.result()  # what stopped the worker, raised here
                        raise ConfigurationError("the in-process worker stopped unexpectedly")
                    if worker.ready.is_set() and not worker.running:
                        await maintenance.promote_due(conn)
                        left = await outcomes.runnable_count(
                            conn, worker.project_id, names, due_within_s=due_within
                        )
                        if left == 0 and not worker.running:
                            break
                        worker.wake()
                    if monotonic() >= deadline:
                        raise ResultTimeout(
                            f"jobs of {', '.join(names)} still running or due after {timeout:g} s"
                        )
                    await asyncio.sleep(0.02)
            finally:
                await conn.close()
        finally:
            worker.request_drain()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return dict(worker.outcomes)

    async def drain(
        self,
        queue: str,
        *,
        timeout: float = 60.0,  # noqa: ASYNC109 - a whole run, not one await
        due_within: float = 1.0,
    ) -> dict[str, int]:
        """`run_until_idle` for one queue."""
        return await self.run_until_idle([queue], timeout=timeout, due_within=due_within)


def _run_sync(coro: Coroutine[Any, Any, _T], what: str) -> _T:
    """Run `coro` on a short-lived event loop (blocking code has none of its own)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise ConfigurationError(
        f"{what}_sync was called inside a running event loop; use `await ...{what}()`"
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


def _delay_ms(delay: float | timedelta | None) -> int | None:
    if delay is None:
        return None
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise ValidationFailed("delay must be a non-negative number of seconds", field="delay")
    return round(seconds * 1000)


def _job_create(
    spec: TaskSpec,
    payload: Any,
    *,
    priority: int | None,
    delay: float | timedelta | None,
    run_at: datetime | None,
    idempotency_key: str | None,
) -> JobCreate:
    delay_ms = _delay_ms(delay)
    try:
        job = JobCreate(
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
    # After validation, which bounds the payload's depth for this walk.
    reject_nul(job.payload, "payload")
    return job


def _validation_failed(exc: ValidationError, prefix: str = "") -> ValidationFailed:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    field = ".".join(p for p in (prefix, loc) if p) or "input"
    message = str(first["msg"]).removeprefix("Value error, ")
    return ValidationFailed(f"{field}: {message}", field=field)
