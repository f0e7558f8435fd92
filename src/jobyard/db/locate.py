"""Which database a command or an SDK App uses: one rule, the same from every directory.

1. `JOBYARD_DATABASE_URL` (or `DATABASE_URL`) set: that server.
2. `JOBYARD_DATA_DIR` set (or `--data-dir`): the embedded server kept in that directory.
3. Otherwise the project's `.jobyard/` directory, found the way git finds `.git`: walk up from
   the current directory; the nearest directory holding `.jobyard/` wins. If there is none, the
   nearest one holding `pyproject.toml` or `.git` is the project root and its `.jobyard/` is used
   (created on first use). Outside any project: `./.jobyard`.

So `jobyard demo` at a project's root and `jobyard jobs` in `src/app/` meet the same database.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from jobyard.db.urls import display_url
from jobyard.domain.settings import Settings

DATA_DIR_NAME: Final = ".jobyard"
PROJECT_MARKERS: Final = ("pyproject.toml", ".git")


@dataclass(frozen=True)
class Location:
    """Where the database is and why: `url` set for a configured server, else `data_dir`."""

    url: str | None
    data_dir: Path
    reason: str

    @property
    def embedded(self) -> bool:
        return self.url is None

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    def describe(self) -> str:
        """One line for humans: the server (password hidden) and the rule that chose it."""
        if self.url is not None:
            return f"{display_url(self.url)} ({self.reason})"
        return f"embedded PostgreSQL in {self.pgdata} ({self.reason})"


def find_data_dir(start: Path | None = None) -> tuple[Path, str]:
    """The project's `.jobyard/` directory seen from `start` (default: the current directory)."""
    here = (start or Path.cwd()).resolve()
    chain = [here, *here.parents]
    for directory in chain:
        if (directory / DATA_DIR_NAME).is_dir():
            where = "here" if directory == here else f"above {here}"
            return directory / DATA_DIR_NAME, f"{DATA_DIR_NAME}/ found {where}"
    for directory in chain:
        for marker in PROJECT_MARKERS:
            if (directory / marker).exists():
                return directory / DATA_DIR_NAME, f"project root {directory} has {marker}"
    return here / DATA_DIR_NAME, "no project found; current directory"


def locate(settings: Settings, start: Path | None = None) -> Location:
    """Apply the rule above to `settings` (whose fields come from the environment or flags)."""
    if settings.database_url:
        source = "JOBYARD_DATABASE_URL" if "JOBYARD_DATABASE_URL" in os.environ else "DATABASE_URL"
        if "DATABASE_URL" not in os.environ and "JOBYARD_DATABASE_URL" not in os.environ:
            source = "configured"
        return Location(settings.database_url, data_dir(settings, start), f"from {source}")
    if settings.data_dir is not None:
        return Location(None, settings.data_dir.expanduser().resolve(), "JOBYARD_DATA_DIR")
    found, reason = find_data_dir(start)
    return Location(None, found, reason)


def data_dir(settings: Settings, start: Path | None = None) -> Path:
    """The directory for jobyard's local files (embedded data, benchmark servers)."""
    if settings.data_dir is not None:
        return settings.data_dir.expanduser().resolve()
    return find_data_dir(start)[0]
