"""The tasks benchmarks/suspects/run.py runs in real `jobyard worker` processes."""

from __future__ import annotations

import asyncio
import os

from jobyard.worker.app import App
from jobyard.worker.context import JobContext

app = App(project="bench/suspects")


@app.task
async def quick(ctx: JobContext, seconds: float = 0.02) -> str:
    """A healthy job: waits a little and succeeds."""
    await asyncio.sleep(seconds)
    return "done"


@app.task
async def exits_137(ctx: JobContext) -> None:
    """The poison pill: its worker process ends at once, as under the OOM killer."""
    os._exit(137)
