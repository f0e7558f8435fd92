"""Text of an earlier migration's statements, for a migration that rewrites one of them or
restores it on downgrade: the earlier text is read from its module, never copied by hand."""

from __future__ import annotations

import importlib


def statement(module: str, start: str, end: str = "END $$;") -> str:
    """The text of `module`'s UPGRADE from `start` to the first `end` after it, both included."""
    source: str = importlib.import_module(module).UPGRADE
    at = source.index(start)
    return source[at : source.index(end, at) + len(end)]


def replaced_function(module: str, header: str, end: str = "END $$;") -> str:
    """A `CREATE FUNCTION` of `module`'s UPGRADE as `CREATE OR REPLACE FUNCTION`: what a
    downgrade runs to put the earlier body back."""
    text = statement(module, header, end)
    return text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
