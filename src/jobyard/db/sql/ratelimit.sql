-- Fixed-window rate limits shared by every API replica. Used only by jobyard/core/ratelimit.py.

-- name: ratelimit_take
-- Take n hits from a bucket's current window if they fit under the limit, in one atomic upsert; returns the total after (NULL: refused) and the seconds until the window ends.
WITH clock AS (
    SELECT coalesce(%(now)s, now()) AS now
), win AS (
    SELECT now,
           to_timestamp(floor(extract(epoch FROM now) / %(window_s)s) * %(window_s)s) AS start
    FROM clock
), taken AS (
    INSERT INTO rate_limit_counters AS c (bucket, window_start, hits)
    SELECT %(bucket)s, win.start, %(n)s FROM win WHERE %(n)s <= %(limit)s
    -- The row lock of ON CONFLICT serialises replicas: two can never both take the last hit.
    ON CONFLICT (bucket, window_start) DO UPDATE SET hits = c.hits + EXCLUDED.hits
    WHERE c.hits + EXCLUDED.hits <= %(limit)s
    RETURNING c.hits
)
SELECT (SELECT hits FROM taken) AS hits,
       greatest(1, ceil(extract(epoch FROM win.start + make_interval(secs => %(window_s)s) - win.now)))::int
           AS retry_after_s
FROM win

-- name: ratelimit_prune
-- Delete counters whose window started before a cut-off (they can no longer refuse anything).
DELETE FROM rate_limit_counters WHERE window_start < coalesce(%(now)s, now()) - make_interval(secs => %(older_than_s)s)

-- name: ratelimit_give_back
-- Return n hits to a bucket's current window (a login that succeeded is not a failed attempt); never below zero.
UPDATE rate_limit_counters
SET hits = greatest(0, hits - %(n)s)
WHERE bucket = %(bucket)s
  AND window_start = to_timestamp(floor(extract(epoch FROM coalesce(%(now)s, now())) / %(window_s)s) * %(window_s)s)
