"""The whole initial schema: tenancy, auth, queues, jobs, executions, schedules, workers.

Revision ID: 0001
Revises:
Create Date: 2026-12-02 17:00
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

UPGRADE = r"""
-- Native enums: the database refuses a status the code does not know.
CREATE TYPE job_status AS ENUM (
    'waiting', 'scheduled', 'queued', 'claimed', 'running', 'done', 'failed', 'dead_letter', 'cancelled');
CREATE TYPE member_role AS ENUM ('owner', 'admin', 'member', 'viewer');
CREATE TYPE backoff_kind AS ENUM ('fixed', 'linear', 'exponential');
CREATE TYPE worker_status AS ENUM ('active', 'draining', 'stopped', 'dead');
CREATE TYPE execution_outcome AS ENUM (
    'succeeded', 'failed', 'timed_out', 'lease_lost', 'released', 'cancelled');
CREATE TYPE overlap_policy AS ENUM ('allow', 'skip');
CREATE TYPE dead_letter_reason AS ENUM ('exhausted', 'poison_pill', 'timed_out');

-- ---------------------------------------------------------------- tenancy and auth
CREATE TABLE organizations (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    slug        text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email          text NOT NULL CHECK (length(email) BETWEEN 3 AND 320 AND email = lower(email)),
    password_hash  text NOT NULL,
    display_name   text NOT NULL DEFAULT '' CHECK (length(display_name) <= 200),
    is_active      boolean NOT NULL DEFAULT true,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT users_email_key UNIQUE (email)
);

CREATE TABLE organization_members (
    org_id      bigint NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id     bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role        member_role NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, user_id)
);
CREATE INDEX organization_members_user_idx ON organization_members (user_id);

CREATE TABLE projects (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id      bigint NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    slug        text NOT NULL CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT projects_org_slug_key UNIQUE (org_id, slug)
);

CREATE TABLE api_keys (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id    bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name          text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    prefix        text NOT NULL,
    key_hash      bytea NOT NULL CHECK (octet_length(key_hash) = 32),
    role          member_role NOT NULL,
    created_by    bigint REFERENCES users (id) ON DELETE SET NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    expires_at    timestamptz,
    revoked_at    timestamptz,
    CONSTRAINT api_keys_key_hash_key UNIQUE (key_hash)
);
CREATE INDEX api_keys_project_idx ON api_keys (project_id, id);

CREATE TABLE refresh_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    family_id    uuid NOT NULL,
    token_hash   bytea NOT NULL CHECK (octet_length(token_hash) = 32),
    issued_at    timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    rotated_at   timestamptz,
    revoked_at   timestamptz,
    CONSTRAINT refresh_tokens_token_hash_key UNIQUE (token_hash)
);
CREATE INDEX refresh_tokens_family_idx ON refresh_tokens (family_id);
CREATE INDEX refresh_tokens_expires_idx ON refresh_tokens (expires_at);

-- Fixed-window counters shared by every API replica (auth attempts, enqueues).
CREATE TABLE rate_limit_counters (
    bucket        text NOT NULL,
    window_start  timestamptz NOT NULL,
    hits          integer NOT NULL DEFAULT 0 CHECK (hits >= 0),
    PRIMARY KEY (bucket, window_start)
);
CREATE INDEX rate_limit_counters_window_idx ON rate_limit_counters (window_start);

-- ---------------------------------------------------------------- queues and policies
CREATE TABLE retry_policies (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id     bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name           text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    backoff        backoff_kind NOT NULL DEFAULT 'exponential',
    base_delay_ms  integer NOT NULL DEFAULT 1000 CHECK (base_delay_ms BETWEEN 0 AND 86400000),
    max_delay_ms   integer NOT NULL DEFAULT 3600000 CHECK (max_delay_ms BETWEEN 0 AND 604800000),
    max_attempts   integer NOT NULL DEFAULT 5 CHECK (max_attempts BETWEEN 1 AND 100),
    jitter         boolean NOT NULL DEFAULT true,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT retry_policies_project_name_key UNIQUE (project_id, name),
    CONSTRAINT retry_policies_delay_order CHECK (base_delay_ms <= max_delay_ms)
);

CREATE TABLE queues (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id         bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name               text NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$'),
    priority           integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
    is_paused          boolean NOT NULL DEFAULT false,
    max_concurrency    integer CHECK (max_concurrency IS NULL OR max_concurrency BETWEEN 1 AND 100000),
    retry_policy_id    bigint REFERENCES retry_policies (id) ON DELETE SET NULL,
    default_timeout_ms integer CHECK (default_timeout_ms IS NULL OR default_timeout_ms BETWEEN 1 AND 86400000),
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queues_project_name_key UNIQUE (project_id, name),
    -- Target of jobs' (queue_id, project_id) key: one check proves both and that they agree.
    CONSTRAINT queues_id_project_key UNIQUE (id, project_id)
);

-- ---------------------------------------------------------------- workers
CREATE TABLE workers (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id         bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name               text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    hostname           text NOT NULL DEFAULT '',
    pid                integer,
    queues             text[] NOT NULL DEFAULT '{}',
    concurrency        integer NOT NULL CHECK (concurrency BETWEEN 1 AND 100000),
    status             worker_status NOT NULL DEFAULT 'active',
    started_at         timestamptz NOT NULL DEFAULT now(),
    -- Denormalized from worker_heartbeats so the sweep reads one row, not an aggregate.
    last_heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    stopped_at         timestamptz,
    CONSTRAINT workers_stopped_has_time CHECK ((status IN ('stopped', 'dead')) = (stopped_at IS NOT NULL))
);
CREATE INDEX workers_project_idx ON workers (project_id, id);
CREATE INDEX workers_live_heartbeat_idx ON workers (last_heartbeat_at) WHERE status IN ('active', 'draining');

CREATE TABLE worker_heartbeats (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    worker_id   bigint NOT NULL REFERENCES workers (id) ON DELETE CASCADE,
    beat_at     timestamptz NOT NULL DEFAULT now(),
    in_flight   integer NOT NULL DEFAULT 0 CHECK (in_flight >= 0),
    capacity    integer NOT NULL DEFAULT 0 CHECK (capacity >= 0)
);
CREATE INDEX worker_heartbeats_worker_idx ON worker_heartbeats (worker_id, beat_at DESC);
CREATE INDEX worker_heartbeats_beat_idx ON worker_heartbeats (beat_at);

-- ---------------------------------------------------------------- jobs
CREATE TABLE job_batches (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id  bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    queue_id    bigint NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    size        integer NOT NULL CHECK (size BETWEEN 1 AND 100000),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_batches_project_idx ON job_batches (project_id, id);

CREATE TABLE scheduled_jobs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id      bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    queue_id        bigint NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    name            text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    cron            text NOT NULL CHECK (length(cron) BETWEEN 1 AND 200),
    timezone        text NOT NULL DEFAULT 'UTC' CHECK (length(timezone) BETWEEN 1 AND 64),
    handler         text NOT NULL CHECK (length(handler) BETWEEN 1 AND 200),
    payload         jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority        integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
    max_attempts    integer CHECK (max_attempts IS NULL OR max_attempts BETWEEN 1 AND 100),
    timeout_ms      integer CHECK (timeout_ms IS NULL OR timeout_ms BETWEEN 1 AND 86400000),
    overlap         overlap_policy NOT NULL DEFAULT 'allow',
    enabled         boolean NOT NULL DEFAULT true,
    next_run_at     timestamptz,
    last_fired_at   timestamptz,
    last_job_id     bigint,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT scheduled_jobs_project_name_key UNIQUE (project_id, name),
    CONSTRAINT scheduled_jobs_payload_size CHECK (octet_length(payload::text) <= 65536)
);
CREATE INDEX scheduled_jobs_due_idx ON scheduled_jobs (next_run_at) WHERE enabled;
CREATE INDEX scheduled_jobs_queue_idx ON scheduled_jobs (queue_id);

CREATE TABLE jobs (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id        bigint NOT NULL,
    queue_id          bigint NOT NULL,
    handler           text NOT NULL CHECK (length(handler) BETWEEN 1 AND 200),
    payload           jsonb NOT NULL DEFAULT '{}'::jsonb,
    status            job_status NOT NULL DEFAULT 'queued',
    priority          integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
    run_at            timestamptz NOT NULL DEFAULT now(),
    -- attempt is accounting (what the retry policy counts; refunded on infrastructure failure);
    -- execution_seq is identity (bumped on every physical run, never reused).
    attempt           integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts      integer NOT NULL DEFAULT 5 CHECK (max_attempts BETWEEN 1 AND 100),
    execution_seq     integer NOT NULL DEFAULT 0 CHECK (execution_seq >= 0),
    lease_lost_count  integer NOT NULL DEFAULT 0 CHECK (lease_lost_count >= 0),
    retry_policy_id   bigint REFERENCES retry_policies (id) ON DELETE SET NULL,
    -- Per-job override of the queue's policy: {"backoff","base_delay_ms","max_delay_ms","jitter"}.
    retry_override    jsonb CHECK (retry_override IS NULL OR jsonb_typeof(retry_override) = 'object'),
    timeout_ms        integer CHECK (timeout_ms IS NULL OR timeout_ms BETWEEN 1 AND 86400000),
    idempotency_key   text CHECK (idempotency_key IS NULL OR length(idempotency_key) BETWEEN 1 AND 200),
    -- References job_batches (id), ON DELETE SET NULL, kept by the triggers below, not a key.
    batch_id          bigint,
    schedule_id       bigint REFERENCES scheduled_jobs (id) ON DELETE SET NULL,
    worker_id         bigint REFERENCES workers (id) ON DELETE SET NULL,
    lock_expires_at   timestamptz,
    claimed_at        timestamptz,
    started_at        timestamptz,
    finished_at       timestamptz,
    cancel_requested_at timestamptz,
    last_error        text CHECK (last_error IS NULL OR length(last_error) <= 8000),
    error_fingerprint text,
    result            jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    -- One composite key instead of two: the queue exists, the project is the queue's, and
    -- deleting either cascades (a project deletes its queues). Each foreign key is a
    -- per-row check on insert: two cost about 5 µs a job, a third of a batch insert statement.
    CONSTRAINT jobs_queue_fkey FOREIGN KEY (queue_id, project_id)
        REFERENCES queues (id, project_id) ON DELETE CASCADE,
    CONSTRAINT jobs_payload_size CHECK (octet_length(payload::text) <= 65536),
    CONSTRAINT jobs_result_size CHECK (result IS NULL OR octet_length(result::text) <= 65536),
    -- A lease exists exactly while a worker holds the job.
    CONSTRAINT jobs_lease_iff_held CHECK ((status IN ('claimed', 'running')) = (lock_expires_at IS NOT NULL)),
    -- Terminal states carry their finish time, and only they do.
    CONSTRAINT jobs_finished_iff_terminal
        CHECK ((status IN ('done', 'dead_letter', 'cancelled')) = (finished_at IS NOT NULL))
);
ALTER TABLE scheduled_jobs
    ADD CONSTRAINT scheduled_jobs_last_job_fk FOREIGN KEY (last_job_id) REFERENCES jobs (id) ON DELETE SET NULL;

-- The claim index: partial, so it holds only claimable rows however large jobs grows, and its
-- column order (with NULLS FIRST matching the claim's ORDER BY) lets LIMIT stop early.
CREATE INDEX jobs_claim_idx ON jobs (queue_id, priority DESC NULLS FIRST, run_at, id)
    WHERE status = 'queued';
-- The promoter's reader: due scheduled jobs (retries and delayed enqueues).
CREATE INDEX jobs_scheduled_idx ON jobs (run_at) WHERE status = 'scheduled';
-- Held jobs only: the in-flight count per queue (max_concurrency) and the reaper's expiry scan.
-- One index for both, because every index on jobs is paid on every state change.
CREATE INDEX jobs_held_idx ON jobs (queue_id, lock_expires_at) WHERE status IN ('claimed', 'running');
-- Idempotency: one job per key per queue; enqueue inserts ON CONFLICT DO NOTHING then reads.
CREATE UNIQUE INDEX jobs_idempotency_key ON jobs (queue_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Explorer (keyset on id) and its status filter.
CREATE INDEX jobs_project_id_idx ON jobs (project_id, id DESC);
CREATE INDEX jobs_project_status_idx ON jobs (project_id, status, id DESC);
CREATE INDEX jobs_fingerprint_idx ON jobs (project_id, error_fingerprint, id DESC)
    WHERE error_fingerprint IS NOT NULL;
-- Retention: finished jobs by age (their executions and logs cascade).
CREATE INDEX jobs_finished_idx ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_schedule_idx ON jobs (schedule_id, id DESC) WHERE schedule_id IS NOT NULL;

-- jobs.batch_id → job_batches (id) ON DELETE SET NULL, enforced by triggers instead of a
-- foreign key. A key is checked row by row: 10,000 jobs of one batch meant 10,000 lookups of
-- the same job_batches row (~36 ms, a fifth of the batch insert). The statement trigger checks
-- each DISTINCT batch once and takes the lock a key check takes (FOR KEY SHARE), so a
-- concurrent delete of the batch still waits for the insert or makes it fail.
CREATE FUNCTION jobs_batch_ref_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    wanted bigint[];
    locked bigint;
    missing bigint;
BEGIN
    IF TG_LEVEL = 'ROW' THEN
        -- An UPDATE that changes batch_id (the WHEN of jobs_batch_ref_upd).
        PERFORM FROM job_batches WHERE id = NEW.batch_id FOR KEY SHARE;
        missing := CASE WHEN FOUND THEN NULL ELSE NEW.batch_id END;
    ELSE
        -- Single enqueues carry no batch: leave before the aggregate (5 µs against 18 µs).
        IF NOT EXISTS (SELECT FROM new_jobs WHERE batch_id IS NOT NULL) THEN
            RETURN NULL;
        END IF;
        SELECT array_agg(DISTINCT batch_id) INTO wanted FROM new_jobs WHERE batch_id IS NOT NULL;
        SELECT count(*) INTO locked FROM (
            SELECT id FROM job_batches WHERE id = ANY (wanted) FOR KEY SHARE) l;
        IF locked < cardinality(wanted) THEN
            SELECT w INTO missing FROM unnest(wanted) w
            WHERE NOT EXISTS (SELECT FROM job_batches b WHERE b.id = w) LIMIT 1;
        END IF;
    END IF;
    IF missing IS NOT NULL THEN
        RAISE foreign_key_violation USING
            MESSAGE = 'insert or update on table "jobs" violates foreign key constraint "jobs_batch_id_fkey"',
            DETAIL = format('Key (batch_id)=(%s) is not present in table "job_batches".', missing),
            CONSTRAINT = 'jobs_batch_id_fkey', TABLE = 'jobs', SCHEMA = TG_TABLE_SCHEMA;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_batch_ref_ins AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_batch_ref_check();
CREATE TRIGGER jobs_batch_ref_upd AFTER UPDATE OF batch_id ON jobs FOR EACH ROW
    WHEN (NEW.batch_id IS NOT NULL AND NEW.batch_id IS DISTINCT FROM OLD.batch_id)
    EXECUTE FUNCTION jobs_batch_ref_check();

-- The referenced side: deleting (or truncating) batches nulls the jobs that named them, and a
-- batch's id never changes.
CREATE FUNCTION job_batches_null_refs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        UPDATE jobs SET batch_id = NULL WHERE batch_id IS NOT NULL;
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT FROM gone) THEN
        RETURN NULL;
    END IF;
    -- A key's SET NULL reads with the newest snapshot and fails a REPEATABLE READ deleter that
    -- would miss a job committed after its snapshot; plpgsql cannot, so refuse instead.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE serialization_failure USING
            MESSAGE = 'delete job_batches rows (or their queue or project) under READ COMMITTED';
    END IF;
    UPDATE jobs SET batch_id = NULL WHERE batch_id IN (SELECT id FROM gone);
    RETURN NULL;
END $$;
CREATE TRIGGER job_batches_delete AFTER DELETE ON job_batches REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION job_batches_null_refs();
CREATE TRIGGER job_batches_truncate AFTER TRUNCATE ON job_batches
    FOR EACH STATEMENT EXECUTE FUNCTION job_batches_null_refs();
CREATE FUNCTION job_batches_keep_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE foreign_key_violation USING
        MESSAGE = 'a job_batches id never changes (jobs.batch_id refers to it)',
        CONSTRAINT = 'jobs_batch_id_fkey', TABLE = 'job_batches', SCHEMA = TG_TABLE_SCHEMA;
END $$;
CREATE TRIGGER job_batches_keep_id BEFORE UPDATE OF id ON job_batches FOR EACH ROW
    WHEN (NEW.id IS DISTINCT FROM OLD.id) EXECUTE FUNCTION job_batches_keep_id();

CREATE TABLE job_dependencies (
    job_id             bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    depends_on_job_id  bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    PRIMARY KEY (job_id, depends_on_job_id),
    CONSTRAINT job_dependencies_not_self CHECK (job_id <> depends_on_job_id)
);
CREATE INDEX job_dependencies_parent_idx ON job_dependencies (depends_on_job_id);

-- One row per physical run, written once when the run ends (the run in flight is described by
-- its jobs row). UNIQUE (job_id, execution_seq) rather than (job_id, attempt): a refunded
-- attempt reuses its number, an execution never does.
CREATE TABLE job_executions (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id             bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    execution_seq      integer NOT NULL CHECK (execution_seq >= 1),
    attempt            integer NOT NULL CHECK (attempt >= 1),
    worker_id          bigint REFERENCES workers (id) ON DELETE SET NULL,
    outcome            execution_outcome NOT NULL,
    attempt_charged    boolean NOT NULL DEFAULT true,
    started_at         timestamptz NOT NULL,
    finished_at        timestamptz NOT NULL,
    duration_ms        integer CHECK (duration_ms IS NULL OR duration_ms >= 0),
    error              text CHECK (error IS NULL OR length(error) <= 8000),
    error_fingerprint  text,
    CONSTRAINT job_executions_job_seq_key UNIQUE (job_id, execution_seq)
);
CREATE INDEX job_executions_worker_idx ON job_executions (worker_id) WHERE worker_id IS NOT NULL;

CREATE TABLE job_logs (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id         bigint NOT NULL,
    execution_seq  integer NOT NULL,
    level          text NOT NULL DEFAULT 'info' CHECK (level IN ('debug', 'info', 'warning', 'error')),
    message        text NOT NULL CHECK (length(message) <= 8000),
    fields         jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (octet_length(fields::text) <= 16384),
    created_at     timestamptz NOT NULL DEFAULT now(),
    -- Lines are written during a run, before its job_executions row exists, so they hang from
    -- the job; execution_seq says which run (job_log_append fences it on the held job row).
    CONSTRAINT job_logs_job_fkey FOREIGN KEY (job_id) REFERENCES jobs (id) ON DELETE CASCADE
);
-- Serves the log pages (job_id, keyset on id) and the cascade from jobs.
CREATE INDEX job_logs_job_idx ON job_logs (job_id, id);

-- Dead letters copy what they need so they outlive the job row (retention may prune it).
CREATE TABLE dead_letter_jobs (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id         bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    queue_id           bigint NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    job_id             bigint REFERENCES jobs (id) ON DELETE SET NULL,
    handler            text NOT NULL,
    payload            jsonb NOT NULL,
    priority           integer NOT NULL DEFAULT 0,
    reason             dead_letter_reason NOT NULL,
    error              text CHECK (error IS NULL OR length(error) <= 8000),
    error_fingerprint  text,
    attempts           integer NOT NULL CHECK (attempts >= 0),
    dead_lettered_at   timestamptz NOT NULL DEFAULT now(),
    replayed_at        timestamptz,
    replay_job_id      bigint REFERENCES jobs (id) ON DELETE SET NULL,
    CONSTRAINT dead_letter_jobs_payload_size CHECK (octet_length(payload::text) <= 65536)
);
CREATE INDEX dead_letter_jobs_project_idx ON dead_letter_jobs (project_id, id DESC);
CREATE INDEX dead_letter_jobs_fingerprint_idx ON dead_letter_jobs (project_id, error_fingerprint)
    WHERE error_fingerprint IS NOT NULL;
CREATE INDEX dead_letter_jobs_job_idx ON dead_letter_jobs (job_id) WHERE job_id IS NOT NULL;
"""

DOWNGRADE = r"""
DROP TABLE IF EXISTS dead_letter_jobs, job_logs, job_executions, job_dependencies CASCADE;
DROP TABLE IF EXISTS jobs, scheduled_jobs, job_batches, worker_heartbeats, workers CASCADE;
DROP TABLE IF EXISTS queues, retry_policies, rate_limit_counters, refresh_tokens, api_keys CASCADE;
DROP TABLE IF EXISTS projects, organization_members, users, organizations CASCADE;
DROP TYPE IF EXISTS dead_letter_reason, overlap_policy, execution_outcome, worker_status,
    backoff_kind, member_role, job_status;
DROP FUNCTION IF EXISTS jobs_batch_ref_check(), job_batches_null_refs(), job_batches_keep_id();
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
