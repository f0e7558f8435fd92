"""Sending an invitation: build the link and hand it to the app's delivery (shared by the API
resource and the dashboard, so both send exactly the same message)."""

from __future__ import annotations

from fastapi import Request

from jobyard.api.delivery import Deliver, InvitationMessage, invitation_link
from jobyard.core import tenancy
from jobyard.core.invitations import IssuedInvitation
from jobyard.db.pool import Conn
from jobyard.domain.ids import OrgId
from jobyard.logs import get_logger

log = get_logger("jobyard.api.invitations")


async def send(request: Request, conn: Conn, issued: IssuedInvitation, inviter: str) -> None:
    """Deliver `issued`; a failing delivery is logged, never lost data (the admin re-sends)."""
    row = issued.invitation
    org = await tenancy.get_org(conn, OrgId(int(row["org_id"])))
    deliver: Deliver = request.app.state.deliver
    message = InvitationMessage(
        email=row["email"],
        org_name=org["name"],
        role=str(row["role"]),
        inviter=inviter,
        link=invitation_link(request.app.state.settings, issued.token),
        expires_at=row["expires_at"],
    )
    try:
        await deliver(message)
    except Exception as exc:
        log.error("invitation not delivered; re-send it", error=type(exc).__name__)
