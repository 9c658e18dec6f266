"""`hpcprof collect`: `engine` (executors, progress, streaming map and reduce; knows nothing of
runs) and `runs` (one run's orchestration: its files, its tool's ToolCollector, the store).

The names callers use are re-exported here, each imported when first used, so that importing
`hpcprof.pool` (as the nsys commands do) does not import the run machinery."""

from __future__ import annotations

import importlib
from typing import Any

#: name -> the module that defines it
EXPORTS = {
    **dict.fromkeys(["InProcess", "Progress", "concat_frames", "concat_parts", "make_executor", "stream_map"],
                    "hpcprof.pool"),
    **dict.fromkeys(["EXIT_PARTIAL", "Collected", "collect_run", "collect_runs", "manifest", "map_files",
                     "rank_files", "reduce_parts", "workload_tables"], "hpcprof.collect.runs"),
}
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in EXPORTS:
        raise AttributeError(f"module 'hpcprof.collect' has no attribute {name!r}")
    return getattr(importlib.import_module(EXPORTS[name]), name)
