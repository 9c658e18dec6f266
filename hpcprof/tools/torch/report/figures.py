"""torch.profiler's figures of a run in the HTML report (its Profiler's `figures`): HTA's views of
its tables (hpcprof.tools.torch.tables)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from hpcprof.report import plots
from hpcprof.report.html import run_window, step_idle_figure, titled
from hpcprof.run.results import read_table
from hpcprof.tools.torch import tables as tt

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from hpcprof.report.runs import RunInfo


def torch_figures(info: RunInfo) -> Iterator[go.Figure]:
    """HTA's views: temporal breakdown, idle time, overlap, launch delay, kernel types."""
    run = info.run.path
    temporal = read_table(run, tt.TEMPORAL.name)
    if temporal is not None and not temporal.empty:
        yield plots.stacked_per_rank(temporal, {"compute_time(us)": "compute", "non_compute_time(us)": "non-compute",
                                                "idle_time(us)": "idle"}, "time (us)",
                                     titled("temporal breakdown per rank", run_window(info, tt.TEMPORAL)))
    idle = read_table(run, tt.IDLE.name)
    if idle is not None and not idle.empty:
        yield plots.bars_per_rank(idle, "idle_time", "idle_category", "idle time (us)",
                                  titled("GPU idle time breakdown", run_window(info, tt.IDLE)))
    overlap = read_table(run, tt.OVERLAP.name)
    if overlap is not None and overlap["comp_comm_overlap_pctg"].notna().any():
        yield plots.bars_per_rank(overlap.fillna(0), "comp_comm_overlap_pctg", None, "%", titled(
            "communication overlapped by computation per rank", run_window(info, tt.OVERLAP)))
    yield from step_idle_figure(run, tt.STEP_IDLE)
    launch = read_table(run, tt.LAUNCH.name)
    if launch is not None and not launch.empty:
        yield plots.histogram(launch["launch_delay"], "launch delay (us)",
                              titled("kernel launch delay", f"{run_window(info, tt.LAUNCH)} of the trace"),
                              launch["rank"].astype(str))
    types = read_table(run, tt.KERNEL_TYPES.name)
    if types is not None and not types.empty:
        yield plots.shares(types.groupby("kernel_type", as_index=False)["sum"].sum(), "kernel_type", "sum",
                           titled("GPU time by kernel type, sum over ranks", run_window(info, tt.KERNEL_TYPES)))
