"""Poison-pill attribution, and the indexes the workers and batches prune needs.

- jobs.suspect: the job's last run ended with its worker's death (lease lost). A suspect is
  claimed only by a worker that holds nothing else, and alone, so its next death can be
  attributed; a run that ends in the handler's own verdict (success or failure) clears it.
- jobs.solo_deaths: deaths of a worker that held this job and nothing else. Only these count
  toward the poison-pill threshold, so a crash never charges the jobs that happened to share
  the dying worker with the job that caused it.
- jobs_suspect_idx: the claim's probe for a waiting suspect (tiny: only queued suspects).
- jobs_worker_idx: the reaper's "did the dying worker hold anything else" check, and the
  worker prune (deleting a worker nulls jobs.worker_id through workers_null_refs()).
- jobs_batch_idx: the batch prune's "no job left in this batch" check (and job_batches_null_refs).
- workers_gone_idx: the prune's scan for long-stopped or dead workers.
- queues_settings_notify: a pause, resume or change of priority or max_concurrency NOTIFYs
  `jobyard_queues` (payload: queue id), whoever makes it, so workers re-read their cached
  queue settings before their next claim.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 12:00
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE jobs
    ADD COLUMN suspect boolean NOT NULL DEFAULT false,
    ADD COLUMN solo_deaths integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT jobs_solo_deaths_check CHECK (solo_deaths >= 0);
CREATE INDEX jobs_suspect_idx ON jobs (queue_id, priority DESC, run_at, id)
    WHERE status = 'queued' AND suspect;
CREATE INDEX jobs_worker_idx ON jobs (worker_id) WHERE worker_id IS NOT NULL;
CREATE INDEX jobs_batch_idx ON jobs (batch_id) WHERE batch_id IS NOT NULL;
CREATE INDEX workers_gone_idx ON workers (stopped_at) WHERE status IN ('stopped', 'dead');
CREATE FUNCTION queues_notify_settings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobyard_queues', NEW.id::text);
    RETURN NULL;
END $$;
CREATE TRIGGER queues_settings_notify AFTER UPDATE OF is_paused, max_concurrency, priority
    ON queues FOR EACH ROW
    WHEN (OLD.is_paused IS DISTINCT FROM NEW.is_paused
          OR OLD.max_concurrency IS DISTINCT FROM NEW.max_concurrency
          OR OLD.priority IS DISTINCT FROM NEW.priority)
    EXECUTE FUNCTION queues_notify_settings();
"""

DOWNGRADE = r"""
DROP TRIGGER queues_settings_notify ON queues;
DROP FUNCTION queues_notify_settings();
DROP INDEX workers_gone_idx;
DROP INDEX jobs_batch_idx;
DROP INDEX jobs_worker_idx;
DROP INDEX jobs_suspect_idx;
ALTER TABLE jobs
    DROP CONSTRAINT jobs_solo_deaths_check,
    DROP COLUMN solo_deaths,
    DROP COLUMN suspect;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
