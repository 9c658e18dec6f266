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
    parts: dict[str, list[np.ndarray]] = {c: [] for c in COLUMNS}
    inst = window.instances
    inst = inst[inst["gpu_ops"] > 0].sort_values("start", kind="stable") if len(inst) else inst
    kernels = act.kernels.sort_values("start", kind="stable")
    for rank, its in window.iterations.groupby("rank", sort=True):
        mine, k = inst[inst["rank"] == rank], kernels[kernels["rank"] == rank]
        cpu, cpu_end = mine["start"].to_numpy(np.int64), mine["end"].to_numpy(np.int64)
        proj_start, proj_end = mine["proj_start"].to_numpy(np.int64), mine["proj_end"].to_numpy(np.int64)
        range_names = mine["range"].astype(str).to_numpy(object)
        gpu, gpu_end = k["start"].to_numpy(np.int64), k["end"].to_numpy(np.int64)
        short = k["short"].astype(str).to_numpy(object)
        for label, number, start, end, cpu_lo, cpu_hi in zip(
                its["window"], its["iteration"], its["start_ns"].to_numpy(np.int64), its["end_ns"].to_numpy(np.int64),
                its["cpu_start"], its["cpu_end"], strict=True):
            sel = np.arange(np.searchsorted(cpu, cpu_lo), np.searchsorted(cpu, cpu_hi, "right"))
            sel = sel[cpu_end[sel] <= cpu_hi]
            sel = sel[np.lexsort((cpu[sel], proj_start[sel]))]
            run = slice(np.searchsorted(gpu, start), np.searchsorted(gpu, end))
            for kind, names, s, e in (("phase", range_names[sel], proj_start[sel], proj_end[sel]),
                                      ("kernel", short[run], gpu[run], gpu_end[run])):
                n = len(names)
                parts["rank"].append(np.full(n, rank, dtype=np.int64))
                parts["window"].append(np.full(n, label, dtype=object))
                parts["iteration"].append(np.full(n, number, dtype=np.int64))
                parts["kind"].append(np.full(n, kind, dtype=object))
                parts["range"].append(names)
                parts["start_ms"].append((s - start) / 1e6)
                parts["end_ms"].append((e - start) / 1e6)
    if not parts["rank"]:
        return pd.DataFrame(columns=COLUMNS)
    return pd.DataFrame({c: np.concatenate(v) for c, v in parts.items()})


def median_iteration(iterations: pd.DataFrame) -> int | None:
    """The iteration whose length (its slowest rank's GPU time) is the median of the window's
    (the lower one of an even count); None without iterations."""
    if iterations is None or iterations.empty:
        return None
    length = iterations.groupby("iteration")["gpu_ns"].max().sort_values(kind="stable")
    return int(length.index[(len(length) - 1) // 2])
