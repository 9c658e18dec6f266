"""torch.profiler traces in `hpcprof collect`: one rank's trace at a time (analyses.all_analyses, as
`hpcprof trace all` runs them, as DataFrames for the store), then the kernels table across ranks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from hpcprof.analysis import busbw
from hpcprof.analysis.collector import Log, NothingToAnalyse, ReadTable, Reducer, ToolCollector
from hpcprof.analysis.detect_steps import window_note
from hpcprof.analysis.idle import attribute, line_time, split, typical_step
from hpcprof.tools.torch import tables as tt
from hpcprof.tools.torch.analysis import critical_path
from hpcprof.tools.torch.analysis.analyses import all_analyses
from hpcprof.tools.torch.analysis.collectives import TraceCollectives, busbw_table
from hpcprof.tools.torch.analysis.idle import IdleEvents, add_queue_length
from hpcprof.tools.torch.analysis.load import TraceColumns, TraceError, gather, helpers_of
from hpcprof.tools.torch.analysis.window import trace_window, window_kernels


def analyse_file(path: Path, rank: int, cores: int = 1) -> dict[str, pd.DataFrame]:
    """One rank's trace (`hpcprof collect`'s per-file map), decoded once (streaming) for both:
    all_analyses of that trace, its measured window (ProfilerStep ranges on GPU time, else the steps
    found in its kernels: trace/window.py) as `window` and `iterations`, the GPU time per kernel
    name in that window (`window_kernels`), the bus bandwidth of its collectives in that window
    (`busbw`, trace/collectives.py), its critical-path events, its idle's causes
    and its time per line of the program (hpcprof.analysis.idle, trace/idle.py; a CPU run's: the lines alone); on `cores` cores
    (load.gather's helpers, load.helpers_of). TraceError names a damaged file; NothingToAnalyse a
    trace without GPU events."""
    columns, path_events, collectives = TraceColumns(), critical_path.CriticalPathEvents(), TraceCollectives()
    idle = IdleEvents()
    gather(path, columns, path_events, collectives, idle, helpers=helpers_of(cores))
    try:
        trace = columns.trace(path, rank)
    except TraceError as exc:
        if "no GPU events" not in str(exc):
            raise
        # a CPU run's trace: nothing for HTA's GPU analyses, not a fault; its gloo collectives still
        # give the critical path across ranks
        try:
            events = path_events.frame(path, rank)
        except TraceError:
            events = None
        if events is None or events.empty:
            raise NothingToAnalyse(str(exc)) from None
        steps = idle.timeline(path, rank)
        return {critical_path.EVENTS_TABLE: events, tt.LINES.key: line_time([steps]),
                tt.STEP_IDLE.key: typical_step([steps])}
    window, iterations = trace_window(trace)
    analysed = {key: table.frame() for key, table in all_analyses([trace]).items()}
    steps = idle.timeline(path, trace.rank)
    add_queue_length(steps, trace)
    cut = [split(steps)]
    return {**analysed, tt.IDLE_CAUSES.key: attribute([steps], cut), tt.LINES.key: line_time([steps]),
            tt.STEP_IDLE.key: typical_step([steps], cut), tt.WINDOW.key: window, tt.ITERATIONS.key: iterations,
            tt.WINDOW_KERNELS.key: window_kernels(trace, window),
            tt.BUSBW.key: busbw_table(collectives, trace.rank, window, path),
            critical_path.EVENTS_TABLE: path_events.frame(path, trace.rank)}


def sorted_kernels(read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    """The kernels table in all_analyses' order over all ranks (kernel type, name, rank)."""
    kernels = read(tt.KERNELS.key)
    if kernels is None:
        return {}
    return {tt.KERNELS.key: kernels.sort_values(["kernel_type", "name", "rank"], kind="stable", ignore_index=True)}


def busbw_across_ranks(read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    """torch_busbw with its rows across ranks (the slowest and fastest rank: busbw.across_ranks)."""
    return busbw.reduce_table(tt.BUSBW.key, read, log)


def cpu_note(read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    """The line that says why traces with gloo's collectives but no GPU event (CPU ranks) give the
    critical path and nothing of HTA's GPU analyses."""
    if read(tt.WINDOW.key) is None and read(critical_path.EVENTS_TABLE) is not None:
        log("torch: no GPU events in the traces (CPU ranks): HTA's GPU analyses skipped; the critical path "
            "and stragglers from gloo's collectives")
    return {}


#: the cross-rank steps of torch traces in collect (TorchCollector.reducers), independent of one another
REDUCERS = (sorted_kernels, critical_path.collect_tables, window_note, busbw_across_ranks, cpu_note)


class TorchCollector(ToolCollector):
    """torch.profiler traces in `collect`: HTA's analyses and the window of each rank's trace,
    then the kernels and critical-path tables across ranks."""

    rewritten = (tt.KERNELS.key, tt.BUSBW.key)    # sorted_kernels, busbw_across_ranks

    def analyse_file(self, path: Path, rank: int) -> dict[str, pd.DataFrame]:
        return analyse_file(path, rank, self.cores)

    def reducers(self) -> Sequence[Reducer]:
        return REDUCERS
