"""Database health an operator must see (issue 15 point 6): the age of the oldest transaction
holding the xmin horizon (while it lives, vacuum cannot reclaim rows that died after it began,
so hot tables bloat) and the dead-tuple ratio of the busiest tables, each with a warning past a
configurable threshold (Settings.health_xmin_warn_s / health_dead_ratio_warn)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobyard.db import run
from jobyard.db.pool import Conn

RELATIONS_SHOWN = 8
# What a holder can hold (the view xmin_horizon_holders, migration 0019).
HOLDER_KINDS = ("xid", "snapshot", "standby", "prepared")
# Hot relations (LIKE patterns) are always listed, whatever their dead rows: `jobs`, and the
# ready-queue tables (`job_ready`, its partitions, any `job_ready_*`) however many there are.
HOT_RELATIONS = ("jobs", r"job\_ready%")
# A ratio over a handful of rows is noise (a 2-row table with one update is "50 % dead").
MIN_DEAD_TO_WARN = 1000
# The ready partitions are mostly dead rows by design: claims delete from them and rotation
# TRUNCATEs each one every few seconds (docs/DATABASE.md), so a high ratio is normal there. Only
# dead rows piling up past what a few rotations leave behind mean rotation is blocked (a
# transaction that read the partition holds a lock on it): about a minute at 800 jobs/s.
READY_PREFIX = "job_ready"
READY_MIN_DEAD_TO_WARN = 50_000


@dataclass(frozen=True)
class DbHealth:
    # Every holder of the horizon, the one furthest back first.
    xmin_holders: list[dict[str, Any]]
    relations: list[dict[str, Any]]
    xmin_warn_s: float
    dead_ratio_warn: float

    @property
    def xmin_holder(self) -> dict[str, Any] | None:
        """The holder that keeps the horizon furthest back: the one vacuum waits for."""
        return self.xmin_holders[0] if self.xmin_holders else None

    @property
    def holders_by_kind(self) -> dict[str, int]:
        """How many holders hold each kind of thing; every kind is listed, 0 included, so a
        gauge per kind keeps its series when the hold ends."""
        counts = dict.fromkeys(HOLDER_KINDS, 0)
        for holder in self.xmin_holders:
            counts[str(holder["held_by"])] = counts.get(str(holder["held_by"]), 0) + 1
        return counts

    @property
    def xmin_age_s(self) -> float:
        return float(self.xmin_holder["age_s"]) if self.xmin_holder else 0.0

    @property
    def xmin_holder_text(self) -> str:
        return describe_holder(self.xmin_holder) if self.xmin_holder else ""

    @property
    def xmin_warning(self) -> bool:
        return self.xmin_age_s > self.xmin_warn_s

    def relation_warning(self, relation: dict[str, Any]) -> bool:
        ready = str(relation["relation"]).startswith(READY_PREFIX)
        least = READY_MIN_DEAD_TO_WARN if ready else MIN_DEAD_TO_WARN
        return (
            int(relation["dead"]) >= least and float(relation["dead_ratio"]) > self.dead_ratio_warn
        )

    @property
    def warnings(self) -> list[str]:
        found = []
        if self.xmin_warning and self.xmin_holder is not None:
            found.append(
                f"{describe_holder(self.xmin_holder)} has held the xmin horizon for "
                f"{self.xmin_age_s:.0f} s: vacuum cannot reclaim dead rows until it ends"
            )
        for r in self.relations:
            if self.relation_warning(r):
                blocked = (
                    ": its rotation is blocked (a transaction that read it holds a lock on it)"
                    if str(r["relation"]).startswith(READY_PREFIX)
                    else ""
                )
                found.append(
                    f"{r['relation']}: {float(r['dead_ratio']):.0%} of its rows are dead "
                    f"({r['dead']} dead tuples){blocked}"
                )
        return found


def describe_holder(holder: dict[str, Any]) -> str:
    """Who holds the horizon, in words an operator can act on: which session (pid, database,
    application, state) or which prepared transaction, and what it holds (migration 0019)."""
    if holder["held_by"] == "prepared":
        return f"a {holder['application_name']} in database {holder['database']}"
    what = {"xid": "a transaction", "snapshot": "a snapshot", "standby": "a standby's snapshot"}
    return (
        f"{what.get(str(holder['held_by']), 'a session')} (pid {holder['pid']}, database "
        f"{holder['database'] or '-'}, {holder['application_name'] or 'no application'}, "
        f"{holder['state'] or 'state hidden'})"
    )


async def read(conn: Conn, *, xmin_warn_s: float, dead_ratio_warn: float) -> DbHealth:
    return DbHealth(
        xmin_holders=await run.all_rows(conn, "health_xmin_holders"),
        relations=await run.all_rows(
            conn, "health_dead_tuples", {"hot": list(HOT_RELATIONS), "limit": RELATIONS_SHOWN}
        ),
        xmin_warn_s=xmin_warn_s,
        dead_ratio_warn=dead_ratio_warn,
    )
