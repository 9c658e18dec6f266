"""`hpcprof compare`, `hpcprof report` and `hpcprof logs`: from collected runs to answers."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import click
from rich.console import Console

from hpcprof.cli.options import with_site_lookup, workdir_option
from hpcprof.core.errors import FiniteRange, UserError, printable
from hpcprof.core.output import emit, table_width

if TYPE_CHECKING:
    import pandas as pd

    from hpcprof.report.runs import RunInfo
    from hpcprof.run.rundir import RunDir

selection = click.argument("runs", nargs=-1, metavar="[SWEEP | RUN...]")


@click.command()
@with_site_lookup
@selection
@workdir_option
@click.option("--baseline", metavar="RUN", help="Add ratios to this run (one of the compared runs) and a verdict "
              "per point: faster, slower or no significant change (Welch t-test, 5 % level).")
@click.option("--fail-if-slower", "fail_pct", type=FiniteRange(min=0), metavar="PCT",
              help="Exit 1 when a point is significantly slower than --baseline by more than PCT % "
                   "of its iteration time (for CI gates).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here instead of stdout.")
def compare(runs: tuple[str, ...], workdir: Path, baseline: str | None, fail_pct: float | None, fmt: str,
            output: Path | None) -> None:
    """Compare runs: one row per run (or per sweep point, repetitions folded into mean, sd and
    95 % confidence interval), its swept parameters and headline metrics; with --baseline the
    change of the iteration time and a verdict. Default: the latest sweep."""
    from hpcprof.report.compare import compare_frame
    from hpcprof.report.terminal import comparison_table

    if fail_pct is not None and baseline is None:
        raise UserError("--fail-if-slower needs --baseline RUN: the run the others must not be slower than")
    df = compare_frame(runs, workdir, baseline)

    def write(out: TextIO) -> None:
        if fmt == "table":
            buf = io.StringIO()
            console = Console(file=buf, width=table_width(sys.stdout if output is None else None))
            console.print(comparison_table(df))
            console.print("".join(f"{note}\n" for note in df.attrs.get("notes", [])), end="", markup=False)
            _scaling_of(runs, workdir, console)
            out.write(buf.getvalue())
        else:   # hpcprof.core.output's CSV (formula-like text neutralised) or JSON
            emit(df, fmt, out)

    if output is None:
        write(sys.stdout)
    else:
        from hpcprof.core.atomic import write_text_stream

        write_text_stream(output, write, inputs=(), option="-o")
        click.echo(f"wrote {printable(str(output))}", err=True)
    if fail_pct is not None:
        gate(df, fail_pct)


def gate(df: pd.DataFrame, pct: float) -> None:
    """Exit 1, naming the points, when any is significantly slower than the baseline by more than `pct` %."""
    from hpcprof.report.compare import param_columns, point_labels
    from hpcprof.report.stats import p_text
    from hpcprof.report.verdict import slower_than

    slow = slower_than(df, pct)
    if slow.empty:
        click.echo(f"no point significantly slower than the baseline by more than {pct:g} %", err=True)
        return
    labels = point_labels(df, param_columns(df))
    for i in slow.index:
        click.echo(f"slower than the baseline by {slow.at[i, 'change_pct']:+.2f} % (more than {pct:g} %; "
                   f"{p_text(slow.at[i, 'p_value'], named=True)}, {slow.at[i, 'test']}): {labels[i] or slow.at[i, 'run']}",
                   err=True)
    raise SystemExit(1)


@click.command()
@with_site_lookup
@selection
@workdir_option
@click.option("--full", is_flag=True, help="Also print every result table (per-event tables included).")
@click.option("--rows", type=click.IntRange(min=1, max=1_000_000), default=12, show_default=True,
              help="Rows shown per table with --full.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a self-contained interactive HTML report (plots) to this file.")
@click.option("--baseline", metavar="RUN", help="With --html: the run the verdicts compare against "
              "(default: the first run).")
@click.option("--timeline", "timeline_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the merged timeline of one run's ranks to this file (Chrome trace JSON for Perfetto or "
                   "chrome://tracing: a process per rank; steps, GPU work, collectives with their wait and the "
                   "critical path on one clock).")
def report(runs: tuple[str, ...], workdir: Path, full: bool, rows: int, html_file: Path | None,
           baseline: str | None, timeline_file: Path | None) -> None:
    """Headline metrics of runs (a sweep id selects all its points; default: the latest sweep);
    failed runs with their reason and log tail."""
    from hpcprof.report.runs import load, select_runs
    from hpcprof.run.rundir import find_run

    if html_file is not None:   # a FIFO, a device, a link, a workdir's file: refused before the report is made
        from hpcprof.core.safe_paths import check_output

        check_output(html_file, (), "--html")
    selected = select_runs(runs, workdir)
    if timeline_file is not None:
        write_timeline(selected, timeline_file)
        return
    if baseline is not None:
        base_run = find_run(baseline, workdir)
        if html_file is None or base_run not in selected:
            raise UserError(f"--baseline {baseline}: give it with --html and name a run of the selection")
        baseline = base_run.run_id
    infos = load(selected, require_collected=html_file is not None, one_workload=html_file is not None)
    if html_file is not None:
        from hpcprof.core.atomic import atomic_write
        from hpcprof.report.html import build_html

        atomic_write(html_file, build_html(infos, baseline), inputs=(), option="--html")
        click.echo(f"wrote {printable(str(html_file))}", err=True)
        return
    from hpcprof.report.limits import print_diagnoses
    from hpcprof.report.terminal import report as terminal_report

    console = Console(width=table_width(sys.stdout))
    print_diagnoses(infos, console)
    terminal_report(infos, full, rows, console)
    print_scaling(infos, console)


def write_timeline(selected: list[RunDir], path: Path) -> None:
    """`report --timeline FILE`: the merged timeline of the one selected run (report.timeline)."""
    import json

    from hpcprof.core.atomic import atomic_write
    from hpcprof.report.runs import load
    from hpcprof.report.timeline import run_timeline

    if len(selected) != 1:
        raise UserError(f"--timeline: name one run ({len(selected)} selected), e.g. hpcprof report RUN --timeline t.json")
    [info] = load(selected, require_collected=True)
    atomic_write(path, json.dumps(run_timeline(info)), inputs=(), option="--timeline")
    click.echo(f"wrote {printable(str(path))}", err=True)


def _scaling_of(runs: tuple[str, ...], workdir: Path, console: Console) -> None:
    """compare's scaling view: print_scaling of the compared runs that are collected."""
    from hpcprof.report.runs import load, select_runs

    print_scaling(load(select_runs(runs, workdir), require_collected=False, one_workload=False), console)


def print_scaling(infos: list[RunInfo], console: Console) -> None:
    """The scaling view of a sweep over world size (sweep.scaling_view): its table and sentences."""
    from rich.table import Table

    from hpcprof.report.sweep import scaling_view

    table, said = scaling_view([i for i in infos if i.metrics])
    if table.empty:
        return
    console.rule("[bold]scaling[/]")
    shown = Table(*table.columns)
    for row in table.itertuples(index=False):
        shown.add_row(*(str(v) for v in row))
    console.print(shown)
    for line in said:
        console.print(line, markup=False, highlight=False)


@click.command()
@click.argument("run")
@workdir_option
@click.option("--rank", type=int, help="Print this rank's log (default: the job log).")
@click.option("--hang", is_flag=True, help="Print why the run hung or died and a table of its ranks: the last "
              "collective each entered and completed, how long it waited, its error and where it was (a running "
              "run's ranks are asked for their stacks and Flight Recorder first: where they are now).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="With --hang: the table's format.")
def logs(run: str, workdir: Path, rank: int | None, hang: bool, fmt: str) -> None:
    """Print a run's job log, or one rank's log, or (--hang) why it hung or died."""
    import codecs

    from hpcprof.core.safe_paths import open_regular
    from hpcprof.core.safe_text import terminal_log
    from hpcprof.run.rundir import find_run

    found = find_run(run, workdir)
    if hang:
        from hpcprof.analysis.forensics.verdict import hang_report

        click.echo(hang_report(found, fmt), nl=False)
        return
    path = found.path / "logs" / ("job.out" if rank is None else f"rank{rank}.log")
    try:
        log = open_regular(path)    # a FIFO or a device there is refused, not waited on or read forever
    except FileNotFoundError:
        have = sorted(p.name for p in (found.path / "logs").glob("*")) if (found.path / "logs").is_dir() else []
        raise UserError(f"{path}: no such log; the run has {', '.join(have) or 'no logs yet'}") from None
    terminal = sys.stdout.isatty()   # on a terminal, the log's escape sequences are shown, not run
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with log:
        while chunk := log.read(1 << 20):
            text = decoder.decode(chunk)
            click.echo(terminal_log(text) if terminal else text, nl=False)
        click.echo(decoder.decode(b"", final=True), nl=False)
