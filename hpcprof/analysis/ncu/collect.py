"""Collector for ncu profiles of a run (see hpcprof.analysis.CollectContext)."""

from __future__ import annotations

import pandas as pd

from hpcprof.analysis import CollectContext
from hpcprof.analysis.ncu.metrics import metrics_table, missing_sections


def collect_ncu(ctx: CollectContext) -> dict[str, pd.DataFrame]:
    """Echo's kernel metric table of the run's ncu profiles (CSV exports, or .ncu-rep via ncu).

    Returns {"metrics": table with `rank` and `file` columns}, or {} when no profile could be
    read. Files that cannot be read (a .ncu-rep without ncu, bad CSV) are logged and skipped.
    """
    df, errors = metrics_table(ctx.files, ncu=ctx.tool_paths.get("ncu"), ranks=ctx.rank_of)
    for message in errors:
        ctx.log(f"ncu: skipped {message}")
    for note in missing_sections(df):
        ctx.log(f"ncu: {note}")
    return {"metrics": df} if len(df) else {}
