"""Collector for trace profiles of a run (see hpcprof.analysis.CollectContext)."""

from __future__ import annotations

import pandas as pd

from hpcprof.analysis import CollectContext
from hpcprof.analysis.trace import analyses
from hpcprof.analysis.trace.load import load_traces


def collect_traces(ctx: CollectContext) -> dict[str, pd.DataFrame]:
    """Run HTA's five analyses on the run's torch.profiler traces, all ranks.

    Returns temporal, overlap, idle, launch, kernels and kernel_types (per rank), each with a
    rank column; files that cannot be analysed are logged and skipped ({} when none is left).
    """
    traces, errors = load_traces(ctx.files, rank_of=ctx.rank_of)
    for line in errors:
        ctx.log(f"skipped because {line}")
    if not traces:
        return {}
    ctx.log(f"analysing {len(traces)} torch.profiler trace(s), ranks "
            f"{', '.join(str(t.rank) for t in traces)}")
    return {
        "temporal": analyses.temporal_breakdown(traces),
        "overlap": analyses.comm_comp_overlap(traces),
        "idle": analyses.idle_time_breakdown(traces),
        "launch": analyses.kernel_launch_stats(traces),
        "kernels": analyses.kernel_breakdown(traces),
        "kernel_types": analyses.kernel_type_breakdown(traces, per_rank=True),
    }
