"""Iterations of the measured window on GPU time, kernels and phases, for the report's per-rank
timeline: each rank's iteration starts at 0 (its first GPU operation), so ranks are aligned."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hpcprof.analysis.nsys.distributed import Activity
from hpcprof.analysis.nsys.window import Window

COLUMNS = ["rank", "window", "iteration", "kind", "range", "start_ms", "end_ms"]


def iteration_timeline(act: Activity, window: Window) -> pd.DataFrame:
    """Per rank and iteration of the window: the NVTX ranges inside the iteration (`kind` phase,
    projected onto the GPU) and its kernels (`kind` kernel, short names), start and end in ms
    from the iteration's GPU start."""
    out = []
    inst = window.instances
    for it in window.iterations.to_dict("records"):
        start, end = int(it["start_ns"]), int(it["end_ns"])
        mine = inst[(inst["rank"] == it["rank"]) & (inst["gpu_ops"] > 0) & (inst["start"] >= it["cpu_start"])
                    & (inst["end"] <= it["cpu_end"])].sort_values(["proj_start", "start"], kind="stable")
        k = act.kernels
        k = k[(k["rank"] == it["rank"]) & (k["start"] >= start) & (k["start"] < end)]
        for kind, names, s, e in (("phase", mine["range"], mine["proj_start"], mine["proj_end"]),
                                  ("kernel", k["short"], k["start"], k["end"])):
            out.append(pd.DataFrame({"rank": it["rank"], "window": it["window"], "iteration": it["iteration"],
                                     "kind": kind, "range": names.astype(str).to_numpy(),
                                     "start_ms": (s.to_numpy(np.int64) - start) / 1e6,
                                     "end_ms": (e.to_numpy(np.int64) - start) / 1e6}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=COLUMNS)


def median_iteration(iterations: pd.DataFrame) -> int | None:
    """The iteration whose length (its slowest rank's GPU time) is the median of the window's
    (the lower one of an even count); None without iterations."""
    if iterations is None or iterations.empty:
        return None
    length = iterations.groupby("iteration")["gpu_ns"].max().sort_values(kind="stable")
    return int(length.index[(len(length) - 1) // 2])
