"""Limits shared by validation and the schema's CHECK constraints (kept equal by a test)."""

from __future__ import annotations

from typing import Final

MAX_PAYLOAD_BYTES: Final = 64 * 1024
# Levels of arrays and objects in a payload or result (migration 0035): pydantic's serializer,
# which writes them back out in API answers, stops at about 254.
MAX_JSON_DEPTH: Final = 100
MAX_PRIORITY: Final = 1000
MIN_PRIORITY: Final = -1000
MAX_NAME_LENGTH: Final = 200
MAX_HANDLER_LENGTH: Final = 200
MAX_IDEMPOTENCY_KEY_LENGTH: Final = 200
MAX_LOG_MESSAGE_LENGTH: Final = 8000
# A log line's fields as jsonb text (job_logs' CHECK): larger ones are replaced by a note.
MAX_LOG_FIELDS_BYTES: Final = 16 * 1024
MAX_ERROR_LENGTH: Final = 8000
MAX_ATTEMPTS_CEILING: Final = 100
# The largest id the API takes: I-JSON's (RFC 7493) interoperable integer limit, 2^53 - 1, so a
# client or generator that reads JSON numbers as doubles never rounds an id out of range (with
# bigint's 2^63 - 1 they did). Sequences are nowhere near it.
MAX_ID: Final = 2**53 - 1
# Jobs one project may enqueue per minute through the API (core/ratelimit.py). A batch counts
# each of its jobs, so a larger one could never be accepted: the API's batch schema's maxItems is
# this same number. The library (defer_many, app.batch) is not rate limited: MAX_BATCH_SIZE.
ENQUEUE_PER_MINUTE: Final = 1000
MAX_API_BATCH_SIZE: Final = ENQUEUE_PER_MINUTE
MAX_BATCH_SIZE: Final = 10_000
# A failed run's traceback (job_executions.traceback; CHECK job_executions_traceback_length).
MAX_TRACEBACK_LENGTH: Final = 16_000
# ctx.progress(fraction, message): the message's length (CHECK jobs_progress_message_length).
MAX_PROGRESS_MESSAGE_LENGTH: Final = 500
# An organization's or a project's slug (CHECK organizations_slug_check, projects_slug_check).
# Match with re.fullmatch: Python's `$` also matches before a final newline; PostgreSQL's does not.
SLUG_PATTERN: Final = r"^[a-z0-9][a-z0-9-]{0,62}$"
SLUG_RULE: Final = (
    "lowercase letters, digits and '-', starting with a letter or digit, at most 63 characters"
)
# A queue's name (CHECK queues_name_check; the API's QueueName).
QUEUE_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$"
QUEUE_NAME_RULE: Final = (
    "letters, digits and '_', '.', ':', '-', starting with a letter or digit, "
    "at most 100 characters"
)
