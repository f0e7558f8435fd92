"""Pydantic shapes shared by the engine, the SDK and the API (validated before any SQL runs)."""

from __future__ import annotations

import json
import math
import sys
from datetime import datetime
from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from jobyard.domain import limits
from jobyard.domain.enums import BackoffKind
from jobyard.domain.errors import ValidationFailed
from jobyard.domain.text import lone_surrogate_in

QueueName = Annotated[str, Field(pattern=limits.QUEUE_NAME_PATTERN)]
HandlerName = Annotated[str, Field(min_length=1, max_length=limits.MAX_HANDLER_LENGTH)]


def _not_bool(value: Any) -> Any:
    """JSON true is not a number: lax int validation would read it as 1 (floats keep their
    lax behaviour: 5.0 is 5, 5.5 is refused)."""
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "Input should be a valid integer, not a boolean")
    return value


# Field before the validator: the other way round pydantic writes `ge`/`le`, not JSON Schema's
# `minimum`/`maximum`, into the document.
Priority = Annotated[
    int, Field(ge=limits.MIN_PRIORITY, le=limits.MAX_PRIORITY), BeforeValidator(_not_bool)
]
Attempts = Annotated[int, Field(ge=1, le=limits.MAX_ATTEMPTS_CEILING), BeforeValidator(_not_bool)]
TimeoutMs = Annotated[int, Field(ge=1, le=86_400_000), BeforeValidator(_not_bool)]
DelayMs = Annotated[int, Field(ge=0, le=366 * 86_400_000), BeforeValidator(_not_bool)]
BaseDelayMs = Annotated[int, Field(ge=0, le=86_400_000), BeforeValidator(_not_bool)]
MaxDelayMs = Annotated[int, Field(ge=0, le=604_800_000), BeforeValidator(_not_bool)]
JobRef = Annotated[int, Field(ge=1, le=limits.MAX_ID), BeforeValidator(_not_bool)]


def require_offset(value: datetime | None) -> datetime | None:
    """A timestamp must name its instant: without a UTC offset PostgreSQL would read it in the
    session's TimeZone. The one check for run_at and every timestamp filter."""
    if value is not None and value.tzinfo is None:
        raise PydanticCustomError(
            "timezone_aware", "must include a timezone offset (e.g. 2026-01-01T09:00:00Z)"
        )
    return value


AwareDateTime = Annotated[datetime, AfterValidator(require_offset)]

DELAY_ORDER = "base_delay_ms must not exceed max_delay_ms"


def check_delay_order(title: str, base_delay_ms: int | None, max_delay_ms: int | None) -> None:
    """The retry delays' rule, for a retry policy and a per-job retry override alike: a 422
    naming base_delay_ms (raised from a model validator, pydantic prefixes the model's path)."""
    if base_delay_ms is None or max_delay_ms is None or base_delay_ms <= max_delay_ms:
        return
    raise ValidationError.from_exception_data(
        title,
        [
            InitErrorDetails(
                type=PydanticCustomError("value_error", DELAY_ORDER),
                loc=("base_delay_ms",),
                input=base_delay_ms,
            )
        ],
    )


# The payload as jsonb's text form writes it (", " and ": "), which is what the database CHECK
# measures. Built once: json.dumps with any non-default option builds a new encoder on every
# call, ~2 us of a batch item's ~4 us of validation.
# allow_nan=False: JSON has no NaN or Infinity. PostgreSQL refuses them, and a serializer may
# quietly write null instead (pydantic does), so they are refused here.
_PAYLOAD_TEXT: Final = json.JSONEncoder(
    separators=(", ", ": "), ensure_ascii=False, allow_nan=False
)


class UnstorableText(ValueError):
    """JSON that jsonb cannot hold (a string with a lone surrogate), or one nested deeper than
    limits.MAX_JSON_DEPTH. NUL, which jsonb cannot hold either, is `text.reject_nul`'s: it
    names the place."""


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` levels in `value` (iteratively: a
    value too deep for the JSON writer's recursion is still measured)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list | tuple))
    return False


def _too_deep(value: Any) -> UnstorableText | None:
    if isinstance(value, dict | list | tuple) and _deeper_than(value, limits.MAX_JSON_DEPTH):
        return UnstorableText(f"it is nested more than {limits.MAX_JSON_DEPTH} levels deep")
    return None


def payload_size(value: Any) -> int:
    """Bytes a JSON value (a payload, a result) takes as jsonb's text — the measure the database
    CHECK uses. Raises UnstorableText (a string jsonb cannot hold), ValueError (NaN, Infinity)
    or TypeError (not JSON at all)."""
    try:
        text = _PAYLOAD_TEXT.encode(value)
    except RecursionError:
        raise _too_deep(value) or UnstorableText("it is nested too deeply") from None
    # Fewer brackets than the limit (strings' brackets counted too) cannot nest past it.
    if text.count("[") + text.count("{") > limits.MAX_JSON_DEPTH:
        deep = _too_deep(value)
        if deep is not None:
            raise deep
    try:
        return len(text.encode())
    except UnicodeEncodeError:
        if lone_surrogate_in(value):
            raise UnstorableText(
                "a string holds a lone surrogate (a \\ud800-\\udfff escape without its pair),"
                " which UTF-8 cannot encode"
            ) from None
        raise


def check_payload(value: Any) -> Any:
    """Pydantic field validator form (pydantic turns ValueError into a per-field 422)."""
    try:
        size = payload_size(value)
    except UnstorableText as exc:
        raise ValueError(f"payload cannot be stored: {exc}") from None
    except TypeError as exc:
        # Only from Python callers (the SDK): a datetime, UUID or Decimal in the payload. Pydantic
        # passes a TypeError through as it is; a ValueError becomes the field's error.
        raise ValueError(
            f"payload must be JSON: {exc} (convert it first, e.g. .isoformat() or str())"
        ) from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            # Python writes no int past sys.get_int_max_str_digits() (4300) as text.
            raise ValueError(
                "payload must be JSON: an integer has more digits than Python will write as text"
                f" ({sys.get_int_max_str_digits()}); send so long a number as a string"
            ) from None
        if _has_infinity(value):
            # Valid JSON text such as 1e400 parses to infinity: say so, not only "NaN".
            raise ValueError(
                "payload must be JSON: a number is out of range for a double (at most about"
                " ±1.8e308; NaN and Infinity are not JSON numbers either)"
            ) from None
        raise ValueError("payload must be JSON: NaN and Infinity are not JSON numbers") from None
    if size > limits.MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload is larger than {limits.MAX_PAYLOAD_BYTES // 1024} KB")
    return value


def _has_infinity(value: Any) -> bool:
    if isinstance(value, float):
        return math.isinf(value)
    if isinstance(value, dict):
        return any(_has_infinity(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_infinity(v) for v in value)
    return False


def ensure_payload_fits(value: Any) -> None:
    """The same check for callers outside pydantic: a domain error naming the field."""
    try:
        check_payload(value)
    except ValueError as exc:
        raise ValidationFailed(str(exc), field="payload") from None


class RetryOverride(BaseModel):
    """Per-job override of the queue's retry policy; unset fields fall back to the queue's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backoff: BackoffKind | None = None
    base_delay_ms: BaseDelayMs | None = None
    max_delay_ms: MaxDelayMs | None = None
    jitter: bool | None = None

    @model_validator(mode="after")
    def _ordered(self) -> RetryOverride:
        check_delay_order(type(self).__name__, self.base_delay_ms, self.max_delay_ms)
        return self


class JobCreate(BaseModel):
    """One job to enqueue. Give run_at or delay_ms (not both) to run it later."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    queue: QueueName = "default"
    handler: HandlerName
    payload: Any = Field(default_factory=dict)
    priority: Priority = 0
    run_at: AwareDateTime | None = None
    delay_ms: DelayMs | None = None
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=limits.MAX_IDEMPOTENCY_KEY_LENGTH
    )
    max_attempts: Attempts | None = None
    timeout_ms: TimeoutMs | None = None
    retry: RetryOverride | None = None
    depends_on: list[JobRef] = Field(default_factory=list, max_length=100)
    # Run even if a parent ends dead_letter or cancelled (default: such a parent cancels it).
    run_anyway: bool = False

    _check_payload = field_validator("payload")(check_payload)

    @model_validator(mode="after")
    def _one_delay(self) -> JobCreate:
        if self.run_at is not None and self.delay_ms is not None:
            raise ValueError("give run_at or delay_ms, not both")
        return self


class BatchItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    handler: HandlerName
    payload: Any = Field(default_factory=dict)
    priority: Priority = 0
    run_at: AwareDateTime | None = None
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=limits.MAX_IDEMPOTENCY_KEY_LENGTH
    )
    max_attempts: Attempts | None = None
    timeout_ms: TimeoutMs | None = None

    _check_payload = field_validator("payload")(check_payload)


class CallbackSpec(BaseModel):
    """A job to enqueue once, when every job of a batch has reached a final state. The
    callback's payload (an object) gets a `batch` key: id, size, done, failed, cancelled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    handler: HandlerName
    queue: QueueName = "default"
    payload: Any = Field(default_factory=dict)
    priority: Priority = 0
    max_attempts: Attempts | None = None
    timeout_ms: TimeoutMs | None = None

    _check_payload = field_validator("payload")(check_payload)


class BatchCreate(BaseModel):
    """Many jobs for one queue, inserted in one statement, with optional callbacks:
    on_success (every job done), on_failure (some dead-lettered or cancelled), on_complete
    (either way)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    queue: QueueName = "default"
    jobs: list[BatchItem] = Field(min_length=1, max_length=limits.MAX_BATCH_SIZE)
    on_success: CallbackSpec | None = None
    on_failure: CallbackSpec | None = None
    on_complete: CallbackSpec | None = None

    def callbacks(self) -> dict[str, Any]:
        """The callbacks as stored on the batch row (`job_batches.callbacks`)."""
        named = {
            "on_success": self.on_success,
            "on_failure": self.on_failure,
            "on_complete": self.on_complete,
        }
        return {k: v.model_dump(mode="json") for k, v in named.items() if v is not None}


StepKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")]


class BatchRequest(BatchCreate):
    """A batch as the API takes it: no more jobs than the project may enqueue in a minute (the
    rate limit counts each job), so a larger one is refused by the schema, not by a 429."""

    jobs: list[BatchItem] = Field(min_length=1, max_length=limits.MAX_API_BATCH_SIZE)


class WorkflowStep(JobCreate):
    """One step of a workflow: a job, named by `key`, that runs after the steps (keys) or
    existing jobs (ids) listed in `after`."""

    key: StepKey
    after: list[
        Annotated[
            StepKey | Annotated[int, Field(ge=1, le=limits.MAX_ID)], BeforeValidator(_not_bool)
        ]
    ] = Field(default_factory=list, max_length=100)


class WorkflowCreate(BaseModel):
    """A DAG of jobs enqueued in one transaction; a cycle is refused (422)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: list[WorkflowStep] = Field(min_length=1, max_length=1000)
