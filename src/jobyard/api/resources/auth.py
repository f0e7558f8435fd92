"""Login, token refresh (rotation with reuse detection), logout, password change, me."""

from __future__ import annotations

from fastapi import Request, Response

from jobyard.api.auth import ACCESS_TTL_S, issue_access_token
from jobyard.api.deps import ConnDep, KeysDep, PrincipalDep, UserDep
from jobyard.api.ratelimit import forgive_login_attempt, take_login_attempt
from jobyard.api.routes import Route, Scope
from jobyard.api.schemas import LoginRequest, Me, MyOrg, PasswordChange, RefreshRequest, TokenPair
from jobyard.core import auth as core_auth
from jobyard.core import tenancy
from jobyard.core.auth import IssuedRefresh, SigningKeys
from jobyard.logs import get_logger

log = get_logger("jobyard.api.auth")


def _pair(keys: SigningKeys, refresh: IssuedRefresh) -> TokenPair:
    access, _ = issue_access_token(keys, refresh.user_id, refresh.family_id)
    return TokenPair(
        access_token=access,
        expires_in=ACCESS_TTL_S,
        refresh_token=refresh.token,
        refresh_expires_at=refresh.expires_at,
    )


async def login(body: LoginRequest, request: Request, conn: ConnDep, keys: KeysDep) -> TokenPair:
    """Exchange email and password for an access token (15 min) and a refresh token (7 days).

    5 failed attempts per 15 minutes per account and client IP (429 with Retry-After)."""
    await take_login_attempt(conn, request, body.email)
    user = await core_auth.authenticate_password(conn, body.email, body.password)
    await forgive_login_attempt(conn, request, body.email)
    refresh = await core_auth.start_session(conn, user.id)
    log.info("login", user_id=user.id)
    return _pair(keys, refresh)


async def refresh(body: RefreshRequest, conn: ConnDep, keys: KeysDep) -> TokenPair:
    """Rotate a refresh token: it is used up and its successor returned with a new access token.

    Presenting a used token again ends every session of that login (reuse detection), except
    within 10 s of its rotation, when the same successor is returned again (a retry after a
    lost response).
    """
    issued = await core_auth.rotate_refresh(conn, keys, body.refresh_token)
    return _pair(keys, issued)


async def logout(principal: PrincipalDep, conn: ConnDep) -> Response:
    """End this session: its refresh tokens and access tokens stop working at once."""
    assert principal.family_id is not None
    await core_auth.revoke_family(conn, principal.family_id)
    return Response(status_code=204)


async def change_password(body: PasswordChange, principal: PrincipalDep, conn: ConnDep) -> Response:
    """Change your password; every other session of yours is ended."""
    assert principal.user is not None and principal.family_id is not None
    await core_auth.change_password(
        conn,
        principal.user.id,
        body.current_password,
        body.new_password,
        keep_family_id=principal.family_id,
    )
    return Response(status_code=204)


async def me(user: UserDep, conn: ConnDep) -> Me:
    """You, and the organizations you belong to with your role in each."""
    orgs = await tenancy.org_page_for_user(conn, user.id, after_id=0, limit=1000)
    return Me(
        id=user.id,
        email=user.email,
        display_name=user.display_name,
        orgs=[MyOrg(id=o["id"], name=o["name"], slug=o["slug"], role=o["role"]) for o in orgs],
    )


TAGS = ("auth",)
ROUTES: tuple[Route, ...] = (
    Route("POST", "/auth/login", Scope.PUBLIC, login, summary="Log in",
          response_model=TokenPair, tags=TAGS, rate_limit="login",
          responses={401: "wrong email or password"}),
    Route("POST", "/auth/refresh", Scope.PUBLIC, refresh, summary="Rotate a refresh token",
          response_model=TokenPair, tags=TAGS, rate_limit="auth",
          responses={401: "invalid, expired, used or revoked refresh token"}),
    Route("POST", "/auth/logout", Scope.USER, logout, status_code=204, summary="Log out",
          tags=TAGS),
    Route("POST", "/auth/password", Scope.USER, change_password, status_code=204,
          summary="Change your password", tags=TAGS, operation_id="auth_change_password"),
    Route("GET", "/auth/me", Scope.USER, me, summary="Who am I", response_model=Me, tags=TAGS),
)  # fmt: skip
