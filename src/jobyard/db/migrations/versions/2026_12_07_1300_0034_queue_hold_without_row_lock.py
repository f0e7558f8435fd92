"""An enqueue keeps its queue from being deleted with a shared advisory lock, not a row lock.

Since 0002 the statement trigger that checks a job's queue locked the queue row `FOR KEY SHARE`,
the lock a foreign key's check takes, so that a concurrent delete of the queue waits for the
enqueue (and its trigger then deletes the new job) and an enqueue that waited for a delete finds
the queue gone. A row lock is written into the row: its `xmax`. When two transactions lock the
same row, PostgreSQL records both lockers in a MultiXact, and every further locker makes a new
MultiXact with all the current members plus itself. Producers that enqueue into one queue from
several sessions at once (a web application's request handlers) therefore made MultiXacts: 152
per 1,000 single enqueues from four connections and 164 from eight, with two or more members
each (benchmarks/profile/multixacts.py, docs/BENCHMARKS.md). MultiXact ids and their member
space wrap around: past `autovacuum_multixact_freeze_max_age` every table whose oldest MultiXact
is too old, the whole job history included, gets an anti-wraparound vacuum, and a member space
used up stops every statement that would make a new MultiXact. At the rate measured (four
producers, ~4,000 enqueues a second) the queue alone passed the default age in about a week.

The lock is now taken where it costs nothing to share: the inserting transaction takes a
transaction-level shared advisory lock on the queue (`queue_hold`), then reads the queue with a
new snapshot; deleting a queue row takes the same lock exclusively first (the row trigger
`queues_hold_off`). Shared holders never wait for each other and write nothing to disk; a delete
waits for every enqueue in flight, and its cascade (`queues_delete_jobs`) then sees their jobs;
an enqueue that waited for a delete reads the queue with a snapshot taken after it and fails with
the key's error. Outside READ COMMITTED a snapshot cannot see that delete, so there the row is
still locked `FOR KEY SHARE`, whose conflict PostgreSQL reports as a serialization failure.

Batches, policies and schedules keep their row locks: a batch row is locked by the enqueue that
made it, and policies and schedules are named by almost no job.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07 13:00
"""

from __future__ import annotations

from alembic import op

from jobyard.db.migrations import earlier

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

_REFS_0028 = (
    "jobyard.db.migrations.versions.2026_12_06_1000_0028_job_policy_schedule_refs_per_statement"
)

UPGRADE = r"""
-- The advisory lock a queue's jobs are inserted under: (space, key) in the two-int form, so it
-- shares nothing with the one-bigint keys jobyard (and most applications) use elsewhere. 'joby'
-- in ASCII; a queue id past 2^31 folds onto a smaller one, which only makes two queues wait for
-- each other's deletes.
CREATE FUNCTION queue_lock_space() RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 1785684601;
CREATE FUNCTION queue_lock_key(queue_id bigint) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (queue_id % 2147483648)::integer;

-- Keeps a queue from being deleted until this transaction ends; false if `queue` is no queue
-- of `project`.
CREATE FUNCTION queue_hold(queue bigint, project bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('transaction_isolation') = 'read committed' THEN
        PERFORM pg_advisory_xact_lock_shared(queue_lock_space(), queue_lock_key(queue));
        -- A statement of its own, so its snapshot is taken once the lock is held: a delete that
        -- committed while this waited is seen, and one that comes later waits for us.
        PERFORM FROM queues WHERE id = queue AND project_id = project;
    ELSE
        -- A transaction snapshot would not see that delete: lock the row as a key check does,
        -- and PostgreSQL reports a concurrent delete as a serialization failure.
        PERFORM FROM queues WHERE id = queue AND project_id = project FOR KEY SHARE;
    END IF;
    RETURN FOUND;
END $$;

-- A queue row is deleted only once every transaction that holds the queue (queue_hold) ends.
CREATE FUNCTION queues_hold_off() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(queue_lock_space(), queue_lock_key(OLD.id));
    RETURN OLD;
END $$;
CREATE TRIGGER queues_hold_off BEFORE DELETE ON queues
    FOR EACH ROW EXECUTE FUNCTION queues_hold_off();
"""

DOWNGRADE = """
DROP TRIGGER queues_hold_off ON queues;
DROP FUNCTION queues_hold_off();
DROP FUNCTION queue_hold(bigint, bigint);
DROP FUNCTION queue_lock_key(bigint);
DROP FUNCTION queue_lock_space();
"""

# The three places 0028's trigger locked queue rows, and what each becomes.
_ROW_0028 = """            PERFORM FROM queues WHERE id = NEW.queue_id AND project_id = NEW.project_id
                FOR KEY SHARE;
            IF NOT FOUND THEN
                bad_queue := NEW.queue_id;
                bad_project := NEW.project_id;
            END IF;
"""
_ROW = """            IF NOT queue_hold(NEW.queue_id, NEW.project_id) THEN
                bad_queue := NEW.queue_id;
                bad_project := NEW.project_id;
            END IF;
"""
_ONE_0028 = """            PERFORM FROM queues WHERE id = first_queue AND project_id = first_project
                FOR KEY SHARE;
            IF NOT FOUND THEN
                bad_queue := first_queue;
                bad_project := first_project;
            END IF;
"""
_ONE = """            IF NOT queue_hold(first_queue, first_project) THEN
                bad_queue := first_queue;
                bad_project := first_project;
            END IF;
"""
_MANY_0028 = """            SELECT count(*), count(q.id) INTO pairs, locked
            FROM (SELECT DISTINCT queue_id, project_id FROM new_jobs) w
            LEFT JOIN LATERAL (
                SELECT id FROM queues
                WHERE id = w.queue_id AND project_id = w.project_id FOR KEY SHARE) q ON true;
            IF locked < pairs THEN
                SELECT w.queue_id, w.project_id INTO bad_queue, bad_project
                FROM (SELECT DISTINCT queue_id, project_id FROM new_jobs) w
                WHERE NOT EXISTS (SELECT FROM queues q
                                  WHERE q.id = w.queue_id AND q.project_id = w.project_id)
                LIMIT 1;
            END IF;
"""
_MANY = """            -- In id order, so that a statement holding several queues and a delete of several
            -- queues take their locks in the same order.
            FOR hold_queue, hold_project IN
                SELECT DISTINCT queue_id, project_id FROM new_jobs ORDER BY 1, 2
            LOOP
                IF NOT queue_hold(hold_queue, hold_project) THEN
                    bad_queue := hold_queue;
                    bad_project := hold_project;
                    EXIT;
                END IF;
            END LOOP;
"""
_DECLARE_0028 = "    pairs bigint;\n    locked bigint;\n"
_DECLARE = "    hold_queue bigint;\n    hold_project bigint;\n    locked bigint;\n"


def _parent_refs_check_0028() -> str:
    """0028's jobs_parent_refs_check, as it was."""
    return earlier.statement(_REFS_0028, "CREATE OR REPLACE FUNCTION jobs_parent_refs_check()")


def _parent_refs_check() -> str:
    text = _parent_refs_check_0028()
    for old, new in ((_ROW_0028, _ROW), (_ONE_0028, _ONE), (_MANY_0028, _MANY)):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    assert text.count(_DECLARE_0028) == 1
    return text.replace(_DECLARE_0028, _DECLARE)


def upgrade() -> None:
    op.execute(UPGRADE)
    op.execute(_parent_refs_check())


def downgrade() -> None:
    op.execute(_parent_refs_check_0028())
    op.execute(DOWNGRADE)
