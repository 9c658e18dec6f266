"""HTA 0.5.0's five trace analyses, vectorised, for every rank: each returns a DataFrame.

Column names, units (µs) and rounding are HTA's. Kernel classification is HTA 0.5.0's
(`hta.utils.utils.get_kernel_type`): COMMUNICATION = `^nccl.*Kernel`; MEMORY = `^Memcpy`,
`^Memset`, `^dma`; COMPUTATION = not matching `^nccl.*Kernel`, `.*Memcpy`, `Memset`, `.*Sync`;
anything else OTHER. "GPU events" are all events on a stream (kernels, memcpy, memset, sync).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from hpcprof.analysis.trace.load import RankTrace

COMP, COMM, MEM, OTHER = "COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER"
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")
KERNEL_CATS = ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy",
               "mtia_ccp_events")
LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC",
                "runFunction - job_prep_and_submit_for_execution")
MEMORY_LAUNCH_NAMES = ("cudaMemcpyAsync", "cudaMemsetAsync")

_COMM_RE = re.compile(r"^nccl.*Kernel")
_MEM_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMP_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def kernel_type(name: str) -> str:
    """HTA 0.5.0's kernel type of a GPU event name."""
    if _COMM_RE.match(name):
        return COMM
    if _MEM_RE.match(name):
        return MEM
    return OTHER if _NOT_COMP_RE.match(name) else COMP


def _types(gpu: pd.DataFrame) -> np.ndarray:
    """Kernel type of each GPU event (classified once per distinct name)."""
    names = gpu["name"].cat
    return np.array([kernel_type(n) for n in names.categories], dtype=object)[names.codes]


def _merge(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals [ts, end) as sorted disjoint (starts, ends); touching ones are joined."""
    if len(ts) == 0:
        return ts, end
    order = _hta_order(ts)
    ts, end = ts[order], end[order]
    new = np.ones(len(ts), dtype=bool)
    new[1:] = ts[1:] > np.maximum.accumulate(end)[:-1]
    first = np.flatnonzero(new)
    return ts[first], np.maximum.reduceat(end, first)


def _hta_order(ts: np.ndarray) -> np.ndarray:
    """The order in which HTA 0.5.0 sorts events by start (pandas `sort_values`: NumPy's
    quicksort, on int64 where times are whole µs). Events with equal starts keep that (unstable)
    order, which matters with negative durations: a [10, 9) before a [10, 15) starts its own
    merged interval."""
    whole = np.all(ts == np.floor(ts))
    return np.argsort(ts.astype(np.int64) if whole else ts, kind="quicksort")


def _busy(gpu: pd.DataFrame, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    ts, end = gpu["ts"].to_numpy(), gpu["end"].to_numpy()
    return _merge(ts, end) if mask is None else _merge(ts[mask], end[mask])


def _sweep(intervals: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Overlay interval sets i = 0, 1, ... as bits 1 << i: (bitmask, duration) of each segment."""
    times = np.concatenate([t for s, e in intervals for t in (s, e)])
    delta = np.concatenate(
        [np.full(len(t), sign << i) for i, (s, e) in enumerate(intervals)
         for t, sign in ((s, 1), (e, -1))]
    )
    order = np.argsort(times, kind="stable")
    times, running = times[order], np.cumsum(delta[order])
    return running[:-1], np.diff(times)


def temporal_breakdown(traces: Sequence[RankTrace]) -> pd.DataFrame:
    """Idle / compute / non-compute time per rank (HTA `get_temporal_breakdown`).

    kernel_time = end of the last GPU event − start of the first; idle = kernel_time − union of
    all GPU events; compute = union of COMPUTATION events; non_compute = the rest. Percentages
    are rounded to 2 decimals.
    """
    rows = []
    for t in traces:
        starts, ends = _busy(t.gpu)
        kernel_time = ends[-1] - starts[0]
        idle = kernel_time - (ends - starts).sum()
        # HTA merges the compute kernels taken from all GPU events as its first merge left them:
        # sorted by start in place (its quicksort's order of equal starts decides where an
        # event of negative duration falls)
        ts, end = t.gpu["ts"].to_numpy(), t.gpu["end"].to_numpy()
        by_start = _hta_order(ts)
        comp = by_start[(_types(t.gpu) == COMP)[by_start]]
        cs, ce = _merge(ts[comp], end[comp])
        compute = (ce - cs).sum()
        rows.append((t.rank, idle, compute, kernel_time - compute - idle, kernel_time))
    df = pd.DataFrame(rows, columns=["rank", "idle_time(us)", "compute_time(us)",
                                     "non_compute_time(us)", "kernel_time(us)"])
    for col in ("idle_time", "compute_time", "non_compute_time"):
        df[f"{col}_pctg"] = (100 * (df[f"{col}(us)"] / df["kernel_time(us)"])).round(2)
    return df


def comm_comp_overlap(traces: Sequence[RankTrace]) -> pd.DataFrame:
    """% of communication time during which computation also runs, per rank (HTA
    `get_comm_comp_overlap`); NaN for a rank without communication kernels."""
    rows = []
    for t in traces:
        types = _types(t.gpu)
        comm = _busy(t.gpu, types == COMM)
        running, length = _sweep([comm, _busy(t.gpu, types == COMP)])
        comm_time = (comm[1] - comm[0]).sum()
        ratio = length[running == 3].sum() / comm_time if comm_time else np.nan
        rows.append((t.rank, round(100 * ratio, 2)))
    return pd.DataFrame(rows, columns=["rank", "comp_comm_overlap_pctg"])


def _classify_idle(traces: Sequence[RankTrace], streams: Sequence[int] | None,
                   consecutive_kernel_delay: float) -> pd.DataFrame:
    """One row per kernel/memcpy/memset: rank, stream, idle_interval before it, idle_category."""
    parts = []
    for t in traces:
        g = t.gpu[t.gpu["cat"].isin(KERNEL_CATS)]
        if streams:
            g = g[g["stream"].isin(streams)]
        order = pd.unique(g["stream"])  # streams in order of first appearance, as HTA lists them
        pos = pd.Series(np.arange(len(order)), index=order)[g["stream"]].to_numpy()
        ts, end, launch = (g[c].to_numpy() for c in ("ts", "end", "launch_ts"))
        idx = np.lexsort((ts, pos))
        pos, ts, end, launch = pos[idx], ts[idx], end[idx], launch[idx]
        prev_end = np.concatenate(([np.nan], end[:-1]))
        prev_end[np.flatnonzero(np.diff(pos, prepend=-1))] = np.nan  # first event of a stream
        interval = ts - prev_end
        host_wait = launch > prev_end  # the CPU enqueued it after the stream had drained
        kernel_wait = ~host_wait & (interval < consecutive_kernel_delay)
        parts.append(pd.DataFrame({
            "rank": t.rank, "order": pos, "stream": order[pos], "idle_interval": interval,
            "idle_category": np.select([host_wait, kernel_wait], [0, 1], 2),
        }))
    return pd.concat(parts, ignore_index=True)


def idle_time_breakdown(traces: Sequence[RankTrace], streams: Sequence[int] | None = None,
                        consecutive_kernel_delay: float = 30) -> pd.DataFrame:
    """GPU idle time per rank and stream split into host_wait / kernel_wait / other (HTA
    `get_idle_time_breakdown`, but for all ranks by default).

    Per stream, the gap before each kernel/memcpy/memset is host_wait when its CPU launch started
    after the previous event ended, else kernel_wait when shorter than `consecutive_kernel_delay`
    µs, else other. idle_time_ratio is the share of the stream's idle time (2 decimals).
    An event whose launch call is not in the trace is compared, as in HTA 0.5.0, with the start
    of the file's first event (see `load_trace`, option `ignore_unmatched_launches`).
    """
    rows = _classify_idle(traces, streams, consecutive_kernel_delay)
    df = (rows.groupby(["rank", "order", "stream", "idle_category"], sort=True)["idle_interval"]
          .sum().rename("idle_time").reset_index())
    total = df.groupby(["rank", "order"])["idle_time"].transform("sum")
    df["idle_time_ratio"] = df["idle_time"] / total.where(total != 0)
    df["idle_category"] = np.asarray(IDLE_CATEGORIES, dtype=object)[df["idle_category"]]
    return df[["rank", "stream", "idle_category", "idle_time", "idle_time_ratio"]].round(2)


def idle_interval_stats(traces: Sequence[RankTrace], streams: Sequence[int] | None = None,
                        consecutive_kernel_delay: float = 30) -> pd.DataFrame:
    """Statistics (pandas `describe`, 2 decimals) of the idle intervals per rank, stream and
    category, as HTA's `show_idle_interval_stats=True`."""
    rows = _classify_idle(traces, streams, consecutive_kernel_delay)
    df = (rows.groupby(["rank", "order", "stream", "idle_category"], sort=True)["idle_interval"]
          .describe().reset_index())
    df["idle_category"] = np.asarray(IDLE_CATEGORIES, dtype=object)[df["idle_category"]]
    return df.drop(columns="order").round(2)


def kernel_launch_stats(traces: Sequence[RankTrace], runtime_cutoff: float = 50,
                        launch_delay_cutoff: float = 100,
                        include_memory_events: bool = True) -> pd.DataFrame:
    """CPU launch duration, GPU duration and launch delay per correlation id (HTA
    `get_cuda_kernel_launch_stats`, for all ranks by default).

    launch_delay = max(0, gpu start − cpu end). HTA's plot buckets are columns: short_kernel
    (cpu_duration <= runtime_cutoff and gpu_duration < cpu_duration), runtime_outlier
    (cpu_duration > runtime_cutoff), launch_delay_outlier (launch_delay > launch_delay_cutoff).
    """
    names = LAUNCH_NAMES + (MEMORY_LAUNCH_NAMES if include_memory_events else ())
    parts = []
    for t in traces:
        launched = t.cpu.loc[t.cpu["name"].isin(names), "correlation"].unique()
        cpu = t.cpu.loc[t.cpu["correlation"].isin(launched), ["correlation", "ts", "dur"]]
        gpu = t.gpu.loc[t.gpu["correlation"].isin(launched), ["correlation", "ts", "dur"]]
        joined = cpu.merge(gpu, on="correlation", how="inner", suffixes=("_cpu", "_gpu"))
        parts.append(pd.DataFrame({
            "rank": t.rank,
            "correlation": joined["correlation"],
            "cpu_duration": joined["dur_cpu"],
            "gpu_duration": joined["dur_gpu"],
            "launch_delay": (joined["ts_gpu"] - joined["ts_cpu"] - joined["dur_cpu"]).clip(lower=0),
        }))
    df = pd.concat(parts, ignore_index=True)
    df["short_kernel"] = (df["cpu_duration"] <= runtime_cutoff) & (
        df["gpu_duration"] < df["cpu_duration"])
    df["runtime_outlier"] = df["cpu_duration"] > runtime_cutoff
    df["launch_delay_outlier"] = df["launch_delay"] > launch_delay_cutoff
    return df


def _analysed_types(include_memory_kernels: bool) -> list[str]:
    return [COMP, COMM] + ([MEM] if include_memory_kernels else [])


def kernel_type_breakdown(traces: Sequence[RankTrace], include_memory_kernels: bool = True,
                          per_rank: bool = False) -> pd.DataFrame:
    """GPU time by kernel type and by overlaps of types ("COMPUTATION overlapping
    COMMUNICATION", ...), summed over ranks as HTA's `get_gpu_kernel_breakdown` first table
    (`per_rank=True`: one table per rank, with a rank column). percentage: 1 decimal.

    Types whose overlap lasts 0 µs are left out (HTA may list them with sum 0, depending on
    sort order).
    """
    types = _analysed_types(include_memory_kernels)
    labels = [" overlapping ".join(k for i, k in enumerate(types) if mask >> i & 1)
              for mask in range(1 << len(types))]
    parts = []
    for t in traces:
        kinds = _types(t.gpu)
        running, length = _sweep([_busy(t.gpu, kinds == k) for k in types])
        on = running > 0
        sums = np.bincount(running[on], weights=length[on].astype(np.int64),
                           minlength=1 << len(types))
        parts.append(pd.DataFrame({"rank": t.rank, "kernel_type": labels, "sum": sums}))
    df = pd.concat(parts, ignore_index=True)
    df = df[df["sum"] > 0].astype({"sum": np.int64})
    keys = ["rank", "kernel_type"] if per_rank else ["kernel_type"]
    df = df.groupby(keys, as_index=False)["sum"].sum()
    df = df.sort_values([*keys[:-1], "sum"], ascending=[True] * (len(keys) - 1) + [False],
                        kind="stable", ignore_index=True)
    total = df.groupby(keys[:-1])["sum"].transform("sum") if per_rank else df["sum"].sum()
    df["percentage"] = (df["sum"] / total * 100).round(1)
    return df


def kernel_breakdown(traces: Sequence[RankTrace], num_kernels: int = 10,
                     duration_ratio: float = 0.8,
                     include_memory_kernels: bool = True,
                     instance_stats: bool = False) -> pd.DataFrame:
    """Per rank and kernel type, sum/max/min/stddev/mean duration of each kernel name (HTA
    `get_gpu_kernel_breakdown` second table; stddev is the sample std, 0 for one instance).

    Beyond the `num_kernels` longest kernels of a type, or past the `duration_ratio` quantile of
    their cumulative time, kernels are collapsed into "others", and then, as HTA 0.5.0 does,
    every row is recomputed from per-kernel *totals*: a kept kernel shows max = min = mean = its
    sum and stddev 0, and "others" gives the statistics of its kernels' totals.
    `instance_stats=True` (a deviation from HTA, option `--instance-stats`) keeps each kept
    kernel's own statistics and gives "others" those of all its kernel instances. The sums are
    HTA's in both cases.

    The arithmetic is HTA's to the last bit: the same pandas groupby aggregations over the same
    values in the same order (rows in file order, grouped by name in sorted order), so the mean
    is pandas' sum / count and the stddev pandas' one-pass (Welford) update in row order, and
    the collapse sorts by total with the same (unstable) pandas sort.
    """
    parts = []
    for t in traces:
        codes = t.gpu["name"].cat.codes.to_numpy()
        names = t.gpu["name"].cat.categories.to_numpy(dtype=object)
        by_name = np.argsort(names.astype(str), kind="stable")
        alphabetical = np.empty(len(names), dtype=np.int64)   # code -> rank of its name (groupby order)
        alphabetical[by_name] = np.arange(len(names))
        sorted_names = names[by_name]
        kinds, dur = _types(t.gpu), t.gpu["dur"].to_numpy(np.float64)
        for kind in _analysed_types(include_memory_kernels):
            group, d = alphabetical[codes[kinds == kind]], dur[kinds == kind]
            if len(group) == 0:
                continue
            stats = _aggregate(group, d)
            stats.index = sorted_names[stats.index.to_numpy()]
            stats.index.name = "name"
            if len(stats) > num_kernels:
                by_time = stats.reset_index().sort_values(by=["sum"], ascending=False, ignore_index=True)
                keep = by_time["sum"] < 0                          # HTA's "always false": negative totals stay
                collapse = ~keep & (by_time["sum"].cumsum() > by_time["sum"].cumsum().quantile(duration_ratio))
                collapse |= ~keep & (by_time.index >= num_kernels)
                label = by_time["name"].where(~collapse, "others")
                if instance_stats:
                    others = set(by_time["name"][collapse])
                    instance = np.array([sorted_names[g] in others for g in range(len(sorted_names))])[group]
                    labels = np.where(instance, "others", sorted_names[group].astype(object))
                    stats = _aggregate(labels, d)
                else:
                    stats = _aggregate(label.to_numpy(dtype=object), by_time["sum"].to_numpy(np.float64))
            parts.append(pd.DataFrame({"name": stats.index.to_numpy(dtype=object),
                                       **{c: stats[c].to_numpy() for c in STAT_COLUMNS},
                                       "kernel_type": kind, "rank": t.rank}))
    df = pd.concat(parts, ignore_index=True)
    df = df.sort_values(["kernel_type", "name", "rank"], kind="stable", ignore_index=True)
    return df.rename(columns={"sum": "sum (us)", "max": "max (us)", "min": "min (us)",
                              "std": "stddev", "mean": "mean (us)"})[
        ["name", "sum (us)", "max (us)", "min (us)", "stddev", "mean (us)", "kernel_type", "rank"]]


STAT_COLUMNS = ["sum", "max", "min", "mean", "std"]


def _aggregate(groups: np.ndarray, dur: np.ndarray) -> pd.DataFrame:
    """HTA's `groupby(name)[dur].agg(["sum", "max", "min", "mean", "std"])` with a missing std
    (one value) as 0: one row per group, in sorted group order. `groups` are names or
    their sort ranks (the same groups in the same order, so the same arithmetic)."""
    stats = pd.DataFrame({"name": groups, "dur": dur}).groupby("name")["dur"].agg(STAT_COLUMNS)
    return stats.fillna({"std": 0})
