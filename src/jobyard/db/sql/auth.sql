-- Authentication: users' passwords, refresh-token families, API keys, and the access guard's
-- membership look-ups. Used only by jobyard/core/auth.py.

-- name: auth_user_by_email
-- A user by (case-folded) email, with the password hash, for login.
SELECT id, email, password_hash, display_name, is_active
FROM users WHERE email = lower(%(email)s)

-- name: auth_user_by_id
-- A user by id, with the password hash, for a password change.
SELECT id, email, password_hash, display_name, is_active FROM users WHERE id = %(user_id)s

-- name: auth_user_set_password
-- Replace a user's password hash (rehash on login, or a password change).
UPDATE users SET password_hash = %(password_hash)s WHERE id = %(user_id)s

-- name: auth_session_user
-- The active user behind an access token, only while the token's refresh family exists for that user and is unrevoked (logout and reuse detection end access tokens at once).
SELECT u.id, u.email, u.display_name
FROM users u
WHERE u.id = %(user_id)s
  AND u.is_active
  -- NULL (no such family for this user) counts as revoked.
  AND coalesce((
      SELECT bool_and(r.revoked_at IS NULL) FROM refresh_tokens r
      WHERE r.family_id = %(family_id)s AND r.user_id = u.id), false)

-- name: auth_refresh_insert
-- Store a refresh token (its SHA-256 only) in a family.
INSERT INTO refresh_tokens (user_id, family_id, token_hash, issued_at, expires_at)
VALUES (%(user_id)s, %(family_id)s, %(token_hash)s, coalesce(%(now)s, now()),
        coalesce(%(now)s, now()) + make_interval(secs => %(ttl_s)s))
RETURNING id, family_id, expires_at

-- name: auth_refresh_lock
-- The presented refresh token, locked so concurrent refreshes of it queue up, with its state.
SELECT r.id, r.user_id, r.family_id, r.expires_at, r.rotated_at, r.revoked_at,
       r.expires_at <= coalesce(%(now)s, now()) AS expired,
       extract(epoch FROM coalesce(%(now)s, now()) - r.rotated_at)::float8 AS since_rotation_s,
       u.is_active
FROM refresh_tokens r JOIN users u ON u.id = r.user_id
WHERE r.token_hash = %(token_hash)s
FOR UPDATE OF r

-- name: auth_refresh_mark_rotated
-- Mark a refresh token as used; its successor is inserted in the same transaction.
UPDATE refresh_tokens SET rotated_at = coalesce(%(now)s, now())
WHERE id = %(id)s AND rotated_at IS NULL AND revoked_at IS NULL

-- name: auth_refresh_live_successor
-- The successor a rotation issued, if it is still unused and unrevoked (the grace-window retry).
SELECT id, family_id, expires_at FROM refresh_tokens
WHERE token_hash = %(token_hash)s AND family_id = %(family_id)s
  AND rotated_at IS NULL AND revoked_at IS NULL AND expires_at > coalesce(%(now)s, now())

-- name: auth_refresh_revoke_family
-- Revoke every token of a family (logout, or replay of a rotated token).
UPDATE refresh_tokens SET revoked_at = coalesce(%(now)s, now())
WHERE family_id = %(family_id)s AND revoked_at IS NULL

-- name: auth_refresh_revoke_other_families
-- Revoke every session of a user except one (after a password change).
UPDATE refresh_tokens SET revoked_at = coalesce(%(now)s, now())
WHERE user_id = %(user_id)s AND family_id <> %(keep_family_id)s AND revoked_at IS NULL

-- name: auth_api_key_insert
-- Store a new API key (its SHA-256 and display prefix only).
INSERT INTO api_keys (project_id, name, prefix, key_hash, role, created_by, expires_at)
VALUES (%(project_id)s, %(name)s, %(prefix)s, %(key_hash)s, %(role)s, %(created_by)s, %(expires_at)s)
RETURNING id, project_id, name, prefix, role, created_by, created_at, last_used_at, expires_at, revoked_at

-- name: auth_api_key_page
-- One keyset page of a project's API keys (never the hash).
SELECT id, project_id, name, prefix, role, created_by, created_at, last_used_at, expires_at, revoked_at
FROM api_keys
WHERE project_id = %(project_id)s AND id > %(after_id)s
ORDER BY id
LIMIT %(limit)s

-- name: auth_api_key_revoke
-- Revoke a project's API key (idempotent: revoking twice keeps the first time).
UPDATE api_keys SET revoked_at = coalesce(revoked_at, coalesce(%(now)s, now()))
WHERE id = %(id)s AND project_id = %(project_id)s
RETURNING id, project_id, name, prefix, role, created_by, created_at, last_used_at, expires_at, revoked_at

-- name: auth_api_key_authenticate
-- The live key with this hash and its project's org; records use at most once a minute.
WITH k AS (
    SELECT k.id, k.project_id, k.role, p.org_id
    FROM api_keys k JOIN projects p ON p.id = k.project_id
    WHERE k.key_hash = %(key_hash)s
      AND k.revoked_at IS NULL
      AND (k.expires_at IS NULL OR k.expires_at > coalesce(%(now)s, now()))
), touched AS (
    -- Throttled so a busy key does not turn every request into a row write.
    UPDATE api_keys a SET last_used_at = coalesce(%(now)s, now())
    FROM k
    WHERE a.id = k.id
      AND (a.last_used_at IS NULL OR a.last_used_at < coalesce(%(now)s, now()) - interval '1 minute')
)
SELECT id, project_id, role, org_id FROM k

-- name: auth_access_project
-- The caller's role in the organization that owns a project (no row: not theirs, or no such project).
SELECT p.id AS project_id, p.org_id, m.role
FROM projects p
JOIN organization_members m ON m.org_id = p.org_id AND m.user_id = %(user_id)s
WHERE p.id = %(project_id)s

-- name: auth_access_org
-- The caller's role in an organization (no row: not a member, or no such organization).
SELECT org_id, role FROM organization_members
WHERE org_id = %(org_id)s AND user_id = %(user_id)s
