"""Tasks the workflow tests run in real `python -m jobyard worker` processes."""

from __future__ import annotations

import asyncio
from typing import Any

from jobyard.worker.app import App
from jobyard.worker.context import JobContext

app = App(project="test/proj")


@app.task
async def tick(ctx: JobContext, i: int = 0) -> int:
    return i


@app.task
async def batch_done(ctx: JobContext, batch: dict[str, Any], tag: str = "") -> dict[str, Any]:
    """A batch callback: its payload carries the batch's counts."""
    return batch


@app.task
async def add(ctx: JobContext, n: int = 0) -> int:
    """n plus the sum of the parents' results."""
    results = await ctx.parent_results()
    return n + sum(v for v in results.values() if isinstance(v, int))


@app.task
def add_blocking(ctx: JobContext, n: int = 0) -> int:
    """`add` as a plain def handler (runs in a worker thread)."""
    results = ctx.parent_results_sync()
    return n + sum(v for v in results.values() if isinstance(v, int))


@app.task
async def fails_first_run(ctx: JobContext) -> str:
    """Fails its first physical run, succeeds after (a step an operator retries)."""
    if ctx.execution_seq == 1:
        raise RuntimeError("first run fails")
    return "recovered"


@app.task
async def slow_add(ctx: JobContext, seconds: float = 1.5) -> int:
    await asyncio.sleep(seconds)
    results = await ctx.parent_results()
    return 1 + sum(v for v in results.values() if isinstance(v, int))
