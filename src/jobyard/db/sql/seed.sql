-- name: seed_org
-- Create (or find) the demo organization by slug.
INSERT INTO organizations (name, slug) VALUES (%(name)s, %(slug)s)
ON CONFLICT (slug) DO UPDATE SET name = EXCLUDED.name
RETURNING id

-- name: seed_user
-- Create (or find) a user by email; an existing user's password is left alone. `created`: the
-- row is new (xmax 0: no update made this version), so the password is the demo's.
INSERT INTO users (email, password_hash, display_name) VALUES (%(email)s, %(password_hash)s, %(display_name)s)
ON CONFLICT (email) DO UPDATE SET display_name = EXCLUDED.display_name
RETURNING id, (xmax = 0) AS created

-- name: seed_member
-- Make a user a member of an organization with a role; an existing membership keeps its role.
INSERT INTO organization_members (org_id, user_id, role) VALUES (%(org_id)s, %(user_id)s, %(role)s)
ON CONFLICT (org_id, user_id) DO NOTHING

-- name: seed_project
-- Create (or find) a project by organization and slug.
INSERT INTO projects (org_id, name, slug) VALUES (%(org_id)s, %(name)s, %(slug)s)
ON CONFLICT (org_id, slug) DO UPDATE SET name = EXCLUDED.name
RETURNING id

-- name: seed_retry_policy
-- Create (or find) a retry policy by project and name.
INSERT INTO retry_policies (project_id, name, backoff, base_delay_ms, max_delay_ms, max_attempts)
VALUES (%(project_id)s, %(name)s, %(backoff)s, %(base_delay_ms)s, %(max_delay_ms)s, %(max_attempts)s)
ON CONFLICT (project_id, name) DO UPDATE SET backoff = EXCLUDED.backoff
RETURNING id

-- name: seed_queue
-- Create (or find) a queue by project and name; unpause it so the demo runs.
INSERT INTO queues (project_id, name, priority, max_concurrency, retry_policy_id)
VALUES (%(project_id)s, %(name)s, %(priority)s, %(max_concurrency)s, %(retry_policy_id)s)
ON CONFLICT (project_id, name) DO UPDATE SET is_paused = false
RETURNING id

-- name: seed_count_jobs
-- How many jobs a project has (the seed adds sample jobs only to an empty project).
SELECT count(*) AS n FROM jobs WHERE project_id = %(project_id)s

-- name: seed_jobs
-- Insert sample jobs: n per handler, spread over priorities.
INSERT INTO jobs (project_id, queue_id, handler, payload, priority, max_attempts)
SELECT %(project_id)s, %(queue_id)s, %(handler)s, %(payload)s, g %% 3, %(max_attempts)s
FROM generate_series(1, %(n)s) g

-- name: seed_schedule
-- Create a demo schedule unless one of that name exists (an operator's edits are kept).
INSERT INTO scheduled_jobs (project_id, queue_id, name, cron, timezone, handler, payload, next_run_at)
VALUES (%(project_id)s, %(queue_id)s, %(name)s, %(cron)s, %(timezone)s, %(handler)s, %(payload)s,
        %(next_run_at)s)
ON CONFLICT (project_id, name) DO NOTHING
