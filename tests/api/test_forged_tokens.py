"""Forged and misused tokens × every authenticated route: all 401 with the error envelope."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from jobyard.api.auth import AUDIENCE, ISSUER, decode_access_token, issue_access_token
from jobyard.core.auth import AuthenticationFailed, SigningKeys
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import UserId
from tests.api.conftest import Tenant
from tests.api.test_isolation import SIGNED_IN_ROUTES, assert_envelope, make_call, route_id, send

_RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
_RSA_PRIVATE_PEM = _RSA.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
)
_RSA_PUBLIC_PEM = _RSA.public_key().public_bytes(
    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _segment(obj: dict[str, Any]) -> str:
    return _b64(json.dumps(obj, separators=(",", ":")).encode())


def _hmac_token(
    header: dict[str, Any], claims: dict[str, Any], key: bytes, digest: str = "sha256"
) -> str:
    """Sign by hand: PyJWT itself refuses a PEM as an HMAC secret, an attacker would not."""
    signing_input = f"{_segment(header)}.{_segment(claims)}"
    sig = hmac.new(key, signing_input.encode(), getattr(hashlib, digest)).digest()
    return f"{signing_input}.{_b64(sig)}"


def _claims(user_id: int, family_id: uuid.UUID, **override: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": str(user_id),
        "typ": "access",
        "sid": str(family_id),
        "jti": "forged",
        "iat": now,
        "nbf": now,
        "exp": now + 600,
    }
    claims.update(override)
    return {k: v for k, v in claims.items() if v is not None}


def forgeries(keys: SigningKeys, user: Any, family_id: uuid.UUID) -> dict[str, str]:
    """name → a bearer token that must be refused. `user` is a real user whose real token is
    tampered with, so every failure is the forgery's, not an unknown user's."""
    good = user.access_token
    header, payload, signature = good.split(".")
    hs = {"alg": "HS256", "typ": "JWT", "kid": keys.kid}
    claims = _claims(user.id, family_id)
    other_user_payload = _segment({**jwt.decode(good, options={"verify_signature": False}),
                                   "sub": str(user.id + 1)})  # fmt: skip
    return {
        "alg none": f"{_segment({'alg': 'none', 'typ': 'JWT', 'kid': keys.kid})}.{payload}.",
        "alg None, signature kept": f"{_segment({'alg': 'None', 'kid': keys.kid})}.{payload}."
        + signature,
        "HS256 signed with an RSA public key": _hmac_token(hs, claims, _RSA_PUBLIC_PEM),
        "RS256 header, HMAC by public key": _hmac_token(
            {**hs, "alg": "RS256"}, claims, _RSA_PUBLIC_PEM
        ),
        "RS256 signed with an attacker's RSA key": jwt.encode(
            claims, _RSA_PRIVATE_PEM, algorithm="RS256", headers={"kid": keys.kid}
        ),
        "HS512 with the right key": _hmac_token(
            {**hs, "alg": "HS512"}, claims, keys.access, "sha512"
        ),
        "tampered payload (another user)": f"{header}.{other_user_payload}.{signature}",
        "tampered signature": f"{header}.{payload}.{signature[:-4]}AAAA",
        "expired": issue_access_token(
            keys, UserId(user.id), family_id, now=datetime.now(UTC) - timedelta(hours=1)
        )[0],
        "not yet valid": _hmac_token(
            hs, _claims(user.id, family_id, nbf=int(time.time()) + 3600), keys.access
        ),
        "wrong audience": _hmac_token(hs, _claims(user.id, family_id, aud="other"), keys.access),
        "wrong issuer": _hmac_token(hs, _claims(user.id, family_id, iss="evil"), keys.access),
        "bad kid": _hmac_token({**hs, "kid": "not-our-key"}, claims, keys.access),
        "no kid": _hmac_token({"alg": "HS256", "typ": "JWT"}, claims, keys.access),
        "typ refresh": _hmac_token(hs, _claims(user.id, family_id, typ="refresh"), keys.access),
        "no typ": _hmac_token(hs, _claims(user.id, family_id, typ=None), keys.access),
        "no exp": _hmac_token(hs, _claims(user.id, family_id, exp=None), keys.access),
        "signed with another secret": jwt.encode(
            claims,
            SigningKeys.derive("another-secret-entirely-0123456789abcdef").access,
            algorithm="HS256",
            headers={"kid": keys.kid},
        ),
        "unknown session family": _hmac_token(hs, _claims(user.id, uuid.uuid4()), keys.access),
        "refresh token as access token": user.refresh_token,
        "garbage": "not-a-token",
        "revoked-looking API key": "jy_" + "A" * 43,
    }


async def _family(conn: Conn, user_id: int) -> uuid.UUID:
    cur = await conn.execute("SELECT family_id FROM refresh_tokens WHERE user_id = %s", (user_id,))
    row = await cur.fetchone()
    assert row is not None
    family: uuid.UUID = row["family_id"]
    return family


def test_the_unforged_token_decodes(signing_keys: SigningKeys) -> None:
    """The forgeries are built from tokens that really are valid (a control for the suite)."""
    family = uuid.uuid4()
    token, _ = issue_access_token(signing_keys, UserId(7), family)
    assert decode_access_token(signing_keys, token).user_id == 7
    forged = _hmac_token(
        {"alg": "HS256", "typ": "JWT", "kid": signing_keys.kid},
        _claims(7, family),
        signing_keys.access,
    )
    assert decode_access_token(signing_keys, forged).family_id == family
    with pytest.raises(AuthenticationFailed):
        decode_access_token(signing_keys, forged[:-2])


@pytest.mark.parametrize("route", SIGNED_IN_ROUTES, ids=route_id)
async def test_forged_tokens_are_refused(
    route: Any,
    client: httpx.AsyncClient,
    conn: Conn,
    tenant_a: Tenant,
    signing_keys: SigningKeys,
) -> None:
    call = await make_call(route, conn, tenant_a, signing_keys)
    owner = tenant_a.users[Role.OWNER]
    family = await _family(conn, owner.id)
    failures = []
    for name, token in forgeries(signing_keys, owner, family).items():
        response = await send(client, route, call, {"Authorization": f"Bearer {token}"})
        if response.status_code != 401:
            failures.append(f"{name}: {response.status_code} {response.text}")
            continue
        assert_envelope(response, 401, "unauthenticated")
        assert token not in response.text
    # A JWT in the API-key header is no API key.
    response = await send(client, route, call, {"X-API-Key": owner.access_token})
    if response.status_code != 401:
        failures.append(f"access token as X-API-Key: {response.status_code}")
    # Two credentials at once are ambiguous, even if both are valid.
    both = {**owner.headers, "X-API-Key": tenant_a.api_keys[Role.ADMIN]}
    response = await send(client, route, call, both)
    if response.status_code != 401:
        failures.append(f"bearer and X-API-Key together: {response.status_code}")
    assert failures == []
