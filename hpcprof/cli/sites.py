"""`hpcprof sites` and `hpcprof sites init`: the site configs, imported with this module (start-up
ends with them: `hpcprof.__main__`)."""

from __future__ import annotations

from pathlib import Path

import click

from hpcprof.cli.common import console
from hpcprof.config.site import available_sites, load_site_file, write_user_site
from hpcprof.core.errors import UserError, warn
from hpcprof.core.output import emit_rows


@click.group(invoke_without_command=True)
@click.pass_context
def sites(ctx: click.Context) -> None:
    """List the available site configs (`sites init NAME` writes your own)."""
    if ctx.invoked_subcommand is not None:
        return
    rows = []
    for name, path in available_sites().items():
        try:
            site = load_site_file(path)
        except UserError as exc:  # one broken site config does not hide the others
            warn(f"{exc.format_message()}; not listed")
            continue
        launcher = site.launcher.kind + (f" ({site.launcher.flavor})" if site.launcher.flavor else "")
        rows.append({"site": name, "scheduler": site.scheduler, "launcher": launcher,
                     "gpus/node": site.node.gpus, "description": site.description, "file": str(path)})
    emit_rows(rows, ["site", "scheduler", "launcher", "gpus/node", "description", "file"], "table")


@sites.command("init")
@click.argument("name")
@click.option("--venv", "venv_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The venv (made with --system-site-packages on top of the site's module, hpcprof installed "
                   "into it) that every job activates after the site's setup.")
@click.option("--account", default=None, help="Your project: written as the site's defaults.account.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Site file to write [default: $XDG_CONFIG_HOME/hpcprof/sites/NAME.yaml, found by --site NAME].")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def sites_init(name: str, venv_dir: Path, account: str | None, output: Path | None, force: bool) -> None:
    """Write your own site file from site NAME (a shipped one): its setup also activates --venv,
    and --account becomes its default account. `--site NAME` then finds yours first."""
    path = write_user_site(name, venv_dir, account, output, force)
    console.print(f"wrote {path}; check it with `hpcprof doctor --site {name}`"
                  + ("" if output is None else f" --site-file {path}"), markup=False)
