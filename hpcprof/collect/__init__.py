"""`hpcprof collect`: one run's orchestration (`runs`) over its steps: `files` (a run's files),
`mapping` and `cache` (the map of its rank files through its tool's ToolCollector, cached per file),
`reduce` (its tables across ranks); the engine they run on is hpcprof.core.pool (executors, progress,
streaming map and reduce; it knows nothing of runs).

The names callers use are re-exported here, each imported when first used, so that importing
`hpcprof.core.pool` (as the nsys commands do) does not import the run machinery."""

from __future__ import annotations

import importlib
from typing import Any

#: name -> the module that defines it
EXPORTS = {
    **dict.fromkeys(["InProcess", "Progress", "concat_frames", "concat_parts", "make_executor", "stream_map"],
                    "hpcprof.core.pool"),
    **dict.fromkeys(["EXIT_PARTIAL", "Collected", "collect_run", "collect_runs"], "hpcprof.collect.runs"),
    **dict.fromkeys(["manifest", "rank_files", "workload_tables"], "hpcprof.collect.files"),
    **dict.fromkeys(["map_files"], "hpcprof.collect.mapping"),
    **dict.fromkeys(["reduce_parts"], "hpcprof.collect.reduce"),
}
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in EXPORTS:
        raise AttributeError(f"module 'hpcprof.collect' has no attribute {name!r}")
    return getattr(importlib.import_module(EXPORTS[name]), name)
