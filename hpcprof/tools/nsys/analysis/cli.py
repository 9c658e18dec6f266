"""`hpcprof nsys ...` commands."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hpcprof.cli.options import (
    expand_paths,
    files_argument,
    one_file_per_rank,
    output_file_option,
    rank_map_option,
    window_option,
)
from hpcprof.core.errors import FiniteRange, UserError, printable
from hpcprof.core.lazy import LazyModule, load_target
from hpcprof.run.ranks import rank_from_filename
from hpcprof.tools.nsys.analysis.stats_command import (
    FORMATS,
    failed_files,
    open_exports,
    report_names,
    run_stats,
    say,
    write,
)
from hpcprof.tools.nsys.stats.schema import NsysInputError
from hpcprof.tools.nsys.stats.stats import DEFAULT_REPORTS, REPORTS

if TYPE_CHECKING:
    import pandas as pd

    from hpcprof.tools.nsys.analysis import distributed as dist
    from hpcprof.tools.nsys.stats.db import Export
else:
    dist = LazyModule("hpcprof.tools.nsys.analysis.distributed")   # SQLAlchemy and the analyses: imported when used


class NsysGroup(click.Group):
    """The `hpcprof nsys` commands; `analyze` (rules_cli.py, the rules' module) imported only when run."""

    LAZY = {"analyze": "hpcprof.tools.nsys.stats.rules_cli:analyze_cmd"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return load_target(self.LAZY[name]) if name in self.LAZY else super().get_command(ctx, name)


@click.group("nsys", cls=NsysGroup)
def nsys() -> None:
    """Reports and distributed analyses of Nsight Systems exports (.sqlite / .nsys-rep)."""


def _finish(failures: int, total: int) -> None:
    if failures:
        raise failed_files(failures, total)


format_option = click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
                             help="Output format.")


@nsys.command("stats")
@files_argument
@click.option("--report", "-r", "reports", default=None, help="Report name(s), comma separated "
              "(current names such as cuda_gpu_kern_sum, or nsys 2022.4 names such as gpukernsum). "
              f"Known: {', '.join(REPORTS)}. Default: nsys 2022.4's default set, in its order "
              f"({', '.join(DEFAULT_REPORTS)}; the graphics, Windows and OpenACC ones are skipped where the "
              "export lacks their data, as nsys skips them, and not computed otherwise).")
@format_option
@click.option("--output", "-o", "prefix", default=None,
              help="Write PREFIX_<report>.<ext> (PREFIX_<file>_<report>.<ext> for several files) instead of stdout.")
def stats_cmd(files: tuple[Path, ...], reports: str | None, fmt: str, prefix: str | None) -> None:
    """`nsys stats` reports, with the same numbers, rows and CSV bytes as nsys. A report whose
    tables the export lacks is skipped with what it lacks, as nsys does (exit 0)."""
    names = report_names(reports)
    if names is None:
        unknown = [r.strip() for r in (reports or "").split(",") if r.strip() and report_names(r) is None]
        raise click.BadParameter(f"unknown report(s) {', '.join(unknown)}; known: {', '.join(REPORTS)}")
    _finish(run_stats(files, names, fmt, prefix), len(files))


def _in_window(func: Callable[[dist.Activity], pd.DataFrame], spec: str, files: tuple[Path, ...]
               ) -> Callable[[dist.Activity], pd.DataFrame]:
    """`func` over the activity inside the window `spec` (--window), its table with a `window` column
    after `rank` naming each rank's window as collect's tables do; `func` itself for `capture`."""
    if spec == "capture":
        return func
    from hpcprof.tools.nsys.analysis.window import window_range

    nvtx = window_range(spec, files)

    def analysis(act: dist.Activity) -> pd.DataFrame:
        from hpcprof.tools.nsys.analysis import window as win

        window = win.find_window(act, nvtx)
        table = func(win.clip(act, window))
        labels = window.labels
        table.insert(list(table.columns).index("rank") + 1, "window", [labels.get(r, win.CAPTURE) for r in table["rank"]])
        return table

    return analysis


@nsys.command("nccl")
@files_argument
@rank_map_option
@window_option()
@click.option("--busbw", is_flag=True, help="Per process group, collective and message-size bucket: median bytes, "
              "median kernel time, algbw = bytes / time and busbw = algbw · nccl-tests' factor (collect's "
              "nsys_busbw; sizes from NCCL's NVTX payloads: an export made with --include-blobs=true).")
@format_option
@output_file_option
def nccl_cmd(files: tuple[Path, ...], rank_map: str | None, window: str, busbw: bool, fmt: str,
             output: str | None) -> None:
    """NCCL collectives per type: count, total, mean, min, max per rank and across ranks, slowest
    rank; with --busbw their bus bandwidth per size bucket."""
    if busbw:
        from hpcprof.analysis import busbw as bw

        _run_analysis(files, rank_map, fmt, output, "nccl-busbw", partial(_busbw_per_rank, window, files),
                      across_ranks=bw.across_ranks, options=f"window={window}")
        return
    _run_analysis(files, rank_map, fmt, output, "nccl", _in_window(dist.nccl_per_rank, window, files),
                  across_ranks=dist.nccl_across_ranks, options=f"window={window}")


def _busbw_per_rank(spec: str, files: tuple[Path, ...], act: dist.Activity) -> pd.DataFrame:
    """The per-rank busbw rows of `act`'s NCCL kernels inside each rank's window (--window: as
    collect's nsys_busbw; `capture`: each rank's whole capture)."""
    import numpy as np

    from hpcprof.tools.nsys.analysis import window as win
    from hpcprof.tools.nsys.analysis.collectives import rank_busbw

    if spec != "capture":
        return rank_busbw(act, win.find_window(act, win.window_range(spec, files)).bounds)
    rank, start, end = act.column("rank"), act.column("start"), act.column("end")
    ranks = np.unique(rank)
    bounds = {"rank": ranks, "window": np.full(len(ranks), win.CAPTURE, dtype=object),
              "start_ns": np.array([start[rank == r].min() for r in ranks.tolist()]),
              "end_ns": np.array([end[rank == r].max() for r in ranks.tolist()])}
    return rank_busbw(act, bounds)


@nsys.command("overlap")
@files_argument
@rank_map_option
@window_option()
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
@window_option()
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
    one_file_per_rank(paths, partial(_rank_of, mapping))
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
                    from hpcprof.tools.nsys.analysis.echo import write_echo

                    assert output is not None  # refused above without -o
                    for path in write_echo(result, Path(output), [*base_paths, *paths]):
                        click.echo(f"wrote {printable(str(path))}", err=True)
                else:
                    write(result, fmt, output, "slowdown", [*base_paths, *paths])
            else:
                failures = max(failures, 1)
    _finish(failures, len(base_paths) + len(paths))


def _echo_match(base: Export, exports: list[Export], mapping: dict[str, int], hpcprof_matched: int | None,
                output: Path | None) -> int:
    """Echo's rule on the exports: its tables written to `output` (--match echo) or only counted
    (hpcprof's rule, `hpcprof_matched` kernels); the rule line on stderr. Returns failures (0 or 1)."""
    import sqlite3

    from hpcprof.tools.nsys.analysis import echo_match as em

    ranks = {e.path: _rank_of(mapping, e.path) for e in exports}
    try:
        result = em.echo_match(base.path, {p: i if r is None else r for i, (p, r) in enumerate(ranks.items())})
    except sqlite3.Error as exc:
        say("input", f"Echo's rule could not read the exports: {exc}")
        return 1
    if output is not None:
        for path in em.write_echo_tables(result.tables, output, [base.path, *(e.path for e in exports)]):
            click.echo(f"wrote {printable(str(path))}", err=True)
    rule = em.RULE_ECHO if output is not None else em.RULE_HPCPROF
    click.echo(em.rule_line(rule, result, hpcprof_matched), err=True)
    return 0


def _activity(exports: list[Export], mapping: dict[str, int]) -> dist.Activity | None:
    """The exports' activity; None (reported) when none of them could be read."""
    try:
        return dist.load_activity(exports, mapping)
    except NsysInputError as exc:
        say("input", str(exc))
        return None


def _report_failed(act: dist.Activity) -> int:
    """One line per export that failed while being read (after the analysis); their number."""
    for path, message in act.failed.items():
        say(path, message)
    return len(act.failed)


def _rank_map(spec: str | None) -> dict[str, int]:
    try:
        return dist.parse_rank_map(spec) if spec else {}
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _rank_of(mapping: dict[str, int], path: Path) -> int | None:
    """A file's rank from --rank-map (by path or name), else from its name (None: neither gives one)."""
    return mapping.get(str(path), mapping.get(path.name, rank_from_filename(path)))


def _ranks_of_files(files: tuple[Path, ...], mapping: dict[str, int]) -> list[int] | None:
    """Each file's rank from --rank-map or its name, when every file has its own; else None."""
    ranks = [_rank_of(mapping, p) for p in files]
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
    from hpcprof.tools.nsys.stats.cache import frame_document, frame_from_document

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
    from hpcprof.core.pool import InProcess, concat_frames, stream_map

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
    one_file_per_rank(files, partial(_rank_of, mapping))
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
        write(result, fmt, output, title, files)
    _finish(failures, len(files))


@nsys.command("critical-path")
@files_argument
@rank_map_option
@click.option("--iteration-range", default=None, metavar="NAME",
              help="The NVTX range that marks one iteration (default: the workload's `iteration` inside "
                   "`timed`, `step<N>`, or Echo's `backward` window).")
@click.option("--segments", is_flag=True, help="Show the chain of each iteration (compute, wait and collective "
              "segments per rank) instead of one row per iteration.")
@click.option("--waits", is_flag=True, help="Show, per collective type, each rank's kernel time split into the "
              "transfer (after the last rank arrived) and the wait for the last rank, which rank came last, and the "
              "transfer no other GPU work of the rank overlapped (exposed_ns).")
@format_option
@output_file_option
def critical_path_cmd(files: tuple[Path, ...], rank_map: str | None, iteration_range: str | None, segments: bool,
                      waits: bool, fmt: str, output: str | None) -> None:
    """Per timed iteration, across ranks: the collective the others waited longest in, the rank they
    waited for, the NVTX phase (or kernel) that held it, the wait, and the iteration's length on the
    critical path."""
    from hpcprof.analysis.collective_wait import transfer_wait
    from hpcprof.tools.nsys.analysis import critical_path as cp

    if segments and waits:
        raise UserError("--segments and --waits show different tables: give one of them")

    def per_file(act: dist.Activity) -> pd.DataFrame:
        return cp.rank_events(act, iteration_range)

    def across_ranks(events: pd.DataFrame) -> pd.DataFrame:
        from hpcprof.analysis.clocks import aligned

        events, said = aligned(events)
        if said is not None:
            say("critical-path", said)
        return transfer_wait(events) if waits else cp.critical_path(events)[1 if segments else 0]

    def said_when_none(table: pd.DataFrame) -> None:
        if table.empty:
            say("critical-path", "no iteration has collectives on two or more ranks (iterations: "
                  + (f"NVTX `{iteration_range}`" if iteration_range else "NVTX `iteration` inside `timed`, "
                     "`step<N>` or `backward`; name another with --iteration-range") + ")")

    _run_analysis(files, rank_map, fmt, output, "critical-path", per_file, across_ranks=across_ranks,
                  note=said_when_none, options=f"iteration_range={iteration_range!r} segments={segments} waits={waits}")


@nsys.command("causes")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--samples", type=click.Path(path_type=Path, file_okay=False),
              help="Folder of the stack sampler's rank<N>.jsonl (default: samples/ of the run, found above each export).")
@click.option("--all-causes", is_flag=True, help="List every cause, also those under 5 % of the step.")
@format_option
def causes_cmd(files: tuple[Path, ...], samples: Path | None, all_causes: bool, fmt: str) -> None:
    """Why the GPU waits: each `hpcprof:step`'s idle time per rank (a .sqlite export each) split into
    its host-side causes in ms per step, with the line of the program and the fix."""
    import sqlite3

    from hpcprof.analysis import idle as I
    from hpcprof.core.output import emit
    from hpcprof.tools.nsys.analysis.idle import timeline

    timelines, errors = [], 0
    for path in files:
        rank = rank_from_filename(path) or 0
        found = samples / f"rank{rank}.jsonl" if samples else I.find_samples(path, rank)
        try:
            timelines.append(timeline(path, rank, found))
        except (sqlite3.Error, OSError) as exc:
            errors += 1
            click.echo(f"hpcprof: {printable(f'{path}: {exc}')}", err=True)
    if not timelines:
        raise UserError("no export could be analysed (a .sqlite from nsys export --type sqlite)")
    frame = I.attribute(timelines)
    emit(frame if all_causes else I.named(frame), fmt, title="idle causes")
    if errors:
        raise UserError(f"{errors} export(s) not analysed, see the 'hpcprof:' lines")

