"""What `jobyard worker`, `jobyard enqueue` and `jobyard jobs` do, kept out of cli.py.

Every user mistake raises a domain error whose message names the flag and the fix; the CLI
prints it without a traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import sys
import traceback as traceback_module
from typing import Any, Final

from jobyard.core import projects
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.enums import JobStatus
from jobyard.domain.errors import ConfigurationError, ValidationFailed
from jobyard.domain.ids import ProjectId
from jobyard.domain.settings import Settings
from jobyard.worker.app import App, Deferred
from jobyard.worker.handlers.builtins import builtin_registry
from jobyard.worker.registry import Registry
from jobyard.worker.runtime import WorkerConfig, run_worker

_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def load_app(ref: str) -> App:
    """Import `module:attribute` and check it is a jobyard App."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ValidationFailed(
            f"--app must look like 'package.module:app', got {ref!r}", field="app"
        )
    # Like uvicorn: the current directory is importable, so `--app tasks:app` finds ./tasks.py.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if _is_the_module_itself(exc, module_name):
            raise ConfigurationError(
                f"--app: cannot import module {module_name!r}: {exc}", field="app"
            ) from None
        raise _raised_on_import(module_name, exc) from None
    except Exception as exc:
        raise _raised_on_import(module_name, exc) from None
    found = getattr(module, attr, None)
    if found is None:
        raise ConfigurationError(
            f"--app: module {module_name!r} has no attribute {attr!r}", field="app"
        )
    if not isinstance(found, App):
        raise ConfigurationError(
            f"--app: {ref} is a {type(found).__name__}, not a jobyard.App", field="app"
        )
    return found


def _is_the_module_itself(exc: ImportError, module_name: str) -> bool:
    """Whether the module named by --app (or a package above it) is what was not found, rather
    than something that module imports (a missing dependency is the user's module's error)."""
    missing = exc.name or ""
    return bool(missing) and (module_name == missing or module_name.startswith(missing + "."))


def _raised_on_import(module_name: str, exc: Exception) -> ConfigurationError:
    """The error, and where in the user's code it was raised (the innermost frame outside
    Python's import machinery), without the traceback."""
    frames = [
        f
        for f in traceback_module.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<frozen") and "importlib" not in f.filename
    ]
    where = ""
    if frames:
        path = frames[-1].filename
        with contextlib.suppress(ValueError):  # another drive on Windows
            relative = os.path.relpath(path)
            path = path if relative.startswith("..") else relative
        where = f" (at {path}:{frames[-1].lineno})"
    return ConfigurationError(
        f"--app: importing {module_name!r} raised {type(exc).__name__}: {exc}{where}", field="app"
    )


def parse_queues(text: str) -> list[str]:
    names = [q.strip() for q in text.split(",") if q.strip()]
    if not names:
        raise ValidationFailed("--queues needs at least one queue name", field="queues")
    for name in names:
        projects.check_queue_name(name)  # before connecting; the database's rule
    return list(dict.fromkeys(names))


def worker_registry(app: App | None) -> Registry:
    """The built-ins plus the app's tasks (an app may not redefine a built-in's name)."""
    builtins = builtin_registry()
    if app is None:
        return builtins
    for spec in app.registry:
        if spec.name in builtins:
            raise ConfigurationError(
                f"task {spec.name!r} clashes with the built-in handler of that name; rename it",
                field="app",
            )
    return builtins.merged(app.registry)


def start_worker(
    settings: Settings,
    url: str,
    *,
    queues: str,
    concurrency: int | None,
    app_ref: str | None,
    project: str | None,
) -> int:
    app = load_app(app_ref) if app_ref else None
    config = WorkerConfig.from_settings(
        settings,
        url=url,
        queues=parse_queues(queues),
        concurrency=concurrency,
        project=project or (app.project if app is not None else None),
    )
    return run_worker(config, worker_registry(app))


def parse_payload(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationFailed(
            f"--payload is not valid JSON ({exc.msg} at character {exc.pos}); quote it for "
            """the shell, e.g. --payload '{"seconds": 2}'""",
            field="payload",
        ) from None


def parse_delay(text: str) -> float:
    """'5s', '500ms', '2m', '1h', '1d' or plain seconds → seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise ValidationFailed(
            f"--delay must be a duration like 5s, 500ms, 2m or 1h, got {text!r}", field="delay"
        )
    return float(match.group(1)) * _UNIT_S[match.group(2) or "s"]


def enqueue_job(
    settings: Settings,
    url: str,
    *,
    handler: str,
    queue: str,
    payload: str,
    delay: str | None,
    priority: int,
    idempotency_key: str | None,
    project: str | None,
) -> Deferred:
    app = App(project=project or settings.project, database_url=url, settings=settings)
    return app.defer_sync(
        handler,
        parse_payload(payload),
        queue=queue,
        delay=parse_delay(delay) if delay is not None else None,
        priority=priority,
        idempotency_key=idempotency_key,
    )


def check_status(status: str | None) -> None:
    """`--status` of `jobyard jobs`: one of the job statuses (checked before any connection)."""
    if status is not None and status not in {s.value for s in JobStatus}:
        raise ValidationFailed(
            f"--status must be one of {', '.join(s.value for s in JobStatus)}", field="status"
        )


async def recent_jobs(
    conn: Conn,
    project_id: ProjectId,
    *,
    status: str | None,
    queue: str | None,
    limit: int,
) -> list[dict[str, Any]]:
    """The newest jobs of a project the caller resolved (an unknown project is its error)."""
    check_status(status)
    return await run.all_rows(
        conn,
        "read_jobs_recent",
        {"project_id": project_id, "status": status, "queue": queue, "limit": limit},
    )
