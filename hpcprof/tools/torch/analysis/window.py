"""The measured window of a Kineto trace: its `ProfilerStep#N` ranges projected onto GPU time.

Each kept ProfilerStep (load_trace drops the last, possibly truncated, one as HTA does) is one
iteration: the GPU events whose launching CPU call starts inside the step, from the first one's
start to the last one's end. The window runs from the first iteration's GPU start to the last
one's end. A trace without ProfilerStep annotations is measured over the steps found in its
kernels (`detected:optimizer`, `detected:sequence`: trace/steps.py), else whole (`capture`).
Times come out in ns on the trace's clock (Kineto's µs × 1000).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hpcprof.core.catalog import CAPTURE_WINDOW
from hpcprof.tools.torch.analysis.analyses import COMM, COMP, kernel_type
from hpcprof.tools.torch.analysis.load import RankTrace
from hpcprof.tools.torch.analysis.steps import WORK, trace_steps

STEP_WINDOW = "ProfilerStep"
CAPTURE = CAPTURE_WINDOW
ITERATION_COLUMNS = ["rank", "window", "iteration", "start_ns", "end_ns", "gpu_ns", "busy_ns", "idle_ns"]
#: an iteration of the window: its number, GPU bounds and host bounds (µs relative to the trace's origin)
STEP_COLUMNS = ["iteration", "start_us", "end_us", "cpu_start_us", "cpu_end_us"]
WINDOW_COLUMNS = ["rank", "window", "start_ns", "end_ns", "duration_ns", "iterations", "busy_ns", "idle_ns",
                  "span_ns", "compute_ns", "comm_ns", "overlap_ns"]


def _union(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint union of intervals [ts, end); an empty one (end <= ts: a sub-µs event on HTA's
    whole-µs grid, its start rounded up past its end rounded down) covers nothing."""
    filled = end > ts
    ts, end = ts[filled], end[filled]
    if len(ts) == 0:
        return ts, end
    order = np.argsort(ts, kind="stable")
    ts, end = ts[order], end[order]
    new = np.concatenate(([True], ts[1:] > np.maximum.accumulate(end)[:-1]))
    first = np.flatnonzero(new)
    return ts[first], np.maximum.reduceat(end, first)


def _covered_each(union: tuple[np.ndarray, np.ndarray], start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each interval [start, end): how much of it the disjoint sorted `union` covers."""
    us, ue = union
    start, end = np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
    if len(us) == 0:
        return np.zeros(len(start))
    cum = np.concatenate(([0.0], np.cumsum(ue - us)))

    def upto(t: np.ndarray) -> np.ndarray:             # covered length in (-inf, t)
        i = np.searchsorted(us, t, side="right")
        j = np.maximum(i - 1, 0)
        return np.where(i > 0, cum[j] + np.clip(t - us[j], 0, (ue - us)[j]), 0.0)

    return upto(np.maximum(end, start)) - upto(start)


def _covered(union: tuple[np.ndarray, np.ndarray], lo: float, hi: float) -> float:
    """Length of `union` inside [lo, hi)."""
    return float(_covered_each(union, np.array([lo]), np.array([hi]))[0])


def _intersection(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], lo: float, hi: float) -> float:
    """Length of the intersection of two unions inside [lo, hi)."""
    return float(_covered_each(b, np.clip(a[0], lo, hi), np.clip(a[1], lo, hi)).sum())


def step_iterations(trace: RankTrace) -> pd.DataFrame:
    """Per kept ProfilerStep: its GPU projection (start_us, end_us relative to the origin) and the
    step on the host (cpu_start_us, cpu_end_us: the GPU events launched in it are its own)."""
    gpu, steps = trace.gpu, trace.steps
    launch = gpu["launch_ts"]
    rows = []
    for i in np.argsort(steps["ts"], kind="stable").tolist():
        start, end = float(steps["ts"][i]), float(steps["end"][i])
        inside = (launch >= start) & (launch <= end)
        if inside.any():
            rows.append({"iteration": int(steps["step"][i]), "start_us": float(gpu["ts"][inside].min()),
                         "end_us": float(gpu["end"][inside].max()), "cpu_start_us": start, "cpu_end_us": end})
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def window_iterations(trace: RankTrace) -> tuple[str, pd.DataFrame]:
    """(the window's label, its iterations: STEP_COLUMNS) of one rank's trace: the kept
    ProfilerSteps, else the steps found in its kernels (trace/steps.py), else none (`capture`)."""
    its = step_iterations(trace)
    if len(its):
        return STEP_WINDOW, its
    found = trace_steps(trace)
    return found if found is not None else (CAPTURE, its)


def trace_window(trace: RankTrace) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(window, iterations) of one rank's trace: the window's bounds, length, iterations, busy and
    idle time, compute, communication and their overlap (HTA's kernel types); per iteration the
    GPU bounds, length, busy and idle time. All in ns."""
    gpu = trace.gpu
    ts, end = gpu["ts"], gpu["end"]
    kinds = np.array([kernel_type(str(n)) for n in gpu.categories["name"]], dtype=object)[gpu["name"]]
    busy = _union(ts, end)
    comm = _union(ts[kinds == COMM], end[kinds == COMM])
    comp = _union(ts[kinds == COMP], end[kinds == COMP])
    label, its = window_iterations(trace)
    lo, hi = (its["start_us"].min(), its["end_us"].max()) if len(its) else (ts.min(), end.max())
    origin_ns = trace.origin * 1000.0

    def ns(us: float) -> int:
        return round(origin_ns + us * 1000.0)

    def us_to_ns(us: float) -> int:
        return round(us * 1000)

    busy_us = _covered(busy, lo, hi)
    window = pd.DataFrame([{
        "rank": trace.rank, "window": label, "start_ns": ns(lo), "end_ns": ns(hi),
        "duration_ns": ns(hi) - ns(lo), "iterations": len(its), "busy_ns": us_to_ns(busy_us),
        "idle_ns": ns(hi) - ns(lo) - us_to_ns(busy_us), "span_ns": ns(hi) - ns(lo),
        "compute_ns": us_to_ns(_covered(comp, lo, hi)), "comm_ns": us_to_ns(_covered(comm, lo, hi)),
        "overlap_ns": us_to_ns(_intersection(comm, comp, lo, hi))}], columns=WINDOW_COLUMNS)
    rows = []
    for it in its.to_dict("records"):
        start, stop = ns(it["start_us"]), ns(it["end_us"])
        b = us_to_ns(_covered(busy, it["start_us"], it["end_us"]))
        rows.append({"rank": trace.rank, "window": label, "iteration": it["iteration"], "start_ns": start,
                     "end_ns": stop, "gpu_ns": stop - start, "busy_ns": b, "idle_ns": stop - start - b})
    return window, pd.DataFrame(rows, columns=ITERATION_COLUMNS)


def window_kernels(trace: RankTrace, window: pd.DataFrame) -> pd.DataFrame:
    """GPU time per name of the kernels, memcpys and memsets inside the rank's window (`trace_window`'s
    row; events cut to it), as nsys' kernel table: rank, window, name, instances, total_ns (most
    time first). An event Kineto's µs rounding ends before its start (within KINETO_SLACK_NS, which
    loading allows) counts as no time, not a negative one."""
    gpu = trace.gpu
    row = window.iloc[0]
    lo, hi = row["start_ns"] / 1000.0 - trace.origin, row["end_ns"] / 1000.0 - trace.origin
    ts, end = gpu["ts"], gpu["end"]
    inside = np.isin(gpu.values("cat").astype(str), WORK) & (end > lo) & (ts < hi)
    cut = np.maximum(np.minimum(end[inside], hi) - np.maximum(ts[inside], lo), 0.0)
    names = gpu.values("name").astype(str)[inside]
    per = pd.DataFrame({"name": names, "ns": np.round(cut * 1000.0).astype(np.int64)}).groupby("name", sort=True)["ns"]
    out = pd.DataFrame({"rank": trace.rank, "window": row["window"], "name": per.size().index.to_numpy(dtype=object),
                        "instances": per.size().to_numpy(np.int64), "total_ns": per.sum().to_numpy(np.int64)})
    return out.sort_values("total_ns", ascending=False, kind="stable", ignore_index=True)
