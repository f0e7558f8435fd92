"""Claim: hand each queued job to exactly one worker (engine rule 1).

The sole user of the job_claim_* queries. One queue per statement, so queue_id is an equality
prefix of the ready set's claim index (job_ready, migration 0012) and LIMIT stops early; FOR
UPDATE SKIP LOCKED lets concurrent claimers pass over each other's rows instead of waiting or
double-claiming. `rotate_ready` empties the ready partition that becomes current next, so dead
ready rows never pile up, whatever snapshot another session holds (docs/DATABASE.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId, QueueId, WorkerId
from jobyard.domain.models import ClaimedJob, QueueRef


class ClaimPosition(NamedTuple):
    """A row's place in claim order as one ascending key: (-priority, run_at, job_id), the order
    of job_ready_claim_idx (migrations 0014, 0027): `priority DESC, run_at, id` ascending."""

    npriority: int
    run_at: datetime
    job_id: int

    def lowered(self, slack_s: float) -> ClaimPosition:
        """The position moved back by `slack_s` of run_at (to the first job of that instant), so
        a claim from it also takes a job whose enqueue committed a little after a later one's."""
        return ClaimPosition(self.npriority, self.run_at - timedelta(seconds=slack_s), 0)


@dataclass(frozen=True)
class Claim:
    """What one claim statement gave: the jobs, and whether a suspect waits for a worker that
    holds nothing (only reported to a claim made without `solo`). `position` is the claim key of
    the last job taken in claim order (not a suspect), None when none was. `room_bound` says
    the queue's max_concurrency left room for fewer jobs than were asked for: a held job of the
    queue that finishes makes room, so its worker should claim again then, not at its next poll.
    """

    jobs: list[ClaimedJob]
    suspect_waiting: bool = False
    position: ClaimPosition | None = None
    room_bound: bool = False


async def claim_batch(
    conn: Conn,
    queue: QueueRef,
    worker_id: WorkerId,
    n: int,
    *,
    lease_s: float,
    start: bool = False,
    now: datetime | None = None,
) -> list[ClaimedJob]:
    """Claim up to n jobs from one queue (fewer if its max_concurrency leaves less room).

    With start=True the jobs are also started (claimed → running) in the same statement: what
    a worker does, since it claims only as many jobs as it has free slots. Without it they stay
    `claimed` until `transitions.start_many`. Suspects are never taken here (see `claim`).
    """
    return (await claim(conn, queue, worker_id, n, lease_s=lease_s, start=start, now=now)).jobs


async def claim(
    conn: Conn,
    queue: QueueRef,
    worker_id: WorkerId,
    n: int,
    *,
    lease_s: float,
    start: bool = False,
    solo: bool = False,
    after: ClaimPosition | None = None,
    now: datetime | None = None,
) -> Claim:
    """claim_batch for a worker. `solo` says the worker holds nothing (and will claim nothing
    else while a suspect runs): then the claim takes one suspect, alone, if the queue has one,
    and otherwise up to n jobs as usual.

    With `after`, only jobs whose claim key is greater than that position are taken
    (`job_claim_batch_after`): the claim then starts its index scan there instead of walking the
    dead entries before it, which a blocked rotation cannot free. Jobs at or below the position
    are not seen; the caller must claim without `after` now and then to take them (the worker's
    degraded mode, docs/DATABASE.md "Claim position").

    `queue` may be stale (workers cache settings): the statement re-reads pause and limit, and
    a limit the cache did not know about makes it claim nothing until re-read under the lock.
    """
    if n <= 0:
        return Claim([])
    params = {
        "queue_id": queue.id,
        "worker_id": worker_id,
        "n": n,
        "lease_s": lease_s,
        "start": start,
        "solo": solo,
        "limited": queue.max_concurrency is not None,
        "now": sql_now(now),
    }
    name = "job_claim_batch"
    if after is not None:
        name = "job_claim_batch_after"
        params["after_npriority"] = after.npriority
        params["after_run_at"] = after.run_at
        params["after_job_id"] = after.job_id
    if queue.max_concurrency is None:
        # No limit: no queue lock, claims on this queue stay fully parallel.
        return _parse(await run.all_rows(conn, name, params))
    async with conn.transaction():
        # Lock first, count in the next statement: in READ COMMITTED a statement's snapshot is
        # taken when it starts, so a count in the locking statement could miss claims committed
        # while it waited for the lock.
        await run.one(conn, "job_claim_lock_queue", params)
        room_row = await run.one(conn, "job_claim_room", params)
        # No row: the queue is paused, which no finished job changes.
        room = int(room_row["room"]) if room_row else 0
        room_bound = room_row is not None and room < n
        if room <= 0:
            return Claim([], room_bound=room_bound)
        rows = await run.all_rows(conn, name, {**params, "n": room})
    return _parse(rows, room_bound=room_bound)


def _parse(rows: list[dict[str, Any]], *, room_bound: bool = False) -> Claim:
    # The statement's last row, all NULLs, is the "a suspect waits" flag, not a job.
    waiting = bool(rows) and bool(rows[-1]["suspect_waiting"])
    if waiting:
        rows = rows[:-1]
    position = max(
        (ClaimPosition(-r["priority"], r["run_at"], r["id"]) for r in rows if not r["suspect"]),
        default=None,
    )
    return Claim(
        [ClaimedJob.from_row(r) for r in rows],
        suspect_waiting=waiting,
        position=position,
        room_bound=room_bound,
    )


async def queues_by_names(conn: Conn, project_id: ProjectId, names: list[str]) -> list[QueueRef]:
    """The named queues in claim order: highest queue priority first."""
    rows = await run.all_rows(
        conn, "queue_list_by_names", {"project_id": project_id, "names": names}
    )
    return [
        QueueRef(
            id=QueueId(r["id"]),
            name=r["name"],
            priority=r["priority"],
            is_paused=r["is_paused"],
            max_concurrency=r["max_concurrency"],
        )
        for r in rows
    ]


# How long a rotation may wait for the exclusive lock on the partition it empties. Claims queue
# behind a waiting ACCESS EXCLUSIVE request, so this bounds the stall it can cause them.
ROTATE_WAIT_MS = 20
# A session whose transaction has held the partition longer than this (a REPEATABLE READ reader)
# is not waited for at all: the rotation says 'locked' without queueing (migration 0017).
ROTATE_HELD_MS = 1000
# How often a process tries to rotate: twice per stint of the ring (two seconds at least), so each
# partition is emptied once before it becomes current again.
ROTATE_EVERY_S = 1.0
# A ready partition is analyzed once this many rows (and a tenth of it) changed since its last
# analyze: the claim's plan needs its statistics to know a backlog is there (migration 0018).
# The rotation's own 'crowded' threshold: past it, the partition holds a backlog.
REFRESH_MIN_CHANGES = 2000
# ... but not again within this many seconds of its last analyze (a drain's deletes would
# otherwise trigger one every tenth of the backlog).
REFRESH_MIN_INTERVAL_S = 10.0


async def rotate_ready(
    conn: Conn, *, wait_ms: int = ROTATE_WAIT_MS, held_ms: int = ROTATE_HELD_MS
) -> str:
    """Empty the job_ready partition due next (migration 0012), and make it current once it is
    empty and the current one has been for two seconds (the ring, migration 0025).

    Returns 'clean' (nothing to free), 'crowded' (a backlog: more than 2,000 live rows would
    be copied under the lock, so the partition waits until claims drain it, migration 0015, and
    gets no new rows meanwhile),
    'busy' (another session rotates), 'locked' (a session holds the partition: a transaction
    older than held_ms, or one that kept it past wait_ms; tried again on the next call) or
    'rotated'. Cheap when there is nothing to do, so every worker and the
    scheduler call it about once a second.

    Then, each in its own short transaction (an ANALYZE must not lengthen the rotation's
    exclusive lock), the held set is rotated too (`keep_held`) and the partitions
    that received a backlog are analyzed (`refresh_ready_stats`). `conn` must be in autocommit
    mode.
    """
    row = await run.one(conn, "job_claim_rotate_ready", {"wait_ms": wait_ms, "held_ms": held_ms})
    await keep_held(conn, wait_ms=wait_ms, held_ms=held_ms)
    await refresh_ready_stats(conn)
    return str(row["outcome"]) if row else "clean"


async def keep_held(
    conn: Conn, *, wait_ms: int = ROTATE_WAIT_MS, held_ms: int = ROTATE_HELD_MS
) -> str:
    """Rotate job_held, the held jobs of every queue (migrations 0022, 0029), as
    `rotate_ready` rotates job_ready; returns the rotation's outcome."""
    row = await run.one(conn, "job_claim_rotate_held", {"wait_ms": wait_ms, "held_ms": held_ms})
    return str(row["outcome"]) if row else "clean"


async def refresh_ready_stats(
    conn: Conn,
    *,
    min_changes: int = REFRESH_MIN_CHANGES,
    min_interval_s: float = REFRESH_MIN_INTERVAL_S,
) -> int:
    """ANALYZE the job_ready partitions whose rows changed by `min_changes` (and a tenth) since
    their last analyze, if that was `min_interval_s` ago or more; returns how many (migration
    0018). Without it a burst of enqueues is claimed on statistics that call the queue's rows
    rare: the planner sorts them all, and the claim's lock filter, below the sort, locks every
    queued job of the queue on every claim."""
    params = {"min_changes": min_changes, "min_interval_s": min_interval_s}
    row = await run.one(conn, "job_claim_refresh_ready_stats", params)
    return int(row["analyzed"]) if row else 0


# A ready partition holding a backlog (the rotation's 'crowded': more live rows than it copies)
# is vacuumed once this many of its rows are dead: until then each full claim steps over their
# index entries at the head of the claim index (a 1,000,000-job drain: 4.4 ms a claim before a
# VACUUM, 2.5 ms after; docs/BENCHMARKS.md) ...
VACUUM_MIN_DEAD = 20_000
# ... and not again within this many seconds (a 15,000 jobs/s drain makes 45,000 dead rows in
# that time; a VACUUM of one such partition takes tens of milliseconds).
VACUUM_MIN_INTERVAL_S = 3.0


async def vacuum_ready(
    conn: Conn,
    *,
    min_dead: int = VACUUM_MIN_DEAD,
    min_live: int = REFRESH_MIN_CHANGES,
    min_interval_s: float = VACUUM_MIN_INTERVAL_S,
) -> list[str]:
    """VACUUM the job_ready partitions that hold a backlog and `min_dead` dead rows (at most one
    VACUUM each per `min_interval_s`); returns their names. The rotation empties a partition by
    TRUNCATE only when its live rows are few (migration 0015); a partition a drain works through
    keeps the dead entries of every job claimed from it, and a full claim walks them all, in
    every such partition, before its first live row. Autovacuum comes once a minute and a
    million-job drain is over in about seventy seconds.

    `conn` must be in autocommit mode. Useless while a transaction holds the xmin horizon
    (nothing claimed since it began may be removed): callers skip it then. Partitions the
    session's role does not own are not picked (VACUUM would only warn): autovacuum keeps them."""
    params = {"min_dead": min_dead, "min_live": min_live, "min_interval_s": min_interval_s}
    rows = await run.all_rows(conn, "job_claim_ready_to_vacuum", params)
    for row in rows:
        await run.vacuum(conn, row["schema_name"], row["table_name"])
    return [str(row["table_name"]) for row in rows]


async def horizon_held(conn: Conn, *, held_s: float) -> bool:
    """Whether a transaction older than `held_s` holds this database's xmin horizon back (an
    idle `BEGIN` that took an xid, a long report): the dead ready rows of every job claimed
    since stay in the claim index until their partition is rotated, and each full claim walks
    them (docs/DATABASE.md, "Claim position")."""
    row = await run.one(conn, "job_claim_horizon_held", {"held_s": held_s})
    return bool(row and row["held"])


# Degraded mode (docs/DATABASE.md "Claim position"): when no rotation has succeeded for this
# long, some session holds the ready set (a long REPEATABLE READ reader) and its dead rows pile
# up; a worker then claims past its claim position. Each partition needs a rotation every six
# seconds, and a working rotation answers 'rotated' or 'clean' at least every two.
POSITION_AFTER_BLOCKED_S = 5.0
# Degraded mode too while a transaction older than this holds the xmin horizon: the rotation
# still frees each partition every six seconds, but until then a claim walks the dead entries of
# up to two periods of claims (about 400 index entries per job claimed at 5,000 jobs/s, against
# 3 without the hold). One slot period: by then the walk has reached half its bound.
POSITION_AFTER_HELD_S = 2.0
# In degraded mode, a worker's claim of a queue ignores its position once this often, so jobs
# that entered the ready set behind it (a higher priority, an earlier run_at, a row that was
# locked) wait at most this long. Such a claim walks the whole dead prefix.
FULL_CLAIM_EVERY_S = 5.0
# ... and this often when only the horizon is held: the rotation still frees each partition
# every six seconds, so a full claim walks at most two slot periods of dead rows and can afford
# to come often; a straggler (a higher priority enqueued behind the position) waits a second.
FULL_CLAIM_EVERY_HELD_S = 1.0
# ... but never more often than this many times its own last duration: a full claim walks every
# dead entry before the first live one, and behind a backlog (a 'crowded' partition is not
# truncated) that walk grows with the hold. Full claims then take at most about a twentieth of
# the worker's time, and the positioned claims, which carry the throughput, keep the rest.
FULL_CLAIM_COST_FACTOR = 20.0
# A positioned claim starts this much run_at before the position: a job whose enqueue committed
# shortly after a later job was claimed (concurrent enqueues commit out of run_at order) is still
# taken at once, for the walk of the dead rows of that quarter second (about 200 entries a claim
# at 800 jobs/s; 1 s cost 800, measured in the readers cell, docs/DATABASE.md).
POSITION_SLACK_S = 0.25


class ClaimMode:
    """One worker's choice between the normal claim and the positioned one (degraded mode).

    `rotated(outcome, now, horizon_held=)` is told every rotation result and whether a long
    transaction holds the xmin horizon; `after(queue_id, now)` says from where to
    claim a queue (None: a normal, full claim); `claimed(queue_id, position)` records the
    position of the last job taken. Positions are kept in normal mode too, so the first claim of
    degraded mode already skips the dead prefix.
    """

    def __init__(
        self,
        *,
        blocked_after_s: float = POSITION_AFTER_BLOCKED_S,
        full_every_s: float = FULL_CLAIM_EVERY_S,
        full_every_held_s: float = FULL_CLAIM_EVERY_HELD_S,
        full_cost_factor: float = FULL_CLAIM_COST_FACTOR,
        slack_s: float = POSITION_SLACK_S,
        now: float = 0.0,
    ) -> None:
        self.blocked_after_s = blocked_after_s
        self.full_every_s = full_every_s
        self.full_every_held_s = full_every_held_s
        self.full_cost_factor = full_cost_factor
        self.slack_s = slack_s
        self.degraded = False
        self._blocked = False
        # Why the current (or last) degraded spell began, for the worker's log line.
        self.reason = ""
        # Claims chosen in the current (or last) degraded spell, for the log line that ends it.
        self.positioned_claims = 0
        self.full_claims = 0
        # The longest full claim of the current (or last) spell, in seconds.
        self.slowest_full_claim_s = 0.0
        self._rotated_ok_at = now
        self._positions: dict[QueueId, ClaimPosition] = {}
        self._full_at: dict[QueueId, float] = {}
        # How long each queue's last full claim of this spell took, and which queues have a full
        # claim under way (after() said None, claimed() has not reported yet).
        self._full_took: dict[QueueId, float] = {}
        self._full_pending: set[QueueId] = set()

    def rotated(self, outcome: str, now: float, *, horizon_held: bool = False) -> str | None:
        """Record a rotation result, and whether a long transaction holds the xmin horizon
        (`horizon_held`); returns 'entered' or 'left' when the mode changes, and 'changed' when
        a degraded spell's reason (and with it `full_period_s`) changes. Degraded while the
        rotation has failed for blocked_after_s, or while the horizon is held."""
        if outcome in ("rotated", "clean"):
            self._rotated_ok_at = now
        blocked = self._blocked = now - self._rotated_ok_at > self.blocked_after_s
        reason = (
            "job_ready not rotating" if blocked else "xmin horizon held" if horizon_held else ""
        )
        if self.degraded == bool(reason):
            if not self.degraded or reason == self.reason:
                return None
            self.reason = reason
            return "changed"
        self.degraded = not self.degraded
        if not self.degraded:
            return "left"
        self.reason = reason
        self.positioned_claims = self.full_claims = 0
        self.slowest_full_claim_s = 0.0
        self._full_took.clear()
        self._full_pending.clear()
        # The first claim of each queue in degraded mode is positioned, the next full one comes
        # a full period later.
        self._full_at = dict.fromkeys(self._positions, now)
        return "entered"

    @property
    def full_period_s(self) -> float:
        """How often each queue gets a full claim in the current degraded spell."""
        return self.full_every_s if self._blocked else self.full_every_held_s

    def full_period_of(self, queue_id: QueueId) -> float:
        """The wait between two full claims of a queue: the spell's period, stretched to
        full_cost_factor times the last full claim's duration when that walk is long."""
        took = self._full_took.get(queue_id, 0.0)
        return max(self.full_period_s, self.full_cost_factor * took)

    def after(self, queue_id: QueueId, now: float) -> ClaimPosition | None:
        if not self.degraded:
            return None
        position = self._positions.get(queue_id)
        last_full = self._full_at.get(queue_id, -1e18)
        if position is None or now - last_full >= self.full_period_of(queue_id):
            self._full_at[queue_id] = now
            self._full_pending.add(queue_id)
            self.full_claims += 1
            return None
        self.positioned_claims += 1
        return position.lowered(self.slack_s)

    def claimed(
        self, queue_id: QueueId, position: ClaimPosition | None, *, took_s: float = 0.0
    ) -> None:
        """Record a claim of `queue_id`: the position of the last job it took, and how long it
        took (`took_s`), which counts when after() had asked for a full claim."""
        if queue_id in self._full_pending:
            self._full_pending.discard(queue_id)
            self._full_took[queue_id] = took_s
            self.slowest_full_claim_s = max(self.slowest_full_claim_s, took_s)
        # The last job taken, also after a full claim: one that found jobs behind the position
        # moves it back to them, so a burst of them is worked through by positioned claims.
        if position is not None:
            self._positions[queue_id] = position
