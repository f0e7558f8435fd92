-- name: queue_ensure
-- Create a queue if it does not exist; return it either way.
WITH created AS (
    INSERT INTO queues (project_id, name) VALUES (%(project_id)s, %(name)s)
    ON CONFLICT (project_id, name) DO NOTHING
    RETURNING *
)
SELECT * FROM created
UNION ALL
SELECT * FROM queues WHERE project_id = %(project_id)s AND name = %(name)s
LIMIT 1

-- name: queue_list_by_names
-- The named queues of a project, in claim order (highest queue priority first).
SELECT id, name, priority, is_paused, max_concurrency
FROM queues
WHERE project_id = %(project_id)s AND name = ANY(%(names)s::text[])
ORDER BY priority DESC, name

-- name: queue_get_by_name
-- One queue by project and name.
SELECT * FROM queues WHERE project_id = %(project_id)s AND name = %(name)s
