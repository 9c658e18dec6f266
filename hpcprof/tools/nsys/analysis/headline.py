"""nsys's headline metrics of a collected run (its Profiler's `metrics`): from its tables
(hpcprof.tools.nsys.tables) with the tool-neutral metrics' functions of hpcprof.analysis.summary."""

from __future__ import annotations

from hpcprof.analysis.detect_steps import window_source_metrics
from hpcprof.analysis.summary import (
    Tables,
    detected_step_metrics,
    gpu_time_metrics,
    idle_cause_metrics,
    overlap_idle_metrics,
    window_metrics,
)
from hpcprof.core import catalog as c
from hpcprof.run.results import Metric
from hpcprof.tools.nsys import tables as nt


def nsys_metrics(tables: Tables) -> list[Metric]:
    """GPU time by category, overlap and idle % over the measured window (nsys_kernels,
    nsys_overlap), the window itself, and the same over the whole capture as `capture.*`."""
    out: list[Metric] = window_metrics(tables(nt.WINDOW.name))
    out += window_source_metrics(tables(nt.WINDOW.name), tables(nt.ITERATIONS.name))
    out += detected_step_metrics(tables(nt.WINDOW.name), tables(nt.ITERATIONS.name))
    out += idle_cause_metrics(tables(nt.IDLE_CAUSES.name))
    kern = tables(nt.KERNELS.name)
    if kern is not None and not kern.empty:
        out += gpu_time_metrics(kern["name"].astype(str), kern["total_ns"].astype(float) / 1e6, kern["rank"].nunique(),
                                categories=tables.categories)
    ov = tables(nt.OVERLAP.name)             # collected before windows: the whole capture's
    out += overlap_idle_metrics(ov) if ov is None or "window" in ov else \
        overlap_idle_metrics(ov, c.CAPTURE_OVERLAP_PCT, c.CAPTURE_IDLE_PCT)
    kern = tables(nt.CUDA_GPU_KERN_SUM.name)
    if kern is not None and not kern.empty:
        out += gpu_time_metrics(kern["Name"].astype(str), kern["Total Time (ns)"].astype(float) / 1e6,
                                kern["rank"].nunique(), c.CAPTURE_GPU_TIME, tables.categories)
    out += overlap_idle_metrics(tables(nt.CAPTURE_OVERLAP.name), c.CAPTURE_OVERLAP_PCT, c.CAPTURE_IDLE_PCT)
    return out
