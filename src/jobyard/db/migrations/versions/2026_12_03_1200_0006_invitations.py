"""Invitations replace handed-out passwords (issue 12, account pre-hijacking).

An admin invites an email to an organization with a role; the invitee redeems a single-use,
expiring token (stored only as SHA-256) by setting their own password (no account yet) or by
accepting while signed in (an existing account). Membership starts only then. One open
invitation per organization and email: inviting again re-sends it (new token, new expiry).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 12:00
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE invitations (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id       bigint NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    email        text NOT NULL CHECK (length(email) BETWEEN 3 AND 320 AND email = lower(email)),
    role         member_role NOT NULL,
    token_hash   bytea NOT NULL CHECK (octet_length(token_hash) = 32),
    invited_by   bigint REFERENCES users (id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    accepted_at  timestamptz,
    accepted_by  bigint REFERENCES users (id) ON DELETE SET NULL,
    revoked_at   timestamptz,
    CONSTRAINT invitations_token_hash_key UNIQUE (token_hash),
    -- A token lives at most 30 days from its (re-)sending.
    CONSTRAINT invitations_expiry_check
        CHECK (expires_at > sent_at AND expires_at <= sent_at + interval '30 days'),
    -- Used or revoked, never both.
    CONSTRAINT invitations_outcome_check CHECK (accepted_at IS NULL OR revoked_at IS NULL),
    -- accepted_by is nulled if that account is deleted; it never exists without accepted_at.
    CONSTRAINT invitations_accepted_check CHECK (accepted_by IS NULL OR accepted_at IS NOT NULL)
);
-- One open invitation per organization and email (inviting again re-sends it).
CREATE UNIQUE INDEX invitations_open_key ON invitations (org_id, email)
    WHERE accepted_at IS NULL AND revoked_at IS NULL;
CREATE INDEX invitations_org_idx ON invitations (org_id, id);
"""

DOWNGRADE = r"""
DROP TABLE invitations;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
