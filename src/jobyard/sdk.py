"""The public library surface, in one place: `from jobyard.sdk import App, JobContext`.

`import jobyard` re-exports the same names lazily (see jobyard/__init__.py).
"""

from __future__ import annotations

from jobyard.domain.errors import (
    ConfigurationError,
    DatabaseUnavailable,
    IdempotencyConflict,
    JobCancelled,
    JobFailed,
    JobyardError,
    LeaseLost,
    NotFound,
    ResultTimeout,
    ValidationFailed,
)
from jobyard.domain.schemas import RetryOverride
from jobyard.worker.app import App, Deferred, JobHandle, Task
from jobyard.worker.canvas import Signature, WorkflowFailed, chain, group
from jobyard.worker.context import JobContext, JobLogger

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
