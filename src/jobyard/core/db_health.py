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
# What a holder can hold (the view xmin_horizon_holders, migrations 0019 and 0021).
HOLDER_KINDS = ("xid", "snapshot", "standby", "prepared", "slot")
# How the view names a replication slot (application_name), before the slot's own name.
SLOT_PREFIX = "replication slot "
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
    def xmin_warnings(self) -> list[str]:
        """The oldest holder past the threshold, and every replication slot left behind: an
        inactive slot keeps its xmin until it is dropped, however young the hold looks (before
        PostgreSQL 17 nobody can say since when it is inactive, so it warns at once)."""
        found = []
        first = self.xmin_holder
        if first is not None and self.xmin_age_s > self.xmin_warn_s:
            found.append(
                f"{describe_holder(first)} has held the xmin horizon for "
                f"{self.xmin_age_s:.0f} s: vacuum cannot reclaim dead rows until "
                + ("its standby returns" if first["held_by"] == "slot" else "it ends")
                + _slot_fix(first)
            )
        for holder in self.xmin_holders:
            if holder is first and found:
                continue
            if self._left_behind(holder):
                found.append(
                    f"{describe_holder(holder)} holds the xmin horizon "
                    f"{int(holder['xmin_age_xids']):,} transactions back with no standby "
                    f"connected" + _slot_fix(holder)
                )
        return found

    def _left_behind(self, holder: dict[str, Any]) -> bool:
        if holder["held_by"] != "slot" or holder["state"] != "inactive":
            return False
        return holder["since"] is None or float(holder["age_s"]) > self.xmin_warn_s

    @property
    def xmin_warning(self) -> bool:
        return bool(self.xmin_warnings)

    def relation_warning(self, relation: dict[str, Any]) -> bool:
        ready = str(relation["relation"]).startswith(READY_PREFIX)
        least = READY_MIN_DEAD_TO_WARN if ready else MIN_DEAD_TO_WARN
        return (
            int(relation["dead"]) >= least and float(relation["dead_ratio"]) > self.dead_ratio_warn
        )

    @property
    def warnings(self) -> list[str]:
        found = self.xmin_warnings
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
    application, state), which prepared transaction or which replication slot, and what it
    holds (migrations 0019, 0021)."""
    if holder["held_by"] == "prepared":
        return f"a {holder['application_name']} in database {holder['database']}"
    if holder["held_by"] == "slot":
        walsender = "" if holder["pid"] is None else f", walsender pid {holder['pid']}"
        return f"{holder['application_name']} ({holder['state']}{walsender})"
    what = {"xid": "a transaction", "snapshot": "a snapshot", "standby": "a standby's snapshot"}
    return (
        f"{what.get(str(holder['held_by']), 'a session')} (pid {holder['pid']}, database "
        f"{holder['database'] or '-'}, {holder['application_name'] or 'no application'}, "
        f"{holder['state'] or 'state hidden'})"
    )


def _slot_fix(holder: dict[str, Any]) -> str:
    """What an operator does about a slot: its standby's feedback is the hold."""
    if holder["held_by"] != "slot":
        return ""
    name = str(holder["application_name"]).removeprefix(SLOT_PREFIX)
    return (
        f"; if its standby is gone for good, drop the slot: "
        f"SELECT pg_drop_replication_slot('{name}')"
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
