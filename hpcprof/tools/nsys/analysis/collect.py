"""nsys profiles in `hpcprof collect`: the exports of a run, one rank's tables, the cross-rank reduce."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import pandas as pd
import pyarrow as pa

from hpcprof.analysis import busbw
from hpcprof.analysis.collector import CollectContext, Log, ReadTable, Reducer, RunStep, ToolCollector, each_alone
from hpcprof.analysis.detect_steps import window_note
from hpcprof.core.atomic import atomic_write
from hpcprof.core.errors import Problem
from hpcprof.core.safe_paths import read_tail
from hpcprof.run.results import arrow_table, to_arrow
from hpcprof.run.rundir import LOG_TAIL_BYTES
from hpcprof.tools.nsys import tables as nt
from hpcprof.tools.nsys.analysis import critical_path
from hpcprof.tools.nsys.analysis import distributed as dist
from hpcprof.tools.nsys.analysis import window as win
from hpcprof.tools.nsys.analysis.collectives import busbw_table, without_payloads
from hpcprof.tools.nsys.analysis.echo import echo_step
from hpcprof.tools.nsys.analysis.timeline import iteration_timeline, median_iteration
from hpcprof.tools.nsys.stats.arrays import Columns
from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.nsys.stats.nvtx import read_process_ranges
from hpcprof.tools.nsys.stats.schema import OLD
from hpcprof.tools.nsys.stats.summaries import LAYOUT, summaries_of

if TYPE_CHECKING:
    from hpcprof.run.record import RunRecord


def find_nsys(tool_paths: Mapping[str, str]) -> str | None:
    """The site's nsys (tool_paths["nsys"]) or nsys on PATH, if any."""
    configured = tool_paths.get("nsys")
    if configured and Path(configured).exists():
        return configured
    return shutil.which(configured or "nsys")


@functools.cache
def export_options(nsys: str) -> tuple[str, ...]:
    """The options of `nsys export` that `nsys` has beyond 2022.4's: `--include-blobs true` (the NVTX
    payloads, NCCL's message sizes: nsys/collectives.py) where its `nsys export --help` names it."""
    try:
        shown = subprocess.run([nsys, "export", "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ()
    return ("--include-blobs", "true") if "--include-blobs" in shown.stdout + shown.stderr else ()


def export_sqlite(nsys: str, rep: Path, work_dir: Path) -> Path:
    """`nsys export -t sqlite` of `rep` into `work_dir` (reused when already exported), with the
    NVTX payloads where the site's nsys can (export_options)."""
    out = work_dir / (rep.stem + ".sqlite")
    if out.exists() and out.stat().st_mtime >= rep.stat().st_mtime:
        return out
    extra = export_options(nsys)

    def export(tmp: Path) -> None:  # a failed export leaves no file
        subprocess.run([nsys, "export", "-t", "sqlite", "--force-overwrite", "true", *extra, "-o", str(tmp), str(rep)],
                       check=True, capture_output=True, text=True)

    return atomic_write(out, export, what="nsys export", suffix=".sqlite")


def sqlite_files(ctx: CollectContext, tool_paths: Mapping[str, str]) -> dict[str, int]:
    """The run's exports with their ranks: .sqlite files as given, .nsys-rep exported with the
    site's nsys (`tool_paths`) when there is one; an export beside its report that lacks NCCL's NVTX
    payloads (`nsys profile --export=sqlite` writes none) is made again with them where that nsys
    can (export_options)."""

    def stem(path: str) -> str:
        return os.path.splitext(os.path.basename(path))[0]

    reps = [f for f in ctx.files if f.endswith(".nsys-rep")]
    given = {f: ctx.rank_of.get(f) for f in ctx.files if f.endswith(".sqlite")}
    have = {stem(f): f for f in given} if reps else {}
    nsys = find_nsys(tool_paths) if reps else None
    for rep in reps:
        beside = have.get(stem(rep))
        if beside is not None and not (nsys is not None and export_options(nsys) and without_payloads(Path(beside))):
            continue
        if beside is not None:          # `nsys profile --export=sqlite` keeps no NVTX payloads: exported again
            given.pop(beside)
        if nsys is None:
            ctx.problem(Problem(Path(rep), "not exported: no nsys executable found (set the site's paths.nsys, or "
                                           "export it with `nsys export -t sqlite` beside it)"))
            continue
        try:
            given[str(export_sqlite(nsys, Path(rep), ctx.work_dir))] = ctx.rank_of.get(rep)
        except (subprocess.CalledProcessError, OSError) as exc:
            last = (getattr(exc, "stderr", None) or "").strip().splitlines()[-1:]
            ctx.problem(Problem(Path(rep), f"nsys export failed: {last[0][:200] if last else exc}"))
    return {f: (r if r is not None else -1) for f, r in given.items()}


#: GPU idle gaps reported by collect (the report's gaps plot): longer than 0.1 ms
GAP_NS = nt.GAP_NS


def rank_nccl(act: dist.Activity) -> pa.Table:
    """The per-rank rows of dist.nccl_summary, in its columns and types, without its cross-rank rows
    (nccl_with_totals makes those over all ranks)."""
    per = dist.nccl_rank_columns(act)
    per["mean_ns"] = per["mean_ns"].round(1)
    rows = len(per["rank"])        # no rows: the frame's types (text columns of str dtype, as with rows)
    table = arrow_table(per) if rows else to_arrow(pd.DataFrame(per | {"scope": pd.array(per["scope"], dtype="str")}),
                                                   pandas_metadata=False)
    missing = pa.nulls(rows, pa.int64())
    return table.append_column("slowest_rank", missing).append_column("slowest_total_ns", missing)


def columns_table(columns: Columns) -> pa.Table:
    """arrow_table of an analysis' columns; those of no rows (arrays.no_rows) straight as Arrow's
    null columns, the type the frame route gives them, without a frame per column."""
    if all(v.dtype == object and not len(v) for v in columns.values()):
        return pa.Table.from_arrays([pa.nulls(0) for _ in columns], names=list(columns))
    return arrow_table(columns)


#: the layouts the NVTX ranges are named in: the analyses' (distributed.process_ranges: 2022.4's)
#: and the summary reports' (summaries.LAYOUT), read in one pass (nvtx.read_process_ranges)
RANGE_LAYOUTS = (OLD, LAYOUT)


def load_activity(exports: list[Export], ranks: dict[str, int]) -> dist.Activity:
    """dist.load_activity of `exports`, their NVTX ranges first read in both RANGE_LAYOUTS at once
    (the analyses and the summary reports then find them read)."""
    read_process_ranges(exports, RANGE_LAYOUTS)
    return dist.load_activity(exports, ranks)


def analyse_tables(path: Path, rank: int, nvtx_window: str | None = None, cpus: int | None = None) -> dict[str, pa.Table]:
    """One rank's export as the Arrow tables collect writes: its summary reports (whole capture,
    as `nsys stats` gives them); over the measured window (nsys/window.py; `nvtx_window`, else
    the run's `profile.window.nvtx`, names the iteration range): the window, its iterations,
    kernels, NCCL per collective, bus bandwidth per collective and message size (nsys/collectives.py),
    overlap, NVTX ranges, iteration timeline and GPU idle gaps over
    GAP_NS; over the whole capture: overlap and NVTX ranges again (`capture_*`). Each table has a
    `rank` column, those of the window a `window` column. NsysInputError when the export cannot
    be used; `cpus`: the CPUs its large tables are read on (Export; collect's: the file's share)."""
    with Export(path, cpus) as export:
        export.check_usable()
        activity = load_activity([export], {str(path): rank})
        [summaries] = summary_tables([(export, rank)])
        if isinstance(summaries, Exception):
            raise summaries
        return summaries | activity_tables(activity, nvtx_window or win.run_window_range(path)) | \
            idle_tables(path, rank, (export, activity))


def idle_tables(path: Path, rank: int, opened: tuple[Export, dist.Activity] | None = None) -> dict[str, pa.Table]:
    """The idle attribution of the step hook's steps in one rank's export (hpcprof.analysis.idle,
    nsys/idle.py, with the run's stack samples where found): its causes, one typical step, the
    time per line; empty tables for an export without the hook's steps. `opened`: the export
    already open and the activity read from it (its GPU operations are the device's busy time)."""
    from hpcprof.analysis import idle as I
    from hpcprof.tools.nsys.analysis.idle import export_timeline, timeline

    samples = I.find_samples(path, rank)
    if opened is None:
        steps = timeline(path, rank, samples)
    else:
        export, activity = opened
        mine = activity.column("file") == str(export.path)
        busy = I.intervals(activity.column("start")[mine].astype(np.float64) / 1000,
                           activity.column("end")[mine].astype(np.float64) / 1000)
        steps = export_timeline(export.sql_rows, export.table_names, rank, samples, busy)
    cut = [I.split(steps)]
    frames = {nt.IDLE_CAUSES.key: I.attribute([steps], cut), nt.STEP_IDLE.key: I.typical_step([steps], cut),
              nt.LINES.key: I.line_time([steps])}
    return {key: pa.Table.from_pandas(frame, preserve_index=False) for key, frame in frames.items()}


def summary_tables(exports: Sequence[tuple[Export, int]]) -> list[dict[str, pa.Table] | Exception]:
    """The summary reports of each (export, rank) (SUMMARY_REPORTS it has the data for, computed for
    all at once: summaries.summaries_of), each with a `rank` column, or the error that stops the
    export's summaries: per report one Arrow table of all the exports' rows, cut by rank."""
    by_rank = sorted(range(len(exports)), key=lambda i: exports[i][1])
    reports, failed = summaries_of([exports[i][0] for i in by_rank])
    ranks = np.array([exports[i][1] for i in by_rank], dtype=np.int64)
    out: dict[int, dict[str, pa.Table] | Exception] = {
        i: failed[at] if at in failed else {} for at, i in enumerate(by_rank)}
    for name, report in reports.items():
        kept = [at for at in report.present if at not in failed]
        joined = arrow_table({"rank": ranks[report.export], **report.table.columns})
        for at, table in zip(kept, split_by_rank(joined, ranks[kept].tolist()), strict=True):
            cast(dict[str, pa.Table], out[by_rank[at]])[name] = table
    return [out[i] for i in range(len(exports))]


def activity_tables(activity: dist.Activity, nvtx_window: str | None) -> dict[str, pa.Table]:
    """The tables of analyse_tables made from the activity of one or more ranks (the analyses are
    per rank, vectorised over ranks), in the window that the range `nvtx_window` marks (None: the
    module's rules, window.py)."""
    out: dict[str, pa.Table] = {}
    window = win.find_window(activity, nvtx_window)
    busbw = busbw_table(activity, window.bounds)         # first: the clip's rows keep the NCCL mask it makes
    inside = win.clip(activity, window)
    out[nt.WINDOW.key] = win.window_summary(activity, window)
    out[nt.ITERATIONS.key] = win.iteration_series(activity, window)
    out[nt.KERNELS.key] = win.with_window(win.kernel_sum(inside), window)
    out[nt.NCCL.key] = win.with_window(rank_nccl(inside), window)
    out[nt.BUSBW.key] = busbw
    out[nt.OVERLAP.key] = win.with_window(columns_table(dist.overlap_columns(inside)), window)
    out[nt.PHASES.key] = win.with_window(columns_table(dist.phase_columns(activity, win.instances_inside(window))), window)
    out[nt.TIMELINE.key] = iteration_timeline(activity, window)
    out[nt.GAPS.key] = win.with_window(columns_table(dist.gap_columns(inside, GAP_NS)), window)
    out[nt.CAPTURE_OVERLAP.key] = columns_table(dist.overlap_columns(activity))
    out[nt.CAPTURE_PHASES.key] = columns_table(dist.phase_columns(activity, window.instance_columns))
    events = critical_path.rank_event_columns(activity)
    out[critical_path.EVENTS_TABLE] = arrow_table(events) if events is not None else \
        to_arrow(critical_path.empty_events(), pandas_metadata=False)
    return out


#: the exports one joint pass of analyse_batch holds together, at most (bytes on disk): a pass keeps
#: their activity in memory at once
BATCH_BYTES = 64 << 20


def joint_groups(files: Sequence[tuple[Path, int]]) -> list[list[int]]:
    """The files (by position) that analyse_batch analyses in one pass: exports of distinct paths
    and ranks (>= 0: an unknown rank is its file's own) that name the same window range, up to
    BATCH_BYTES together; groups of one file and files that cannot be looked at are left out."""
    groups: list[list[int]] = []
    filling: dict[str | None, tuple[list[int], set[object], int]] = {}
    for i, (path, rank) in enumerate(files):
        try:
            size, nvtx_window = path.stat().st_size, win.run_window_range(path)
        except OSError:
            continue
        if rank < 0 or size > BATCH_BYTES:
            continue
        members, seen, total = filling.get(nvtx_window, ([], set(), 0))
        if rank in seen or str(path) in seen or total + size > BATCH_BYTES:
            groups.append(members)
            members, seen, total = [], set(), 0
        members.append(i)
        seen |= {rank, str(path)}
        filling[nvtx_window] = (members, seen, total + size)
    groups += [members for members, _, _ in filling.values()]
    return [g for g in groups if len(g) > 1]


def split_by_rank(table: pa.Table, ranks: Sequence[int]) -> list[pa.Table]:
    """The rows of each of `ranks` (its `rank` column), in the table's order: slices where the
    table is in rank order (as the analyses make them), else the rows taken."""
    if not table.num_rows:
        return [table] * len(ranks)
    column = table.column("rank").to_numpy()
    if (column[1:] >= column[:-1]).all():
        lo, hi = np.searchsorted(column, ranks, "left").tolist(), np.searchsorted(column, ranks, "right").tolist()
        return [table.slice(a, b - a) for a, b in zip(lo, hi, strict=True)]
    order = np.argsort(column, kind="stable")
    lo, hi = np.searchsorted(column[order], ranks, "left").tolist(), np.searchsorted(column[order], ranks, "right").tolist()
    return [table.take(order[a:b]) for a, b in zip(lo, hi, strict=True)]


def analyse_batch(files: Sequence[tuple[Path, int]], cpus: int | None = None) -> list[dict[str, pa.Table] | Exception]:
    """analyse_tables of each of `files`, or the exception it raised, with the same tables: the
    summary reports of each export on its own, the analyses of the activity in one pass over the
    exports of each joint_groups group (joint_pass). A pass that fails is tried again as two
    halves, so that one damaged file costs a few passes, not the group's; a file no pass takes is
    analysed on its own, its error its own. `cpus`: as analyse_tables takes it, for each file."""
    out: dict[int, dict[str, pa.Table] | Exception] = {}
    pending = joint_groups(files)
    while pending:
        group = pending.pop()
        try:
            out.update(joint_pass(files, group, cpus))
        except Exception:                   # halves tried again; single files below
            if len(group) >= 4:
                pending += [group[:len(group) // 2], group[len(group) // 2:]]
    alone = [i for i in range(len(files)) if i not in out]
    out.update(zip(alone, each_alone(functools.partial(analyse_tables, cpus=cpus), [files[i] for i in alone]),
                   strict=True))
    return [out[i] for i in range(len(files))]


def joint_pass(files: Sequence[tuple[Path, int]], group: list[int],
               cpus: int | None = None) -> dict[int, dict[str, pa.Table]]:
    """The tables of the files at positions `group` (distinct ranks, one window range), by position:
    the activity of their exports analysed in one pass (the analyses are per rank and vectorised
    over ranks: numpy's cost per call, most of a small export's time, is paid once for all), each
    file's rows then taken out by its rank; its summary reports on its own. Files whose export does
    not open or read are left out (analysed on their own by the caller)."""
    with contextlib.ExitStack() as stack:
        exports: dict[int, Export] = {}
        for i in group:
            try:
                exports[i] = stack.enter_context(Export(files[i][0], cpus))
                exports[i].check_usable()
            except Exception:               # left to the caller
                exports.pop(i, None)
        if len(exports) < 2:
            return {}
        activity = load_activity(list(exports.values()), {str(files[i][0]): files[i][1] for i in exports})
        joint = [i for i in exports if exports[i].path not in activity.failed]
        tables = activity_tables(activity, win.run_window_range(files[group[0]][0]))
        parts = {name: split_by_rank(table, [files[i][1] for i in joint]) for name, table in tables.items()}
        summaries = summary_tables([(exports[i], files[i][1]) for i in joint])
        return {i: got | {name: rows[at] for name, rows in parts.items()} | idle_tables(*files[i], (exports[i], activity))
                for at, (i, got) in enumerate(zip(joint, summaries, strict=True))
                if isinstance(got, dict)}       # a failed export: left to the caller


def analyse_file(path: Path, rank: int, nvtx_window: str | None = None, cpus: int | None = None,
                 ) -> dict[str, pd.DataFrame]:
    """analyse_tables' tables as frames, as the run's results read them back (results.read_table)."""
    return {name: table.to_pandas() for name, table in analyse_tables(path, rank, nvtx_window, cpus).items()}


def median_timeline(read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    """The timeline cut to the window's median iteration (the same iteration on every rank)."""
    timeline = read(nt.TIMELINE.key)
    middle = median_iteration(read(nt.ITERATIONS.key))
    if timeline is None or middle is None:
        return {}
    return {nt.TIMELINE.key: timeline[timeline["iteration"] == middle].reset_index(drop=True)}


def nccl_with_totals(read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    """Per collective, the totals over all ranks and the slowest rank (`scope == "all"`,
    distributed.nccl_across_ranks: the same rows as `hpcprof nsys nccl`) appended to the per-rank
    NCCL rows."""
    per = read(nt.NCCL.key)
    return {nt.NCCL.key: dist.nccl_across_ranks(per)} if per is not None and not per.empty else {}


def busbw_across_ranks(read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    """nsys_busbw with its rows across ranks (the slowest and fastest rank: busbw.across_ranks)."""
    return busbw.reduce_table(nt.BUSBW.key, read, log)


#: the cross-rank steps of nsys in collect (NsysCollector.reducers), independent of one another
REDUCERS = (critical_path.collect_tables, median_timeline, nccl_with_totals, window_note, busbw_across_ranks)


class NsysCollector(ToolCollector):
    """nsys in `collect`: exports (.nsys-rep exported to SQLite), each rank's tables, the NCCL
    summary and timeline across ranks; the ranks whose capture left no profile, and Echo's slowdown
    of the run against its sweep's world-size-1 run."""

    rewritten = (nt.TIMELINE.key, nt.NCCL.key, nt.BUSBW.key)  # median_timeline, nccl_with_totals, busbw
    report_and_export = True            # rank1.nsys-rep and rank1.sqlite: one rank's report and its export
    check_without_files = True          # a run whose profiled ranks left no file at all names them

    def inputs(self, ctx: CollectContext) -> dict[str, int]:
        return sqlite_files(ctx, self.tool_paths)

    def analyse_file(self, path: Path, rank: int) -> dict[str, pd.DataFrame]:
        return analyse_file(path, rank, cpus=self.cores)

    def analyse_tables(self, path: Path, rank: int) -> dict[str, pa.Table]:
        return analyse_tables(path, rank, cpus=self.cores)

    def analyse_batch(self, files: Sequence[tuple[Path, int]]) -> list[dict[str, pa.Table] | Exception]:
        return analyse_batch(files, self.cores)

    def reducers(self) -> Sequence[Reducer]:
        return REDUCERS

    def missing_cause(self, run_dir: Path, record: RunRecord, rank: int) -> str:
        """As ToolCollector's, and whether nsys said it recorded nothing: because the program failed
        first (its error line), else its capture range never opened (with `capture_range` set)."""
        log = Path("logs") / f"rank{rank}.log"
        text = _log_text(run_dir / log)
        if text is None or NOTHING_RECORDED not in text:
            return super().missing_cause(run_dir, record, rank)
        from hpcprof.analysis.forensics.ranks import rank_error
        from hpcprof.analysis.steps import window_not_reached

        ranged = record.experiment.profile.nsys.capture_range != "none"
        failed = rank_error(run_dir, rank)  # a program that failed first never opened its range
        never = "nsys recorded nothing: the capture range never opened" + window_not_reached(run_dir, rank, record)
        return ((f"nsys recorded nothing: the program failed first ({failed})" if failed else
                 never if ranged else "nsys recorded nothing") + f" ({log}: {NOTHING_RECORDED})")

    def run_steps(self) -> Mapping[str, RunStep]:
        return {"echo": echo_step}


#: what nsys prints when its capture range never opened (cudaProfilerApi / nvtx)
NOTHING_RECORDED = "No reports were generated"


def _log_text(log: Path) -> str | None:
    """A rank log's text (a regular file, its last LOG_TAIL_BYTES), None when there is none or it
    cannot be read (a FIFO or a device: not waited on)."""
    try:
        return read_tail(log, LOG_TAIL_BYTES).decode(errors="replace")
    except OSError:
        return None
