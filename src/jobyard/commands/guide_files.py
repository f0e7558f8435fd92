"""Where the user guides are: the wheel carries them as `jobyard/docs/*.md` (pyproject.toml,
force-include), a source checkout has them in `docs/`. CLI hints name the file that exists."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Final

GUIDES: Final = (
    "GETTING_STARTED",
    "WORKER",
    "WORKFLOWS",
    "SCHEDULER",
    "CONFIGURATION",
    "API",
    "DASHBOARD",
    "METRICS",
    "SECURITY",
    "TESTING_YOUR_APP",
)
# src/jobyard/commands/guide_files.py → the checkout's docs/ (an editable install).
_CHECKOUT_DOCS: Final = Path(__file__).resolve().parents[3] / "docs"


def guide_path(name: str) -> Path | None:
    """The installed guide `name` (e.g. "WORKER"), else the checkout's; None if neither."""
    packaged = Path(str(resources.files("jobyard") / "docs" / f"{name}.md"))
    for candidate in (packaged, _CHECKOUT_DOCS / f"{name}.md"):
        if candidate.is_file():
            return candidate
    return None


def see(name: str, about: str = "") -> str:
    """A hint naming the guide's file as it exists here: 'see /…/jobyard/docs/WORKER.md'."""
    found = guide_path(name)
    return f"see {found or f'docs/{name}.md'}{f' {about}' if about else ''}"


def title(path: Path) -> str:
    with path.open(encoding="utf-8") as f:
        return f.readline().lstrip("# ").strip()
