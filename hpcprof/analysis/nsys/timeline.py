"""The NVTX ranges of one iteration on every rank, for the report's Gantt chart."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hpcprof.analysis.nsys.db import NVTX, NVTX_PUSHPOP, NVTX_STARTEND, pid_of
from hpcprof.analysis.nsys.distributed import Activity
from hpcprof.analysis.nsys.stats import OLD, nvtx_ranges

#: the range that spans one iteration (seqpar's `iteration`, ddp's `step`, `step<N>`), else Echo's window
ITERATION_RANGE = r"(?:iteration|step)\d*"
WINDOW_RANGE = "backward"
COLUMNS = ["rank", "iteration", "range", "start_ms", "end_ms"]


def iteration_timeline(act: Activity) -> pd.DataFrame:
    """Per rank, the middle instance of the iteration range and every NVTX range inside it, with
    start and end in ms from that iteration's start (the rank's own clock)."""
    proc_rank = act.ops.groupby(["file", "pid"])["rank"].min().to_dict()
    parts = []
    for path, export in act.exports.items():
        if not export.has(NVTX):
            continue
        ranges, names = nvtx_ranges(export, NVTX_PUSHPOP + NVTX_STARTEND, OLD, with_times=True)
        if ranges.empty:
            continue
        ranges["range"] = names[ranges["name"].to_numpy()]
        pids = pid_of(ranges["globalTid"].to_numpy(np.int64))
        ranges["rank"] = [proc_rank.get((str(path), int(p)), -1) for p in pids]
        parts.append(ranges[["rank", "range", "start", "end"]])
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    ranges = pd.concat(parts, ignore_index=True)
    ranges = ranges[ranges["rank"] >= 0]
    ranges["anchor"] = ranges["range"].astype(str).str.fullmatch(ITERATION_RANGE)
    if not ranges["anchor"].any():
        ranges["anchor"] = ranges["range"] == WINDOW_RANGE
    out = []
    for rank, r in ranges.groupby("rank", sort=True):
        its = r[r["anchor"]].sort_values("start")
        if its.empty:
            continue
        k = len(its) // 2
        start, end = int(its["start"].iloc[k]), int(its["end"].iloc[k])
        inside = r[(r["start"] >= start) & (r["end"] <= end)].sort_values("start")
        out.append(pd.DataFrame({"rank": rank, "iteration": k, "range": inside["range"].to_numpy(),
                                 "start_ms": (inside["start"].to_numpy(np.int64) - start) / 1e6,
                                 "end_ms": (inside["end"].to_numpy(np.int64) - start) / 1e6}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=COLUMNS)
