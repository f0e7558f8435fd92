"""Tasks the acceptance tests run in real `python -m jobyard worker` processes."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from jobyard.worker.app import App
from jobyard.worker.context import JobContext

app = App(project="test/proj")


@app.task
def stubborn(ctx: JobContext, seconds: float = 30.0) -> None:
    """Ignores cancellation: a blocking call in a thread that never checks ctx.is_cancelled()."""
    time.sleep(seconds)


@app.task
async def raises_on_cancel(ctx: JobContext, seconds: float = 30.0) -> None:
    """Reacts to cancellation by raising its own error (an aborted handler, not a failed one)."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        raise RuntimeError("aborted by shutdown") from None


@app.task
async def quick(ctx: JobContext, seconds: float = 0.3) -> str:
    await asyncio.sleep(seconds)
    return "done"


@app.task
async def kills_its_worker(ctx: JobContext) -> None:
    """A poison pill: every run takes the whole worker process down."""
    os.kill(os.getpid(), signal.SIGKILL)


@app.task
async def exits_137(ctx: JobContext) -> None:
    """A poison pill that takes its worker down the way a crashing C extension or the OOM
    killer's victim would look: the process ends at once, nothing unwinds."""
    os._exit(137)


@app.task
async def sleepy(ctx: JobContext, seconds: float) -> int:
    await asyncio.sleep(seconds)
    return ctx.execution_seq
