"""docs/CONFIGURATION.md names every setting, so the page cannot fall behind the code."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobyard.domain.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "CONFIGURATION.md"


@pytest.mark.parametrize("field", sorted(Settings.model_fields))
def test_every_setting_is_documented(field: str) -> None:
    assert f"`JOBYARD_{field.upper()}`" in DOC.read_text(encoding="utf-8")
