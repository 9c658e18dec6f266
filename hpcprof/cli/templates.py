"""`hpcprof templates copy` and `hpcprof templates vars`."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from hpcprof.cli.common import console
from hpcprof.core.errors import UserError


@click.group()
def templates() -> None:
    """Editable copies of the job-script templates."""


@templates.command("copy")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def templates_copy(directory: Path) -> None:
    """Copy the shipped templates into DIRECTORY; use them with --templates DIR or a site's
    `templates:` key."""
    from hpcprof.core.atomic import atomic_write
    from hpcprof.render.job import shipped_template_dir

    sources = sorted(shipped_template_dir().glob("*.j2"))
    existing = [directory / p.name for p in sources if (directory / p.name).exists()]
    if existing:
        raise UserError(f"{existing[0]} exists; copy into a new or empty directory")
    made = not directory.exists()
    written: list[Path] = []
    try:  # all the templates or none: a failure (a full disk) leaves nothing to block the retry
        for path in sources:
            written.append(atomic_write(directory / path.name, path.read_bytes(), what="template"))
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        if made:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    for path in written:
        console.print(f"wrote {path}", markup=False)


@templates.command("vars")
def templates_vars() -> None:
    """The variables and filters the job and wrapper templates can use."""
    from hpcprof.render.job import MANIFEST_VARS, TEMPLATE_FILTERS, TEMPLATE_VARS

    width = max(map(len, [*TEMPLATE_VARS, *MANIFEST_VARS, *TEMPLATE_FILTERS]))
    click.echo("Variables (every template):")
    click.echo("\n".join(f"  {name:<{width}}  {text}" for name, text in TEMPLATE_VARS.items()))
    click.echo("Variables (mpijob.yaml.j2 only):")
    click.echo("\n".join(f"  {name:<{width}}  {text}" for name, text in MANIFEST_VARS.items()))
    click.echo("Filters:")
    click.echo("\n".join(f"  {name:<{width}}  {text}" for name, text in TEMPLATE_FILTERS.items()))
