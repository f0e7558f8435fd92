"""Handlers every worker has, registered under fixed names: noop, sleep, fail, http_request."""

from __future__ import annotations

import asyncio
from typing import Any

from jobyard.domain.errors import ValidationFailed
from jobyard.worker.context import JobContext
from jobyard.worker.registry import Registry, TaskSpec

MAX_SLEEP_S = 24 * 3600.0


class HandlerFailed(Exception):
    """Raised by the `fail` handler on purpose (demos and tests)."""


async def noop(ctx: JobContext) -> None:
    """Do nothing and succeed."""


async def sleep(ctx: JobContext) -> dict[str, float]:
    """Sleep `payload.seconds` (default 1); a cancel, timeout or drain interrupts it at once."""
    seconds = _seconds(ctx.payload)
    await asyncio.sleep(seconds)
    return {"slept_s": seconds}


async def fail(ctx: JobContext) -> None:
    """Raise with `payload.message` (default "failed on purpose")."""
    message = "failed on purpose"
    if isinstance(ctx.payload, dict) and isinstance(ctx.payload.get("message"), str):
        message = ctx.payload["message"]
    raise HandlerFailed(message)


async def http_request(ctx: JobContext) -> dict[str, Any]:
    """One SSRF-guarded HTTP request described by the payload (see handlers/http_request.py)."""
    if not isinstance(ctx.payload, dict):
        raise ValidationFailed("http_request needs a JSON object payload", field="payload")
    # Imported on first use: httpx and its transports add ~45 ms to the start of every
    # `jobyard` command and worker, and most workers never send a request.
    from jobyard.worker.handlers.http_request import http_request as send

    return await send(ctx.payload)


def _seconds(payload: Any) -> float:
    value = payload.get("seconds", 1.0) if isinstance(payload, dict) else 1.0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationFailed("sleep needs payload.seconds as a number", field="payload.seconds")
    if not 0 <= value <= MAX_SLEEP_S:
        raise ValidationFailed(
            f"payload.seconds must be between 0 and {MAX_SLEEP_S:g}", field="payload.seconds"
        )
    return float(value)


def builtin_registry() -> Registry:
    registry = Registry()
    for fn in (noop, sleep, fail, http_request):
        registry.add(TaskSpec(name=fn.__name__, fn=fn))
    return registry
