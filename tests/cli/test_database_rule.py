"""One database rule (issue 11, point 2): from any directory of a project the CLI and the SDK
find the same `.jobyard/`, the way git finds `.git`; JOBYARD_DATABASE_URL and JOBYARD_DATA_DIR
win over it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobyard.cli import app
from jobyard.db.locate import find_data_dir, locate
from jobyard.db.migrate import head_revision
from jobyard.db.resolve import head_revision as fast_head_revision
from jobyard.domain.errors import ConfigurationError
from jobyard.domain.settings import Settings


def test_the_nearest_jobyard_directory_above_wins(tmp_path: Path) -> None:
    (tmp_path / "proj" / ".jobyard").mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("[project]\nname='x'\n")
    deep = tmp_path / "proj" / "src" / "app" / "sub"
    deep.mkdir(parents=True)
    (tmp_path / "proj" / "src" / "pyproject.toml").write_text("")  # a nested package
    for start in (tmp_path / "proj", deep, tmp_path / "proj" / "src"):
        found, _ = find_data_dir(start)
        assert found == tmp_path / "proj" / ".jobyard", start
    assert find_data_dir(deep)[1] == f".jobyard/ found above {deep}"
    assert find_data_dir(tmp_path / "proj")[1] == ".jobyard/ found here"


def test_without_jobyard_directory_the_project_root_is_used(tmp_path: Path) -> None:
    """The first `jobyard demo` in a subdirectory must not create a second database there."""
    (tmp_path / "proj" / "tests").mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("")
    found, reason = find_data_dir(tmp_path / "proj" / "tests")
    assert found == tmp_path / "proj" / ".jobyard"
    assert reason == f"project root {tmp_path / 'proj'} has pyproject.toml"
    (tmp_path / "repo" / "a").mkdir(parents=True)
    (tmp_path / "repo" / ".git").mkdir()
    assert find_data_dir(tmp_path / "repo" / "a")[0] == tmp_path / "repo" / ".jobyard"


def test_outside_any_project_the_current_directory_is_used(tmp_path: Path) -> None:
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    # tmp_path's parents hold no .jobyard/, pyproject.toml or .git on this machine's /tmp.
    if any(
        (p / m).exists() for p in lonely.parents for m in (".jobyard", "pyproject.toml", ".git")
    ):
        pytest.fail(f"{tmp_path} lies inside a project; the test needs a clean /tmp")
    assert find_data_dir(lonely) == (lonely / ".jobyard", "no project found; current directory")


def test_an_explicit_url_or_data_dir_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".jobyard").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("JOBYARD_DATABASE_URL", "postgresql://u:secret@db:5432/app")
    where = locate(Settings())
    assert where.url == "postgresql://u:secret@db:5432/app"
    assert where.describe() == "postgresql://u:***@db:5432/app (from JOBYARD_DATABASE_URL)"
    monkeypatch.delenv("JOBYARD_DATABASE_URL")
    monkeypatch.setenv("JOBYARD_DATA_DIR", str(tmp_path / "elsewhere"))
    where = locate(Settings())
    assert where.url is None and where.pgdata == tmp_path / "elsewhere" / "pgdata"
    assert where.reason == "JOBYARD_DATA_DIR"
    monkeypatch.delenv("JOBYARD_DATA_DIR")
    assert locate(Settings()).pgdata == tmp_path / ".jobyard" / "pgdata"


def test_db_status_names_the_same_database_from_every_subdirectory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "src" / "app").mkdir(parents=True)
    monkeypatch.delenv("JOBYARD_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("JOBYARD_DATA_DIR", raising=False)
    shown = set()
    for where in (tmp_path, tmp_path / "src", tmp_path / "src" / "app"):
        monkeypatch.chdir(where)
        result = CliRunner().invoke(app, ["db", "status"], env={"COLUMNS": "300"})
        assert result.exit_code == 1, result.output  # not started: nothing created
        line = result.output.splitlines()[0]
        shown.add(line.split(" (")[0])
    assert shown == {f"database: embedded PostgreSQL in {tmp_path / '.jobyard' / 'pgdata'}"}
    assert not (tmp_path / ".jobyard" / "pgdata").exists()


def test_the_fast_head_revision_matches_alembic() -> None:
    """Commands read the head from the version files (no Alembic import at start)."""
    assert fast_head_revision() == head_revision()


def test_tool_jobyard_in_pyproject_sets_defaults_the_environment_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "shop"\n\n[tool.jobyard]\nproject = "acme/shop"\ndata_dir = "var/jy"\n'
    )
    (tmp_path / "src").mkdir()
    monkeypatch.chdir(tmp_path / "src")
    for name in ("JOBYARD_PROJECT", "JOBYARD_DATA_DIR", "JOBYARD_DATABASE_URL", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert settings.project == "acme/shop"
    assert locate(settings).pgdata == tmp_path / "var" / "jy" / "pgdata"
    monkeypatch.setenv("JOBYARD_PROJECT", "other/one")
    assert Settings().project == "other/one"


def test_tool_jobyard_refuses_the_database_url_and_unknown_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.jobyard]\ndatabase_url = "postgresql://u:pw@db/app"\n'
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=r"does not take database_url .*environment"):
        Settings()
    result = CliRunner().invoke(app, ["jobs"], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "[tool.jobyard] does not take database_url" in result.output
    assert "Traceback" not in result.output and "pw@" not in result.output
