"""Procrastinate app for the peer benchmark: one no-op task, `noop` (async, as jobyard's).

`procrastinate --app proc_app.app worker ...` runs it; the DSN comes from PROCRASTINATE_BENCH_DSN.
Runs in the peer venv, never imports jobyard.
"""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector


def make_app(conninfo: str) -> App:
    """The app on `conninfo`, with the task registered (bench.py defers through one too: an
    App built in bench.py itself, the __main__ module, makes Procrastinate warn)."""
    app = App(connector=PsycopgConnector(conninfo=conninfo))

    @app.task(name="noop")
    async def noop() -> None:
        return None

    return app


app = make_app(os.environ.get("PROCRASTINATE_BENCH_DSN", ""))
