"""The options the commands share, declared once: --workdir (and its --site lookup), --db, the plan
options (--site, --site-file, --set, --templates, --max-points, --after), the options of the
nsys file commands and the check of the rank files the analysis commands take (one_file_per_rank).
Command modules import these; no command module imports another."""

from __future__ import annotations

import functools
import glob
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from hpcprof.config import MAX_POINTS
from hpcprof.core.errors import UserError
from hpcprof.run.rank_sets import check_rank_set
from hpcprof.run.ranks import rank_from_filename
from hpcprof.run.workdirs import known_workdirs, known_workdirs_file

workdir_option = click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path),
    callback=lambda ctx, param, value: check_workdir(value),
    default=lambda: os.environ.get("HPCPROF_WORKDIR", "hpcprof-runs"), show_default="$HPCPROF_WORKDIR or ./hpcprof-runs",
    help="Where run directories (and the default SQLite store) live.")
db_option = click.option("--db", default=None, help="SQLAlchemy URL of the campaign store (default $HPCPROF_DB "
                         "or sqlite:///<workdir>/hpcprof.db).")
site_option = click.option("--site", "site_name", default="local", show_default=True, help="Site config name.")
site_file_option = click.option("--site-file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                                help="A site config file (overrides --site).")
#: what plans an experiment's runs (render, submit): EXPERIMENT, --site, --site-file, --set, --templates,
#: --max-points, in that order
_PLAN = (click.argument("experiment", type=click.Path(dir_okay=False, exists=True, path_type=Path)),
         site_option, site_file_option,
         click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                      help="Override an experiment field, e.g. resources.nodes=2 (repeatable)."),
         click.option("--templates", type=click.Path(file_okay=False, path_type=Path),
                      help="Directory of edited templates (from `hpcprof templates copy`)."),
         click.option("--max-points", type=click.IntRange(min=1), default=MAX_POINTS, show_default=True,
                      help="Most sweep points to expand (a larger sweep is refused)."))


def plan_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The arguments and options that plan an experiment's runs (_PLAN), on `command`."""
    return functools.reduce(lambda wrapped, decorate: decorate(wrapped), reversed(_PLAN), command)

after_option = click.option("--after", multiple=True, metavar="RUN|SWEEP",
                            help="Start only once these runs' jobs have ended, in any state (Slurm "
                                 "--dependency=afterany, PBS -W depend=afterany); repeatable.")


lookup_site_option = click.option(
    "--site", "lookup_site", default=None, metavar="SITE",
    help="Look in SITE's workdir (its workdir:, or where your submits to SITE went) instead of --workdir.")


def with_site_lookup(command: Callable[..., None]) -> Callable[..., None]:
    """Give a read command (with `runs` and `workdir` parameters) `--site SITE`: its workdir
    becomes `read_workdir(workdir, SITE, runs)`."""
    @functools.wraps(command)
    def run(*args: Any, lookup_site: str | None = None, **kwargs: Any) -> None:
        kwargs["workdir"] = read_workdir(kwargs["workdir"], lookup_site, kwargs.get("runs", ()))
        command(*args, **kwargs)

    return lookup_site_option(run)


def read_workdir(workdir: Path, lookup_site: str | None, refs: tuple[str, ...] = ()) -> Path:
    """The workdir a read command (status, collect, report, compare) looks in: --workdir or
    $HPCPROF_WORKDIR when given, else --site's workdir (its `workdir:` expanded, else the latest
    recorded for that site), else ./hpcprof-runs. When that holds no runs (and no RUN given is a
    path), the error lists the workdirs submit recorded that do."""
    from hpcprof.run.rundir import all_runs, has_runs

    ctx = click.get_current_context()
    given = ctx.get_parameter_source("workdir") is not click.core.ParameterSource.DEFAULT
    if lookup_site is not None and not given and not os.environ.get("HPCPROF_WORKDIR"):
        workdir = site_workdir(lookup_site)
    if (workdir.is_dir() and has_runs(workdir)) or any(Path(ref).exists() for ref in refs):
        return workdir
    elsewhere = [(site, where, len(all_runs(where))) for site, where in reversed(known_workdirs())
                 if where != workdir.resolve() and where.is_dir()]
    elsewhere = [entry for entry in elsewhere if entry[2]]
    if elsewhere:
        listed = "; ".join(f"{where} (site {site}, {count} run{'s' if count != 1 else ''})"
                           for site, where, count in elsewhere[:5])
        raise UserError(f"no runs under {workdir}; runs you submitted are under {listed}: give --site "
                        f"{elsewhere[0][0]} or --workdir {elsewhere[0][1]}")
    return workdir


def site_workdir(name: str) -> Path:
    """Site `name`'s workdir: its `workdir:` (with its default account), else the latest one
    submit recorded for it."""
    from hpcprof.config.site import expand_workdir, find_site

    site = find_site(name)
    recorded = [where for site_name, where in known_workdirs() if site_name == site.name]
    if site.workdir is not None:
        try:
            return expand_workdir(site, site.defaults.account)
        except UserError:
            if not recorded:
                raise
    if recorded:
        return recorded[-1]
    raise UserError(f"--site {name}: the site has no workdir: and no submit to it was recorded "
                    f"({known_workdirs_file()}); give --workdir")


def check_workdir(value: Path) -> Path:
    """--workdir: refuse an empty value (it would mean the current directory)."""
    if not str(value).strip() or str(value) == ".":
        raise UserError("--workdir is empty; give a directory (default ./hpcprof-runs)")
    return value


#: submit's --workdir: unlike the read commands' its default is the site's `workdir:`
submit_workdir_option = click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
    callback=lambda ctx, param, value: None if value is None else check_workdir(value),
    help="Where run directories (and the default SQLite store) live [default: $HPCPROF_WORKDIR, "
         "else the site's workdir:, else ./hpcprof-runs].")

# The nsys file commands (`hpcprof nsys ...`)
files_argument = click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
rank_map_option = click.option("--rank-map", default=None,
                               help="FILE=RANK[,FILE=RANK...] when file names carry no rank.")
output_file_option = click.option("--output", "-o", default=None, help="Write to this file instead of stdout.")


def _window_spec(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value in ("auto", "capture") or (value.startswith("nvtx:") and len(value) > len("nvtx:")):
        return value
    raise click.BadParameter(f"{value!r}: give auto, capture or nvtx:NAME (the NVTX range that marks one iteration)")


WINDOW_HELP = ("The time the analysis covers. auto: collect's measured window (the `timed` range, else the "
               "iteration ranges, else Echo's `backward`, else the whole capture; an export in a run's directory: its "
               "profile.window.nvtx first), so the numbers equal collect's on the same export; capture: the whole "
               "capture (nsys's own rules); nvtx:NAME: from the first to the last instance of the NVTX range NAME.")


def window_option(more: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--window of the analyses of exports (`hpcprof nsys nccl|overlap|gaps`, `hpcprof diff`); `more`:
    what a command adds to its help."""
    return click.option("--window", "window", default="auto", show_default=True, metavar="auto|capture|nvtx:NAME",
                        callback=_window_spec, help=f"{WINDOW_HELP} {more}".strip())


def expand_paths(values: Sequence[str], option: str) -> list[Path]:
    """Paths, with glob patterns (quoted, so the shell left them) expanded; a pattern matching
    nothing is an error naming the option."""
    paths: list[Path] = []
    for value in values:
        if glob.has_magic(value):
            matches = sorted(glob.glob(value))
            if not matches:
                raise UserError(f"{option} {value!r}: the pattern matches no file")
            paths += [Path(m) for m in matches]
        else:
            paths.append(Path(value))
    return paths


def one_file_per_rank(paths: Sequence[Path], rank_of: Callable[[Path], int | None] = rank_from_filename) -> None:
    """The rank files an analysis command was given (`rank_of`: a file's rank, None where unknown):
    a file given twice, or two files of one rank, is a one-line error naming them (each would be
    counted twice)."""
    line = check_rank_set(((str(p), rank_of(p)) for p in paths), identity=os.path.realpath).summary()
    if line is not None:
        raise UserError(f"{line}: give each rank's file once (one file per rank)")
