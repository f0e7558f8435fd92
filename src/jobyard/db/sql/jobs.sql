-- name: job_insert
-- Enqueue one job; ON CONFLICT on the idempotency index returns nothing (the caller then reads).
-- explain: {"queue": "$queue_name", "handler": "explain.noop", "payload": {"n": 1}, "waiting": false, "run_at": null, "priority": 0, "max_attempts": null, "timeout_ms": null, "idempotency_key": "explain-key", "retry_override": null, "schedule_id": null}
WITH queue AS (
    SELECT q.id, q.project_id, q.default_timeout_ms, p.max_attempts AS policy_max_attempts
    FROM queues q
    LEFT JOIN retry_policies p ON p.id = q.retry_policy_id
    WHERE q.project_id = %(project_id)s AND q.name = %(queue)s
), inserted AS (
    INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at,
                      max_attempts, timeout_ms, idempotency_key, retry_override, schedule_id)
    SELECT queue.project_id, queue.id, %(handler)s, %(payload)s,
           CASE
               WHEN %(waiting)s THEN 'waiting'::job_status
               WHEN %(run_at)s::timestamptz > coalesce(%(now)s, now()) THEN 'scheduled'::job_status
               ELSE 'queued'::job_status
           END,
           %(priority)s,
           greatest(coalesce(%(run_at)s::timestamptz, coalesce(%(now)s, now())), coalesce(%(now)s, now())),
           coalesce(%(max_attempts)s, queue.policy_max_attempts, 5),
           coalesce(%(timeout_ms)s, queue.default_timeout_ms),
           %(idempotency_key)s, %(retry_override)s, %(schedule_id)s
    FROM queue
    ON CONFLICT (queue_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING *
)
-- NOTIFY wakes idle workers at once (rule 7); referenced so the CTE is not skipped.
SELECT inserted.*,
       (SELECT count(pg_notify('jobyard_jobs', i.queue_id::text))
        FROM inserted i WHERE i.status = 'queued') AS notified
FROM inserted

-- name: job_insert_ref
-- job_insert for callers that need only the new job's id and status (the SDK's defer): the
-- same insert, but the whole row is neither formatted by the server nor decoded by the client,
-- ~14 per cent of a single enqueue's wall time (docs/BENCHMARKS.md).
-- explain: {"queue": "$queue_name", "handler": "explain.noop", "payload": {"n": 1}, "waiting": false, "run_at": null, "priority": 0, "max_attempts": null, "timeout_ms": null, "idempotency_key": "explain-key", "retry_override": null, "schedule_id": null}
WITH queue AS (
    SELECT q.id, q.project_id, q.default_timeout_ms, p.max_attempts AS policy_max_attempts
    FROM queues q
    LEFT JOIN retry_policies p ON p.id = q.retry_policy_id
    WHERE q.project_id = %(project_id)s AND q.name = %(queue)s
), inserted AS (
    INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at,
                      max_attempts, timeout_ms, idempotency_key, retry_override, schedule_id)
    SELECT queue.project_id, queue.id, %(handler)s, %(payload)s,
           CASE
               WHEN %(waiting)s THEN 'waiting'::job_status
               WHEN %(run_at)s::timestamptz > coalesce(%(now)s, now()) THEN 'scheduled'::job_status
               ELSE 'queued'::job_status
           END,
           %(priority)s,
           greatest(coalesce(%(run_at)s::timestamptz, coalesce(%(now)s, now())), coalesce(%(now)s, now())),
           coalesce(%(max_attempts)s, queue.policy_max_attempts, 5),
           coalesce(%(timeout_ms)s, queue.default_timeout_ms),
           %(idempotency_key)s, %(retry_override)s, %(schedule_id)s
    FROM queue
    ON CONFLICT (queue_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING *
)
-- NOTIFY wakes idle workers at once (rule 7); referenced so the CTE is not skipped.
SELECT inserted.id, inserted.status,
       (SELECT count(pg_notify('jobyard_jobs', i.queue_id::text))
        FROM inserted i WHERE i.status = 'queued') AS notified
FROM inserted

-- name: job_insert_dependencies
-- Record that a job waits for its parents (run_anyway: even if one ends dead_letter/cancelled).
-- explain: {"parents": ["$parent_job_id"], "run_anyway": false}
INSERT INTO job_dependencies (job_id, depends_on_job_id, run_anyway)
SELECT %(job_id)s, parent, %(run_anyway)s FROM unnest(%(parents)s::bigint[]) AS parent

-- name: job_lock_parents
-- The given parents of this project and their status, locked FOR SHARE in id order: a parent's
-- final transition waits for this enqueue to commit, so its trigger sees the new child.
-- explain: {"parents": ["$parent_job_id"]}
SELECT id, status FROM jobs
WHERE project_id = %(project_id)s AND id = ANY(%(parents)s::bigint[])
ORDER BY id
FOR SHARE

-- name: job_get_by_idempotency_key
-- The job an idempotency key already names in this queue.
-- explain: {"queue": "$queue_name", "idempotency_key": "explain-key"}
SELECT j.* FROM jobs j
JOIN queues q ON q.id = j.queue_id
WHERE q.project_id = %(project_id)s AND q.name = %(queue)s AND j.idempotency_key = %(idempotency_key)s

-- name: job_insert_batch
-- Enqueue many jobs of one queue in one statement; the rows share a job_batches row.
-- explain: {"queue": "$queue_name", "size": 1, "items": "[{\"handler\": \"explain.noop\", \"payload\": {}, \"priority\": 0}]", "any_key": false, "callbacks": {}}
WITH queue AS (
    SELECT q.id, q.project_id, q.default_timeout_ms, p.max_attempts AS policy_max_attempts
    FROM queues q
    LEFT JOIN retry_policies p ON p.id = q.retry_policy_id
    WHERE q.project_id = %(project_id)s AND q.name = %(queue)s
), batch AS (
    INSERT INTO job_batches (project_id, queue_id, size, callbacks)
    SELECT queue.project_id, queue.id, %(size)s, %(callbacks)s FROM queue
    RETURNING id, queue_id
), item AS NOT MATERIALIZED (
    -- jsonb_to_recordset turns a JSON null into SQL NULL; the payload null stays JSON null.
    SELECT queue.project_id, queue.id AS queue_id, i.handler,
           coalesce(i.payload, 'null'::jsonb) AS payload,
           CASE WHEN i.run_at > coalesce(%(now)s, now()) THEN 'scheduled'::job_status
                ELSE 'queued'::job_status END AS status,
           i.priority,
           greatest(coalesce(i.run_at, coalesce(%(now)s, now())), coalesce(%(now)s, now()))
               AS run_at,
           coalesce(i.max_attempts, queue.policy_max_attempts, 5) AS max_attempts,
           coalesce(i.timeout_ms, queue.default_timeout_ms) AS timeout_ms,
           i.idempotency_key, batch.id AS batch_id
    FROM queue, batch,
         -- The validated items as one JSON array (one parameter, expanded here in C): seven
         -- parallel arrays cost the client ~3.5 µs a job to encode, one document ~0.3 µs.
         jsonb_to_recordset(%(items)s::jsonb)
             AS i(handler text, payload jsonb, priority int, run_at timestamptz,
                  max_attempts int, timeout_ms int, idempotency_key text)
), keyed AS (
    -- ON CONFLICT makes every row of its INSERT a speculative insertion (a probe of the arbiter
    -- index before, a confirm record in the WAL after), key or no key, so a batch without any
    -- key skips it (14 per cent of a 10,000-job batch, BENCHMARKS.md). The whole batch takes
    -- one path, so ids still follow the items' order (and FIFO within the batch holds); the
    -- other path is a one-time filter that is false, so the items are expanded once.
    INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at,
                      max_attempts, timeout_ms, idempotency_key, batch_id)
    SELECT * FROM item WHERE %(any_key)s
    ON CONFLICT (queue_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING jobs.id, jobs.status
), unkeyed AS (
    -- Without the arbiter a key would fail the batch (unique violation), never skip silently.
    INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at,
                      max_attempts, timeout_ms, idempotency_key, batch_id)
    SELECT * FROM item WHERE NOT %(any_key)s
    RETURNING jobs.id, jobs.status
), inserted AS (
    SELECT id, status FROM keyed UNION ALL SELECT id, status FROM unkeyed
)
SELECT (SELECT id FROM batch) AS batch_id,
       (SELECT queue_id FROM batch) AS queue_id,
       coalesce(array_agg(id ORDER BY id), '{}') AS ids,
       count(*) FILTER (WHERE status = 'queued') AS queued,
       (SELECT count(pg_notify('jobyard_jobs', b.queue_id::text)) FROM batch b) AS notified
FROM inserted

-- name: job_insert_batch_resize
-- A batch holds the jobs its statement inserted: items an idempotency key skipped are not its
-- (they belong to the request that made them), so its size is what was inserted, set in the
-- enqueue's transaction before any of its jobs can finish (else it would never complete).
UPDATE job_batches SET size = %(size)s WHERE id = %(batch_id)s

-- name: job_insert_batch_drop
-- The batch of an enqueue whose every item was skipped: it holds no job (size >= 1 is a CHECK).
DELETE FROM job_batches WHERE id = %(batch_id)s

-- name: job_insert_batch_earlier
-- The batches of the jobs that a batch's idempotency keys already name (NULL: not enqueued in
-- a batch): one batch means the request is a repeat of the one that made it.
SELECT DISTINCT j.batch_id
FROM jobs j
JOIN queues q ON q.id = j.queue_id
WHERE q.project_id = %(project_id)s AND q.name = %(queue)s
  AND j.idempotency_key = ANY (%(keys)s::text[])

-- name: job_get
-- One job by id within a project.
-- explain: {}
SELECT * FROM jobs WHERE id = %(job_id)s AND project_id = %(project_id)s

-- name: job_claim_batch
-- Claim up to n queued jobs from one unpaused queue. The job row describes the run in flight
-- (worker_id, execution_seq, attempt, claimed_at/started_at, lease); its job_executions row is
-- written once, by the statement that ends the run (docs/DATABASE.md).
-- With start, they go on to running in the same statement (a worker claims only what it runs).
-- Suspects (jobs whose last run died with its worker) are claimed only with solo (the worker
-- holds nothing), one at a time and instead of anything else, so a death during that run can
-- be pinned on it. A claim without solo says so in a last row of NULLs (suspect_waiting) when
-- a suspect waits, so the busy worker can finish what it holds and make room (docs/WORKER.md).
-- Stamps use statement_timestamp(): under the queue lock this runs inside a transaction, whose
-- now() is when it began, before any wait for the lock.
-- explain: {"n": 10, "lease_s": 30.0, "start": true, "solo": false, "limited": false}
WITH queue AS MATERIALIZED (
    -- Read here, not from the worker's cache, so a pause or a new limit holds from the next
    -- claim on: a queue with max_concurrency is claimed only under its lock (limited).
    SELECT q.id FROM queues q
    WHERE q.id = %(queue_id)s AND NOT q.is_paused
      AND (q.max_concurrency IS NULL OR %(limited)s)
), suspect AS MATERIALIZED (
    -- job_ready_suspect_idx: holds only queued suspects, so this costs nothing when there are
    -- none. LIMIT 0 without solo (not a false WHERE, which would plan a sort of nothing): the
    -- Limit node then reads no row at all. The jobs row is locked as in picked.
    SELECT r.job_id AS id
    FROM job_ready r
    WHERE r.queue_id = %(queue_id)s AND r.suspect
      AND EXISTS (SELECT 1 FROM queue)
      AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = r.job_id AND j.status = 'queued'
                  FOR UPDATE OF j SKIP LOCKED)
    ORDER BY r.priority DESC NULLS FIRST, r.run_at, r.job_id
    LIMIT CASE WHEN %(solo)s THEN 1 ELSE 0 END
), picked AS MATERIALIZED (
    -- The claimable jobs come from job_ready (migration 0012), not from jobs: its dead rows are
    -- truncated away every few seconds, so a held snapshot cannot make this walk grow. Its
    -- claim index supplies this order, so LIMIT stops after n rows; MATERIALIZED keeps the
    -- planner from re-running the limited subquery. `- r.priority` ascending is `priority DESC`
    -- (NOT NULL), written as the index has it: one index serves this claim and the claim past
    -- a position (migration 0027).
    -- Each candidate's jobs row is locked (SKIP LOCKED) and re-checked by key in a filter on
    -- the ordered scan: a job some session holds (an operator's SELECT ... FOR UPDATE, a cancel
    -- in flight, another claim) is passed over for the next one, never waited for, and only a
    -- job still queued is taken. A join instead would plan a hash join or a sort whenever the
    -- ready set is small. That jobs lock is the claim's only lock: the ready row itself is not
    -- locked, since a concurrent claimer is already passed over by it, and a ready-row lock
    -- was one more WAL-logged tuple write per job (docs/DATABASE.md "The claim").
    SELECT r.job_id AS id
    FROM job_ready r
    WHERE r.queue_id = %(queue_id)s
      AND NOT r.suspect
      AND EXISTS (SELECT 1 FROM queue)
      AND NOT EXISTS (SELECT 1 FROM suspect)
      AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = r.job_id AND j.status = 'queued'
                  FOR UPDATE OF j SKIP LOCKED)
    ORDER BY - r.priority, r.run_at, r.job_id
    LIMIT %(n)s
), claimed AS (
    -- Every claim charges an attempt and opens a new execution_seq (identity, never reused).
    -- Claim and start in one UPDATE: a separate start was a second statement and a second
    -- non-HOT version of every row (about 14 µs a job of the 75 µs the server spent, and its
    -- own transaction with the claim in the worker); see docs/BENCHMARKS.md.
    UPDATE jobs j
    SET status = CASE WHEN %(start)s THEN 'running'::job_status ELSE 'claimed'::job_status END,
        worker_id = %(worker_id)s,
        claimed_at = coalesce(%(now)s, statement_timestamp()),
        started_at = CASE WHEN %(start)s THEN coalesce(%(now)s, statement_timestamp()) END,
        lock_expires_at = coalesce(%(now)s, statement_timestamp())
                          + make_interval(secs => %(lease_s)s),
        attempt = j.attempt + 1,
        execution_seq = j.execution_seq + 1,
        updated_at = coalesce(%(now)s, statement_timestamp())
    -- = ANY(ARRAY(...)) keeps this a primary-key lookup whatever the planner thinks of picked
    -- (rows come back in id order). The rows were locked above while still queued; a status
    -- test here would let PostgreSQL 18 skip-scan jobs_project_group_idx in id DESC order.
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked UNION ALL SELECT id FROM suspect))
    -- run_at (with priority and id) is the claim position of the last job claimed.
    RETURNING j.id, j.project_id, j.queue_id, j.handler, j.payload, j.priority, j.attempt,
              j.max_attempts, j.execution_seq, j.timeout_ms, j.lock_expires_at, j.worker_id,
              j.suspect, j.run_at
)
SELECT claimed.*, false AS suspect_waiting FROM claimed
UNION ALL
-- One row of NULLs (typed by the outer join) flags a suspect waiting for a worker that holds
-- nothing; job_ready_suspect_idx answers it without touching the queue's other jobs.
SELECT c.*, true AS suspect_waiting
FROM (SELECT) AS one LEFT JOIN claimed c ON false
WHERE NOT %(solo)s
  AND EXISTS (SELECT 1 FROM job_ready s WHERE s.queue_id = %(queue_id)s AND s.suspect)

-- name: job_claim_batch_after
-- job_claim_batch past a claim position: only ready rows whose claim key (-priority, run_at,
-- job_id) is greater than (after_npriority, after_run_at, after_job_id), read from
-- job_ready_claim_idx as one index range. A worker uses it only while the rotation is blocked
-- (a reader holds job_ready), so the dead rows of claimed jobs below the position, which nothing
-- can free then, are not walked by every claim; rows that entered below it (a higher priority,
-- an earlier run_at, a row skipped while locked) are left to the worker's periodic full claim
-- (job_claim_batch), see docs/DATABASE.md "Claim position". Otherwise the same statement.
-- explain: {"n": 10, "lease_s": 30.0, "start": true, "solo": false, "limited": false, "after_npriority": -1000, "after_run_at": "2000-01-01T00:00:00+00:00", "after_job_id": 0}
WITH queue AS MATERIALIZED (
    -- Read here, not from the worker's cache, so a pause or a new limit holds from the next
    -- claim on: a queue with max_concurrency is claimed only under its lock (limited).
    SELECT q.id FROM queues q
    WHERE q.id = %(queue_id)s AND NOT q.is_paused
      AND (q.max_concurrency IS NULL OR %(limited)s)
), suspect AS MATERIALIZED (
    -- job_ready_suspect_idx: holds only queued suspects, so this costs nothing when there are
    -- none. LIMIT 0 without solo (not a false WHERE, which would plan a sort of nothing): the
    -- Limit node then reads no row at all. The jobs row is locked as in picked.
    SELECT r.job_id AS id
    FROM job_ready r
    WHERE r.queue_id = %(queue_id)s AND r.suspect
      AND EXISTS (SELECT 1 FROM queue)
      AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = r.job_id AND j.status = 'queued'
                  FOR UPDATE OF j SKIP LOCKED)
    ORDER BY r.priority DESC NULLS FIRST, r.run_at, r.job_id
    LIMIT CASE WHEN %(solo)s THEN 1 ELSE 0 END
), picked AS MATERIALIZED (
    -- As in job_claim_batch (the jobs lock, filters, LIMIT), in the same order, from the
    -- position on.
    SELECT r.job_id AS id
    FROM job_ready r
    WHERE r.queue_id = %(queue_id)s
      -- One row comparison in the order of job_ready_claim_idx (all ascending): the scan
      -- starts at the position instead of walking the dead entries before it. `>=`, not `>`:
      -- the planner estimates a row comparison from its first column, and over a backlog of
      -- one priority "-priority > p" matched no row, so it sorted the whole partition and the
      -- lock filter below the sort locked every queued job. The position's own job is no
      -- longer queued (or is fine to take again).
      AND (- r.priority, r.run_at, r.job_id)
          >= (%(after_npriority)s::integer, %(after_run_at)s::timestamptz,
             %(after_job_id)s::bigint)
      AND NOT r.suspect
      AND EXISTS (SELECT 1 FROM queue)
      AND NOT EXISTS (SELECT 1 FROM suspect)
      AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = r.job_id AND j.status = 'queued'
                  FOR UPDATE OF j SKIP LOCKED)
    ORDER BY - r.priority, r.run_at, r.job_id
    LIMIT %(n)s
), claimed AS (
    -- Every claim charges an attempt and opens a new execution_seq (identity, never reused).
    -- Claim and start in one UPDATE: a separate start was a second statement and a second
    -- non-HOT version of every row (about 14 µs a job of the 75 µs the server spent, and its
    -- own transaction with the claim in the worker); see docs/BENCHMARKS.md.
    UPDATE jobs j
    SET status = CASE WHEN %(start)s THEN 'running'::job_status ELSE 'claimed'::job_status END,
        worker_id = %(worker_id)s,
        claimed_at = coalesce(%(now)s, statement_timestamp()),
        started_at = CASE WHEN %(start)s THEN coalesce(%(now)s, statement_timestamp()) END,
        lock_expires_at = coalesce(%(now)s, statement_timestamp())
                          + make_interval(secs => %(lease_s)s),
        attempt = j.attempt + 1,
        execution_seq = j.execution_seq + 1,
        updated_at = coalesce(%(now)s, statement_timestamp())
    -- = ANY(ARRAY(...)) keeps this a primary-key lookup whatever the planner thinks of picked
    -- (rows come back in id order). The rows were locked above while still queued; a status
    -- test here would let PostgreSQL 18 skip-scan jobs_project_group_idx in id DESC order.
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked UNION ALL SELECT id FROM suspect))
    -- run_at (with priority and id) is the claim position of the last job claimed.
    RETURNING j.id, j.project_id, j.queue_id, j.handler, j.payload, j.priority, j.attempt,
              j.max_attempts, j.execution_seq, j.timeout_ms, j.lock_expires_at, j.worker_id,
              j.suspect, j.run_at
)
SELECT claimed.*, false AS suspect_waiting FROM claimed
UNION ALL
-- One row of NULLs (typed by the outer join) flags a suspect waiting for a worker that holds
-- nothing; job_ready_suspect_idx answers it without touching the queue's other jobs.
SELECT c.*, true AS suspect_waiting
FROM (SELECT) AS one LEFT JOIN claimed c ON false
WHERE NOT %(solo)s
  AND EXISTS (SELECT 1 FROM job_ready s WHERE s.queue_id = %(queue_id)s AND s.suspect)

-- name: job_claim_rotate_ready
-- Empty the ready partition that becomes current next (its live rows moved, then TRUNCATE):
-- 'clean', 'crowded', 'busy', 'locked' (held by a transaction older than held_ms, or still held
-- after wait_ms: retry later) or 'rotated' (migrations 0012, 0015, 0017).
-- explain: {"wait_ms": 20, "held_ms": 1000}
SELECT job_ready_rotate(%(wait_ms)s, %(held_ms)s) AS outcome

-- name: job_claim_rotate_held
-- The same for the held set, every queue's held jobs (migrations 0022, 0029): its partition
-- that becomes current next keeps only the rows of jobs still held, moved, and is then
-- TRUNCATEd.
-- explain: {"wait_ms": 20, "held_ms": 1000}
SELECT job_held_rotate(%(wait_ms)s, %(held_ms)s) AS outcome

-- name: job_claim_horizon_held
-- Whether a transaction older than held_s holds this database's xmin horizon back: then neither
-- vacuum nor the indexes' clean-up may drop the dead ready rows of the jobs claimed since, and
-- every claim walks them until the next rotation (up to two slot periods of claims). Who counts
-- (an xid of any database, a snapshot of this one, a standby, a prepared transaction) is the
-- view of migration 0019. A holder whose start this role may not read is not counted.
-- explain: {"held_s": 2.0}
SELECT EXISTS (
    SELECT 1 FROM xmin_horizon_holders h
    WHERE h.since < clock_timestamp() - make_interval(secs => %(held_s)s)
) AS held

-- name: job_claim_refresh_ready_stats
-- ANALYZE the ready partitions that a backlog changed since their last analyze, so the claim's
-- plan reads them in claim order (migration 0018); the number analyzed.
-- explain: {"min_changes": 2000, "min_interval_s": 10.0}
SELECT job_ready_refresh_stats(%(min_changes)s, %(min_interval_s)s) AS analyzed

-- name: job_claim_ready_to_vacuum
-- The ready partitions whose claimed rows' dead entries a VACUUM should clear now: a backlog
-- (more than min_live live rows, so the rotation does not truncate them), at least min_dead
-- dead rows, and no VACUUM (by a worker or autovacuum) within min_interval_s. A full claim steps
-- over every dead entry at the head of each partition's claim index (docs/DATABASE.md).
-- explain: {"min_dead": 20000, "min_live": 2000, "min_interval_s": 3.0}
SELECT n.nspname AS schema_name, c.relname AS table_name,
       pg_stat_get_dead_tuples(c.oid) AS dead_rows
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.inhparent = 'job_ready'::regclass
  AND pg_stat_get_dead_tuples(c.oid) >= %(min_dead)s
  AND pg_stat_get_live_tuples(c.oid) > %(min_live)s
  -- A role that may not VACUUM the partition would get a warning on every call.
  AND pg_has_role(c.relowner, 'USAGE')
  AND coalesce(greatest(pg_stat_get_last_vacuum_time(c.oid),
                        pg_stat_get_last_autovacuum_time(c.oid)), '-infinity')
      < clock_timestamp() - make_interval(secs => %(min_interval_s)s)
ORDER BY pg_stat_get_dead_tuples(c.oid) DESC

-- name: job_claim_lock_queue
-- Serialize claims on a queue that has max_concurrency; returns the room left (0 when paused).
-- Run in its own statement so the next statement's snapshot sees every committed claim.
-- FOR NO KEY UPDATE, not FOR UPDATE: it conflicts with itself (claims take turns) and with any
-- change to the queue row, but not with FOR KEY SHARE, which an enqueue took on the queue row
-- until migration 0034 (and still takes outside READ COMMITTED, queue_hold): with FOR UPDATE
-- every such enqueue to a limited queue waited for the claim in progress (sampled at up to
-- 211 ms in a pressure run on a busy host).
-- explain: {}
SELECT q.max_concurrency, q.is_paused
FROM queues q WHERE q.id = %(queue_id)s
FOR NO KEY UPDATE

-- name: job_claim_room
-- Free slots under the queue's max_concurrency, counted after the queue row lock is held.
-- A limit removed since the caller read it leaves room for all n (never NULL). The held jobs
-- are counted in the held set, job_held (migrations 0022, 0029): under a held xmin horizon a
-- partial index of held jobs on `jobs` kept a dead entry for every job run since, and a count
-- there walked them all, while job_held's rotation drops them within three slot periods. The
-- count is job_held_count, an index-only scan that marks the entries of finished jobs' rows
-- dead so the next count steps over them (a bitmap scan fetched each again: migration 0023).
-- explain: {"n": 10}
SELECT greatest(0, least(%(n)s, coalesce(q.max_concurrency - job_held_count(q.id), %(n)s)))
           AS room
FROM queues q WHERE q.id = %(queue_id)s AND NOT q.is_paused

-- name: job_start_many
-- claimed → running for jobs this worker still holds (fenced on worker and execution_seq).
-- explain: {"ids": ["$job_id"], "seqs": [1]}
UPDATE jobs j
SET status = 'running', started_at = coalesce(%(now)s, now()), updated_at = coalesce(%(now)s, now())
FROM unnest(%(ids)s::bigint[], %(seqs)s::int[]) AS t(id, seq)
WHERE j.id = t.id AND j.execution_seq = t.seq AND j.worker_id IS NOT DISTINCT FROM %(worker_id)s
  AND j.status::text = 'claimed'
RETURNING j.id

-- name: job_complete_many
-- running → done for jobs this worker still holds; records their finished runs.
-- explain: {"ids": ["$job_id"], "seqs": [1], "results": [{}]}
WITH finished AS (
    UPDATE jobs j
    SET status = 'done', result = t.result, lock_expires_at = NULL, suspect = false,
        finished_at = coalesce(%(now)s, now()), updated_at = coalesce(%(now)s, now())
    FROM unnest(%(ids)s::bigint[], %(seqs)s::int[], %(results)s::jsonb[]) AS t(id, seq, result)
    WHERE j.id = t.id AND j.execution_seq = t.seq AND j.worker_id IS NOT DISTINCT FROM %(worker_id)s
      -- status::text and worker_id IS NOT DISTINCT FROM, here and in every write by job id:
      -- written plainly, they let the planner scan a partial index instead of the key (an
      -- enum test matched the predicate of the partial index of held jobs that migration 0029
      -- dropped, and any strict test of worker_id proved the IS NOT NULL of jobs_worker_idx,
      -- which migration 0030 dropped). Under a held xmin that index kept every job that had
      -- run since: a 10-minute hold made this a 20,000-buffer scan and stalled the workers.
      -- Statistics taken before a drain called every worker_id NULL, but the worker index held
      -- every job the worker had finished: 39 ms a completion by the end of a 100,000-job
      -- drain. The parameter is never NULL.
      -- (docs/DATABASE.md, tests/db/test_hot_path_plans.py)
      AND j.status::text = 'running'
    RETURNING j.id, j.execution_seq, j.attempt, j.worker_id, j.started_at
), recorded AS (
    -- The run's one row, written now that its outcome is known (only for rows the fenced
    -- UPDATE changed): an INSERT instead of the claim's insert plus an UPDATE here.
    INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, outcome, started_at,
                                finished_at, duration_ms)
    SELECT f.id, f.execution_seq, f.attempt, f.worker_id, 'succeeded', f.started_at,
           coalesce(%(now)s, now()),
           greatest(0, (extract(epoch FROM coalesce(%(now)s, now()) - f.started_at) * 1000)::int)
    FROM finished f
)
-- Waiting children are queued (or cancelled) by the jobs_final_effects trigger, which acts on
-- every final transition with a fresh snapshot (migration 0008, docs/WORKFLOWS.md).
SELECT f.id FROM finished f

-- name: job_retry_context
-- What the failure path needs to decide retry vs dead letter (fenced read).
-- explain: {"id": "$job_id", "seq": 1}
SELECT j.attempt, j.max_attempts, j.retry_override, j.status,
       p.backoff, p.base_delay_ms, p.max_delay_ms, p.jitter
FROM jobs j
JOIN queues q ON q.id = j.queue_id
LEFT JOIN retry_policies p ON p.id = coalesce(j.retry_policy_id, q.retry_policy_id)
WHERE j.id = %(id)s AND j.execution_seq = %(seq)s AND j.worker_id IS NOT DISTINCT FROM %(worker_id)s
  AND j.status::text IN ('claimed', 'running')

-- name: job_fail
-- running → scheduled (retry at run_at) or dead_letter, fenced; records the finished run; copies
-- a dead letter when the attempts are exhausted.
-- explain: {"id": "$job_id", "seq": 1, "next_status": "scheduled", "delay_s": 5.0, "error": "boom", "fingerprint": "f0", "outcome": "failed", "dlq_reason": "exhausted", "traceback": null}
WITH held AS MATERIALIZED (
    -- The run's start, read before the UPDATE clears it; locked, so it is the newest version.
    SELECT j.id, j.worker_id, coalesce(j.started_at, j.claimed_at) AS started_at
    FROM jobs j
    WHERE j.id = %(id)s AND j.execution_seq = %(seq)s AND j.worker_id IS NOT DISTINCT FROM %(worker_id)s
      AND j.status::text IN ('claimed', 'running')
    FOR UPDATE
), failed AS (
    UPDATE jobs j
    SET status = %(next_status)s::job_status,
        run_at = CASE WHEN %(next_status)s = 'scheduled'
                      THEN coalesce(%(now)s, now()) + make_interval(secs => %(delay_s)s)
                      ELSE j.run_at END,
        last_error = %(error)s, error_fingerprint = %(fingerprint)s,
        -- The handler gave its own verdict, so this run did not kill its worker: no suspect.
        lock_expires_at = NULL, claimed_at = NULL, started_at = NULL, suspect = false,
        finished_at = CASE WHEN %(next_status)s = 'dead_letter' THEN coalesce(%(now)s, now()) END,
        updated_at = coalesce(%(now)s, now())
    FROM held h
    WHERE j.id = h.id AND j.execution_seq = %(seq)s AND j.worker_id IS NOT DISTINCT FROM %(worker_id)s
      AND j.status::text IN ('claimed', 'running')
    RETURNING j.*, h.worker_id AS run_worker_id, h.started_at AS run_started_at
), recorded AS (
    INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, outcome, started_at,
                                finished_at, duration_ms, error, error_fingerprint, traceback)
    SELECT f.id, f.execution_seq, f.attempt, f.run_worker_id, %(outcome)s::execution_outcome,
           f.run_started_at, coalesce(%(now)s, now()),
           greatest(0, (extract(epoch FROM coalesce(%(now)s, now()) - f.run_started_at) * 1000)::int),
           %(error)s, %(fingerprint)s, %(traceback)s
    FROM failed f
), lettered AS (
    INSERT INTO dead_letter_jobs (project_id, queue_id, job_id, handler, payload, priority, reason,
                                  error, error_fingerprint, attempts)
    SELECT f.project_id, f.queue_id, f.id, f.handler, f.payload, f.priority,
           %(dlq_reason)s::dead_letter_reason, f.last_error, f.error_fingerprint, f.attempt
    FROM failed f WHERE f.status = 'dead_letter'
    RETURNING id
)
SELECT f.id, f.status, f.run_at, f.attempt, (SELECT id FROM lettered) AS dead_letter_id
FROM failed f

-- name: job_release_many
-- Give jobs back without charging the attempt (graceful drain): → queued, execution 'released'.
-- explain: {"ids": ["$job_id"], "seqs": [1]}
WITH held AS MATERIALIZED (
    -- The run (attempt, start) as it was, read before the UPDATE refunds and clears it.
    SELECT j.id, j.execution_seq, j.attempt, coalesce(j.started_at, j.claimed_at) AS started_at
    FROM jobs j, unnest(%(ids)s::bigint[], %(seqs)s::int[]) AS t(id, seq)
    WHERE j.id = t.id AND j.execution_seq = t.seq AND j.worker_id IS NOT DISTINCT FROM %(worker_id)s
      AND j.status::text IN ('claimed', 'running')
    FOR UPDATE OF j
), released AS (
    UPDATE jobs j
    SET status = 'queued', attempt = greatest(0, j.attempt - 1), worker_id = NULL,
        lock_expires_at = NULL, claimed_at = NULL, started_at = NULL,
        updated_at = coalesce(%(now)s, now())
    FROM held h
    WHERE j.id = h.id AND j.execution_seq = h.execution_seq AND j.worker_id IS NOT DISTINCT FROM %(worker_id)s
      AND j.status::text IN ('claimed', 'running')
    RETURNING j.id, j.execution_seq, j.queue_id, h.attempt, h.started_at
), recorded AS (
    INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, outcome,
                                attempt_charged, started_at, finished_at, duration_ms)
    SELECT r.id, r.execution_seq, r.attempt, %(worker_id)s, 'released', false, r.started_at,
           coalesce(%(now)s, now()),
           greatest(0, (extract(epoch FROM coalesce(%(now)s, now()) - r.started_at) * 1000)::int)
    FROM released r
)
SELECT r.id, (SELECT count(pg_notify('jobyard_jobs', d.queue_id::text))
              FROM (SELECT DISTINCT queue_id FROM released) d) AS notified
FROM released r

-- name: job_cancel_pending
-- Cancel a job that no worker holds yet (waiting, scheduled or queued) at once.
-- explain: {}
UPDATE jobs
SET status = 'cancelled', finished_at = coalesce(%(now)s, now()), updated_at = coalesce(%(now)s, now()),
    cancel_requested_at = coalesce(%(now)s, now())
WHERE id = %(job_id)s AND project_id = %(project_id)s AND status IN ('waiting', 'scheduled', 'queued')
RETURNING *

-- name: job_request_cancel
-- Ask the worker holding a job to stop it; the worker hears it on jobyard_cancel or at heartbeat.
-- explain: {}
WITH requested AS (
    UPDATE jobs
    SET cancel_requested_at = coalesce(cancel_requested_at, coalesce(%(now)s, now())),
        updated_at = coalesce(%(now)s, now())
    WHERE id = %(job_id)s AND project_id = %(project_id)s AND status::text IN ('claimed', 'running')
    RETURNING *
)
SELECT requested.*, (SELECT count(pg_notify('jobyard_cancel', r.id::text || ':' || r.worker_id::text))
                     FROM requested r) AS notified
FROM requested

-- name: job_finish_cancelled
-- The worker stopped a job whose cancel was requested: → cancelled, run recorded 'cancelled'.
-- explain: {"id": "$job_id", "seq": 1}
WITH cancelled AS (
    UPDATE jobs j
    SET status = 'cancelled', lock_expires_at = NULL, finished_at = coalesce(%(now)s, now()),
        updated_at = coalesce(%(now)s, now())
    WHERE j.id = %(id)s AND j.execution_seq = %(seq)s AND j.worker_id IS NOT DISTINCT FROM %(worker_id)s
      AND j.status::text IN ('claimed', 'running')
    RETURNING j.id, j.execution_seq, j.attempt, j.worker_id,
              coalesce(j.started_at, j.claimed_at) AS started_at
), recorded AS (
    INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, outcome, started_at,
                                finished_at, duration_ms)
    SELECT c.id, c.execution_seq, c.attempt, c.worker_id, 'cancelled', c.started_at,
           coalesce(%(now)s, now()),
           greatest(0, (extract(epoch FROM coalesce(%(now)s, now()) - c.started_at) * 1000)::int)
    FROM cancelled c
)
SELECT id FROM cancelled

-- name: job_log_append
-- Write a handler log line, only while this worker still holds this run (fenced).
-- explain: {"id": "$job_id", "seq": 1, "level": "info", "message": "hello", "fields": {}}
INSERT INTO job_logs (job_id, execution_seq, level, message, fields)
SELECT j.id, j.execution_seq, %(level)s, %(message)s, %(fields)s
FROM jobs j
WHERE j.id = %(id)s AND j.execution_seq = %(seq)s AND j.worker_id IS NOT DISTINCT FROM %(worker_id)s
  AND j.status::text IN ('claimed', 'running')
RETURNING id
