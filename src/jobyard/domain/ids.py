"""Typed ids so a queue id can never be passed where a job id is expected."""

from __future__ import annotations

from typing import NewType

OrgId = NewType("OrgId", int)
UserId = NewType("UserId", int)
ProjectId = NewType("ProjectId", int)
QueueId = NewType("QueueId", int)
JobId = NewType("JobId", int)
WorkerId = NewType("WorkerId", int)
ScheduleId = NewType("ScheduleId", int)
ExecutionSeq = NewType("ExecutionSeq", int)
