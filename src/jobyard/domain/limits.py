"""Limits shared by validation and the schema's CHECK constraints (kept equal by a test)."""

from __future__ import annotations

from typing import Final

MAX_PAYLOAD_BYTES: Final = 64 * 1024
MAX_PRIORITY: Final = 1000
MIN_PRIORITY: Final = -1000
MAX_NAME_LENGTH: Final = 200
MAX_HANDLER_LENGTH: Final = 200
MAX_IDEMPOTENCY_KEY_LENGTH: Final = 200
MAX_LOG_MESSAGE_LENGTH: Final = 8000
MAX_ERROR_LENGTH: Final = 8000
MAX_ATTEMPTS_CEILING: Final = 100
MAX_BATCH_SIZE: Final = 10_000
# A failed run's traceback (job_executions.traceback; CHECK job_executions_traceback_length).
MAX_TRACEBACK_LENGTH: Final = 16_000
# ctx.progress(fraction, message): the message's length (CHECK jobs_progress_message_length).
MAX_PROGRESS_MESSAGE_LENGTH: Final = 500
