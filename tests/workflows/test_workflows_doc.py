"""docs/WORKFLOWS.md runs: its file blocks are written to a temporary directory, a real
`jobyard worker --app flows:app` runs there, and each `<!-- run -->` script must exit 0."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "WORKFLOWS.md"
BLOCK = re.compile(r"<!-- (file: (?P<name>[\w.]+)|run) -->\n```python\n(?P<code>.*?)```", re.S)

pytestmark = pytest.mark.slow


def blocks() -> tuple[dict[str, str], list[str]]:
    files: dict[str, str] = {}
    runs: list[str] = []
    for m in BLOCK.finditer(DOC.read_text(encoding="utf-8")):
        if m["name"]:
            files[m["name"]] = m["code"]
        else:
            runs.append(m["code"])
    return files, runs


def test_the_page_has_its_examples() -> None:
    files, runs = blocks()
    assert set(files) == {"flows.py"} and len(runs) == 4


@pytest.mark.timeout(300)
def test_every_example_of_workflows_md_runs(db_url: str, tmp_path: Path) -> None:
    files, runs = blocks()
    for name, code in files.items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    env = {
        **os.environ,
        "JOBYARD_DATABASE_URL": db_url,
        "JOBYARD_PROJECT": "demo/flows",
        "JOBYARD_POLL_INTERVAL_S": "0.5",
        "JOBYARD_LOG_LEVEL": "warning",
        "PYTHONPATH": str(tmp_path),
    }
    # The first script creates the project and its default queue (outside production).
    with (tmp_path / "worker.log").open("wb") as log:
        worker = None
        try:
            for i, code in enumerate(runs):
                script = tmp_path / f"example_{i}.py"
                script.write_text(code, encoding="utf-8")
                if worker is None:
                    worker = subprocess.Popen(
                        [sys.executable, "-m", "jobyard", "worker", "--app", "flows:app",
                         "--queues", "default", "--concurrency", "8"],
                        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                    )  # fmt: skip
                done = subprocess.run(
                    [sys.executable, str(script)],
                    cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                )  # fmt: skip
                assert done.returncode == 0, (
                    f"example {i} failed:\n{code}\n{done.stdout}\n{done.stderr}\n"
                    + (tmp_path / "worker.log").read_text(errors="replace")
                )
        finally:
            if worker is not None:
                worker.kill()
                worker.wait(10)
