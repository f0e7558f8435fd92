"""PgQueuer's single enqueue against a bare insert, both sent by asyncpg, for
benchmarks/profile/enqueue_split.py.

Runs in the peer venv (never imports jobyard). `--setup` (re)creates the database with
PgQueuer's schema (`pgq install`) and a bare table, and prints its URL. Without it, one round
on that database: `--calls` calls of each, one connection, every call its own transaction
(asyncpg's default), the two in the order `--round` gives (reversed on odd rounds), each after
50 untimed calls that prepare its statement. Prints one JSON object: µs a call of each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import asyncpg
from bench import ENTRYPOINT, Bench, connect

WARM_CALLS: Final = 50
BARE_TABLE: Final = """
CREATE TABLE bare_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                        payload jsonb NOT NULL DEFAULT '{}',
                        created_at timestamptz NOT NULL DEFAULT now())"""


async def setup(admin_url: str, workdir: Path) -> str:
    url = await Bench(admin_url, workdir).fresh_database("enqueue_calls")
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(BARE_TABLE)
    finally:
        await conn.close()
    return url


async def one_round(url: str, calls: int, round_no: int) -> dict[str, float]:
    conn, queries = await connect(url)

    async def pgqueuer() -> None:
        await queries.enqueue(ENTRYPOINT, None)

    async def bare() -> None:
        await conn.fetchval("INSERT INTO bare_jobs DEFAULT VALUES RETURNING id")

    sides: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("pgqueuer_us", pgqueuer),
        ("bare_us", bare),
    ]
    if round_no % 2:
        sides.reverse()
    result: dict[str, float] = {}
    try:
        for name, call in sides:
            for _ in range(WARM_CALLS):
                await call()
            started = time.perf_counter()
            for _ in range(calls):
                await call()
            result[name] = (time.perf_counter() - started) / calls * 1e6
    finally:
        await conn.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url", required=True, help="the server's admin URL (--setup) or the database's"
    )
    parser.add_argument("--workdir", type=Path, default=Path.cwd())
    parser.add_argument("--setup", action="store_true")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--round", type=int, default=0)
    args = parser.parse_args()
    if args.setup:
        print(asyncio.run(setup(args.url, args.workdir)))
    else:
        print(json.dumps(asyncio.run(one_round(args.url, args.calls, args.round))))


if __name__ == "__main__":
    main()
