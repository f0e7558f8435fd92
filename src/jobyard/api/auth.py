"""Access tokens (JWT) and turning request credentials into a principal.

Access tokens: HS256 only (pinned on decode, so `none` and RS256/HS256 key confusion are
refused), 15 minutes, `iss`/`aud` checked, `kid` must name the current key, `typ` must be
"access", and `sid` names the refresh family so revoking the family ends the token at once.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import jwt

from jobyard.core.auth import (
    API_KEY_PREFIX,
    REFRESH_PREFIX,
    ApiKeyPrincipal,
    AuthenticationFailed,
    SessionUser,
    SigningKeys,
    authenticate_api_key,
    session_user,
)
from jobyard.db.pool import Conn
from jobyard.domain.ids import UserId

ALGORITHM: Final = "HS256"
ISSUER: Final = "jobyard"
AUDIENCE: Final = "jobyard-api"
ACCESS_TTL_S: Final = 15 * 60
_REQUIRED: Final = ["exp", "iat", "nbf", "iss", "aud", "sub", "typ", "sid", "jti"]


@dataclass(frozen=True)
class AccessClaims:
    user_id: UserId
    family_id: uuid.UUID
    expires_at: datetime


@dataclass(frozen=True)
class Principal:
    """Who is calling: a signed-in user (with the session's refresh family) or an API key."""

    user: SessionUser | None = None
    family_id: uuid.UUID | None = None
    api_key: ApiKeyPrincipal | None = None

    @property
    def kind(self) -> str:
        return "user" if self.user is not None else "api_key"


def issue_access_token(
    keys: SigningKeys, user_id: UserId, family_id: uuid.UUID, *, now: datetime | None = None
) -> tuple[str, datetime]:
    issued = (now or datetime.now(UTC)).replace(microsecond=0)
    expires = issued + timedelta(seconds=ACCESS_TTL_S)
    claims: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": str(user_id),
        "typ": "access",
        "sid": str(family_id),
        "jti": secrets.token_hex(8),
        "iat": issued,
        "nbf": issued,
        "exp": expires,
    }
    token = jwt.encode(claims, keys.access, algorithm=ALGORITHM, headers={"kid": keys.kid})
    return token, expires


def decode_access_token(keys: SigningKeys, token: str) -> AccessClaims:
    """Verify every property of an access token; any failure is the same AuthenticationFailed."""
    invalid = AuthenticationFailed("invalid or expired access token")
    try:
        header = jwt.get_unverified_header(token)
        # Checked before the signature so a token minted under another key fails plainly.
        if header.get("alg") != ALGORITHM or header.get("kid") != keys.kid:
            raise invalid
        claims = jwt.decode(
            token,
            keys.access,
            algorithms=[ALGORITHM],
            audience=AUDIENCE,
            issuer=ISSUER,
            options={"require": _REQUIRED},
            leeway=5,
        )
    except jwt.ExpiredSignatureError:
        raise AuthenticationFailed("access token expired", reason="token_expired") from None
    except jwt.PyJWTError:
        raise invalid from None
    if claims.get("typ") != "access":
        raise invalid
    try:
        user_id = UserId(int(claims["sub"]))
        family_id = uuid.UUID(str(claims["sid"]))
    except (TypeError, ValueError):
        raise invalid from None
    return AccessClaims(user_id, family_id, datetime.fromtimestamp(claims["exp"], UTC))


def bearer_kind(token: str) -> str:
    """Which credential a bearer token is: api_key, refresh or access (JWTs start "ey")."""
    if token.startswith(API_KEY_PREFIX):
        return "api_key"
    if token.startswith(REFRESH_PREFIX):
        return "refresh"
    return "access"


async def resolve_principal(
    conn: Conn, keys: SigningKeys, *, bearer: str | None, api_key: str | None
) -> Principal:
    """The principal for a request's credentials, or AuthenticationFailed (→ 401)."""
    if bearer and api_key:
        raise AuthenticationFailed("send one credential: Authorization or X-API-Key, not both")
    if api_key is None and bearer is not None and bearer_kind(bearer) == "api_key":
        api_key = bearer
        bearer = None
    if api_key is not None:
        key = await authenticate_api_key(conn, api_key)
        if key is None:
            raise AuthenticationFailed("invalid or revoked API key")
        return Principal(api_key=key)
    if not bearer:
        raise AuthenticationFailed()
    if bearer_kind(bearer) == "refresh":
        raise AuthenticationFailed("a refresh token cannot be used as an access token")
    claims = decode_access_token(keys, bearer)
    user = await session_user(conn, claims.user_id, claims.family_id)
    if user is None:
        raise AuthenticationFailed("this session has ended; sign in again")
    return Principal(user=user, family_id=claims.family_id)
