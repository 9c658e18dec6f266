"""`hpcprof collect`: `engine` (executors, progress, streaming map and reduce; knows nothing of
runs) and `runs` (one run's orchestration: its files, its tool's ToolCollector, the store)."""

from hpcprof.collect.engine import InProcess, Progress, concat_frames, concat_parts, make_executor, stream_map
from hpcprof.collect.runs import (
    EXIT_PARTIAL,
    Collected,
    collect_run,
    collect_runs,
    manifest,
    map_files,
    rank_files,
    reduce_parts,
    workload_tables,
)

__all__ = ["EXIT_PARTIAL", "Collected", "InProcess", "Progress", "collect_run", "collect_runs", "concat_frames",
           "concat_parts", "make_executor", "manifest", "map_files", "rank_files", "reduce_parts", "stream_map",
           "workload_tables"]
