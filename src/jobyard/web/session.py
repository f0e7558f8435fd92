"""Dashboard sessions: the API's own login family, carried in two httpOnly cookies.

A login starts a refresh-token family (core.auth.start_session), exactly like the API's login.
The access JWT (15 min) and the refresh token (7 days) live in httpOnly, SameSite=Lax cookies
(Secure when the request came over https). When the access token has expired, the next request
rotates the refresh token once (core's grace window covers parallel polls doing the same), so
logout — revoking the family — ends every cookie of the session at once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Final

from fastapi import Request, Response

from jobyard.api.auth import decode_access_token, issue_access_token
from jobyard.core import auth as core_auth
from jobyard.core.auth import AuthenticationFailed, SessionUser, SigningKeys
from jobyard.db.pool import Conn
from jobyard.domain.ids import UserId

ACCESS_COOKIE: Final = "jy_access"
REFRESH_COOKIE: Final = "jy_refresh"


@dataclass
class WebSession:
    """The signed-in user of a dashboard request, and cookies to send back (after a rotation)."""

    user: SessionUser
    family_id: uuid.UUID
    new_cookies: dict[str, tuple[str, int]] = field(default_factory=dict)


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def set_cookie(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="lax",
        secure=_secure(request),
    )


def session_cookies(
    keys: SigningKeys, refresh: core_auth.IssuedRefresh
) -> dict[str, tuple[str, int]]:
    """Cookie name → (value, max-age) for a session's fresh access token and refresh token."""
    access, _ = issue_access_token(keys, refresh.user_id, refresh.family_id)
    return {
        ACCESS_COOKIE: (access, core_auth.REFRESH_TTL_S),
        REFRESH_COOKIE: (refresh.token, core_auth.REFRESH_TTL_S),
    }


Cookies = dict[str, tuple[str, int]]


def apply_cookies(request: Request, response: Response, cookies: Cookies) -> None:
    for name, (value, max_age) in cookies.items():
        set_cookie(request, response, name, value, max_age)


def clear_cookies(request: Request, response: Response) -> None:
    for name in (ACCESS_COOKIE, REFRESH_COOKIE):
        response.delete_cookie(
            name, path="/", httponly=True, samesite="lax", secure=_secure(request)
        )


async def log_in(
    conn: Conn, keys: SigningKeys, email: str, password: str
) -> tuple[SessionUser, dict[str, tuple[str, int]]]:
    """Check the password (the API's argon2 check) and start a session family."""
    user = await core_auth.authenticate_password(conn, email, password)
    refresh = await core_auth.start_session(conn, user.id)
    return user, session_cookies(keys, refresh)


async def _from_access(conn: Conn, keys: SigningKeys, token: str) -> WebSession | None:
    claims = decode_access_token(keys, token)
    user = await core_auth.session_user(conn, claims.user_id, claims.family_id)
    return None if user is None else WebSession(user, claims.family_id)


async def resolve(conn: Conn, keys: SigningKeys, request: Request) -> WebSession | None:
    """The session behind the request's cookies, or None (not signed in, ended, or invalid)."""
    access = request.cookies.get(ACCESS_COOKIE)
    if access:
        try:
            return await _from_access(conn, keys, access)
        except AuthenticationFailed as exc:
            if exc.details.get("reason") != "token_expired":
                return None
    refresh = request.cookies.get(REFRESH_COOKIE)
    if not refresh:
        return None
    try:
        issued = await core_auth.rotate_refresh(conn, keys, refresh)
    except AuthenticationFailed:
        return None
    user = await core_auth.session_user(conn, UserId(issued.user_id), issued.family_id)
    if user is None:
        return None
    return WebSession(user, issued.family_id, session_cookies(keys, issued))


async def log_out(conn: Conn, session: WebSession) -> None:
    """Revoke the session's family: its access and refresh cookies stop working at once."""
    await core_auth.revoke_family(conn, session.family_id)
