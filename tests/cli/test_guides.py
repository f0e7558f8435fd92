"""`jobyard docs` and the hints that name a guide: the file they name exists (here, the
checkout's; tests/acceptance/test_installed_wheel.py checks the wheel's copies)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from typer.testing import CliRunner

from jobyard.cli import app
from jobyard.commands.guide_files import GUIDES, see

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_carries_exactly_the_guides_the_cli_knows() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    included = config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert included == {f"docs/{g}.md": f"jobyard/docs/{g}.md" for g in GUIDES}


def test_docs_lists_every_guide_with_a_file_that_exists_and_prints_one() -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["docs"])
    assert listed.exit_code == 0, listed.output
    paths = re.findall(r"^\s+(/\S+\.md)$", listed.output, re.MULTILINE)
    assert len(paths) == len(GUIDES), listed.output
    assert all(Path(p).is_file() for p in paths), paths
    assert "worker            Workers and the Python SDK" in listed.output, listed.output

    shown = runner.invoke(app, ["docs", "Worker.md"])
    assert shown.exit_code == 0 and shown.output.startswith("# Workers and the Python SDK\n")
    refused = runner.invoke(app, ["docs", "nope"])
    assert refused.exit_code == 2 and "no guide named 'nope'" in refused.output
    assert "getting_started, worker" in refused.output


def test_a_hint_names_a_guide_that_exists() -> None:
    hint = see("SCHEDULER", "for the cron syntax")
    path = hint.removeprefix("see ").removesuffix(" for the cron syntax")
    assert Path(path).is_file() and path.endswith("/SCHEDULER.md"), hint
    refused = CliRunner().invoke(app, ["schedules", "preview", "61 * * * *"])
    assert refused.exit_code == 2, refused.output
    assert f"hint: see {path} for the cron syntax" in refused.output, refused.output
