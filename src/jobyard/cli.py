"""The `jobyard` command: one root Typer app assembled from the groups in `jobyard.commands`.

Each group lives in its own small module (parse flags, call core, print); this file only
mounts them. Adding a subcommand to a group (e.g. `jobyard jobs why`) is a module that
decorates the group's Typer (`jobs_app`) and is imported below.
"""

from __future__ import annotations

import inspect
import sys

import typer

from jobyard.commands import (
    accounts,
    bench,
    database,
    dlq,
    enqueue,
    guides,
    job_actions,
    jobs,
    processes,
    queues,
    schedules,
    workers,
)

app = typer.Typer(
    name="jobyard",
    help="jobyard: background jobs, retries and cron on PostgreSQL alone. "
    "Which database: JOBYARD_DATABASE_URL, else the project's .jobyard/ found upward from "
    "the current directory (`jobyard db status` says which).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for top_level in (processes.root, enqueue.root, database.root, bench.root, guides.root):
    app.add_typer(top_level)
# job_actions adds why, retry, run-now and bulk to the jobs group.
assert job_actions.why_cmd is not None
app.add_typer(jobs.jobs_app, name="jobs")
app.add_typer(queues.queues_app, name="queues")
app.add_typer(dlq.dlq_app, name="dlq")
app.add_typer(schedules.schedules_app, name="schedules")
app.add_typer(database.db_app, name="db")
app.add_typer(workers.workers_app, name="workers")
app.add_typer(accounts.accounts_app, name="accounts")


def _first_paragraph(text: str) -> str:
    return " ".join(inspect.cleandoc(text).split("\n\n")[0].split())


def _one_line_summaries(typer_app: typer.Typer) -> None:
    """Typer lists each command by the first paragraph of its help but, in its rich markup mode,
    keeps that paragraph's line breaks, so a docstring wrapped in the source broke mid-sentence
    in `jobyard --help`. Each command and group gets that paragraph, joined, as its short help."""
    for command in typer_app.registered_commands:
        text = command.help or (inspect.getdoc(command.callback) if command.callback else None)
        if command.short_help is None and text:
            command.short_help = _first_paragraph(text)
    for group in typer_app.registered_groups:
        sub = group.typer_instance
        if sub is None:
            continue
        _one_line_summaries(sub)
        text = sub.info.help
        if isinstance(text, str) and not isinstance(sub.info.short_help, str):
            sub.info.short_help = _first_paragraph(text)


_one_line_summaries(app)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
