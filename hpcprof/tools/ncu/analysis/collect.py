"""ncu profiles in `hpcprof collect`: one rank's file at a time, then a note on the empty columns."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from hpcprof.analysis.collector import Log, ReadTable, Reducer, ToolCollector
from hpcprof.tools.ncu import tables as nc
from hpcprof.tools.ncu.analysis.metrics import kernel_table, missing_sections
from hpcprof.tools.ncu.analysis.parse import load


def analyse_file(path: Path, rank: int, ncu: str | None = None) -> dict[str, pd.DataFrame]:
    """One rank's profile (`hpcprof collect`'s per-file map): {"metrics": Echo's table with
    `rank` and `file` columns}, NcuInputError names a bad file."""
    df = kernel_table(load(path, ncu))
    df.insert(0, "file", path.name)
    df.insert(0, "rank", pd.array([rank] * len(df), dtype="Int64"))
    return {nc.METRICS.key: df}


def note_missing_sections(read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    """No new table; logs the Echo columns empty in every file (the ncu section to add)."""
    metrics = read(nc.METRICS.key)
    for note in missing_sections(metrics if metrics is not None else pd.DataFrame()):
        log(f"ncu: {note}")
    return {}


class NcuCollector(ToolCollector):
    """ncu in `collect`: each rank's profile with the site's ncu (a .ncu-rep needs it), then a
    note on the Echo columns empty in every file."""

    def analyse_file(self, path: Path, rank: int) -> dict[str, pd.DataFrame]:
        return analyse_file(path, rank, self.tool_paths.get("ncu"))

    def reducers(self) -> Sequence[Reducer]:
        return (note_missing_sections,)
