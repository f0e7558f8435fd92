"""An --app module that fails while it is imported (tests/worker/test_cli.py)."""

from __future__ import annotations


def _configure() -> None:
    raise RuntimeError("boom at import")


_configure()
