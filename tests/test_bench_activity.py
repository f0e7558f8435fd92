"""The timeline's activity sampler (benchmarks/activity.py) on real sessions: one asleep in a
statement, one running a VACUUM slowed by the cost delay. Never a timing assertion: the sampler
is stopped only once it has seen both."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from jobyard.benchmarks.activity import Activity, ActivitySampler, statement_name
from jobyard.db import run
from jobyard.db.pool import connect
from jobyard.db.queries import QUERIES


async def test_the_sampler_names_wait_events_and_the_tables_being_vacuumed(db_url: str) -> None:
    setup = await connect(db_url, autocommit=True)
    sleeper = await connect(db_url, autocommit=True)
    vacuumer = await connect(db_url, autocommit=True, application_name="slow-vacuum")
    sampler = ActivitySampler(db_url, interval_s=0.05)
    sleeping = vacuuming = asyncio.ensure_future(asyncio.sleep(0))
    try:
        await setup.execute(
            "CREATE TABLE activity_probe AS SELECT g AS id, repeat('x', 200) AS pad"
            " FROM generate_series(1, 20000) g"
        )
        await setup.execute("DELETE FROM activity_probe")
        # Every page read costs the whole limit, then a nap: the VACUUM lasts many samples.
        await vacuumer.execute("SET vacuum_cost_limit = 1")
        await vacuumer.execute("SET vacuum_cost_delay = '20ms'")
        await sampler.start()
        sleeping = asyncio.create_task(sleeper.execute("SELECT pg_sleep(60)"))
        vacuuming = asyncio.create_task(vacuumer.execute("VACUUM activity_probe"))
        waits: dict[str, int] = {}
        vacuums: dict[str, int] = {}
        statements: dict[str, int] = {}
        looks = 0

        def seen_all() -> bool:
            return (
                "Timeout:PgSleep" in waits
                and "Timeout:VacuumDelay" in waits
                and any(k.startswith("activity_probe: VACUUM ") for k in vacuums)
            )

        # Bounded so that a sampler that never sees them fails instead of hanging (the VACUUM
        # alone lasts about ten seconds at this cost delay).
        for _ in range(300):
            if seen_all():
                break
            await asyncio.sleep(0.1)
            seen = sampler.take()
            looks += seen.samples
            for key, count in seen.waits.items():
                waits[key] = waits.get(key, 0) + count
            for key, count in seen.maintenance.items():
                vacuums[key] = vacuums.get(key, 0) + count
            for key, count in seen.statements.items():
                statements[key] = statements.get(key, 0) + count
        assert seen_all(), (waits, vacuums)
        assert looks > 0
        # Who ran it is in the key: this session's name, not autovacuum.
        assert any(k.endswith("(slow-vacuum)") for k in vacuums), vacuums
        # take() hands each look over once.
        await sampler.stop()
        assert sampler.take() == Activity()
        # Neither statement is one of jobyard's named queries.
        assert set(statements) == {"other"}, statements
    finally:
        await sampler.stop()
        for conn in (sleeper, vacuumer):
            await setup.execute("SELECT pg_cancel_backend(%s)", (conn.info.backend_pid,))
        # The cancelled statements end with an error, which is the point.
        await asyncio.gather(sleeping, vacuuming, return_exceptions=True)
        for conn in (setup, sleeper, vacuumer):
            await conn.close()


async def _as_the_server_shows(db_url: str, name: str, params: dict[str, Any]) -> str:
    """Run a named query as the engine does and read back its text from pg_stat_activity."""
    conn = await connect(db_url, autocommit=True)
    observer = await connect(db_url, autocommit=True)
    try:
        await run.all_rows(conn, name, params)
        cur = await observer.execute(
            "SELECT query FROM pg_stat_activity WHERE pid = %s", (conn.info.backend_pid,)
        )
        row = await cur.fetchone()
        assert row is not None
        return str(row["query"])
    finally:
        await conn.close()
        await observer.close()


async def test_a_statement_is_named_by_its_text_as_the_server_shows_it(db_url: str) -> None:
    bounds = [datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)]
    text = await _as_the_server_shows(db_url, "bench_timeline_completions", {"bounds": bounds})
    assert "$1" in text  # placeholders as the server numbers them
    assert statement_name(text) == "bench_timeline_completions"
    assert statement_name("SELECT 1") == "other"


async def test_the_claims_are_named_from_the_first_kilobyte_the_server_keeps(db_url: str) -> None:
    # On a queue that does not exist the claim takes nothing.
    params: dict[str, Any] = {
        "queue_id": -1, "worker_id": -1, "n": 1, "lease_s": 30, "start": True, "solo": False,
        "limited": False, "now": None,
    }  # fmt: skip
    after = {"after_npriority": 0, "after_run_at": datetime.now(UTC), "after_job_id": 0}
    for name, extra in (("job_claim_batch", {}), ("job_claim_batch_after", after)):
        text = await _as_the_server_shows(db_url, name, {**params, **extra})
        assert len(text.encode()) < len(QUERIES[name].statement.encode())  # cut by the server
        assert statement_name(text) == name
