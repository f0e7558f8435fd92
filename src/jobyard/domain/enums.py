"""StrEnums that mirror the PostgreSQL enum types one to one (checked by a schema test)."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    WAITING = "waiting"
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    CLAIMED = "claimed"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    DEAD_LETTER = "dead_letter"
    CANCELLED = "cancelled"


class Role(StrEnum):
    OWNER = "owner"
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"

    @property
    def rank(self) -> int:
        """Higher outranks lower; the guard compares ranks, never names."""
        return _ROLE_RANK[self]

    def at_least(self, other: Role) -> bool:
        return self.rank >= other.rank


_ROLE_RANK = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2, Role.OWNER: 3}


class BackoffKind(StrEnum):
    FIXED = "fixed"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


class WorkerStatus(StrEnum):
    ACTIVE = "active"
    DRAINING = "draining"
    STOPPED = "stopped"
    DEAD = "dead"


class ExecutionOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    LEASE_LOST = "lease_lost"
    RELEASED = "released"
    CANCELLED = "cancelled"


class OverlapPolicy(StrEnum):
    ALLOW = "allow"
    SKIP = "skip"


class DeadLetterReason(StrEnum):
    EXHAUSTED = "exhausted"
    POISON_PILL = "poison_pill"
    TIMED_OUT = "timed_out"
