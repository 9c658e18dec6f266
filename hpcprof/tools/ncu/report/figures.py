"""ncu's figures of a run in the HTML report (its Profiler's `figures`): its metric table
(hpcprof.tools.ncu.tables) as speed-of-light bars."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pandas as pd

from hpcprof.report import plots
from hpcprof.report.html import run_window, titled
from hpcprof.run.results import read_table
from hpcprof.tools.ncu import tables as nc

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from hpcprof.report.runs import RunInfo

#: ncu's Echo columns drawn as speed-of-light bars (by name prefix)
SOL_COLUMNS = ("Compute throughput", "Memory throughput", "DRAM throughput", "Achieved occupancy")


def ncu_figures(info: RunInfo) -> Iterator[go.Figure]:
    """Echo's kernel metric table as speed-of-light bars."""
    table = read_table(info.run.path, nc.METRICS.name)
    if table is None or table.empty:
        return
    cols = [c for c in table.columns if c.startswith(SOL_COLUMNS) and pd.api.types.is_numeric_dtype(table[c])]
    if cols:
        head = table.head(20)
        head = head.assign(kernel=head["ID"].astype(str) + " " + head["Kernel Name"].astype(str).str.slice(0, 40))
        long = head.melt(id_vars="kernel", value_vars=cols, var_name="metric", value_name="pct")
        yield plots.sol_bars(long, titled("ncu speed of light (Echo metrics)", f"{run_window(info, nc.METRICS)} "
                                          "profiled, the first 20"))
