"""CSRF defence for every state-changing dashboard form: a token and a same-origin check.

- Signed-in forms carry a per-session token: an HMAC of the session's refresh family under a key
  derived from the server secret. It is stable for the whole session (rotation keeps the family)
  and worthless for any other session.
- The login form (no session yet) uses a double-submit token: a random value in a cookie and in
  the form, which a cross-site page can neither read nor set.
- Every POST must also come from this origin: its Origin header (or, when a browser sends none,
  its Referer) must name the scheme, host and port the request was sent to.
Either check failing refuses the request with 403 before anything is read or changed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from typing import Final
from urllib.parse import urlsplit

from fastapi import Request

from jobyard.core.auth import SigningKeys
from jobyard.domain.errors import JobyardError

FIELD: Final = "csrf_token"
LOGIN_COOKIE: Final = "jy_login_csrf"


class CsrfRefused(JobyardError):
    """This form could not be verified as coming from this dashboard; reload the page and retry."""

    code = "csrf_refused"


def session_token(keys: SigningKeys, family_id: uuid.UUID) -> str:
    key = hmac.new(keys.access, b"jobyard/dashboard-csrf/v1", hashlib.sha256).digest()
    return hmac.new(key, family_id.bytes, hashlib.sha256).hexdigest()


def new_login_token() -> str:
    return secrets.token_urlsafe(32)


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def same_origin(request: Request) -> bool:
    """Whether the browser says this request was sent from a page of this origin."""
    here = f"{request.url.scheme}://{request.url.netloc}".lower()
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        return origin.lower() == here
    referer = request.headers.get("referer")
    if referer:
        return _origin_of(referer) == here
    return False


def check(request: Request, submitted: object, expected: str | None) -> None:
    """Raise CsrfRefused unless the request is same-origin and carries the expected token."""
    if not same_origin(request):
        raise CsrfRefused("this form was not sent from this dashboard's origin")
    if (
        not expected
        or not isinstance(submitted, str)
        or not hmac.compare_digest(submitted.encode(), expected.encode())
    ):
        raise CsrfRefused()
