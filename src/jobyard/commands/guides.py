"""`jobyard docs [GUIDE]`: list the user guides with their files, or print one."""

from __future__ import annotations

from typing import Annotated

import typer

from jobyard.commands.common import fail, out
from jobyard.commands.guide_files import GUIDES, guide_path, title

root = typer.Typer()


@root.command("docs")
def docs_cmd(
    guide: Annotated[
        str | None,
        typer.Argument(help="A guide's name, e.g. worker or getting_started (none: list them)."),
    ] = None,
) -> None:
    """List the user guides and where they are, or print one (`jobyard docs worker | less`)."""
    if guide is None:
        # Plain lines, not a table: a path cut to the terminal's width cannot be copied.
        for name in GUIDES:
            path = guide_path(name)
            heading = title(path) if path else "(missing from this installation)"
            out.print(f"{name.lower():<17} {heading}", highlight=False, markup=False)
            if path:
                out.print(f"{'':<17} {path}", highlight=False, markup=False, soft_wrap=True)
        return
    name = guide.upper().removesuffix(".MD").replace("-", "_")
    path = guide_path(name) if name in GUIDES else None
    if path is None:
        raise fail(
            f"no guide named {guide!r}",
            f"one of: {', '.join(g.lower() for g in GUIDES)} (`jobyard docs` lists them)",
        )
    typer.echo(path.read_text(encoding="utf-8"), nl=False)
