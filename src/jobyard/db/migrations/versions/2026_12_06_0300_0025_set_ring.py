"""The ready and held sets move on to their next partition only once it has been emptied (a ring).

Until now a row went to the partition of the current two-second period of the clock
(`job_ready_slot`), whatever that partition held. The rotation empties the partition due next
only when it holds at most 2,000 live rows (migration 0015); behind a backlog it answers
`crowded` and the partition becomes current anyway. So under a backlog no partition was ever
truncated: each kept receiving new rows every six seconds while the claims deleted its old ones,
and while a transaction held the xmin horizon none of those deleted rows could be removed. In the
80 % cell (11,851 jobs/s offered, a ten-minute hold) `job_ready*` reached 5.7 M dead rows and
1.3 GB, growing for as long as the hold lasted (docs/BENCHMARKS.md).

Now each set keeps its current partition in a sequence, `job_ready_ring` / `job_held_ring`: the
value is the start of the current stint in epoch milliseconds times three, plus the slot. The
triggers read the slot from it. `job_set_rotate` moves the ring on to the next partition only
once that partition is empty on disk and the current stint has lasted two seconds. A crowded
partition is therefore not written to any more: the claims drain it, then the rotation moves its
last few live rows and truncates it, and only then does it become current again. Meanwhile the
current partition keeps receiving. A partition's dead rows are bounded by the rows it received,
and the ready set's size by the backlog, not by how long a horizon has been held.

- A sequence, not a table row: its value is read without MVCC (no dead versions for the
  triggers to walk while a horizon is held, where a control row updated every two seconds would
  leave 300 versions in ten minutes) and `setval` is seen by every session at once.
- The move on is a compare-and-set under the family's advisory lock: the value is read again
  under it, and a rotation that finds it changed answers `busy`.
- `setval` is not transactional; a rotation that failed after it leaves the ring on a partition
  that may hold rows. That is safe: which partition a ready row is in never decides whether it is
  claimed, and a partition is truncated only under ACCESS EXCLUSIVE after its live rows moved.
- Before counting a partition's live rows (a scan that walks its dead rows first), the rotation
  asks the statistics: more than 20,000 live rows (ten times the cap) is `crowded` unread. The
  counters reach this session up to ten seconds late; being ten times over the cap absorbs that.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06 03:00
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_READY_0012 = "jobyard.db.migrations.versions.2026_12_03_1500_0012_job_ready"
_READY_0016 = "jobyard.db.migrations.versions.2026_12_03_1940_0016_ready_delete_by_key"
_HELD_0022 = "jobyard.db.migrations.versions.2026_12_05_0800_0022_job_held"


def _function(module: str, name: str, text: str | None = None) -> str:
    """The CREATE FUNCTION statement of `name` in a migration's UPGRADE (or in `text`), as OR
    REPLACE: from its header to the `$$;` that closes its body."""
    source: str = text if text is not None else importlib.import_module(module).UPGRADE
    start = source.index(f"CREATE FUNCTION {name}(")
    body = source.index("$$", start)
    end = source.index("$$;", body + 2) + len("$$;")
    return source[start:end].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


_CLOCK_COMMENT = (
    "-- clock_timestamp: a statement that ran long still writes to the period it ends in."
)
_READY_CLOCK = "    " + _CLOCK_COMMENT + "\n    slot := job_ready_slot(clock_timestamp());"
_READY_RING = """    -- The ring's current partition (migration 0025): read without MVCC, so always the newest.
    SELECT (last_value % 3)::smallint INTO slot FROM job_ready_ring;"""
_HELD_CLOCK = "job_ready_slot(clock_timestamp())"
_HELD_RING = "(SELECT (last_value % 3)::smallint FROM job_held_ring)"


def _ready_sync_0016() -> str:
    rewritten: str = importlib.import_module(_READY_0016)._rewritten()
    return rewritten


def _ready_sync() -> str:
    old = _ready_sync_0016()
    assert _READY_CLOCK in old
    return old.replace(_READY_CLOCK, _READY_RING)


def _held(name: str) -> str:
    old = _function(_HELD_0022, name)
    assert _HELD_CLOCK in old
    return old.replace("        " + _CLOCK_COMMENT + "\n", "").replace(_HELD_CLOCK, _HELD_RING)


ROTATE = r"""
-- One rotation for both partitioned sets, job_ready and job_held (`family`), around the ring
-- `<family>_ring` (the current stint's start in epoch ms times three, plus its slot). Empty the
-- partition due next, then make it current once the current stint has lasted two seconds.
-- Returns 'clean' (nothing to free), 'locked' (held by a transaction older than held_ms, or
-- still held after wait_ms), 'crowded' (more than 2,000 live rows to copy under the lock: the
-- ring waits for the claims to drain it), 'busy' (another session rotates this family) or
-- 'rotated': the rows that `keep` selects from the partition (`t`) moved to the current one,
-- then TRUNCATE. `keep` is a constant of the two wrappers, never input. The order and the
-- reasons are those of migrations 0012, 0015, 0017, 0020 and 0025.
CREATE OR REPLACE FUNCTION job_set_rotate(family text, keep text, wait_ms integer, held_ms integer)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    ring text := format('%s_ring', family);
    at_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    ring_value bigint;
    latest bigint;
    current_slot smallint;
    target text;
    outcome text := 'clean';
    live integer;
BEGIN
    EXECUTE format('SELECT last_value FROM %I', ring) INTO ring_value;
    current_slot := ring_value % 3;
    target := format('%s_%s', family, (current_slot + 1) % 3);
    IF pg_relation_size(target::regclass) > 0 THEN
        -- Asked before the count below (0020): a long transaction holding the partition also
        -- keeps every dead row of it, and a count that stops at 2,001 live rows would walk them
        -- all. Such a transaction (a REPEATABLE READ reader) will not let go within wait_ms, and
        -- claims would queue behind our pending exclusive request all that time (0017).
        IF EXISTS (
            SELECT 1
            FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'relation'
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND l.relation = target::regclass::oid
              AND l.granted
              AND l.pid <> pg_backend_pid()
              AND a.xact_start < clock_timestamp() - make_interval(secs => held_ms / 1000.0)
        ) THEN
            RETURN 'locked';
        END IF;
        -- A backlog: copying it under the exclusive lock would stall every claim (0015). A
        -- partition the claims are still draining is told from its counters, unread: the count
        -- walks the dead rows at the front of its heap first (0025).
        IF pg_stat_get_live_tuples(target::regclass) > 20000 THEN
            RETURN 'crowded';
        END IF;
        EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %I LIMIT 2001) s', target) INTO live;
        IF live > 2000 THEN
            RETURN 'crowded';
        END IF;
        outcome := 'rotated';
    ELSIF at_ms - ring_value / 3 < 2000 THEN
        RETURN 'clean';
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext(format('jobyard.%s_rotate', family))) THEN
        RETURN 'busy';
    END IF;
    -- Another session may have moved the ring on since it was read above.
    EXECUTE format('SELECT last_value FROM %I', ring) INTO latest;
    IF latest <> ring_value THEN
        RETURN 'busy';
    END IF;
    IF outcome = 'rotated' THEN
        PERFORM set_config('lock_timeout', wait_ms || 'ms', true);
        BEGIN
            EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', target);
        EXCEPTION WHEN lock_not_available THEN
            RETURN 'locked';
        END;
        -- Under the exclusive lock no claim can hold or take one of these rows, so each live
        -- row is in exactly one partition when the lock is released. `keep` lists the columns
        -- after `slot` in the table's order.
        EXECUTE format('INSERT INTO %I SELECT %s, %s', format('%s_%s', family, current_slot),
                       current_slot, format(keep, target));
        EXECUTE format('TRUNCATE %I', target);
    END IF;
    -- The partition due next is empty now: it becomes current once this stint has lasted two
    -- seconds (a session that read the old value writes one last row to the old partition).
    IF at_ms - ring_value / 3 >= 2000 THEN
        PERFORM setval(ring::regclass, at_ms * 3 + (current_slot + 1) % 3);
    END IF;
    RETURN outcome;
END $$;
"""

# The rings start where the clock is, so the rows already in the partitions keep their order.
RINGS = r"""
CREATE SEQUENCE job_ready_ring AS bigint MINVALUE 0;
CREATE SEQUENCE job_held_ring AS bigint MINVALUE 0;
SELECT setval(ring, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint * 3
                    + job_ready_slot(clock_timestamp()))
FROM unnest(ARRAY['job_ready_ring', 'job_held_ring']::regclass[]) ring;
"""


def upgrade() -> None:
    op.execute(RINGS)
    op.execute(_ready_sync())
    op.execute(_held("jobs_held_sync"))
    op.execute(_held("job_held_fill"))
    op.execute(ROTATE)
    op.execute("DROP FUNCTION job_ready_slot(timestamptz);")


def downgrade() -> None:
    op.execute(_function(_READY_0012, "job_ready_slot").replace(" OR REPLACE", "", 1))
    op.execute(_function(_HELD_0022, "job_set_rotate"))
    op.execute(_function(_HELD_0022, "job_held_fill"))
    op.execute(_function(_HELD_0022, "jobs_held_sync"))
    op.execute(_ready_sync_0016())
    op.execute("DROP SEQUENCE job_held_ring; DROP SEQUENCE job_ready_ring;")
