"""Collector for ncu profiles of a run (see hpcprof.analysis.CollectContext)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from hpcprof.analysis import CollectContext
from hpcprof.analysis.ncu.metrics import kernel_table, metrics_table, missing_sections
from hpcprof.analysis.ncu.parse import load


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


def analyse_file(path: Path, rank: int, ncu: str | None = None) -> dict[str, pd.DataFrame]:
    """One rank's profile (`hpcprof collect`'s per-file map): {"metrics": Echo's table with
    `rank` and `file` columns}, as collect_ncu gives for that file. NcuInputError names a bad file."""
    df = kernel_table(load(path, ncu))
    df.insert(0, "file", path.name)
    df.insert(0, "rank", pd.array([rank] * len(df), dtype="Int64"))
    return {"metrics": df}


def reduce_files(read: Callable[[str], pd.DataFrame | None], log: Callable[[str], None]) -> dict[str, pd.DataFrame]:
    """No new table; logs the Echo columns empty in every file (the ncu section to add)."""
    metrics = read("metrics")
    for note in missing_sections(metrics if metrics is not None else pd.DataFrame()):
        log(f"ncu: {note}")
    return {}
