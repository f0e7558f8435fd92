"""jobyard: background jobs, retries and cron on PostgreSQL alone.

    import jobyard

    app = jobyard.App(project="acme/shop")

    @app.task(queue="emails")
    async def send_welcome(ctx: jobyard.JobContext, user_id: int) -> None: ...

The names below are loaded on first use, so `import jobyard.domain` (or the CLI) does not pull
in the worker and the database driver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobyard.sdk import (
        App,
        ConfigurationError,
        DatabaseUnavailable,
        Deferred,
        IdempotencyConflict,
        JobCancelled,
        JobContext,
        JobFailed,
        JobHandle,
        JobLogger,
        JobyardError,
        LeaseLost,
        NotFound,
        ResultTimeout,
        RetryOverride,
        Signature,
        Task,
        ValidationFailed,
        WorkflowFailed,
        chain,
        group,
    )

__all__ = [
    "App",
    "ConfigurationError",
    "DatabaseUnavailable",
    "Deferred",
    "IdempotencyConflict",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "JobHandle",
    "JobLogger",
    "JobyardError",
    "LeaseLost",
    "NotFound",
    "ResultTimeout",
    "RetryOverride",
    "Signature",
    "Task",
    "ValidationFailed",
    "WorkflowFailed",
    "chain",
    "group",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("jobyard.sdk"), name)
    raise AttributeError(f"module 'jobyard' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
