"""The jobyard error tree. Each class docstring is its default message."""

from __future__ import annotations

from typing import Any


class JobyardError(Exception):
    """Something went wrong in jobyard."""

    code = "error"

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or (self.__doc__ or self.code).strip()
        self.details = details
        super().__init__(self.message)


class ConfigurationError(JobyardError):
    """The configuration is invalid."""

    code = "configuration_error"


class ValidationFailed(JobyardError):
    """The input is invalid."""

    code = "validation_error"


class NotFound(JobyardError):
    """The resource does not exist."""

    code = "not_found"


class Conflict(JobyardError):
    """The request conflicts with the current state."""

    code = "conflict"


class IdempotencyConflict(Conflict):
    """A job with this idempotency key already exists with a different payload."""

    code = "idempotency_conflict"


class IllegalTransition(JobyardError):
    """This job status change is not allowed."""

    code = "illegal_transition"


class LeaseLost(JobyardError):
    """This worker no longer holds the job's lease."""

    code = "lease_lost"


class DatabaseUnavailable(JobyardError):
    """The database cannot be reached."""

    code = "database_unavailable"


class JobFailed(JobyardError):
    """The job failed for good (dead-lettered); its last error is in the message."""

    code = "job_failed"


class JobCancelled(JobyardError):
    """The job was cancelled before it finished."""

    code = "job_cancelled"


class ResultTimeout(JobyardError, TimeoutError):
    """The job did not finish within the time given to wait for its result."""

    code = "result_timeout"
