"""`hpcprof ncu ...` commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

import click

from hpcprof.cli.options import files_argument, one_file_per_rank, output_file_option
from hpcprof.core.errors import UserError, printable
from hpcprof.core.output import FORMATS, emit, write
from hpcprof.core.safe_text import csv_frame
from hpcprof.tools.ncu.analysis.echo import RULE_HPCPROF
from hpcprof.tools.ncu.analysis.metrics import metric_key, metrics_table, missing_sections


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
@click.option("--layout", type=click.Choice(["hpcprof", "echo"]), default="hpcprof", show_default=True,
              help="echo: Echo's kernel_metric_output.csv byte for byte (its ncu_report_process.py: values "
                   "as ncu printed them, names and order of the kshortname export); one FILE, CSV only.")
@click.option("--kshortname", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="--layout echo: Echo's second export of the report (ncu -i REPORT --print-kernel-base "
                   "function --csv); exported through ncu when FILE is a .ncu-rep.")
@output_file_option
@click.pass_context
def metrics(ctx: click.Context, files: tuple[Path, ...], metrics: tuple[str, ...], fmt: str, ncu_path: str | None,
            layout: str, kshortname: Path | None, output: str | None) -> None:
    """Echo's kernel metric table of ncu profiles, one FILE per rank.

    FILE is `ncu --csv --page details` (or `--page raw`) output, or a .ncu-rep read through
    ncu. Columns: ID, Kernel Name, Compute throughput, SM, Memory throughput, DRAM throughput,
    Achieved occupancy, Maximum occupancy (theoretical), L1 hit rate, L2 hit rate (%; SM is
    the SM count); empty where the profile lacks the section, and then the table's title (csv,
    json: a stderr line) names the section each empty column needs. With several files a `rank`
    column (from `rank<N>` in the file name) and a `file` column come first. A stderr line names
    the layout (the rule) that made the output.

    --layout echo: FILE is Echo's `temp/*_details.csv` (with --kshortname its `*_kshortname.csv`)
    or the .ncu-rep; the output is the kernel_metric_output.csv Echo's script writes from them.
    """
    if layout == "echo":
        _echo(ctx, files, metrics, fmt, ncu_path, kshortname, output)
        return
    if kshortname is not None:
        raise UserError("--kshortname is read by --layout echo only; add --layout echo")
    one_file_per_rank(files)
    df, errors = metrics_table(list(files), metrics, ncu=ncu_path)
    values = [c for c in df.columns if c not in ("ID", "Kernel Name", "rank", "file")]
    empty = df[values].isna().all(axis=1) if values else None
    if empty is not None and len(df) and empty.all():  # e.g. every value n/a: nothing measured
        errors.append(f"{', '.join(map(str, files))}: no metric has a value (all n/a or missing); "
                      "profile with the sections of Echo's table (ncu --set full)")
        df = df.iloc[0:0]
    for message in errors:
        click.echo(f"hpcprof ncu metrics: {printable(message)}", err=True)
    notes = missing_sections(df)
    if notes and fmt != "table":
        for note in notes:
            click.echo(f"hpcprof ncu metrics: {note}", err=True)
    click.echo(f"hpcprof ncu metrics: layout: {RULE_HPCPROF}", err=True)
    if len(df) and output is not None:
        write(df, Path(output), fmt, inputs=files)
    elif len(df):
        emit(df, fmt, title="; ".join(notes) if notes and fmt == "table" else None)
    if errors:
        raise UserError(f"{len(errors)} problem(s) with the input; see above")


def _echo(ctx: click.Context, files: tuple[Path, ...], metrics: tuple[str, ...], fmt: str, ncu_path: str | None,
          kshortname: Path | None, output: str | None) -> None:
    """`--layout echo`: Echo's kernel_metric_output.csv of one profile, to `output` or stdout."""
    from hpcprof.core.atomic import write_text_stream
    from hpcprof.tools.ncu.analysis.echo import echo_metrics
    from hpcprof.tools.ncu.analysis.parse import NcuInputError

    if len(files) != 1:
        raise UserError(f"--layout echo: give one FILE (Echo's script reads one report), not {len(files)}")
    if metrics:
        raise UserError("--layout echo writes Echo's fixed columns; drop --metric or use --layout hpcprof")
    if ctx.get_parameter_source("fmt") is not click.core.ParameterSource.DEFAULT and fmt != "csv":
        raise UserError(f"--layout echo writes Echo's CSV; drop --format {fmt}")
    try:
        result = echo_metrics(files[0], kshortname, ncu_path)
    except NcuInputError as exc:
        raise UserError(str(exc)) from None
    # Echo: merged_df.to_csv(path, index=False); formula-like names neutralised (and shown as text on a terminal)
    text = csv_frame(result.table, terminal=output is None and sys.stdout.isatty()).to_csv(index=False)
    if output is None:
        sys.stdout.write(text)  # as it is: click.echo would strip escapes
    else:
        def to(fh: TextIO) -> None:
            fh.write(text)

        inputs = [files[0], *([kshortname] if kshortname else [])]
        click.echo(f"wrote {printable(str(write_text_stream(Path(output), to, inputs=inputs)))}", err=True)
    click.echo(f"hpcprof ncu metrics: {result.summary()}", err=True)
