"""Collector for trace profiles of a run (see hpcprof.analysis.CollectContext), and the one
path that runs every analysis on traces loaded once (`hpcprof trace all` uses it too)."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from hpcprof.analysis import CollectContext
from hpcprof.analysis.trace import analyses
from hpcprof.analysis.trace.load import RankTrace, load_traces


def all_analyses(traces: Sequence[RankTrace]) -> dict[str, pd.DataFrame]:
    """HTA's five analyses with their defaults, on traces loaded once: temporal, overlap, idle,
    launch, kernels and kernel_types (per rank), each with a rank column."""
    return {
        "temporal": analyses.temporal_breakdown(traces),
        "overlap": analyses.comm_comp_overlap(traces),
        "idle": analyses.idle_time_breakdown(traces),
        "launch": analyses.kernel_launch_stats(traces),
        "kernels": analyses.kernel_breakdown(traces),
        "kernel_types": analyses.kernel_type_breakdown(traces, per_rank=True),
    }


def collect_traces(ctx: CollectContext) -> dict[str, pd.DataFrame]:
    """All analyses (all_analyses) of the run's torch.profiler traces, all ranks; files that
    cannot be analysed are logged and skipped ({} when none is left)."""
    traces, errors = load_traces(ctx.files, rank_of=ctx.rank_of)
    for line in errors:
        if "no GPU events" in line:      # a CPU run's trace: nothing for HTA's GPU analyses, not a fault
            ctx.log(f"note: {line}")
        else:
            ctx.log(f"skipped because {line}")
    if not traces:
        return {}
    ctx.log(f"analysing {len(traces)} torch.profiler trace(s), ranks "
            f"{', '.join(str(t.rank) for t in traces)}")
    return all_analyses(traces)
