"""Invitations: how people join an organization (issue 12, account pre-hijacking).

Admins invite an email with a role, list open invitations, re-send (a new link; the old one
stops working) and revoke them. The answer never says whether the email has an account, and
never holds a credential: the link goes to the invitee through the delivery seam. The invitee
redeems it: `POST /invitations/redeem` sets their own password (no account yet; answers signed
in), or `POST /invitations/accept` while signed in to the invited email's account.
"""

from __future__ import annotations

from fastapi import Request, Response

from jobyard.api import invitations as sending
from jobyard.api.auth import ACCESS_TTL_S, issue_access_token
from jobyard.api.deps import ConnDep, KeysDep, OrgDep, UserDep
from jobyard.api.pagination import Page, PageDep, make_page
from jobyard.api.resources._shared import IdPath
from jobyard.api.resources.members import owner_rule
from jobyard.api.routes import Route, Scope
from jobyard.api.schemas import (
    InvitationAccept,
    InvitationCreate,
    InvitationPublic,
    InvitationRedeem,
    MyOrg,
    TokenPair,
)
from jobyard.core import auth as core_auth
from jobyard.core import invitations
from jobyard.domain.enums import Role


async def list_invitations(org: OrgDep, conn: ConnDep, page: PageDep) -> Page[InvitationPublic]:
    """Open invitations (pending or expired), oldest first. Never their tokens."""
    rows = await invitations.page(conn, org.org_id, after_id=page.after_id(), limit=page.limit + 1)
    built = make_page(rows, page.limit, key=lambda r: int(r["id"]))
    return Page[InvitationPublic](
        items=[InvitationPublic.model_validate(r) for r in built.items],
        next_cursor=built.next_cursor,
    )


async def create_invitation(
    body: InvitationCreate, org: OrgDep, conn: ConnDep, request: Request
) -> InvitationPublic:
    """Invite an email; the link goes to the invitee, never into this response. Inviting an
    email that has an open invitation re-sends it. The same answer whether or not the email
    has an account."""
    owner_rule(org, body.role)
    issued = await invitations.invite(
        conn, org.org_id, email=body.email, role=body.role, invited_by=org.user_id
    )
    await sending.send(request, conn, issued, _name(org))
    return InvitationPublic.model_validate(issued.invitation)


async def resend_invitation(
    invitation_id: IdPath, org: OrgDep, conn: ConnDep, request: Request
) -> InvitationPublic:
    """Send a new link (valid 7 days); the previous link stops working."""
    current = await invitations.get(conn, org.org_id, invitation_id)
    owner_rule(org, Role(current["role"]))  # before anything changes
    issued = await invitations.resend(conn, org.org_id, invitation_id)
    await sending.send(request, conn, issued, _name(org))
    return InvitationPublic.model_validate(issued.invitation)


async def revoke_invitation(invitation_id: IdPath, org: OrgDep, conn: ConnDep) -> Response:
    """The link stops working at once."""
    owner_rule(org, Role((await invitations.get(conn, org.org_id, invitation_id))["role"]))
    await invitations.revoke(conn, org.org_id, invitation_id)
    return Response(status_code=204)


async def redeem_invitation(body: InvitationRedeem, conn: ConnDep, keys: KeysDep) -> TokenPair:
    """Create the invited account with your own password; you are signed in and a member."""
    user_id, _ = await invitations.redeem_new_account(
        conn, body.token, password=body.password, display_name=body.display_name
    )
    refresh = await core_auth.start_session(conn, user_id)
    access, _ = issue_access_token(keys, refresh.user_id, refresh.family_id)
    return TokenPair(
        access_token=access,
        expires_in=ACCESS_TTL_S,
        refresh_token=refresh.token,
        refresh_expires_at=refresh.expires_at,
    )


async def accept_invitation(body: InvitationAccept, user: UserDep, conn: ConnDep) -> MyOrg:
    """Accept with the account you are signed in to (it must have the invited email)."""
    inv = await invitations.accept(conn, body.token, user_id=user.id, email=user.email)
    return MyOrg(id=inv["org_id"], name=inv["org_name"], slug=inv["org_slug"], role=inv["role"])


def _name(org: OrgDep) -> str:
    user = org.principal.user
    assert user is not None  # ORG routes admit users only
    return user.display_name or user.email


TAGS = ("invitations",)
ROUTES: tuple[Route, ...] = (
    Route("GET", "/orgs/{org_id}/invitations", Scope.ORG, list_invitations, min_role=Role.ADMIN,
          summary="List open invitations", response_model=Page[InvitationPublic], tags=TAGS),
    Route("POST", "/orgs/{org_id}/invitations", Scope.ORG, create_invitation,
          min_role=Role.ADMIN, status_code=201, summary="Invite someone",
          response_model=InvitationPublic, tags=TAGS),
    Route("POST", "/orgs/{org_id}/invitations/{invitation_id}/resend", Scope.ORG,
          resend_invitation, min_role=Role.ADMIN, summary="Re-send an invitation (new link)",
          response_model=InvitationPublic, tags=TAGS),
    Route("DELETE", "/orgs/{org_id}/invitations/{invitation_id}", Scope.ORG, revoke_invitation,
          min_role=Role.ADMIN, status_code=204, summary="Revoke an invitation", tags=TAGS),
    Route("POST", "/invitations/redeem", Scope.PUBLIC, redeem_invitation, status_code=201,
          summary="Redeem an invitation: create your account", response_model=TokenPair,
          tags=TAGS, rate_limit="auth",
          responses={404: "the link is invalid, used, revoked or expired",
                     409: "the email already has an account: accept while signed in"}),
    Route("POST", "/invitations/accept", Scope.USER, accept_invitation,
          summary="Accept an invitation with your account", response_model=MyOrg, tags=TAGS,
          responses={404: "the link is invalid, used, revoked or expired",
                     409: "already a member"}),
)  # fmt: skip
