-- name: worker_register
-- A worker process announces itself with the handler names it can run; returns its id.
INSERT INTO workers (project_id, name, hostname, pid, queues, concurrency, status,
                     started_at, last_heartbeat_at, handlers)
VALUES (%(project_id)s, %(name)s, %(hostname)s, %(pid)s, %(queues)s, %(concurrency)s, 'active',
        coalesce(%(now)s, now()), coalesce(%(now)s, now()), %(handlers)s::text[])
RETURNING id

-- name: lease_extend
-- Heartbeat: extend the leases this worker still holds, mark it alive, record the beat.
-- Jobs missing from the result have been lost (reaped and maybe re-claimed) or finished.
WITH alive AS (
    UPDATE workers
    SET last_heartbeat_at = coalesce(%(now)s, now()),
        status = CASE WHEN %(draining)s THEN 'draining'::worker_status ELSE status END,
        orphan_threads = %(orphan_threads)s
    WHERE id = %(worker_id)s AND status IN ('active', 'draining')
    RETURNING id, paused_at IS NOT NULL AS paused
), beat AS (
    INSERT INTO worker_heartbeats (worker_id, beat_at, in_flight, capacity)
    SELECT id, coalesce(%(now)s, now()), cardinality(%(ids)s::bigint[]), %(capacity)s FROM alive
), extended AS (
    UPDATE jobs j
    SET lock_expires_at = coalesce(%(now)s, now()) + make_interval(secs => %(lease_s)s)
    FROM unnest(%(ids)s::bigint[], %(seqs)s::int[]) AS t(id, seq)
    WHERE j.id = t.id AND j.execution_seq = t.seq AND j.worker_id IS NOT DISTINCT FROM %(worker_id)s
      AND j.status::text IN ('claimed', 'running')  -- ::text: by key, see job_complete_many
    RETURNING j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested
)
SELECT (SELECT count(*) FROM alive) AS alive,
       coalesce((SELECT bool_or(paused) FROM alive), false) AS paused,
       coalesce((SELECT array_agg(id) FROM extended), '{}') AS held,
       coalesce((SELECT array_agg(id) FROM extended WHERE cancel_requested), '{}') AS cancel_requested

-- name: worker_loop_stall
-- The loop-watch thread reports an event-loop stall (ongoing) and its end (ongoing = false, the
-- final length). The start is the database's time less the length seen, kept from the first
-- report of the same stall (`stalls` numbers them) so that its end does not move it.
UPDATE workers
SET loop_stalls = %(stalls)s,
    loop_stall = jsonb_build_object(
        'started_at',
        CASE WHEN loop_stalls = %(stalls)s AND loop_stall ? 'started_at'
             THEN loop_stall -> 'started_at'
             ELSE to_jsonb(coalesce(%(now)s, now()) - make_interval(secs => %(blocked_s)s))
        END,
        'blocked_s', round(%(blocked_s)s::numeric, 2),
        'ongoing', %(ongoing)s::boolean,
        'handler', %(handler)s::text,
        'job_ids', to_jsonb(%(job_ids)s::bigint[]),
        'at', %(at)s::text)
WHERE id = %(worker_id)s AND status IN ('active', 'draining')

-- name: worker_set_paused
-- An operator pauses (or resumes) a live worker of the project; the worker learns it from its
-- next heartbeat. Pausing again keeps the first time and pauser. No row: no such live worker.
UPDATE workers
SET paused_at = CASE WHEN %(paused)s THEN coalesce(paused_at, coalesce(%(now)s, now())) END,
    paused_by = CASE WHEN %(paused)s THEN coalesce(paused_by, %(by)s) END
WHERE project_id = %(project_id)s AND id = %(worker_id)s AND status IN ('active', 'draining')
RETURNING id, name, status, paused_at, paused_by

-- name: worker_stop
-- A worker leaves cleanly.
UPDATE workers SET status = 'stopped', stopped_at = coalesce(%(now)s, now())
WHERE id = %(worker_id)s AND status IN ('active', 'draining')
