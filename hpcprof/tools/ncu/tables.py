"""Nsight Compute's result table (`ncu_metrics`, hpcprof.core.catalog's TableSpec), declared once: its
collector and its figures take the name from here; the profiler table gathers it (CATALOG)."""

from __future__ import annotations

from hpcprof.core.catalog import EACH_KERNEL, TableSpec, ToolCatalog

NCU = "ncu"

METRICS = TableSpec(NCU, "metrics", "profiled kernel", EACH_KERNEL,
                    "Echo's ncu metric table: throughputs, occupancy, hit rates of each kernel", "Echo's ncu table")

#: ncu's table (it feeds no tool-neutral metric)
CATALOG = ToolCatalog(tables=(METRICS,))
