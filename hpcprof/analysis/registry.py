"""The one table of profiling tools `collect` knows: tool name -> "module:ToolCollector class",
imported only when a run of that tool is collected (`hpcprof sites` never imports pandas).
Adding a tool is one module with a ToolCollector subclass and one line here."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from hpcprof.analysis.collector import ToolCollector

COLLECTORS: dict[str, str] = {
    "nsys": "hpcprof.analysis.nsys.collect:NsysCollector",
    "ncu": "hpcprof.analysis.ncu.collect:NcuCollector",
    "torch": "hpcprof.analysis.trace.collect:TorchCollector",
}


def collector(tool: str, tool_paths: Mapping[str, str] | None = None, cores: int = 1) -> ToolCollector:
    """The collector of `tool` with the site's executables, its files analysed on `cores` cores each;
    KeyError for a tool not in COLLECTORS."""
    module, _, name = COLLECTORS[tool].partition(":")
    cls: type[ToolCollector] = getattr(importlib.import_module(module), name)
    return cls(tool_paths, cores)
