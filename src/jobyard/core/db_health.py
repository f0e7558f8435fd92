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
    xmin_holder: dict[str, Any] | None
    relations: list[dict[str, Any]]
    xmin_warn_s: float
    dead_ratio_warn: float

    @property
    def xmin_age_s(self) -> float:
        return float(self.xmin_holder["age_s"]) if self.xmin_holder else 0.0

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
            h = self.xmin_holder
            found.append(
                f"a transaction (pid {h['pid']}, {h['application_name'] or 'no application'}, "
                f"{h['state']}) has held the xmin horizon for {self.xmin_age_s:.0f} s: "
                "vacuum cannot reclaim dead rows until it ends"
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


async def read(conn: Conn, *, xmin_warn_s: float, dead_ratio_warn: float) -> DbHealth:
    return DbHealth(
        xmin_holder=await run.one(conn, "health_xmin_holder"),
        relations=await run.all_rows(
            conn, "health_dead_tuples", {"hot": list(HOT_RELATIONS), "limit": RELATIONS_SHOWN}
        ),
        xmin_warn_s=xmin_warn_s,
        dead_ratio_warn=dead_ratio_warn,
    )
