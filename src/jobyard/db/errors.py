"""psycopg errors → domain errors, keyed by constraint name (the db boundary, STYLE rule 10)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg import errors as pg

from jobyard.domain.errors import Conflict, DatabaseUnavailable, NotFound, ValidationFailed

_CHECK_MESSAGES = {
    "jobs_payload_size": ("payload", "payload is larger than 64 KB"),
    "scheduled_jobs_payload_size": ("payload", "payload is larger than 64 KB"),
    "dead_letter_jobs_payload_size": ("payload", "payload is larger than 64 KB"),
    "jobs_result_size": ("result", "result is larger than 64 KB"),
    "jobs_payload_depth": ("payload", "payload is nested more than 100 levels deep"),
    "scheduled_jobs_payload_depth": ("payload", "payload is nested more than 100 levels deep"),
    "dead_letter_jobs_payload_depth": ("payload", "payload is nested more than 100 levels deep"),
    "jobs_result_depth": ("result", "result is nested more than 100 levels deep"),
    "jobs_progress_range": ("fraction", "progress must be between 0 and 1"),
    "jobs_progress_message_length": ("message", "progress message is longer than 500 characters"),
    "job_executions_traceback_length": ("traceback", "traceback is longer than 16000 characters"),
}


def translate(exc: psycopg.Error) -> Exception:
    """The domain error for a database error (or the error itself if it has no meaning here)."""
    diag = getattr(exc, "diag", None)
    constraint = getattr(diag, "constraint_name", None) or ""
    if isinstance(exc, pg.CheckViolation):
        field, message = _CHECK_MESSAGES.get(constraint, (constraint, "value out of range"))
        return ValidationFailed(message, field=field, constraint=constraint)
    if isinstance(exc, pg.UniqueViolation):
        return Conflict("a resource with these unique values already exists", constraint=constraint)
    if isinstance(exc, pg.ForeignKeyViolation):
        return NotFound("a referenced resource does not exist", constraint=constraint)
    if isinstance(exc, psycopg.DataError):
        # Class 22: out-of-range numbers, malformed text, NUL bytes, bad time zone offsets.
        return ValidationFailed("a value is out of range or malformed", sqlstate=exc.sqlstate)
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return DatabaseUnavailable()
    return exc


@asynccontextmanager
async def translated() -> AsyncIterator[None]:
    """Raise domain errors instead of driver errors inside this block."""
    try:
        yield
    except psycopg.Error as exc:
        mapped = translate(exc)
        if mapped is exc:
            raise
        raise mapped from exc
