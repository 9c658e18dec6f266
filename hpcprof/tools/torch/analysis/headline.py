"""torch.profiler's headline metrics of a collected run (its Profiler's `metrics`): from its tables
(hpcprof.tools.torch.tables) with the tool-neutral metrics' functions of hpcprof.analysis.summary."""

from __future__ import annotations

import math

from hpcprof.analysis.detect_steps import window_source_metrics
from hpcprof.analysis.summary import (
    Tables,
    detected_step_metrics,
    gpu_time_metrics,
    idle_cause_metrics,
    idle_pct,
    overlap_idle_metrics,
    window_metrics,
)
from hpcprof.core import catalog as c
from hpcprof.run.results import Metric
from hpcprof.tools.torch import tables as tt


def torch_metrics(tables: Tables) -> list[Metric]:
    """Over the measured window (torch_window: the ProfilerSteps, else the steps found in the trace):
    idle and overlap %, the window itself, GPU time by category (torch_window_kernels), the idle
    per step by host-side cause (torch_idle_causes); over the whole trace as `capture.*`: HTA's
    overlap % (mean over ranks) and idle % (idle_pct of HTA's idle and kernel time)."""
    out: list[Metric] = []
    window = tables(tt.WINDOW.name)
    out += window_metrics(window)
    out += window_source_metrics(window, tables(tt.ITERATIONS.name))
    out += detected_step_metrics(window, tables(tt.ITERATIONS.name))
    out += overlap_idle_metrics(window)
    kernels = tables(tt.WINDOW_KERNELS.name)
    if kernels is not None and not kernels.empty:
        out += gpu_time_metrics(kernels["name"].astype(str), kernels["total_ns"].astype(float) / 1e6,
                                kernels["rank"].nunique(), categories=tables.categories)
    out += idle_cause_metrics(tables(tt.IDLE_CAUSES.name))
    ov = tables(tt.OVERLAP.name)
    if ov is not None and ov["comp_comm_overlap_pctg"].notna().any():
        out.append(c.CAPTURE_OVERLAP_PCT.value(float(ov["comp_comm_overlap_pctg"].mean())))
    temporal = tables(tt.TEMPORAL.name)
    if temporal is not None and not temporal.empty:
        value = idle_pct(temporal["idle_time(us)"], temporal["kernel_time(us)"])
        if not math.isnan(value):
            out.append(c.CAPTURE_IDLE_PCT.value(value))
    return out
