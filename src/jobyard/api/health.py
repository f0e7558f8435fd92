"""`/healthz` (the process is alive; touches nothing) and `/readyz` (the database answers and its
schema is at the migration head this code expects). Outside the route table: they need no
credentials, no tenant and no rate limit, and load balancers poll them constantly.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from jobyard.api.errors import envelope, request_id_of
from jobyard.db import run
from jobyard.db.pool import Pool
from jobyard.logs import get_logger

log = get_logger("jobyard.api.health")

READY_TIMEOUT_S = 3.0
HEALTH_PATHS = ("/healthz", "/readyz")


async def healthz() -> dict[str, str]:
    return {"status": "ok"}


async def _schema_revision(pool: Pool) -> str | None:
    async with pool.connection(timeout=READY_TIMEOUT_S) as conn:
        row = await run.one(conn, "health_schema_revision")
    return None if row is None else str(row["version_num"])


async def readyz(request: Request) -> Any:
    expected: str = request.app.state.schema_head
    pool: Pool | None = request.app.state.pool
    checks: dict[str, str] = {"database": "unreachable", "migrations": "unknown"}
    if pool is not None:
        try:
            revision = await asyncio.wait_for(_schema_revision(pool), READY_TIMEOUT_S)
        except Exception as exc:  # any failure means "not ready"; the reason goes to the log
            log.warning("readiness check failed", error=type(exc).__name__)
            if "UndefinedTable" in type(exc).__name__:
                checks = {"database": "ok", "migrations": "not migrated"}
        else:
            checks["database"] = "ok"
            checks["migrations"] = (
                "at head" if revision == expected else f"at {revision}, expected {expected}"
            )
    if checks == {"database": "ok", "migrations": "at head"}:
        return {"status": "ready", "checks": checks}
    return envelope(
        503, "not_ready", "not ready", {"checks": checks}, request_id=request_id_of(request)
    )


def mount_health(app: FastAPI) -> None:
    app.add_api_route("/healthz", healthz, methods=["GET"], include_in_schema=False)
    app.add_api_route(
        "/readyz", readyz, methods=["GET"], include_in_schema=False, response_class=JSONResponse
    )
