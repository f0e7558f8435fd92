"""Dashboard screens for joining an organization (issue 12): an organization's members with its
open invitations (invite, re-send, revoke — admins), and the page an invitation link opens.

The invitation page needs no session: a new invitee sets their own password there (the form is
CSRF-protected by a double-submit cookie, as the login form is) and is signed in; an existing
account signs in and accepts. Every rule is core.invitations' — the same as the API's.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter, Request
from fastapi.responses import Response

from jobyard.api import invitations as sending
from jobyard.api.deps import get_keys
from jobyard.core import invitations, tenancy
from jobyard.core.auth import PermissionDenied, start_session, user_org_access
from jobyard.domain.enums import Role
from jobyard.domain.errors import JobyardError, NotFound, ValidationFailed
from jobyard.domain.ids import OrgId
from jobyard.web import csrf
from jobyard.web.pages import Ctx, _connection, _handle, _id, _see_other, render
from jobyard.web.session import apply_cookies, resolve, session_cookies

router = APIRouter(include_in_schema=False)
INVITE_COOKIE: Final = "jy_invite_csrf"
ROLES: Final = ("viewer", "member", "admin", "owner")
MIN_PASSWORD: Final = 12


async def _admit_org(ctx: Ctx, raw_org_id: str, min_role: Role) -> dict[str, Any]:
    access = await user_org_access(ctx.conn, ctx.session.user.id, _id(raw_org_id, "organization"))
    if access is None:
        raise NotFound("organization not found")
    if not access.role.at_least(min_role):
        raise PermissionDenied(f"this action needs the {min_role} role or higher")
    ctx.role = access.role
    return await tenancy.get_org(ctx.conn, access.org_id)


# ----------------------------------------------------------------------------- members page


@router.get("/orgs/{org_id}/members")
async def members(request: Request, org_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        org = await _admit_org(ctx, org_id, Role.VIEWER)
        people = await tenancy.member_page(ctx.conn, OrgId(org["id"]), after_id=0, limit=500)
        pending: list[dict[str, Any]] = []
        if ctx.can("admin"):
            pending = await invitations.page(ctx.conn, OrgId(org["id"]), after_id=0, limit=500)
        roles = [r for r in ROLES if ctx.role is Role.OWNER or r != "owner"]
        return render(
            "members.html",
            **ctx.base(org=org, members=people, invitations=pending, roles=roles),
        )

    return await _handle(request, build)


def _form(ctx: Ctx, name: str) -> str:
    assert ctx.form is not None
    return str(ctx.form.get(name) or "").strip()


@router.post("/orgs/{org_id}/invitations")
async def invite(request: Request, org_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        org = await _admit_org(ctx, org_id, Role.ADMIN)
        email, raw_role = _form(ctx, "email").lower(), _form(ctx, "role") or "member"
        if raw_role not in ROLES:
            raise ValidationFailed("choose a role", field="role")
        role = Role(raw_role)
        if role is Role.OWNER and ctx.role is not Role.OWNER:
            raise PermissionDenied("only an owner can invite an owner")
        if not (3 <= len(email) <= 320) or email.count("@") != 1 or not email.isprintable():
            raise ValidationFailed("enter an email address", field="email")
        issued = await invitations.invite(
            ctx.conn, OrgId(org["id"]), email=email, role=role, invited_by=ctx.session.user.id
        )
        await sending.send(request, ctx.conn, issued, _inviter(ctx))
        return _see_other(f"/orgs/{org['id']}/members?done=invited")

    return await _handle(request, build)


@router.post("/orgs/{org_id}/invitations/{invitation_id}/resend")
async def resend(request: Request, org_id: str, invitation_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        org = await _admit_org(ctx, org_id, Role.ADMIN)
        _owner_only(
            ctx, await invitations.get(ctx.conn, OrgId(org["id"]), _id(invitation_id, "invitation"))
        )
        issued = await invitations.resend(
            ctx.conn, OrgId(org["id"]), _id(invitation_id, "invitation")
        )
        await sending.send(request, ctx.conn, issued, _inviter(ctx))
        return _see_other(f"/orgs/{org['id']}/members?done=resent")

    return await _handle(request, build)


@router.post("/orgs/{org_id}/invitations/{invitation_id}/revoke")
async def revoke(request: Request, org_id: str, invitation_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        org = await _admit_org(ctx, org_id, Role.ADMIN)
        _owner_only(
            ctx, await invitations.get(ctx.conn, OrgId(org["id"]), _id(invitation_id, "invitation"))
        )
        await invitations.revoke(ctx.conn, OrgId(org["id"]), _id(invitation_id, "invitation"))
        return _see_other(f"/orgs/{org['id']}/members?done=revoked")

    return await _handle(request, build)


def _owner_only(ctx: Ctx, invitation: dict[str, Any]) -> None:
    """The API's rule: only an owner manages an invitation to the owner role."""
    if invitation["role"] == Role.OWNER and ctx.role is not Role.OWNER:
        raise PermissionDenied("only an owner can re-send or revoke an owner's invitation")


def _inviter(ctx: Ctx) -> str:
    return ctx.session.user.display_name or ctx.session.user.email


# ----------------------------------------------------------------------------- the link's page


def _invite_page(
    request: Request,
    token: str,
    invitation: dict[str, Any] | None,
    user: Any,
    csrf_token: str,
    *,
    status: int = 200,
    error: str | None = None,
    display_name: str = "",
) -> Response:
    login_token = csrf.new_login_token()
    response = render(
        "invite.html",
        status,
        token=token,
        invitation=invitation,
        user=user,
        csrf_token=csrf_token,
        login_token=login_token,
        error=error,
        display_name=display_name,
        next_url=request.url.path + "?" + request.url.query,
        project={},
    )
    response.set_cookie(
        INVITE_COOKIE,
        login_token,
        max_age=3600,
        path="/invite",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.get("/invite")
async def invite_page(request: Request) -> Response:
    token = request.query_params.get("token", "")
    async with _connection(request) as conn:
        session = await resolve(conn, get_keys(request), request)
        user = session.user if session else None
        csrf_token = csrf.session_token(get_keys(request), session.family_id) if session else ""
        try:
            invitation = await invitations.lookup(conn, token)
        except NotFound as exc:
            return _invite_page(request, token, None, user, csrf_token, status=404,
                                error=exc.message)  # fmt: skip
    response = _invite_page(request, token, invitation, user, csrf_token)
    if session is not None:
        apply_cookies(request, response, session.new_cookies)
    return response


@router.post("/invite")
async def redeem(request: Request) -> Response:
    """A new account: the invitee's own password; they are signed in on success."""
    form = await request.form()
    token = str(form.get("token") or "")
    display_name = str(form.get("display_name") or "").strip()[:200]
    password = str(form.get("password") or "")
    try:
        csrf.check(request, form.get(csrf.FIELD), request.cookies.get(INVITE_COOKIE))
    except csrf.CsrfRefused as exc:
        return render("error.html", 403, status=403, message=exc.message)
    async with _connection(request) as conn:
        try:
            invitation = await invitations.lookup(conn, token)
        except NotFound as exc:
            return _invite_page(request, token, None, None, "", status=404, error=exc.message)
        problem = None
        if not MIN_PASSWORD <= len(password) <= 1024:
            problem = f"Choose a password of {MIN_PASSWORD} to 1024 characters."
        elif password != str(form.get("password2") or ""):
            problem = "The two passwords differ."
        elif not display_name.isprintable():
            problem = "The name may not hold control characters."
        if problem is None:
            try:
                user_id, _ = await invitations.redeem_new_account(
                    conn, token, password=password, display_name=display_name
                )
                refresh = await start_session(conn, user_id)
            except JobyardError as exc:
                problem = exc.message
        if problem is not None:
            return _invite_page(request, token, invitation, None, "", status=422,
                                error=problem, display_name=display_name)  # fmt: skip
    response = _see_other("/projects?done=joined")
    apply_cookies(request, response, session_cookies(get_keys(request), refresh))
    response.delete_cookie(INVITE_COOKIE, path="/invite")
    return response


@router.post("/invite/accept")
async def accept(request: Request) -> Response:
    """An existing account, signed in: its membership starts now."""

    async def build(ctx: Ctx) -> Response:
        token = _form(ctx, "token")
        await invitations.accept(
            ctx.conn, token, user_id=ctx.session.user.id, email=ctx.session.user.email
        )
        return _see_other("/projects?done=joined")

    return await _handle(request, build)
