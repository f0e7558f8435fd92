-- Invitations to organizations (tokens stored as SHA-256). Used only by jobyard/core/invitations.py.

-- name: invitation_upsert
-- Invite an email (or re-send its open invitation: new token, role, inviter and expiry).
INSERT INTO invitations AS i (org_id, email, role, token_hash, invited_by, sent_at, expires_at)
VALUES (%(org_id)s, lower(%(email)s), %(role)s, %(token_hash)s, %(invited_by)s,
        coalesce(%(now)s, now()), coalesce(%(now)s, now()) + make_interval(secs => %(ttl_s)s))
ON CONFLICT (org_id, email) WHERE accepted_at IS NULL AND revoked_at IS NULL
DO UPDATE SET token_hash = EXCLUDED.token_hash, role = EXCLUDED.role,
              invited_by = EXCLUDED.invited_by, sent_at = EXCLUDED.sent_at,
              expires_at = EXCLUDED.expires_at
RETURNING id, org_id, email, role, invited_by, created_at, sent_at, expires_at

-- name: invitation_resend
-- Give an open invitation a new token and expiry (the old token stops working).
UPDATE invitations
SET token_hash = %(token_hash)s, sent_at = coalesce(%(now)s, now()),
    expires_at = coalesce(%(now)s, now()) + make_interval(secs => %(ttl_s)s)
WHERE id = %(invitation_id)s AND org_id = %(org_id)s AND accepted_at IS NULL AND revoked_at IS NULL
RETURNING id, org_id, email, role, invited_by, created_at, sent_at, expires_at

-- name: invitation_revoke
-- Revoke an open invitation of an organization.
UPDATE invitations SET revoked_at = coalesce(%(now)s, now())
WHERE id = %(invitation_id)s AND org_id = %(org_id)s AND accepted_at IS NULL AND revoked_at IS NULL

-- name: invitation_page
-- One keyset page of an organization's open invitations (expired ones included, flagged).
SELECT i.id, i.email, i.role, i.invited_by, u.display_name AS invited_by_name, i.created_at,
       i.sent_at, i.expires_at, i.expires_at <= coalesce(%(now)s, now()) AS expired
FROM invitations i LEFT JOIN users u ON u.id = i.invited_by
WHERE i.org_id = %(org_id)s AND i.accepted_at IS NULL AND i.revoked_at IS NULL
  AND i.id > %(after_id)s
ORDER BY i.id
LIMIT %(limit)s

-- name: invitation_by_token
-- The open, unexpired invitation a token names, with its organization (FOR UPDATE: redeeming).
SELECT i.id, i.org_id, o.name AS org_name, o.slug AS org_slug, i.email, i.role, i.expires_at,
       u.display_name AS invited_by_name,
       EXISTS (SELECT 1 FROM users a WHERE a.email = i.email) AS has_account
FROM invitations i
JOIN organizations o ON o.id = i.org_id
LEFT JOIN users u ON u.id = i.invited_by
WHERE i.token_hash = %(token_hash)s AND i.accepted_at IS NULL AND i.revoked_at IS NULL
  AND i.expires_at > coalesce(%(now)s, now())
FOR UPDATE OF i

-- name: invitation_mark_accepted
-- Use an invitation up (single use).
UPDATE invitations SET accepted_at = coalesce(%(now)s, now()), accepted_by = %(user_id)s
WHERE id = %(invitation_id)s AND accepted_at IS NULL AND revoked_at IS NULL

-- name: invitation_member_exists
-- Whether an email already belongs to an organization (inviting a member again is a conflict).
SELECT 1 AS found FROM organization_members m JOIN users u ON u.id = m.user_id
WHERE m.org_id = %(org_id)s AND u.email = lower(%(email)s)

-- name: invitation_user_insert
-- Create the account of a redeemed invitation, with the password its owner chose.
INSERT INTO users (email, password_hash, display_name)
VALUES (lower(%(email)s), %(password_hash)s, %(display_name)s)
ON CONFLICT (email) DO NOTHING
RETURNING id, email, display_name

-- name: invitation_member_insert
-- Start the membership an invitation grants (kept as is if it already exists).
INSERT INTO organization_members (org_id, user_id, role) VALUES (%(org_id)s, %(user_id)s, %(role)s)
ON CONFLICT (org_id, user_id) DO NOTHING

-- name: invitation_get
-- One open invitation of an organization.
SELECT id, org_id, email, role, invited_by, created_at, sent_at, expires_at
FROM invitations
WHERE id = %(invitation_id)s AND org_id = %(org_id)s AND accepted_at IS NULL AND revoked_at IS NULL
