"""hpcprof from Python (notebooks): load torch.profiler traces and nsys exports, run the analyses,
read collected runs and compare them. Everything returns pandas DataFrames; the trace analyses
take `plot=True` to return a plotly figure of the result instead (HTA's `visualize=True`).

    from hpcprof import api
    traces = api.load_traces("profiles/torch")          # a directory or files, HTA's trace_dir
    traces.temporal_breakdown()                           # HTA get_temporal_breakdown
    traces.temporal_breakdown(plot=True)                  # the figure
    api.compare(workdir="hpcprof-runs")                   # hpcprof compare, as a DataFrame

The trace analyses are HTA 0.5.0's (same columns and numbers, checked against HTA in
tests/test_trace_gold.py), over all ranks by default.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpcprof.errors import UserError

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from hpcprof.tools.torch.analysis.load import RankTrace

PathLike = str | Path


def _paths(paths: PathLike | Iterable[PathLike]) -> list[Path]:
    return [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]


@dataclass
class Traces:
    """torch.profiler traces of one run, one per rank (`load_traces`); the methods are HTA's
    TraceAnalysis analyses, for every rank unless `ranks` narrows them."""

    traces: list[RankTrace]
    skipped: list[str]      # one line per file that could not be used

    @property
    def ranks(self) -> list[int]:
        """The ranks loaded, in order."""
        return [t.rank for t in self.traces]

    def _of(self, ranks: Sequence[int] | None) -> list[RankTrace]:
        if ranks is None:
            return self.traces
        missing = sorted(set(ranks) - set(self.ranks))
        if missing:
            raise UserError(f"ranks {missing}: not among the loaded ranks {self.ranks}")
        return [t for t in self.traces if t.rank in set(ranks)]

    def temporal_breakdown(self, ranks: Sequence[int] | None = None, plot: bool = False) -> pd.DataFrame | go.Figure:
        """Idle, compute and non-compute GPU time per rank (HTA `get_temporal_breakdown`)."""
        from hpcprof import api_plots
        from hpcprof.tools.torch.analysis.analyses import temporal_breakdown

        df = temporal_breakdown(self._of(ranks)).frame()
        return api_plots.temporal_breakdown(df) if plot else df

    def idle_time_breakdown(self, ranks: Sequence[int] | None = None, streams: Sequence[int] | None = None,
                            consecutive_kernel_delay: float = 30, show_idle_interval_stats: bool = False,
                            plot: bool = False) -> pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame] | go.Figure:
        """GPU idle time per rank and stream by cause: host wait, kernel wait, other (HTA
        `get_idle_time_breakdown`; with `show_idle_interval_stats`, also the interval statistics,
        as the tuple HTA returns)."""
        from hpcprof import api_plots
        from hpcprof.tools.torch.analysis.analyses import (
            idle_interval_stats,
            idle_time_breakdown,
        )

        traces = self._of(ranks)
        df = idle_time_breakdown(traces, streams, consecutive_kernel_delay).frame()
        if plot:
            return api_plots.idle_time_breakdown(df)
        if show_idle_interval_stats:
            return df, idle_interval_stats(traces, streams, consecutive_kernel_delay)
        return df

    def comm_comp_overlap(self, ranks: Sequence[int] | None = None, plot: bool = False) -> pd.DataFrame | go.Figure:
        """% of communication time overlapped by computation, per rank (HTA `get_comm_comp_overlap`)."""
        from hpcprof import api_plots
        from hpcprof.tools.torch.analysis.analyses import comm_comp_overlap

        df = comm_comp_overlap(self._of(ranks)).frame()
        return api_plots.comm_comp_overlap(df) if plot else df

    def kernel_launch_stats(self, ranks: Sequence[int] | None = None, runtime_cutoff: float = 50,
                            launch_delay_cutoff: float = 100, plot: bool = False) -> pd.DataFrame | go.Figure:
        """CPU launch time, GPU time and launch delay of every kernel (HTA
        `get_cuda_kernel_launch_stats`, all ranks in one frame with a rank column)."""
        from hpcprof import api_plots
        from hpcprof.tools.torch.analysis.analyses import kernel_launch_stats

        df = kernel_launch_stats(self._of(ranks), runtime_cutoff, launch_delay_cutoff).frame()
        return api_plots.kernel_launch_stats(df) if plot else df

    def gpu_kernel_breakdown(self, ranks: Sequence[int] | None = None, num_kernels: int = 10,
                             include_memory_kernels: bool = True, plot: bool = False
                             ) -> tuple[pd.DataFrame, pd.DataFrame] | go.Figure:
        """(time by kernel type, the longest kernels of each type per rank), HTA
        `get_gpu_kernel_breakdown`; `plot=True`: the kernel-type pie."""
        from hpcprof import api_plots
        from hpcprof.tools.torch.analysis.analyses import (
            kernel_breakdown,
            kernel_type_breakdown,
        )

        traces = self._of(ranks)
        by_type = kernel_type_breakdown(traces, include_memory_kernels).frame()
        if plot:
            return api_plots.kernel_type_breakdown(by_type)
        return by_type, kernel_breakdown(traces, num_kernels, include_memory_kernels=include_memory_kernels).frame()


def load_traces(paths: PathLike | Iterable[PathLike], ranks: Sequence[int] | None = None,
                include_last_profiler_step: bool = False) -> Traces:
    """Load torch.profiler traces (`*.pt.trace.json[.gz]` or HTA's `*.json[.gz]`, directories
    expanded; HTA's `TraceAnalysis(trace_dir=...)`). Files that cannot be used are listed in
    `.skipped`; none usable is an error."""
    from hpcprof.tools.torch.analysis.load import load_traces as load

    traces, errors = load(_paths(paths), set(ranks) if ranks is not None else None, include_last_profiler_step)
    if not traces:
        raise UserError(f"no usable trace under {', '.join(map(str, _paths(paths)))}"
                        + (f": {errors[0]}" if errors else ""))
    return Traces(traces, errors)


def nsys_reports() -> list[str]:
    """The `nsys stats` reports hpcprof computes (names as nsys spells them)."""
    from hpcprof.tools.nsys.stats.stats import REPORTS

    return sorted(REPORTS)


def nsys_report(export: PathLike, name: str) -> pd.DataFrame:
    """One `nsys stats` report (e.g. cuda_gpu_kern_sum) of an nsys SQLite export, as nsys
    computes it (`hpcprof nsys stats`)."""
    from hpcprof.tools.nsys.stats.db import Export
    from hpcprof.tools.nsys.stats.stats import REPORTS, run_report

    if name not in REPORTS:
        raise UserError(f"nsys report {name!r}: unknown; known: {', '.join(nsys_reports())}")
    return run_report(Export(Path(export)), name)


def _run(ref: PathLike, workdir: PathLike) -> Path:
    from hpcprof.rundir import find_run

    return find_run(str(ref), Path(workdir)).path


def run_tables(run: PathLike, workdir: PathLike = "hpcprof-runs") -> list[str]:
    """Names of the result tables `hpcprof collect` wrote for a run (an id or its directory)."""
    from hpcprof.results import list_tables

    return list_tables(_run(run, workdir))


def run_table(run: PathLike, name: str, workdir: PathLike = "hpcprof-runs") -> pd.DataFrame:
    """One result table of a collected run (`run_tables` lists them)."""
    from hpcprof.results import read_table

    path = _run(run, workdir)
    df = read_table(path, name)
    if df is None:
        have = ", ".join(run_tables(path)) or "none (run hpcprof collect first)"
        raise UserError(f"run {path.name}: no result table {name!r}; it has: {have}")
    return df


def compare(runs: Sequence[str] = (), workdir: PathLike = "hpcprof-runs", baseline: str | None = None,
            plot: str | None = None) -> pd.DataFrame | go.Figure:
    """`hpcprof compare` as a DataFrame: one row per run (repetitions folded), its swept
    parameters and headline metrics; default: the latest sweep. `plot="iteration.mean"` (a metric,
    with its unit as the column names it, `iteration.mean [ms]`, or without) returns a bar chart of
    that metric per run instead."""
    from hpcprof import api_plots
    from hpcprof.catalog import find_column
    from hpcprof.report.compare import compare_frame

    df = compare_frame(tuple(runs), Path(workdir), baseline)
    if plot is None:
        return df
    found = find_column([str(c) for c in df.columns], plot)
    if found is None:
        raise UserError(f"plot={plot!r}: not a metric of the comparison; columns: {', '.join(map(str, df.columns))}")
    return api_plots.metric_by_run(df, found)
