-- Organizations, their members and their projects. Used only by jobyard/core/tenancy.py.

-- name: tenancy_org_page_for_user
-- One keyset page of the organizations a user belongs to, with the user's role.
SELECT o.id, o.name, o.slug, o.created_at, m.role
FROM organization_members m JOIN organizations o ON o.id = m.org_id
WHERE m.user_id = %(user_id)s AND o.id > %(after_id)s
ORDER BY o.id
LIMIT %(limit)s

-- name: tenancy_org_insert
-- Create an organization.
INSERT INTO organizations (name, slug) VALUES (%(name)s, %(slug)s)
RETURNING id, name, slug, created_at

-- name: tenancy_org_get
-- An organization by id.
SELECT id, name, slug, created_at FROM organizations WHERE id = %(org_id)s

-- name: tenancy_org_rename
-- Rename an organization.
UPDATE organizations SET name = %(name)s WHERE id = %(org_id)s
RETURNING id, name, slug, created_at

-- name: tenancy_org_delete
-- Delete an organization and (by cascade) everything it owns.
DELETE FROM organizations WHERE id = %(org_id)s

-- name: tenancy_org_lock
-- Lock an organization row so membership changes in it are serialised (last-owner rule).
SELECT id FROM organizations WHERE id = %(org_id)s FOR UPDATE

-- name: tenancy_member_insert
-- Add a user to an organization; no row when they already are a member.
INSERT INTO organization_members (org_id, user_id, role) VALUES (%(org_id)s, %(user_id)s, %(role)s)
ON CONFLICT (org_id, user_id) DO NOTHING
RETURNING org_id, user_id, role, created_at

-- name: tenancy_member_page
-- One keyset page of an organization's members with their emails.
SELECT m.user_id, u.email, u.display_name, m.role, m.created_at
FROM organization_members m JOIN users u ON u.id = m.user_id
WHERE m.org_id = %(org_id)s AND m.user_id > %(after_id)s
ORDER BY m.user_id
LIMIT %(limit)s

-- name: tenancy_member_get
-- One member of an organization.
SELECT m.user_id, u.email, u.display_name, m.role, m.created_at
FROM organization_members m JOIN users u ON u.id = m.user_id
WHERE m.org_id = %(org_id)s AND m.user_id = %(user_id)s

-- name: tenancy_member_owner_count
-- How many owners an organization has (read under tenancy_org_lock).
SELECT count(*) AS n FROM organization_members WHERE org_id = %(org_id)s AND role = 'owner'

-- name: tenancy_member_set_role
-- Change a member's role.
UPDATE organization_members SET role = %(role)s
WHERE org_id = %(org_id)s AND user_id = %(user_id)s

-- name: tenancy_member_delete
-- Remove a member from an organization.
DELETE FROM organization_members WHERE org_id = %(org_id)s AND user_id = %(user_id)s

-- name: tenancy_project_page
-- One keyset page of an organization's projects.
SELECT id, org_id, name, slug, created_at FROM projects
WHERE org_id = %(org_id)s AND id > %(after_id)s
ORDER BY id
LIMIT %(limit)s

-- name: tenancy_project_insert
-- Create a project in an organization.
INSERT INTO projects (org_id, name, slug) VALUES (%(org_id)s, %(name)s, %(slug)s)
RETURNING id, org_id, name, slug, created_at

-- name: tenancy_project_get
-- A project by id.
SELECT id, org_id, name, slug, created_at FROM projects WHERE id = %(project_id)s

-- name: tenancy_project_delete
-- Delete a project and (by cascade) its queues, jobs, schedules, keys and history.
DELETE FROM projects WHERE id = %(project_id)s

-- name: tenancy_owner_count
-- How many owners an organization has (`jobyard accounts create-owner` makes the first only).
SELECT count(*) AS owners FROM organization_members
WHERE org_id = %(org_id)s AND role = 'owner'
