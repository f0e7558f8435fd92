"""A deliberately broken jobs_final_effects for the break recorded in docs/TESTING.md: the
batch step decides from a count over `jobs` with its own snapshot instead of updating the
batch row's counters under its row lock. Installed only when JOBYARD_BREAK_BATCH_LOCK=1."""

from __future__ import annotations

import importlib

from jobyard.db.pool import Conn

_MIGRATION = "jobyard.db.migrations.versions.2026_12_03_1800_0013_batch_counts_on_read"

_BROKEN_LOOP = """    FOR b IN
        SELECT jb.id, jb.project_id, jb.size, jb.callbacks, jb.completed_at,
               c.done, c.failed, c.cancelled
        FROM job_batches jb, LATERAL (
            SELECT count(*) FILTER (WHERE j.status = 'done') AS done,
                   count(*) FILTER (WHERE j.status = 'dead_letter') AS failed,
                   count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled
            FROM jobs j WHERE j.batch_id = jb.id) c
        WHERE jb.id IN (SELECT DISTINCT nj.batch_id FROM new_jobs nj WHERE nj.batch_id IS NOT NULL)
    LOOP
"""


def broken_function() -> str:
    source: str = importlib.import_module(_MIGRATION).UPGRADE
    start = source.index("CREATE OR REPLACE FUNCTION jobs_final_effects()")
    body = source[start:]
    loop_start = body.index("    FOR b IN\n")
    loop_end = body.index("    LOOP\n", loop_start) + len("    LOOP\n")
    return body[:loop_start] + _BROKEN_LOOP + body[loop_end:]


async def install(conn: Conn) -> None:
    await conn.execute(broken_function())  # type: ignore[arg-type]
