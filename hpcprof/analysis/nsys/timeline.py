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
    if len(inst):
        projected = inst["gpu_ops"].to_numpy() > 0
        cols = {c: inst[c].to_numpy()[projected] for c in ("rank", "start", "end", "proj_start", "proj_end", "range")}
        by_start = np.argsort(cols["start"], kind="stable")
        cols = {c: v[by_start] for c, v in cols.items()}
    else:
        cols = {c: np.empty(0, dtype=np.int64) for c in ("rank", "start", "end", "proj_start", "proj_end")}
        cols["range"] = np.empty(0, dtype=object)
    kernel = np.flatnonzero(act.column("kernel"))
    kernel = kernel[np.argsort(act.column("start")[kernel], kind="stable")]
    k_rank = act.column("rank")[kernel]
    its = window.iterations
    it_rank = its["rank"].to_numpy(np.int64)
    it_cols = [its[c].to_numpy() for c in ("window", "iteration", "start_ns", "end_ns", "cpu_start", "cpu_end")]
    for rank in np.unique(it_rank).tolist():
        mine = cols["rank"] == rank
        k = kernel[k_rank == rank]
        cpu, cpu_end = cols["start"][mine].astype(np.int64), cols["end"][mine].astype(np.int64)
        proj_start, proj_end = cols["proj_start"][mine].astype(np.int64), cols["proj_end"][mine].astype(np.int64)
        range_names = np.array([str(n) for n in cols["range"][mine].tolist()] + [None], dtype=object)[:-1]
        gpu, gpu_end = act.column("start")[k].astype(np.int64), act.column("end")[k].astype(np.int64)
        short = np.array([str(n) for n in act.column("short")[k].tolist()] + [None], dtype=object)[:-1]
        at = np.flatnonzero(it_rank == rank)
        for label, number, start, end, cpu_lo, cpu_hi in zip(*(c[at].tolist() for c in it_cols), strict=True):
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
