"""Job fields bound once per run reach every log line emitted in that run's context, and no
other line."""

from __future__ import annotations

import contextvars
import json
import logging

import pytest
import structlog

from jobyard.logs import bind_job, configure_logging


def test_job_fields_reach_lines_in_the_run_context_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    configure_logging("info", "json")
    try:
        log = structlog.get_logger("t")
        run = contextvars.copy_context()
        run.run(bind_job, {"job_id": 7, "queue": "q", "attempt": 2})
        run.run(log.info, "job failed", attempt=3)  # the line's own value wins
        log.info("elsewhere")
        first, second = (json.loads(line) for line in capsys.readouterr().err.splitlines())
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    assert (first["job_id"], first["queue"], first["attempt"]) == (7, "q", 3)
    assert "job_id" not in second
