"""nsys profiles in `hpcprof collect`: the exports of a run, one rank's tables, the cross-rank reduce."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from hpcprof.analysis.collector import CollectContext, Log, ReadTable, Reducer, ToolCollector
from hpcprof.analysis.nsys import critical_path
from hpcprof.analysis.nsys import distributed as dist
from hpcprof.analysis.nsys import window as win
from hpcprof.analysis.nsys.arrays import Columns
from hpcprof.analysis.nsys.db import Export
from hpcprof.analysis.nsys.stats import SUMMARY_REPORTS, run_summaries
from hpcprof.analysis.nsys.timeline import iteration_timeline, median_iteration
from hpcprof.atomic import atomic_write
from hpcprof.errors import Problem
from hpcprof.ranks import rank_from_filename
from hpcprof.results import arrow_table, to_arrow


def find_nsys(tool_paths: Mapping[str, str]) -> str | None:
    """The site's nsys (tool_paths["nsys"]) or nsys on PATH, if any."""
    configured = tool_paths.get("nsys")
    if configured and Path(configured).exists():
        return configured
    return shutil.which(configured or "nsys")


def export_sqlite(nsys: str, rep: Path, work_dir: Path) -> Path:
    """`nsys export -t sqlite` of `rep` into `work_dir` (reused when already exported)."""
    out = work_dir / (rep.stem + ".sqlite")
    if out.exists() and out.stat().st_mtime >= rep.stat().st_mtime:
        return out

    def export(tmp: Path) -> None:  # a failed export leaves no file
        subprocess.run([nsys, "export", "-t", "sqlite", "--force-overwrite", "true", "-o", str(tmp), str(rep)],
                       check=True, capture_output=True, text=True)

    return atomic_write(out, export, what="nsys export", suffix=".sqlite")


def sqlite_files(ctx: CollectContext, tool_paths: Mapping[str, str]) -> dict[Path, int]:
    """The run's exports with their ranks: .sqlite files as given, .nsys-rep exported with the
    site's nsys (`tool_paths`) when there is one."""
    reps = [f for f in ctx.files if f.suffix == ".nsys-rep"]
    given = {f: ctx.rank_of.get(f) for f in ctx.files if f.suffix == ".sqlite"}
    have = {f.stem for f in given}
    nsys = find_nsys(tool_paths) if any(r.stem not in have for r in reps) else None
    for rep in reps:
        if rep.stem in have:
            continue
        if nsys is None:
            ctx.problem(Problem(rep, "not exported: no nsys executable found (set the site's paths.nsys, or "
                                     "export it with `nsys export -t sqlite` beside it)"))
            continue
        try:
            given[export_sqlite(nsys, rep, ctx.work_dir)] = ctx.rank_of.get(rep)
        except (subprocess.CalledProcessError, OSError) as exc:
            last = (getattr(exc, "stderr", None) or "").strip().splitlines()[-1:]
            ctx.problem(Problem(rep, f"nsys export failed: {last[0][:200] if last else exc}"))
    return {f: (r if r is not None else -1) for f, r in given.items()}


#: GPU idle gaps reported by collect (the report's gaps plot): longer than 0.1 ms
GAP_NS = 100_000


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


def analyse_tables(path: Path, rank: int, nvtx_window: str | None = None) -> dict[str, pa.Table]:
    """One rank's export as the Arrow tables collect writes: its summary reports (whole capture,
    as `nsys stats` gives them); over the measured window (nsys/window.py; `nvtx_window`, else
    the run's `profile.window.nvtx`, names the iteration range): the window, its iterations,
    kernels, NCCL per collective, overlap, NVTX ranges, iteration timeline and GPU idle gaps over
    GAP_NS; over the whole capture: overlap and NVTX ranges again (`capture_*`). Each table has a
    `rank` column, those of the window a `window` column. NsysInputError when the export cannot
    be used."""
    out: dict[str, pa.Table] = {}
    with Export(path) as export:
        export.check_usable()
        activity = dist.load_activity([export], {str(path): rank})
        for name, report in run_summaries(export, list(SUMMARY_REPORTS)).items():
            out[name] = arrow_table({"rank": np.full(len(report), rank, dtype=np.int64), **report.columns})
        window = win.find_window(activity, nvtx_window or win.run_window_range(path))
        inside = win.clip(activity, window)
        out["window"] = win.window_summary(activity, window)
        out["iterations"] = win.iteration_series(activity, window)
        out["kernels"] = win.with_window(win.kernel_sum(inside), window)
        out["nccl"] = win.with_window(rank_nccl(inside), window)
        out["overlap"] = win.with_window(columns_table(dist.overlap_columns(inside)), window)
        out["phases"] = win.with_window(columns_table(dist.phase_columns(activity, win.instances_inside(window))),
                                        window)
        out["timeline"] = iteration_timeline(activity, window)
        out["gaps"] = win.with_window(columns_table(dist.gap_columns(inside, GAP_NS)), window)
        out["capture_overlap"] = columns_table(dist.overlap_columns(activity))
        out["capture_phases"] = columns_table(dist.phase_columns(activity, window.instance_columns))
        events = critical_path.rank_event_columns(activity)
        out[critical_path.EVENTS_TABLE] = arrow_table(events) if events is not None else \
            to_arrow(critical_path.empty_events(), pandas_metadata=False)
    return out


def analyse_file(path: Path, rank: int, nvtx_window: str | None = None) -> dict[str, pd.DataFrame]:
    """analyse_tables' tables as frames, as the run's results read them back (results.read_table)."""
    return {name: table.to_pandas() for name, table in analyse_tables(path, rank, nvtx_window).items()}


def median_timeline(read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    """The timeline cut to the window's median iteration (the same iteration on every rank)."""
    timeline = read("timeline")
    middle = median_iteration(read("iterations"))
    if timeline is None or middle is None:
        return {}
    return {"timeline": timeline[timeline["iteration"] == middle].reset_index(drop=True)}


def nccl_with_totals(read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    """Per collective, the totals over all ranks and the slowest rank (`scope == "all"`,
    distributed.nccl_across_ranks: the same rows as `hpcprof nsys nccl`) appended to the per-rank
    NCCL rows."""
    per = read("nccl")
    return {"nccl": dist.nccl_across_ranks(per)} if per is not None and not per.empty else {}


#: the cross-rank steps of nsys in collect (NsysCollector.reducers), independent of one another
REDUCERS = (critical_path.collect_tables, median_timeline, nccl_with_totals)


class NsysCollector(ToolCollector):
    """nsys in `collect`: exports (.nsys-rep exported to SQLite), each rank's tables, the NCCL
    summary and timeline across ranks."""

    def inputs(self, ctx: CollectContext) -> dict[Path, int]:
        return sqlite_files(ctx, self.tool_paths)

    def analyse_file(self, path: Path, rank: int) -> dict[str, pd.DataFrame]:
        return analyse_file(path, rank)

    def analyse_tables(self, path: Path, rank: int) -> dict[str, pa.Table]:
        return analyse_tables(path, rank)

    def reducers(self) -> Sequence[Reducer]:
        return REDUCERS


#: the files of an nsys profile (a report, the old name of one, or its SQLite export)
PROFILE_SUFFIXES = (".nsys-rep", ".qdrep", ".sqlite")
#: what nsys prints when its capture range never opened (cudaProfilerApi / nvtx)
NOTHING_RECORDED = "No reports were generated"


def missing_profiles(run_dir: Path, config: dict) -> list[str]:
    """One line per rank that the run's config says nsys profiles (profile.ranks over the run's
    ranks) but that left no nsys profile, with the cause its rank log gives. Empty for other tools."""
    from hpcprof.ranks import RankSelection

    profile = config["experiment"]["profile"]
    if profile["tool"] != "nsys":
        return []
    per_node, world = int(config["ranks_per_node"]), int(config["world_size"])
    selection = RankSelection(profile["ranks"])
    ranged = profile["nsys"]["capture_range"] != "none"
    profiles = run_dir / "profiles" / "nsys"
    present = {rank_from_filename(p) for p in profiles.iterdir() if p.suffix in PROFILE_SUFFIXES} \
        if profiles.is_dir() else set()
    lines = []
    for rank in range(world):
        if rank in present or not selection.selects(rank, rank % per_node, per_node):
            continue
        log = run_dir / "logs" / f"rank{rank}.log"
        text = log.read_text(errors="replace") if log.is_file() else None
        if text is None:
            cause = f"no nsys profile and no rank log ({log.relative_to(run_dir)}): the rank never started"
        elif NOTHING_RECORDED in text:
            cause = ("nsys recorded nothing: the capture range never opened" if ranged
                     else "nsys recorded nothing") + f" ({log.relative_to(run_dir)}: {NOTHING_RECORDED})"
        else:
            cause = f"no nsys profile written (see {log.relative_to(run_dir)})"
        lines.append(f"nsys: rank {rank}: {cause}")
    return lines
