"""Day-to-day commands (issue 11, point 7): jobs show/cancel, queues list/pause/resume,
dlq list/replay, enqueue to an unknown queue, and `--help` without `<bool>` noise."""

from __future__ import annotations

import asyncio
import re

import pytest
from typer.testing import CliRunner, Result

from jobyard.cli import app
from jobyard.commands import common
from jobyard.core import enqueue, lease, projects, schedules, workers
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.models import LoopStall
from jobyard.domain.schemas import JobCreate
from tests.api.engine_helpers import claim_one, dead_letter, make_worker
from tests.worker.helpers import PROJECT, rows


@pytest.fixture
def cli(db_url: str, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    # Rich reads COLUMNS once, when the CLI's consoles are made (first import, in whichever
    # test came first): set the width itself, so a table never cuts what a test looks for.
    monkeypatch.setattr(common.out, "width", 300)
    return CliRunner(
        env={"JOBYARD_DATABASE_URL": db_url, "JOBYARD_PROJECT": PROJECT, "COLUMNS": "300"}
    )


async def _project(conn: Conn, *queues: str) -> ProjectId:
    pid = await projects.resolve_project(conn, PROJECT, create=True)
    await projects.ensure_queues(conn, pid, list(queues or ("default",)))
    return pid


async def invoke(cli: CliRunner, args: list[str]) -> Result:
    """The CLI runs its own event loop (asyncio.run), so it runs in a thread beside the test's."""
    return await asyncio.to_thread(cli.invoke, app, args)


def _ok(result: object) -> str:
    output: str = result.output  # type: ignore[attr-defined]
    assert result.exit_code == 0, output  # type: ignore[attr-defined]
    assert "Traceback" not in output
    return output


def _refused(result: object, code: int = 2) -> str:
    output: str = result.output  # type: ignore[attr-defined]
    assert result.exit_code == code, output  # type: ignore[attr-defined]
    assert "Traceback" not in output
    return output


async def test_jobs_show_prints_status_runs_error_and_logs(cli: CliRunner, conn: Conn) -> None:
    pid = await _project(conn)
    worker = await make_worker(conn, pid)
    await dead_letter(conn, pid, worker, handler="charge", error="card 4242 declined")
    (job,) = await rows(conn, "SELECT id FROM jobs")
    await conn.execute(
        "INSERT INTO job_logs (job_id, execution_seq, level, message, fields) "
        "VALUES (%s, 1, 'info', 'charging', '{\"amount\": 5}')",
        (job["id"],),
    )
    out = _ok(await invoke(cli, ["jobs", "show", str(job["id"])]))
    assert f"job {job['id']}  charge  on queue default  — dead_letter" in out
    assert "attempt 1/1" in out
    assert "last error: CardError: card 4242 declined" in out
    assert re.search(r"#1 attempt 1  failed .*worker", out), out
    assert "    error: CardError: card 4242 declined" in out
    assert "charging" in out and '"amount": 5' in out


async def test_jobs_show_unknown_id_says_how_to_find_one(cli: CliRunner, conn: Conn) -> None:
    await _project(conn)
    out = _refused(await invoke(cli, ["jobs", "show", "999"]))
    assert "job 999 does not exist in this project" in out and "jobyard jobs" in out


async def test_jobs_cancel_cancels_a_queued_job_once(cli: CliRunner, conn: Conn) -> None:
    pid = await _project(conn)
    result = await enqueue.enqueue(conn, pid, JobCreate(queue="default", handler="noop"))
    job_id = result.job["id"]
    assert _ok(await invoke(cli, ["jobs", "cancel", str(job_id)])).strip() == (
        f"job {job_id} cancelled"
    )
    (row,) = await rows(conn, "SELECT status FROM jobs WHERE id = %s", job_id)
    assert row["status"] == "cancelled"
    again = _refused(await invoke(cli, ["jobs", "cancel", str(job_id)]))
    assert f"job {job_id} is already cancelled" in again
    missing = _refused(await invoke(cli, ["jobs", "cancel", "4242"]))
    assert "job 4242 does not exist" in missing


async def test_queues_list_pause_resume(cli: CliRunner, conn: Conn) -> None:
    await _project(conn, "default", "emails")
    listed = _ok(await invoke(cli, ["queues", "list"]))
    assert "default" in listed and "emails" in listed and "paused" not in listed
    assert _ok(await invoke(cli, ["queues", "pause", "emails"])).strip() == "queue emails paused"
    (row,) = await rows(conn, "SELECT is_paused FROM queues WHERE name = 'emails'")
    assert row["is_paused"] is True
    assert "paused" in _ok(await invoke(cli, ["queues", "list"]))
    assert _ok(await invoke(cli, ["queues", "resume", "emails"])).strip() == "queue emails resumed"
    (row,) = await rows(conn, "SELECT is_paused FROM queues WHERE name = 'emails'")
    assert row["is_paused"] is False
    unknown = _refused(await invoke(cli, ["queues", "pause", "nope"]))
    assert "no queue named 'nope'; known queues: default, emails" in unknown


async def test_queues_limit_sets_and_removes_max_concurrency(cli: CliRunner, conn: Conn) -> None:
    """Found as a user (2026-12-05): the CLI could pause a queue but not limit it; the limit
    took an API call or SQL."""
    await _project(conn, "default", "emails")
    limited = _ok(await invoke(cli, ["queues", "limit", "emails", "3"]))
    assert limited.strip() == "queue emails: at most 3 at once"
    (row,) = await rows(conn, "SELECT max_concurrency FROM queues WHERE name = 'emails'")
    assert row["max_concurrency"] == 3
    assert re.search(r"emails\W+active\W+3", _ok(await invoke(cli, ["queues", "list"])))
    removed = _ok(await invoke(cli, ["queues", "limit", "emails", "--none"]))
    assert removed.strip() == "queue emails: no limit"
    (row,) = await rows(conn, "SELECT max_concurrency FROM queues WHERE name = 'emails'")
    assert row["max_concurrency"] is None
    for both_or_neither in (["emails"], ["emails", "2", "--none"]):
        out = _refused(await invoke(cli, ["queues", "limit", *both_or_neither]))
        assert "give either a limit or --none" in out and "jobyard queues limit emails 5" in out
    assert "not in the range" in _refused(await invoke(cli, ["queues", "limit", "emails", "0"]))
    unknown = _refused(await invoke(cli, ["queues", "limit", "nope", "2"]))
    assert "no queue named 'nope'" in unknown
    (row,) = await rows(conn, "SELECT max_concurrency FROM queues WHERE name = 'emails'")
    assert row["max_concurrency"] is None


async def test_dlq_list_and_replay(cli: CliRunner, conn: Conn) -> None:
    pid = await _project(conn)
    worker = await make_worker(conn, pid)
    dlq_id = await dead_letter(conn, pid, worker, handler="charge", error="card 4242 declined")
    listed = _ok(await invoke(cli, ["dlq", "list"]))
    assert "charge" in listed and "card 4242 declined" in listed
    replayed = _ok(await invoke(cli, ["dlq", "replay", str(dlq_id)]))
    match = re.search(rf"dead letter {dlq_id} replayed as job (\d+) \(queued\)", replayed)
    assert match, replayed
    (row,) = await rows(conn, "SELECT status, handler FROM jobs WHERE id = %s", int(match[1]))
    assert row == {"status": "queued", "handler": "charge"}
    assert f"as job {match[1]}" in _ok(await invoke(cli, ["dlq", "list"]))
    missing = _refused(await invoke(cli, ["dlq", "replay", "777"]))
    assert "dead letter 777 does not exist" in missing and "jobyard dlq list" in missing


async def test_enqueue_refuses_an_unknown_queue_and_lists_the_known_ones(
    cli: CliRunner, conn: Conn
) -> None:
    """Issue 11: the CLI created an unknown queue silently; its job then waited forever."""
    await _project(conn, "default", "emails")
    out = _refused(await invoke(cli, ["enqueue", "noop", "--queue", "emial"]))
    assert "queue 'emial' does not exist" in out
    assert "known queues: default, emails" in out and "--create-queue" in out
    assert await rows(conn, "SELECT id FROM jobs") == []
    assert len(await rows(conn, "SELECT id FROM queues")) == 2
    created = _ok(await invoke(cli, ["enqueue", "noop", "--queue", "emial", "--create-queue"]))
    assert created.strip() == "job 1 queued"


def test_enqueue_into_a_database_without_the_project_says_what_to_do(cli: CliRunner) -> None:
    out = _refused(cli.invoke(app, ["enqueue", "noop"]))
    assert f"project {PROJECT!r} does not exist" in out and "--create-queue" in out


@pytest.mark.parametrize(
    "command",
    [[], ["jobs"], ["jobs", "show"], ["db", "reset"], ["enqueue"], ["demo"], ["worker"],
     ["queues", "pause"], ["queues", "limit"], ["dlq", "replay"], ["migrate"]],
)  # fmt: skip
def test_help_shows_no_bool_noise(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    assert "--help" in result.output


@pytest.mark.parametrize("group", [[], ["jobs"], ["db"], ["queues"], ["accounts"]])
def test_command_lists_read_as_sentences_on_a_wide_terminal(group: list[str]) -> None:
    """Each command's summary fills its row before it wraps: a docstring's own line breaks
    (Typer keeps them in its rich mode) once broke summaries mid-sentence."""
    result = CliRunner().invoke(app, [*group, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    panel = result.output.split("Commands")[1]
    rows = [line for line in panel.splitlines() if line.startswith("│")]
    continued = [row for row in rows if re.match(r"│\s{3,}\S", row)]
    assert rows and not continued, result.output


async def test_workers_list_and_show_name_a_blocked_loop_and_orphan_threads(
    cli: CliRunner, conn: Conn
) -> None:
    pid = await _project(conn)
    sick = await make_worker(conn, pid)
    well = await make_worker(conn, pid)
    gone = await make_worker(conn, pid)
    await workers.stop(conn, WorkerId(gone))
    await lease.heartbeat(conn, WorkerId(sick), [], lease_s=30, capacity=4, orphan_threads=1)
    stall = LoopStall(
        number=2, blocked_s=1.5, ongoing=True, handler="resize", job_ids=(41,),
        at="/srv/shop/tasks.py:13 in resize",
    )  # fmt: skip
    await workers.record_loop_stall(conn, WorkerId(sick), stall)

    listed = _ok(await invoke(cli, ["workers", "list"]))
    lines = {
        int(m.group(1)): line
        for line in listed.splitlines()
        if (m := re.search(r"│\s*(\d+)\s*│", line))
    }
    assert set(lines) == {sick, well}, listed  # live only
    assert "loop blocked by resize; 1 orphan thread(s)" in lines[sick], listed
    assert "ok" in lines[well], listed
    every = _ok(await invoke(cli, ["workers", "list", "--all"]))
    assert f"│ {gone} " in every and "stopped" in every, every

    shown = _ok(await invoke(cli, ["workers", "show", str(sick)]))
    assert (
        "event loop: BLOCKED since " in shown
        and "by handler 'resize' (job #41) at /srv/shop/tasks.py:13 in resize (2 stalls since "
        "it started)"
        in shown
    ), shown
    assert "orphan threads: 1 handler thread(s) still running after their run ended" in shown
    assert "move the blocking call into a plain def handler" in shown, shown
    assert "recent heartbeats (1):" in shown, shown
    calm = _ok(await invoke(cli, ["workers", "show", str(well)]))
    assert "event loop: never stood still" in calm and "orphan threads: none" in calm, calm
    missing = _refused(await invoke(cli, ["workers", "show", "987654"]))
    assert "worker 987654 does not exist in this project" in missing, missing
    assert "jobyard workers list --all" in missing, missing


async def test_schedules_list_pause_resume_and_run_now(cli: CliRunner, conn: Conn) -> None:
    pid = await _project(conn)
    (queue,) = await rows(conn, "SELECT id FROM queues WHERE project_id = %s", pid)
    nightly = await schedules.create_schedule(
        conn, pid,
        schedules.ScheduleFields(name="nightly-report", queue_id=queue["id"], cron="0 3 * * *",
                                 handler="report", timezone="Asia/Kolkata"),
    )  # fmt: skip
    sid = nightly["id"]
    listed = _ok(await invoke(cli, ["schedules", "list"]))
    assert "nightly-report" in listed and "0 3 * * *" in listed and "Asia/Kolkata" in listed
    assert "active" in listed, listed

    assert f"schedule {sid} 'nightly-report' paused" in _ok(
        await invoke(cli, ["schedules", "pause", str(sid)])
    )
    assert "paused" in _ok(await invoke(cli, ["schedules", "list"]))
    (row,) = await rows(conn, "SELECT enabled, next_run_at FROM scheduled_jobs WHERE id = %s", sid)
    assert row == {"enabled": False, "next_run_at": None}
    resumed = _ok(await invoke(cli, ["schedules", "resume", str(sid)]))
    assert f"schedule {sid} 'nightly-report' resumed; next fire 20" in resumed, resumed

    fired = _ok(await invoke(cli, ["schedules", "run-now", str(sid)]))
    job_id = int(re.search(r"fired: job (\d+)", fired).group(1))  # type: ignore[union-attr]
    (job,) = await rows(conn, "SELECT handler, status::text AS s FROM jobs WHERE id = %s", job_id)
    assert job == {"handler": "report", "s": "queued"}

    for action in ("pause", "resume", "run-now"):
        missing = _refused(await invoke(cli, ["schedules", action, "987654"]))
        assert "schedule 987654 does not exist in this project" in missing, missing
        assert "jobyard schedules list" in missing, missing


async def test_workers_pause_and_resume(cli: CliRunner, conn: Conn) -> None:
    pid = await _project(conn)
    wid = await make_worker(conn, pid)
    paused = _ok(await invoke(cli, ["workers", "pause", str(wid)]))
    assert f"worker {wid} " in paused and "paused: it claims nothing" in paused, paused
    assert "paused" in _ok(await invoke(cli, ["workers", "list"]))
    shown = _ok(await invoke(cli, ["workers", "show", str(wid)]))
    assert re.search(r"PAUSED by \S+@\S+ \(cli\) at ", shown), shown
    (row,) = await rows(conn, "SELECT paused_at IS NOT NULL AS p FROM workers WHERE id = %s", wid)
    assert row["p"] is True
    assert "resumed" in _ok(await invoke(cli, ["workers", "resume", str(wid)]))
    assert "PAUSED" not in _ok(await invoke(cli, ["workers", "show", str(wid)]))
    await workers.stop(conn, WorkerId(wid))
    stopped = _refused(await invoke(cli, ["workers", "pause", str(wid)]))
    assert "is stopped: only an active or draining worker can be paused" in stopped, stopped
    missing = _refused(await invoke(cli, ["workers", "resume", "987654"]))
    assert "worker 987654 does not exist in this project" in missing, missing


async def test_jobs_why_judges_a_silent_worker_by_the_configured_heartbeat(
    cli: CliRunner, conn: Conn
) -> None:
    pid = await _project(conn)
    await enqueue.enqueue(conn, pid, JobCreate(handler="h"))
    wid = await make_worker(conn, pid)
    held = await claim_one(conn, pid, wid, "default")
    await conn.execute(
        "UPDATE workers SET last_heartbeat_at = now() - interval '3 s' WHERE id = %s", (wid,)
    )
    usual = _ok(await invoke(cli, ["jobs", "why", str(held.id)]))
    assert "- running: Running on worker" in usual, usual  # 3 s is nothing at 5 s beats
    fast = await asyncio.to_thread(
        cli.invoke, app, ["jobs", "why", str(held.id)], env={"JOBYARD_HEARTBEAT_INTERVAL_S": "0.5"}
    )
    assert "- holder_silent: Held by worker" in _ok(fast), fast.output


async def test_text_that_looks_like_markup_is_printed_as_it_is(cli: CliRunner, conn: Conn) -> None:
    """Names, payloads and errors come from users: a "[/]" in one once ended the command with
    rich's MarkupError instead of being printed."""
    pid = await _project(conn)
    (queue,) = await rows(conn, "SELECT id FROM queues WHERE project_id = %s", pid)
    wid = await make_worker(conn, pid)
    await conn.execute("UPDATE workers SET name = 'box[/]1' WHERE id = %s", (wid,))
    await dead_letter(conn, pid, wid, handler="pay[/]", error="KeyError: '[/]'")
    job = await enqueue.enqueue(
        conn, pid, JobCreate(handler="send[/]mail", payload={"note": "[/] [bold]x[/bold]"})
    )
    await schedules.create_schedule(
        conn, pid,
        schedules.ScheduleFields(name="nightly[/]", queue_id=queue["id"], cron="0 3 * * *",
                                 handler="report[red]"),
    )  # fmt: skip
    job_id = str(job.job["id"])
    for args, shown in (
        (["jobs"], "send[/]mail"),
        (["jobs", "show", job_id], '"[/] [bold]x[/bold]"'),
        (["jobs", "why", job_id], "job"),
        (["dlq", "list"], "KeyError: '[/]'"),
        (["workers", "list"], "box[/]1"),
        (["workers", "show", str(wid)], "box[/]1"),
        (["schedules", "list"], "report[red]"),
    ):
        output = _ok(await invoke(cli, args))
        assert shown in output, (args, output)
