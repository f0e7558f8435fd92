-- name: project_find_by_slugs
-- A project by organization slug and project slug.
SELECT p.* FROM projects p JOIN organizations o ON o.id = p.org_id
WHERE o.slug = %(org_slug)s AND p.slug = %(project_slug)s

-- name: project_find_by_id
-- A project by id.
SELECT * FROM projects WHERE id = %(project_id)s

-- name: project_ensure_org
-- Create an organization by slug for local use, or find it.
INSERT INTO organizations (name, slug) VALUES (%(slug)s, %(slug)s)
ON CONFLICT (slug) DO UPDATE SET slug = EXCLUDED.slug
RETURNING id

-- name: project_ensure
-- Create a project by slug inside an organization, or find it.
INSERT INTO projects (org_id, name, slug) VALUES (%(org_id)s, %(slug)s, %(slug)s)
ON CONFLICT (org_id, slug) DO UPDATE SET slug = EXCLUDED.slug
RETURNING *
