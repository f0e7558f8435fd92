"""An --app module that imports a dependency that is not installed (tests/worker/test_cli.py)."""

from __future__ import annotations

import not_installed_dependency_xyz  # type: ignore[import-not-found]  # noqa: F401
