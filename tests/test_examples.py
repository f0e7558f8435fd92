"""The example project's own tests pass (run as its owner would, from its directory), and
docs/TESTING_YOUR_APP.md shows its files exactly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHOP = ROOT / "examples" / "shop"
DOC = ROOT / "docs" / "TESTING_YOUR_APP.md"
_BLOCK = re.compile(r"<!-- file: (?P<path>[^ ]+) -->\n```[a-z]*\n(?P<body>.*?)```\n", re.DOTALL)


@pytest.mark.slow
def test_the_example_projects_tests_pass(pg_admin_url: str) -> None:
    env = {**os.environ, "JOBYARD_TEST_DATABASE_URL": pg_admin_url}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=SHOP,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout


def test_the_doc_shows_every_file_of_the_example_verbatim() -> None:
    shown = {m["path"]: m["body"] for m in _BLOCK.finditer(DOC.read_text(encoding="utf-8"))}
    files = {
        str(p.relative_to(ROOT))
        for p in SHOP.iterdir()
        if p.is_file() and p.suffix in {".py", ".toml"}
    }
    assert set(shown) == files
    for path, body in shown.items():
        assert body == (ROOT / path).read_text(encoding="utf-8"), f"{DOC.name} differs from {path}"
