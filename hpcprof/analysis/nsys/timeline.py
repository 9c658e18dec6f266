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
    inst = inst[inst["gpu_ops"] > 0].sort_values("start", kind="stable") if len(inst) else inst
    kernels = act.kernels.sort_values("start", kind="stable")
    for rank, its in window.iterations.groupby("rank", sort=True):
        mine, k = inst[inst["rank"] == rank], kernels[kernels["rank"] == rank]
        cpu, gpu = mine["start"].to_numpy(np.int64), k["start"].to_numpy(np.int64)
        for it in its.to_dict("records"):
            start, end = int(it["start_ns"]), int(it["end_ns"])
            ranges = mine.iloc[np.searchsorted(cpu, it["cpu_start"]):np.searchsorted(cpu, it["cpu_end"], "right")]
            ranges = ranges[ranges["end"] <= it["cpu_end"]].sort_values(["proj_start", "start"], kind="stable")
            run = k.iloc[np.searchsorted(gpu, start):np.searchsorted(gpu, end)]
            for kind, names, s, e in (("phase", ranges["range"], ranges["proj_start"], ranges["proj_end"]),
                                      ("kernel", run["short"], run["start"], run["end"])):
                out.append(pd.DataFrame({"rank": rank, "window": it["window"], "iteration": it["iteration"],
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
