"""PgQueuer worker factory for `pgq run pgq_worker:create` (one no-op entrypoint, `noop`).

The DSN comes from PGQ_BENCH_DSN. One asyncpg connection per worker process, PgQueuer's
documented `from_asyncpg_connection` setup. Runs in the peer venv, never imports jobyard.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.models import Job


@asynccontextmanager
async def create() -> AsyncGenerator[PgQueuer, None]:
    connection = await asyncpg.connect(os.environ["PGQ_BENCH_DSN"])
    pgq = PgQueuer.from_asyncpg_connection(connection)

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    try:
        yield pgq
    finally:
        await connection.close()
