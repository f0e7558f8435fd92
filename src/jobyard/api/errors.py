"""One error envelope for every failure: `{"error": {"code", "message", "details", "request_id"}}`.

Domain errors map to statuses here (NotFound 404, Conflict 409, …); unexpected exceptions become
a 500 with no stack trace in the body, logged with the request id (see middleware.py).
"""

from __future__ import annotations

import json
import re
import traceback
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from jobyard.core.auth import AuthenticationFailed, PermissionDenied
from jobyard.core.ratelimit import RateLimited
from jobyard.db.pool import CONNECTION_ERRORS
from jobyard.domain.errors import (
    Conflict,
    DatabaseUnavailable,
    IllegalTransition,
    JobyardError,
    LeaseLost,
    NotFound,
    ValidationFailed,
)
from jobyard.logs import get_logger

log = get_logger("jobyard.api")


class ErrorBody(BaseModel):
    code: str = Field(examples=["not_found"])
    message: str = Field(examples=["project not found"])
    details: Any = Field(default_factory=dict)
    request_id: str | None = None


class ErrorEnvelope(BaseModel):
    error: ErrorBody


# Checked in order: the first matching class decides the status.
STATUS_BY_ERROR: Final[tuple[tuple[type[JobyardError], int], ...]] = (
    (AuthenticationFailed, 401),
    (PermissionDenied, 403),
    (NotFound, 404),
    (Conflict, 409),  # includes IdempotencyConflict
    (LeaseLost, 409),
    (IllegalTransition, 409),
    (ValidationFailed, 422),
    (RateLimited, 429),
    (DatabaseUnavailable, 503),
)
_HTTP_CODES: Final = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
    503: "unavailable",
}


# Submitted values considered when withholding echoes, and the shortest value withheld where it
# stands unquoted (shorter ones are too likely to be ordinary words of the message).
_MAX_SUBMITTED = 2000
_MIN_UNQUOTED = 6
_MIN_QUOTED_PART = 8  # a quoted part of a value (e.g. truncated), long enough not to be a word
_QUOTED = re.compile(r""" ?(?:'([^'\n]*)'|"([^"\n]*)")""")
WITHHELD = "(value withheld)"


def _leaves(value: Any, out: list[str]) -> None:
    """Strings (and numbers, as text) inside a JSON value, up to a bound. Not the keys: they
    are mostly the API's own field names, which messages name on purpose."""
    if len(out) >= _MAX_SUBMITTED:
        return
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out.append(str(value))
    elif isinstance(value, dict):
        for item in value.values():
            _leaves(item, out)
    elif isinstance(value, list | tuple):
        for item in value:
            _leaves(item, out)


def submitted_values(request: Request, body: Any = None) -> set[str]:
    """What the client sent (path, query, JSON body): error messages must not repeat any of it."""
    out: list[str] = [str(v) for v in request.path_params.values()]
    out += [v for _, v in request.query_params.multi_items()]
    if body is None:
        raw = getattr(request, "_body", b"")  # Starlette keeps the body it read for the handler
        try:
            body = json.loads(raw) if raw else None
        except (ValueError, RecursionError):
            body = None
    _leaves(body, out)
    tokens = {t for v in out for t in v.replace(",", " ").split()}
    # Messages built with {value!r} show control characters escaped: withhold those forms too.
    escaped = {repr(v)[1:-1] for v in out}
    return {v for v in {*out, *tokens, *escaped} if v.strip()}


def withhold(text: str, submitted: set[str]) -> str:
    """`text` without the submitted values it quotes ('…' or "…": whole values, their space or
    comma separated parts, or 8+ characters of one) nor, unquoted, whole values of 6+ characters."""
    if not submitted:
        return text

    def quoted(match: re.Match[str]) -> str:
        inner = match.group(1) if match.group(1) is not None else match.group(2)
        if inner and (
            inner in submitted
            or (len(inner) >= _MIN_QUOTED_PART and any(inner in v for v in submitted))
        ):
            return ""
        return match.group(0)

    text = _QUOTED.sub(quoted, text)
    for value in sorted(submitted, key=len, reverse=True):
        if len(value) >= _MIN_UNQUOTED and value in text:
            text = text.replace(value, WITHHELD)
    return text


def _withhold_details(details: Any, submitted: set[str]) -> Any:
    if isinstance(details, str):
        return None if details in submitted else withhold(details, submitted)
    if isinstance(details, dict):
        cleaned = {
            k: v if k == "field" else _withhold_details(v, submitted) for k, v in details.items()
        }
        return {k: v for k, v in cleaned.items() if v is not None or details[k] is None}
    if isinstance(details, list):
        return [_withhold_details(v, submitted) for v in details]
    return details


def request_id_of(request: Request) -> str | None:
    value = request.scope.get("state", {}).get("request_id")
    return value if isinstance(value, str) else None


def envelope(
    status: int,
    code: str,
    message: str,
    details: Any = None,
    *,
    request_id: str | None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {
        "error": {
            "code": code,
            "message": message,
            "details": details if details is not None else {},
            "request_id": request_id,
        }
    }
    return JSONResponse(body, status_code=status, headers=headers)


def status_for(exc: JobyardError) -> int:
    for cls, status in STATUS_BY_ERROR:
        if isinstance(exc, cls):
            return status
    return 500


_MAX_FIELD_LENGTH = 200  # a field path names submitted keys too; bound what is repeated


def _field_path(loc: tuple[int | str, ...]) -> str:
    # ("body", "jobs", 3, "payload") → "jobs[3].payload"; the source ("body"/"query"/…) is kept
    # for parameters so a bad ?limit is named "query.limit".
    parts = list(loc)
    if parts and parts[0] == "body":
        parts = parts[1:]
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def _json_position(doc: Any, pos: int) -> tuple[int, int]:
    """Line and column (1-based) of character `pos`, as json.JSONDecodeError counts them."""
    text = doc if isinstance(doc, str) else ""
    return text.count("\n", 0, pos) + 1, pos - text.rfind("\n", 0, pos)


def _not_json(request: Request, err: dict[str, Any], doc: Any) -> JSONResponse:
    """400 for a body that is not JSON text. FastAPI reports it as a 422 `json_invalid` error
    located at a character offset; the json module's own words (fixed text, never the body's)
    say what is wrong, and line and column say where."""
    loc = err.get("loc", ())
    pos = loc[-1] if loc and isinstance(loc[-1], int) else 0
    line, column = _json_position(doc, pos)
    ctx = err.get("ctx") or {}
    what = str(ctx.get("error") or "malformed")
    where = f"line {line} column {column}"
    return envelope(
        400,
        "bad_request",
        f"the body is not valid JSON: {what}{' ' if what.endswith(' at') else ' at '}{where}",
        {"line": line, "column": column},
        request_id=request_id_of(request),
    )


def _is_json_media_type(value: str | None) -> bool:
    media = (value or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    for err in errors:
        if err.get("type") == "json_invalid":
            return _not_json(request, dict(err), exc.body)
    if (
        isinstance(exc.body, bytes | bytearray)
        and any(tuple(err.get("loc", ()))[:1] == ("body",) for err in errors)
        and not _is_json_media_type(request.headers.get("content-type"))
    ):
        # FastAPI parses a body as JSON only under a JSON media type; any other body (a form,
        # curl -d's default) reaches validation as raw bytes. Say what to send instead.
        return envelope(
            415,
            _HTTP_CODES[415],
            "the body must be JSON: send Content-Type: application/json",
            request_id=request_id_of(request),
        )
    submitted = submitted_values(request, exc.body)
    fields = [
        {
            "field": _field_path(tuple(err.get("loc", ())))[:_MAX_FIELD_LENGTH],
            "message": withhold(str(err.get("msg", "invalid")), submitted),
        }
        for err in errors
    ]
    first = fields[0] if fields else {"field": "body", "message": "invalid"}
    return envelope(
        422,
        "validation_error",
        f"{first['field']}: {first['message']}",
        {"fields": fields},
        request_id=request_id_of(request),
    )


def _unparsable(cause: BaseException | None) -> str | None:
    """What FastAPI's 400 "There was an error parsing the body" means, from its cause: the
    json module failing on bytes that are not UTF-8, or on nesting deeper than it recurses."""
    if isinstance(cause, UnicodeDecodeError):
        return f"the body is not JSON text: it is not valid UTF-8 (at byte {cause.start})"
    if isinstance(cause, RecursionError):
        return "the body could not be parsed as JSON: it is nested too deeply"
    return None


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    if exc.status_code == 400:
        message = _unparsable(exc.__cause__) or message
    return envelope(
        exc.status_code,
        code,
        message,
        request_id=request_id_of(request),
        headers=dict(exc.headers) if exc.headers else None,
    )


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, JobyardError)
    status = status_for(exc)
    headers: dict[str, str] = {}
    if isinstance(exc, AuthenticationFailed):
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, RateLimited):
        headers["Retry-After"] = str(exc.retry_after_s)
    if status == 500:
        return await unhandled_error(request, exc)
    # Domain messages may quote what the client sent (a cron field, a slug): never echo it.
    submitted = submitted_values(request)
    message = withhold(exc.message, submitted)
    details: Any = _withhold_details(exc.details, submitted)
    if isinstance(exc, ValidationFailed) and "field" in details:
        # Same shape as request validation errors: a list of {field, message}.
        rest = {k: v for k, v in details.items() if k != "field"}
        details = {"fields": [{"field": details["field"], "message": message}], **rest}
    return envelope(
        status,
        exc.code,
        message,
        details,
        request_id=request_id_of(request),
        headers=headers,
    )


async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
    log.warning("database unavailable", error=type(exc).__name__)
    err = DatabaseUnavailable()
    return envelope(503, err.code, err.message, request_id=request_id_of(request))


async def unhandled_error(request: Request, exc: Exception) -> JSONResponse:
    """500 with the request id only. The log gets the exception type and the stack's frames
    but not the message: driver errors quote parameter values (payload fragments) in theirs."""
    frames = [
        f"{f.filename.rsplit('/site-packages/', 1)[-1]}:{f.lineno} {f.name}"
        for f in traceback.extract_tb(exc.__traceback__)
    ]
    log.error(
        "unhandled error",
        error=f"{type(exc).__module__}.{type(exc).__name__}",
        method=request.method,
        path=request.url.path,
        stack=frames[-12:],
    )
    return envelope(
        500,
        "internal_error",
        "an unexpected error occurred; quote the request id when reporting it",
        request_id=request_id_of(request),
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(JobyardError, _domain_error)
    for cls in CONNECTION_ERRORS:
        if issubclass(cls, Exception):
            app.add_exception_handler(cls, _unavailable)
