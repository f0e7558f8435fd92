"""Text no PostgreSQL column can hold, handed over by a handler.

A Python string may carry NUL or a lone surrogate; `text` and `jsonb` refuse both. What a
handler says about its job (the exception, its traceback, log lines, progress) is stored with
them written as escapes; what it returns as data is refused as InvalidResult. Either way the
job reaches its final state and the jobs beside it in the same completion batch are untouched.
Before, the refused write escaped the completion callback and left the job `running` until
its lease expired (and the same on every retry).
"""

from __future__ import annotations

from typing import Any

from jobyard.db.pool import Conn
from jobyard.worker.app import App
from jobyard.worker.context import JobContext
from tests.worker.helpers import PROJECT, eventually, job_status, rows, running_worker, scalar

FINAL = ("done", "dead_letter")


async def _final(conn: Conn, job_id: int) -> bool:
    return await job_status(conn, job_id) in FINAL


async def test_text_a_handler_says_is_stored_escaped_and_data_it_returns_is_refused(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)

    @app.task(max_attempts=1)
    async def raises(ctx: JobContext, text: str) -> Any:
        raise ValueError(f"bad {chr(int(text, 16))} text")

    @app.task(max_attempts=1)
    async def says(ctx: JobContext, text: str) -> Any:
        odd = chr(int(text, 16))
        await ctx.logger.info(f"line {odd}", extra=odd, **{f"key{odd}": 1})
        await ctx.progress(0.5, f"half {odd}")

    @app.task(max_attempts=1)
    async def returns(ctx: JobContext, text: str) -> Any:
        return {"s": f"a{chr(int(text, 16))}b"}

    @app.task(max_attempts=1)
    async def fine(ctx: JobContext) -> Any:
        return {"ok": True}

    # Payloads carry the code point as hex: the payload itself must be storable.
    jobs = {
        (task.name, odd): await task.defer(text=odd)
        for task in (raises, says, returns)
        for odd in ("0", "d800")
    }
    neighbours = [await fine.defer() for _ in range(5)]
    async with running_worker(db_url, app):
        for job in [*jobs.values(), *neighbours]:
            await eventually(lambda job=job: _final(conn, job.id), timeout=20)

    async def error(key: tuple[str, str]) -> str:
        return str(await scalar(conn, "SELECT last_error FROM jobs WHERE id = %s", jobs[key].id))

    refusals = {
        "0": "result.s: must not contain the NUL character",
        "d800": "a string holds a lone surrogate",
    }
    for odd, escaped in (("0", "\\x00"), ("d800", "\\ud800")):
        assert await job_status(conn, jobs["raises", odd].id) == "dead_letter"
        assert await error(("raises", odd)) == f"ValueError: bad {escaped} text"
        traceback = await scalar(
            conn,
            "SELECT traceback FROM job_executions WHERE job_id = %s",
            jobs["raises", odd].id,
        )
        assert f"bad {escaped} text" in traceback

        assert await job_status(conn, jobs["says", odd].id) == "done"
        (line,) = await rows(
            conn,
            "SELECT message, fields FROM job_logs WHERE job_id = %s",
            jobs["says", odd].id,
        )
        assert line["message"] == f"line {escaped}"
        assert line["fields"] == {"extra": escaped, f"key{escaped}": 1}
        progress = await scalar(
            conn, "SELECT progress_message FROM jobs WHERE id = %s", jobs["says", odd].id
        )
        assert progress == f"half {escaped}"

        # Data is not altered: the result is refused, and says why.
        assert await job_status(conn, jobs["returns", odd].id) == "dead_letter"
        assert (await error(("returns", odd))).startswith(
            f"InvalidResult: the handler's result cannot be stored: {refusals[odd]}"
        )
    for job in neighbours:
        assert await job_status(conn, job.id) == "done"
