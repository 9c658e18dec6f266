"""The collector of a profiling tool: the ToolCollector class its entry in the profiler table
(hpcprof.profilers) names as "module:Class", imported only when a run of that tool is collected
(`hpcprof sites` never imports pandas)."""

from __future__ import annotations

from collections.abc import Mapping

from hpcprof import profilers
from hpcprof.analysis.collector import ToolCollector
from hpcprof.core.lazy import load_target


def collector(tool: str, tool_paths: Mapping[str, str] | None = None, cores: int = 1) -> ToolCollector:
    """The collector of `tool` with the site's executables, its files analysed on `cores` cores each;
    KeyError for a tool that has none (none), UserError for one the table does not know."""
    target = profilers.get(tool).collector
    if target is None:
        raise KeyError(tool)
    cls: type[ToolCollector] = load_target(target)
    return cls(tool_paths, cores)
