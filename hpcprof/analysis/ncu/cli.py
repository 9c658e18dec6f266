"""`hpcprof ncu ...` commands."""

from __future__ import annotations

from pathlib import Path

import click

from hpcprof.analysis.ncu.metrics import metric_key, metrics_table, missing_sections
from hpcprof.cli_options import files_argument
from hpcprof.errors import UserError
from hpcprof.output import FORMATS, emit


@click.group("ncu")
def ncu() -> None:
    """Nsight Compute kernel metrics (Echo's table) from ncu CSV exports or .ncu-rep."""


def _check_metric(ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]) -> tuple[str, ...]:
    for spec in specs:
        try:
            metric_key(spec)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return specs


@ncu.command("metrics")
@files_argument
@click.option("--metric", "metrics", multiple=True, callback=_check_metric,
              help='Extra column: "Section Name/Metric Name" of the details page (e.g. '
                   '"Launch Statistics/Registers Per Thread") or a raw metric name '
                   '(gpu__time_duration.sum); in base units. Repeatable.')
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--ncu", "ncu_path", metavar="PATH",
              help="ncu executable used to read .ncu-rep files (default: ncu on PATH).")
def metrics(files: tuple[Path, ...], metrics: tuple[str, ...], fmt: str, ncu_path: str | None) -> None:
    """Echo's kernel metric table of ncu profiles, one FILE per rank.

    FILE is `ncu --csv --page details` (or `--page raw`) output, or a .ncu-rep read through
    ncu. Columns: ID, Kernel Name, Compute throughput, SM, Memory throughput, DRAM throughput,
    Achieved occupancy, Maximum occupancy (theoretical), L1 hit rate, L2 hit rate (%; SM is
    the SM count); empty where the profile lacks the section, and then the table's title (csv,
    json: a stderr line) names the section each empty column needs. With several files a `rank`
    column (from `rank<N>` in the file name) and a `file` column come first.
    """
    df, errors = metrics_table(list(files), metrics, ncu=ncu_path)
    values = [c for c in df.columns if c not in ("ID", "Kernel Name", "rank", "file")]
    empty = df[values].isna().all(axis=1) if values else None
    if empty is not None and len(df) and empty.all():  # e.g. every value n/a: nothing measured
        errors.append(f"{', '.join(map(str, files))}: no metric has a value (all n/a or missing); "
                      "profile with the sections of Echo's table (ncu --set full)")
        df = df.iloc[0:0]
    for message in errors:
        click.echo(f"hpcprof ncu metrics: {message}", err=True)
    notes = missing_sections(df)
    if notes and fmt != "table":
        for note in notes:
            click.echo(f"hpcprof ncu metrics: {note}", err=True)
    if len(df):
        emit(df, fmt, title="; ".join(notes) if notes and fmt == "table" else None)
    if errors:
        raise UserError(f"{len(errors)} problem(s) with the input; see above")
