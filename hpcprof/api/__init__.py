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

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcprof.core.errors import UserError

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

PathLike = str | Path


def __getattr__(name: str) -> Any:
    """A built-in tool's part of the API (hpcprof.profilers.Profiler.api: torch's `load_traces` and
    `Traces`, nsys's `nsys_reports` and `nsys_report`), imported on first use."""
    from hpcprof import profilers
    from hpcprof.core.lazy import load_target

    for tool in profilers.BUILTIN.values():
        for target in tool.api:
            if target.rpartition(":")[2] == name:
                return load_target(target)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    from hpcprof import profilers

    return sorted([*globals(), *(t.rpartition(":")[2] for tool in profilers.BUILTIN.values() for t in tool.api)])


def _run(ref: PathLike, workdir: PathLike) -> Path:
    from hpcprof.run.rundir import find_run

    return find_run(str(ref), Path(workdir)).path


def run_tables(run: PathLike, workdir: PathLike = "hpcprof-runs") -> list[str]:
    """Names of the result tables `hpcprof collect` wrote for a run (an id or its directory)."""
    from hpcprof.run.results import list_tables

    return list_tables(_run(run, workdir))


def run_table(run: PathLike, name: str, workdir: PathLike = "hpcprof-runs") -> pd.DataFrame:
    """One result table of a collected run (`run_tables` lists them)."""
    from hpcprof.run.results import read_table

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
    from hpcprof.api import plots as api_plots
    from hpcprof.core.catalog import find_column
    from hpcprof.report.compare import compare_frame

    df = compare_frame(tuple(runs), Path(workdir), baseline)
    if plot is None:
        return df
    found = find_column([str(c) for c in df.columns], plot)
    if found is None:
        raise UserError(f"plot={plot!r}: not a metric of the comparison; columns: {', '.join(map(str, df.columns))}")
    return api_plots.metric_by_run(df, found)
