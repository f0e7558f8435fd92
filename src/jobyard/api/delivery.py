"""How an invitation reaches the invitee: a small seam a deployment replaces.

jobyard has no mail server. The default delivery writes the invitation link in one log line
(`invitation link`), where a mail would go: in `jobyard demo` the operator copies it from the
terminal. A deployment points `JOBYARD_INVITATION_DELIVERY` at `package.module:function`, an
async function taking an `InvitationMessage` (send a mail, post to a chat, …); it is imported
once at start-up. A delivery that raises is logged and the invitation stays (re-send it).

The link carries the token in its query string (never logged by the request log, which keeps
the path only); it is built from `JOBYARD_PUBLIC_URL`, never from the request's Host header, so
a forged Host cannot make the API send a victim a link to another site.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from jobyard.domain.errors import ConfigurationError
from jobyard.domain.settings import Settings
from jobyard.logs import get_logger

log = get_logger("jobyard.api.invitations")


@dataclass(frozen=True)
class InvitationMessage:
    email: str
    org_name: str
    role: str
    inviter: str
    link: str
    expires_at: datetime


Deliver = Callable[[InvitationMessage], Awaitable[None]]


async def log_delivery(message: InvitationMessage) -> None:
    """The stand-in for a mail: one log line with the link, for the operator to pass on."""
    log.warning(
        "invitation link",
        to=message.email,
        org=message.org_name,
        role=message.role,
        link=message.link,
        expires_at=message.expires_at.isoformat(),
    )


def public_url(settings: Settings) -> str:
    if settings.public_url:
        return settings.public_url.rstrip("/")
    return f"http://{settings.api_host}:{settings.api_port}"


def invitation_link(settings: Settings, token: str) -> str:
    return f"{public_url(settings)}/invite?{urlencode({'token': token})}"


def load_delivery(settings: Settings) -> Deliver:
    """The configured delivery: "log" (the default) or an async `package.module:function`."""
    spec = settings.invitation_delivery
    if spec == "log":
        return log_delivery
    module_name, _, attr = spec.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigurationError(
            f"JOBYARD_INVITATION_DELIVERY={spec!r} cannot be imported ({type(exc).__name__}); "
            "give `package.module:function`"
        ) from None
    if not inspect.iscoroutinefunction(target):
        raise ConfigurationError(f"JOBYARD_INVITATION_DELIVERY={spec!r} must be an async function")
    deliver: Deliver = target
    return deliver
