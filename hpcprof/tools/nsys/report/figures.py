"""nsys's figures of a run in the HTML report (its Profiler's `figures`): its tables
(hpcprof.tools.nsys.tables) and Echo's slowdown."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from hpcprof.analysis.categories import categories_for
from hpcprof.core import catalog as c
from hpcprof.report import plots
from hpcprof.report.html import run_window, step_idle_figure, titled
from hpcprof.run.results import read_table
from hpcprof.tools.nsys import tables as nt

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from hpcprof.report.runs import RunInfo


def nsys_figures(info: RunInfo) -> Iterator[go.Figure]:
    """Echo's slowdown, GPU time by category and NCCL per rank, the timeline, busy/idle, gaps."""
    run = info.run.path
    slowdown = read_table(run, c.ECHO_SLOWDOWN.name)
    if slowdown is not None and "slowdown" in slowdown and slowdown["slowdown"].notna().any():
        yield plots.histogram(slowdown["slowdown"].dropna(), "slowdown (distributed / 1 GPU)", titled(
            "kernel slowdown distribution (Echo)", f"{run_window(info, c.ECHO_SLOWDOWN)} of the whole capture"))
    kern = read_table(run, nt.KERNELS.name)
    if kern is not None and not kern.empty:
        df = kern.assign(category=kern["name"].astype(str).map(categories_for(info.record)),
                         time_ms=kern["total_ns"] / 1e6)
        by = df.groupby(["rank", "category"], as_index=False)["time_ms"].sum()
        yield plots.bars_per_rank(by, "time_ms", "category", "GPU time (ms)", titled(
            "GPU time by kernel category per rank", run_window(info, nt.KERNELS)))
    nccl = read_table(run, nt.NCCL.name)
    if nccl is not None and not nccl.empty and "scope" in nccl:
        per_rank = nccl[nccl["scope"] != "all"].assign(time_ms=lambda d: d["total_ns"] / 1e6,
                                                       rank=lambda d: d["rank"].astype(int))
        if not per_rank.empty:
            yield plots.bars_per_rank(per_rank, "time_ms", "collective", "NCCL time (ms)",
                                      titled("NCCL collectives per type and rank", run_window(info, nt.NCCL)))
    yield from step_idle_figure(run, nt.STEP_IDLE)
    timeline = read_table(run, nt.TIMELINE.name)
    if timeline is not None and not timeline.empty:
        yield plots.gantt(timeline, titled("one iteration on every rank",
                                           f"the median iteration of the {run_window(info, nt.WINDOW)}"))
    overlap = read_table(run, nt.OVERLAP.name)
    if overlap is not None and not overlap.empty:
        ms = overlap.assign(**{c: overlap[c] / 1e6 for c in ("compute_ns", "comm_ns", "idle_ns")})
        yield plots.stacked_per_rank(ms, {"compute_ns": "compute", "comm_ns": "communication", "idle_ns": "idle"},
                                     "ms", titled("GPU busy and idle time per rank", run_window(info, nt.OVERLAP)))
    gaps = read_table(run, nt.GAPS.name)
    if gaps is not None and not gaps.empty:
        window = read_table(run, nt.WINDOW.name)
        starts = dict(zip(window["rank"], window["start_ns"], strict=True)) if window is not None else {}
        length = float(window["duration_ns"].max()) / 1e6 if window is not None and not window.empty else \
            float((gaps["end_ns"] - gaps["start_ns"].min()).max()) / 1e6
        yield plots.gaps(gaps, starts, length, titled(f"GPU idle gaps over {nt.GAP_NS / 1e6:g} ms per rank",
                                                      run_window(info, nt.GAPS)))
