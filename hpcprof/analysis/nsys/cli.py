"""`hpcprof nsys ...` commands."""

from __future__ import annotations

import glob
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from hpcprof.analysis.nsys_stats.schema import MissingData, NsysInputError
from hpcprof.analysis.nsys_stats.stats import PYTHON_REPORTS, REPORTS, SMALL_EXPORT_BYTES, run_python_reports
from hpcprof.analysis.nsys_stats.table import Table, write_csv
from hpcprof.cli_options import files_argument, output_file_option, rank_map_option
from hpcprof.errors import FiniteRange, UserError
from hpcprof.lazy import LazyModule
from hpcprof.ranks import rank_from_filename

if TYPE_CHECKING:
    import pandas as pd

    from hpcprof.analysis.nsys import distributed as dist
    from hpcprof.analysis.nsys_stats.db import Export
else:
    dist = LazyModule("hpcprof.analysis.nsys.distributed")   # SQLAlchemy and the analyses: imported when used

FORMATS = ("csv", "table", "json")     # = hpcprof.output.FORMATS (output imports rich: only for table/json)

EXTENSIONS = {"csv": "csv", "json": "json", "table": "txt"}


@click.group("nsys")
def nsys() -> None:
    """Reports and distributed analyses of Nsight Systems exports (.sqlite / .nsys-rep)."""


def _fail(path: Path | str, message: str) -> None:
    """One line on stderr naming the file."""
    text = message if message.startswith(str(path)) else f"{path}: {message}"
    click.echo(f"hpcprof nsys: {text}", err=True)


def open_exports(paths: list[Path], stack: ExitStack, gpu: bool = True) -> tuple[list[Export], int]:
    """Open every file that is a usable export (with `gpu`: one with GPU operations; a .nsys-rep
    is first exported to SQLite in a temporary folder with the nsys on PATH); report the others
    on stderr. Returns (exports, failures)."""
    import shutil
    import subprocess
    import tempfile

    from hpcprof.analysis.nsys_stats.db import Export

    exports: list[Export] = []
    failures = 0
    scratch: Path | None = None
    for path in paths:
        try:
            source = path
            if path.suffix == ".nsys-rep":
                nsys_exe = shutil.which("nsys")
                if nsys_exe is None:
                    raise NsysInputError(f"{path}: a .nsys-rep needs nsys to export it to SQLite; "
                                         "nsys is not on PATH (run `nsys export -t sqlite` where it is)")
                scratch = scratch or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hpcprof-nsys-")))
                from hpcprof.analysis.nsys.collect import export_sqlite

                try:
                    source = export_sqlite(nsys_exe, path, scratch / str(len(exports) + failures))
                except subprocess.CalledProcessError as exc:
                    raise NsysInputError(
                        f"{path}: nsys export failed ({' '.join((exc.stderr or '').split())})") from None
            export = stack.enter_context(Export(source))
            export.check_usable(gpu)
        except NsysInputError as exc:
            _fail(path, str(exc))
            failures += 1
            continue
        exports.append(export)
    return exports, failures


def _finish(failures: int, total: int) -> None:
    if failures:
        raise UserError(f"{failures} of {total} input file(s) could not be processed (see messages above)")


#: `nsys stats --format table` cells: thousands separators, the CSV's decimals (7,541,095.4)
TABLE_CELLS = {"i": "{:,d}", "f1": "{:,.1f}", "f3": "{:,.3f}"}


def _table_cell(value: Any, fmt: str, null: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return null
    if fmt in TABLE_CELLS and not isinstance(value, str):
        return TABLE_CELLS[fmt].format(int(value) if fmt == "i" else float(value))
    return str(value)


def _emit_stats_table(df: pd.DataFrame | Table, out: TextIO, title: str | None) -> None:
    """A stats report as a table with nsys's number formatting."""
    from rich.console import Console
    from rich.table import Table as RichTable

    from hpcprof.output import table_width

    table = df if isinstance(df, Table) else Table.from_frame(df)
    shown = RichTable(title=title, show_lines=False)
    for name, fmt in zip(table.columns, table.formats, strict=True):
        shown.add_column(name, justify="right" if fmt in TABLE_CELLS else "left")
    cells = [[_table_cell(v, fmt, table.null) for v in values]
             for values, fmt in zip(table.column_values(), table.formats, strict=True)]
    for row in zip(*cells, strict=True):
        shown.add_row(*row)
    Console(file=out, width=table_width(out)).print(shown)


def _emit(df: pd.DataFrame | Table, fmt: str, out: TextIO, title: str | None = None) -> None:
    if fmt in ("csv", "table") and (isinstance(df, Table) or "formats" in getattr(df, "attrs", {})):  # a report
        if fmt == "csv":
            write_csv(df, out)
        else:
            _emit_stats_table(df, out, title)
    else:
        from hpcprof.output import emit

        emit(df, fmt, out, title=title)


def _write(df: pd.DataFrame | Table, fmt: str, output: str | None, title: str,
           inputs: Sequence[Path] = ()) -> None:
    if output is None:
        _emit(df, fmt, sys.stdout, title)
        return
    from hpcprof.atomic import write_text_stream

    path = write_text_stream(Path(output), lambda fh: _emit(df, fmt, fh, title), inputs=inputs)
    click.echo(f"wrote {path}", err=True)


def _report_names(value: str) -> list[str]:
    names = [r.strip() for r in value.split(",") if r.strip()]
    unknown = [r for r in names if r not in REPORTS]
    if unknown:
        raise click.BadParameter(f"unknown report(s) {', '.join(unknown)}; known: {', '.join(REPORTS)}")
    return names


def _python_engine(engine: str, names: list[str], fmt: str, files: tuple[Path, ...]) -> bool:
    """Whether the standard-library engine runs the reports: `--engine python`, or `auto` for CSV
    of the summary reports it has (PYTHON_REPORTS) on .sqlite exports under SMALL_EXPORT_BYTES
    (there the imports of the columnar engine cost more than the reports)."""
    fits = fmt == "csv" and all(n in PYTHON_REPORTS for n in names)
    if engine == "python":
        if not fits:
            raise UserError(f"--engine python writes --format csv of {', '.join(PYTHON_REPORTS)}; "
                            "use --engine columnar (or auto) for other reports and formats")
        if any(p.suffix == ".nsys-rep" for p in files):
            raise UserError("--engine python reads SQLite exports; export the .nsys-rep files first "
                            "(nsys export -t sqlite) or use --engine columnar")
        return True
    return engine == "auto" and fits and all(
        p.suffix != ".nsys-rep" and p.is_file() and p.stat().st_size <= SMALL_EXPORT_BYTES for p in files)


def _python_results(files: tuple[Path, ...], names: list[str]) -> Iterator[tuple[Path, list[Any] | None]]:
    """(file, reports) of each export by the standard-library engine; None (named on stderr) where
    the file is not a usable export."""
    for path in files:
        try:
            yield path, run_python_reports(path, names)
        except NsysInputError as exc:
            _fail(path, str(exc))
            yield path, None


format_option = click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
                             help="Output format.")


@nsys.command("stats")
@files_argument
@click.option("--report", "-r", "reports", required=True, help="Report name(s), comma separated "
              "(current names such as cuda_gpu_kern_sum, or nsys 2022.4 names such as gpukernsum). "
              f"Known: {', '.join(REPORTS)}.")
@format_option
@click.option("--output", "-o", "prefix", default=None,
              help="Write PREFIX_<report>.<ext> (PREFIX_<file>_<report>.<ext> for several files) instead of stdout.")
@click.option("--engine", type=click.Choice(["auto", "python", "columnar"]), default="auto", show_default=True,
              help="python: standard library only (CSV of the summary reports); columnar: numpy/Arrow, "
                   "every report and format, fast on large exports; auto: python for CSV of those reports "
                   "on exports up to 32 MB. Both give nsys's bytes.")
def stats_cmd(files: tuple[Path, ...], reports: str, fmt: str, prefix: str | None, engine: str) -> None:
    """`nsys stats` reports, with the same numbers, rows and CSV bytes as nsys. A report whose
    tables the export lacks is skipped with what it lacks, as nsys does (exit 0)."""
    names = _report_names(reports)
    blocks = len(files) * len(names)
    failures = 0
    with ExitStack() as stack:
        if _python_engine(engine, names, fmt, files):
            results = _python_results(files, names)
        else:
            from hpcprof.analysis.nsys_stats.stats import run_reports

            exports, failures = open_exports(list(files), stack, gpu=False)
            results = ((export.path, run_reports(export, names, frames=fmt != "csv")) for export in exports)
        for path, outcomes in results:
            if outcomes is None:
                failures += 1
                continue
            for name, df in zip(names, outcomes, strict=True):
                if isinstance(df, MissingData):
                    _fail(path, f"{name} skipped: {df}")
                    continue
                if isinstance(df, NsysInputError):
                    _fail(path, str(df))
                    failures += 1
                    break
                if prefix is not None:
                    stem = f"{prefix}_{path.stem}" if len(files) > 1 else prefix
                    _write(df, fmt, f"{stem}_{name}.{EXTENSIONS[fmt]}", name, files)
                    continue
                if blocks > 1:
                    click.echo(f"# {path} {name}")
                _emit(df, fmt, sys.stdout, f"{path.name}: {name}")
                if blocks > 1:
                    click.echo("")
    _finish(failures, len(files))


def _window_spec(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value in ("auto", "capture") or (value.startswith("nvtx:") and len(value) > len("nvtx:")):
        return value
    raise click.BadParameter(f"{value!r}: give auto, capture or nvtx:NAME (the NVTX range that marks one iteration)")


window_option = click.option(
    "--window", "window", default="auto", show_default=True, metavar="auto|capture|nvtx:NAME", callback=_window_spec,
    help="The time the analysis covers. auto: collect's measured window (the `timed` range, else the iteration "
         "ranges, else Echo's `backward`, else the whole capture; an export in a run's directory: its "
         "profile.window.nvtx first), so the numbers equal collect's on the same export; capture: the whole "
         "capture (nsys's own rules); nvtx:NAME: from the first to the last instance of the NVTX range NAME.")


def _in_window(func: Callable[[dist.Activity], pd.DataFrame], spec: str, files: tuple[Path, ...]
               ) -> Callable[[dist.Activity], pd.DataFrame]:
    """`func` over the activity inside the window `spec` (--window), its table with a `window` column
    after `rank` naming each rank's window as collect's tables do; `func` itself for `capture`."""
    if spec == "capture":
        return func
    if spec.startswith("nvtx:"):
        nvtx: str | None = spec.removeprefix("nvtx:")
    else:
        from hpcprof.analysis.nsys.window import run_window_range

        named = {run_window_range(path) for path in files}
        if len(named) > 1:
            raise UserError(f"--window auto: the files name different windows ({', '.join(sorted(map(str, named)))}: "
                            "exports of different runs); give --window nvtx:NAME or capture")
        nvtx = named.pop()

    def analysis(act: dist.Activity) -> pd.DataFrame:
        from hpcprof.analysis.nsys import window as win

        window = win.find_window(act, nvtx)
        table = func(win.clip(act, window))
        labels = window.labels
        table.insert(list(table.columns).index("rank") + 1, "window", [labels.get(r, win.CAPTURE) for r in table["rank"]])
        return table

    return analysis


@nsys.command("nccl")
@files_argument
@rank_map_option
@window_option
@format_option
@output_file_option
def nccl_cmd(files: tuple[Path, ...], rank_map: str | None, window: str, fmt: str, output: str | None) -> None:
    """NCCL collectives per type: count, total, mean, min, max per rank and across ranks, slowest rank."""
    _run_analysis(files, rank_map, fmt, output, "nccl", _in_window(dist.nccl_per_rank, window, files),
                  across_ranks=dist.nccl_across_ranks, options=f"window={window}")


@nsys.command("overlap")
@files_argument
@rank_map_option
@window_option
@format_option
@output_file_option
def overlap_cmd(files: tuple[Path, ...], rank_map: str | None, window: str, fmt: str, output: str | None) -> None:
    """Compute vs communication time per rank and device; overlap % = compute-during-comm / comm (HTA)."""
    _run_analysis(files, rank_map, fmt, output, "overlap", _in_window(dist.overlap, window, files),
                  options=f"window={window}")


@nsys.command("gaps")
@files_argument
@click.option("--threshold-ms", type=FiniteRange(min=0, max=1e9), default=500.0, show_default=True,
              help="Report idle gaps longer than this.")
@rank_map_option
@window_option
@format_option
@output_file_option
def gaps_cmd(files: tuple[Path, ...], threshold_ms: float, rank_map: str | None, window: str, fmt: str,
             output: str | None) -> None:
    """GPU idle gaps over a threshold per process and device (nsys's gpu_gaps rule)."""
    def said_when_none(df: pd.DataFrame) -> None:
        if df.empty:
            click.echo(f"gaps: no GPU idle gap over {threshold_ms:g} ms in {len(files)} file(s) in the window "
                       f"{window} (a lower --threshold-ms shows shorter ones)", err=True)

    ns = int(threshold_ms * 1_000_000)
    _run_analysis(files, rank_map, fmt, output, "gaps", _in_window(lambda act: dist.gaps(act, ns), window, files),
                  note=said_when_none, options=f"threshold_ns={ns} window={window}")


@nsys.command("phases")
@files_argument
@rank_map_option
@format_option
@output_file_option
def phases_cmd(files: tuple[Path, ...], rank_map: str | None, fmt: str, output: str | None) -> None:
    """GPU time of the kernels launched inside each NVTX range, per rank."""
    _run_analysis(files, rank_map, fmt, output, "phases", dist.phases)


def expand_paths(values: tuple[str, ...], option: str) -> list[Path]:
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


@nsys.command("slowdown")
@click.option("--baseline", "baseline", required=True, multiple=True,
              help="Export(s) of the run without communication (world size 1); a glob is expanded.")
@click.option("--distributed", "distributed", required=True, multiple=True,
              help="Exports of the distributed run: repeat the option, give a quoted glob "
                   "('ws2/rank*.sqlite'), or list the files after it (the shell's glob).")
@click.argument("more", nargs=-1, type=click.Path(path_type=Path), metavar="[DISTRIBUTED...]")
@rank_map_option
@format_option
@click.option("--layout", type=click.Choice(["hpcprof", "echo"]), default="hpcprof", show_default=True,
              help="echo: Echo's columns (id, kShortName, kDemangledName, ground_truth, duration, "
                   "overlap_ratio, slowdown), one file per device; -o FILE.xlsx writes Excel.")
@click.option("--match", "match", type=click.Choice(["hpcprof", "echo"]), default="hpcprof", show_default=True,
              help="hpcprof: kernels matched by name and occurrence. echo: Echo's analyse.py exactly (launch "
                   "index over non-NCCL kernels + equal demangled name, device id to device id), written in "
                   "Echo's layout; needs one --baseline and -o FILE.xlsx|FILE.csv.")
@output_file_option
def slowdown_cmd(baseline: tuple[str, ...], distributed: tuple[str, ...], more: tuple[Path, ...],
                 rank_map: str | None, fmt: str, layout: str, match: str, output: str | None) -> None:
    """Echo's slowdown per compute kernel: (dur_N − dur_1) / (overlap_ratio · dur_1), every device."""
    mapping = _rank_map(rank_map)
    base_paths = expand_paths(baseline, "--baseline")
    paths = expand_paths(distributed, "--distributed") + list(more)
    if "echo" in (layout, match) and output is None:
        raise UserError(f"--{'match' if match == 'echo' else 'layout'} echo writes files: add -o FILE.csv or -o FILE.xlsx")
    if match == "echo" and len(base_paths) != 1:
        raise UserError(f"--match echo: give exactly one --baseline export (Echo joins one world-size-1 "
                        f"export), not {len(base_paths)}")
    if output is not None and Path(output).suffix == ".xlsx" and "echo" not in (layout, match):
        raise UserError(f"-o {output}: .xlsx is written for --layout echo only; add --layout echo")
    with ExitStack() as stack:
        base, base_failures = open_exports(base_paths, stack)
        exports, failures = open_exports(paths, stack)
        failures += base_failures
        if base and exports and match == "echo":
            failures += _echo_match(base[0], exports, mapping, None, Path(output or ""))
        elif base and exports:
            base_act, dist_act = _activity(base, {}), _activity(exports, mapping)
            if base_act is not None and dist_act is not None:
                result = dist.slowdown(base_act, dist_act)
                failures += _report_failed(base_act) + _report_failed(dist_act)
                if len(base) == 1:
                    matched = int((result["status"] == "matched").sum())
                    failures += _echo_match(base[0], exports, mapping, matched, None)
                if layout == "echo":
                    from hpcprof.analysis.nsys.echo import write_echo

                    assert output is not None  # refused above without -o
                    for path in write_echo(result, Path(output)):
                        click.echo(f"wrote {path}", err=True)
                else:
                    _write(result, fmt, output, "slowdown", [*base_paths, *paths])
            else:
                failures = max(failures, 1)
    _finish(failures, len(base_paths) + len(paths))


def _echo_match(base: Export, exports: list[Export], mapping: dict[str, int], hpcprof_matched: int | None,
                output: Path | None) -> int:
    """Echo's rule on the exports: its tables written to `output` (--match echo) or only counted
    (hpcprof's rule, `hpcprof_matched` kernels); the rule line on stderr. Returns failures (0 or 1)."""
    import sqlite3

    from hpcprof.analysis.nsys import echo_match as em

    ranks = {e.path: mapping.get(str(e.path), mapping.get(e.path.name, rank_from_filename(e.path))) for e in exports}
    try:
        result = em.echo_match(base.path, {p: i if r is None else r for i, (p, r) in enumerate(ranks.items())})
    except sqlite3.Error as exc:
        _fail("input", f"Echo's rule could not read the exports: {exc}")
        return 1
    if output is not None:
        for path in em.write_echo_tables(result.tables, output):
            click.echo(f"wrote {path}", err=True)
    rule = em.RULE_ECHO if output is not None else em.RULE_HPCPROF
    click.echo(em.rule_line(rule, result, hpcprof_matched), err=True)
    return 0


def _activity(exports: list[Export], mapping: dict[str, int]) -> dist.Activity | None:
    """The exports' activity; None (reported) when none of them could be read."""
    try:
        return dist.load_activity(exports, mapping)
    except NsysInputError as exc:
        _fail("input", str(exc))
        return None


def _report_failed(act: dist.Activity) -> int:
    """One line per export that failed while being read (after the analysis); their number."""
    for path, message in act.failed.items():
        _fail(path, message)
    return len(act.failed)


def _rank_map(spec: str | None) -> dict[str, int]:
    try:
        return dist.parse_rank_map(spec) if spec else {}
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _ranks_of_files(files: tuple[Path, ...], mapping: dict[str, int]) -> list[int] | None:
    """Each file's rank from --rank-map or its name, when every file has its own; else None."""
    ranks = [mapping.get(str(p), mapping.get(p.name, rank_from_filename(p))) for p in files]
    if None in ranks or len(set(ranks)) < len(ranks):
        return None
    return ranks  # type: ignore[return-value]


def _analysis_key(title: str, options: str, export: Export, mapping: dict[str, int]) -> str:
    """What an analysis's result on `export` depends on beside the export and the code (cache.py's
    key): the command, its options, the export's path and the rank mapping, pandas' and numpy's versions."""
    import numpy as np
    import pandas as pd

    return (f"analysis {title} [{options}] {export.path} ranks={sorted(mapping.items())} "
            f"pandas={pd.__version__} numpy={np.__version__}")


def _per_file_result(exports: list[Export], mapping: dict[str, int], func: Callable[[dist.Activity], pd.DataFrame],
                     key: str) -> tuple[pd.DataFrame | None, int]:
    """`func` over the exports' activity (None when none could be read), with the failures
    reported; with one export, its result is kept in the export's cache as `key` (cache.py: only
    large exports, by this code, dropped when the export changes) and read back the next time,
    unless some part of the export failed."""
    from hpcprof.analysis.nsys_stats.cache import frame_document, frame_from_document

    failures = 0

    def compute() -> pd.DataFrame | None:
        nonlocal failures
        act = _activity(exports, mapping)
        if act is None:
            failures += len(exports)
            return None
        result = func(act)
        failures += _report_failed(act)
        return result

    if len(exports) != 1:
        return compute(), failures
    result = exports[0].cached_result(key, compute, lambda df: None if df is None or failures else frame_document(df),
                                      frame_from_document)
    return result, failures


def _analyse_one_at_a_time(files: tuple[Path, ...], ranks: list[int], func: Callable[[dist.Activity], pd.DataFrame],
                           across_ranks: Callable[[pd.DataFrame], pd.DataFrame] | None,
                           title: str = "", options: str = "") -> tuple[pd.DataFrame | None, int]:
    """`func` on each file on its own, in rank order, through collect's engine (one export open
    and one rank's activity in memory at a time; each file's result kept in its cache as
    `_per_file_result` does), the results concatenated as they stream in, then `across_ranks`
    over them. Returns (the table or None when no file could be used, failures)."""
    from hpcprof.pool import InProcess, concat_frames, stream_map

    failures = 0

    def one_file(path: Path, rank: int) -> pd.DataFrame | None:
        nonlocal failures
        with ExitStack() as stack:
            exports, failed = open_exports([path], stack)
            failures += failed
            if not exports:
                return None
            mapping = {str(exports[0].path): rank}
            result, failed = _per_file_result(exports, mapping, func, _analysis_key(title, options, exports[0], mapping))
            failures += failed
            return result

    jobs = ((path, (path, rank)) for rank, path in sorted(zip(ranks, files, strict=False)))
    results = (future.result() for _, future in stream_map(InProcess(), one_file, jobs, in_flight=1))
    df = concat_frames(r for r in results if r is not None)
    if df is None:
        return None, failures
    return (across_ranks(df) if across_ranks else df), failures


def _run_analysis(files: tuple[Path, ...], rank_map: str | None, fmt: str, output: str | None, title: str,
                  per_file: Callable[[dist.Activity], pd.DataFrame],
                  across_ranks: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
                  note: Callable[[pd.DataFrame], None] | None = None, options: str = "") -> None:
    """`per_file` over the files' activity, then `across_ranks` over its rows, written out (`note`
    first told the table). When every file has its own rank, the files are analysed one at a
    time, so memory and open files do not grow with the number of ranks (each file's rows kept in
    its cache); otherwise (ranks found inside the exports) all at once, the table of one export
    kept in its cache. `options`: those of the command that change the table (the kept table's key)."""
    mapping = _rank_map(rank_map)
    ranks = _ranks_of_files(files, mapping) if len(files) > 1 else None
    if ranks is not None:
        result, failures = _analyse_one_at_a_time(files, ranks, per_file, across_ranks, title, options)
    else:
        def analysis(act: dist.Activity) -> pd.DataFrame:
            return across_ranks(per_file(act)) if across_ranks else per_file(act)

        with ExitStack() as stack:
            exports, failures = open_exports(list(files), stack)
            result = None
            if exports:
                result, failed = _per_file_result(exports, mapping, analysis,
                                                  _analysis_key(title, options, exports[0], mapping))
                failures += failed
    if result is not None:
        if note is not None:
            note(result)
        _write(result, fmt, output, title, files)
    _finish(failures, len(files))


@nsys.command("critical-path")
@files_argument
@rank_map_option
@click.option("--iteration-range", default=None, metavar="NAME",
              help="The NVTX range that marks one iteration (default: the workload's `iteration` inside "
                   "`timed`, `step<N>`, or Echo's `backward` window).")
@click.option("--segments", is_flag=True, help="Show the chain of each iteration (compute, wait and collective "
              "segments per rank) instead of one row per iteration.")
@format_option
@output_file_option
def critical_path_cmd(files: tuple[Path, ...], rank_map: str | None, iteration_range: str | None, segments: bool,
                      fmt: str, output: str | None) -> None:
    """Per timed iteration, across ranks: the collective the others waited longest in, the rank they
    waited for, the NVTX phase (or kernel) that held it, the wait, and the iteration's length on the
    critical path."""
    from hpcprof.analysis.nsys import critical_path as cp

    def per_file(act: dist.Activity) -> pd.DataFrame:
        return cp.rank_events(act, iteration_range)

    def across_ranks(events: pd.DataFrame) -> pd.DataFrame:
        return cp.critical_path(events)[1 if segments else 0]

    def said_when_none(table: pd.DataFrame) -> None:
        if table.empty:
            _fail("critical-path", "no iteration has collectives on two or more ranks (iterations: "
                  + (f"NVTX `{iteration_range}`" if iteration_range else "NVTX `iteration` inside `timed`, "
                     "`step<N>` or `backward`; name another with --iteration-range") + ")")

    _run_analysis(files, rank_map, fmt, output, "critical-path", per_file, across_ranks=across_ranks,
                  note=said_when_none, options=f"iteration_range={iteration_range!r} segments={segments}")
nsys.add_command(LazyModule("hpcprof.analysis.nsys_stats.rules_cli").analyze_cmd)   # `hpcprof nsys analyze` (rules_cli.py)
