"""Iterations of the measured window on GPU time, kernels and phases, for the report's per-rank
timeline: each rank's iteration starts at 0 (its first GPU operation), so ranks are aligned."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from hpcprof.run.results import arrow_table
from hpcprof.tools.nsys.analysis.distributed import Activity
from hpcprof.tools.nsys.analysis.window import Window

COLUMNS = ["rank", "window", "iteration", "kind", "range", "start_ms", "end_ms"]


def _spans(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, index): every index in [lo[i], hi[i]) with its i, in order of i then index."""
    counts = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(len(lo)), counts)
    return owner, np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)


def iteration_timeline(act: Activity, window: Window) -> pa.Table:
    """Per rank and iteration of the window: the NVTX ranges inside the iteration (`kind` phase,
    projected onto the GPU) and its kernels (`kind` kernel, short names), start and end in ms
    from the iteration's GPU start."""
    inst = window.instance_columns
    projected = inst["gpu_ops"] > 0
    cols = {c: inst[c][projected] for c in ("rank", "start", "end", "proj_start", "proj_end", "range")}
    by_start = np.argsort(cols["start"], kind="stable")
    cols = {c: v[by_start] if c == "range" else v[by_start].astype(np.int64) for c, v in cols.items()}
    kernel = np.flatnonzero(act.column("kernel"))
    kernel = kernel[np.argsort(act.column("start")[kernel], kind="stable")]
    k_rank = act.column("rank")[kernel]
    its = window.iterations
    it_rank, it_cols = its["rank"], its
    parts: dict[str, list[np.ndarray]] = {c: [] for c in COLUMNS}
    for rank in np.unique(it_rank).tolist():
        at = np.flatnonzero(it_rank == rank)
        label, number = it_cols["window"][at].astype(object), it_cols["iteration"][at].astype(np.int64)
        start, end = it_cols["start_ns"][at].astype(np.int64), it_cols["end_ns"][at].astype(np.int64)
        cpu_lo, cpu_hi = it_cols["cpu_start"][at].astype(np.int64), it_cols["cpu_end"][at].astype(np.int64)
        mine, k = cols["rank"] == rank, kernel[k_rank == rank]
        cpu, cpu_end, proj_start, proj_end = (cols[c][mine] for c in ("start", "end", "proj_start", "proj_end"))
        range_names = np.array([str(n) for n in cols["range"][mine].tolist()], dtype=object)
        gpu, gpu_end = act.column("start")[k].astype(np.int64), act.column("end")[k].astype(np.int64)
        short = np.array([str(n) for n in act.column("short")[k].tolist()], dtype=object)
        # phases: the ranges inside each iteration on the CPU, by projected start (then CPU start)
        p_it, sel = _spans(np.searchsorted(cpu, cpu_lo), np.searchsorted(cpu, cpu_hi, "right"))
        inside = cpu_end[sel] <= cpu_hi[p_it]
        p_it, sel = p_it[inside], sel[inside]
        by = np.lexsort((sel, cpu[sel], proj_start[sel], p_it))
        p_it, sel = p_it[by], sel[by]
        # kernels: those starting in each iteration's GPU span, in start order
        k_it, run = _spans(np.searchsorted(gpu, start), np.searchsorted(gpu, end))
        it = np.concatenate((p_it, k_it))
        order = np.lexsort((np.repeat([0, 1], [len(p_it), len(k_it)]), it))    # per iteration: phases, kernels
        it = it[order]
        origin = start[it]
        parts["rank"].append(np.full(len(it), rank, dtype=np.int64))
        parts["window"].append(label[it])
        parts["iteration"].append(number[it])
        parts["kind"].append(np.repeat(np.array(["phase", "kernel"], dtype=object), [len(p_it), len(k_it)])[order])
        parts["range"].append(np.concatenate((range_names[sel], short[run]))[order])
        parts["start_ms"].append((np.concatenate((proj_start[sel], gpu[run]))[order] - origin) / 1e6)
        parts["end_ms"].append((np.concatenate((proj_end[sel], gpu_end[run]))[order] - origin) / 1e6)
    if not parts["rank"]:
        return arrow_table(dict.fromkeys(COLUMNS, np.empty(0, dtype=object)))
    return arrow_table({c: np.concatenate(v) for c, v in parts.items()})


def median_iteration(iterations: pd.DataFrame) -> int | None:
    """The iteration whose length (its slowest rank's GPU time) is the median of the window's
    (the lower one of an even count); None without iterations."""
    if iterations is None or iterations.empty:
        return None
    length = iterations.groupby("iteration")["gpu_ns"].max().sort_values(kind="stable")
    return int(length.index[(len(length) - 1) // 2])
