"""HTA 0.5.0's five trace analyses, vectorised, for every rank: each returns a Table (trace/table.py:
numpy columns; `Table.frame()` is the DataFrame HTA returns).

Column names, units (µs) and rounding are HTA's. Kernel classification is HTA 0.5.0's
(`hta.utils.utils.get_kernel_type`): COMMUNICATION = `^nccl.*Kernel`; MEMORY = `^Memcpy`,
`^Memset`, `^dma`; COMPUTATION = not matching `^nccl.*Kernel`, `.*Memcpy`, `Memset`, `.*Sync`;
anything else OTHER. "GPU events" are all events on a stream (kernels, memcpy, memset, sync).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from hpcprof.tools.torch import tables as tt
from hpcprof.tools.torch.analysis.load import RankTrace
from hpcprof.tools.torch.analysis.table import (
    Table,
    first_seen,
    group_stats,
    group_sum,
    isin,
    quantile,
    sort_descending,
    sorted_groups,
    texts,
)

if TYPE_CHECKING:
    import pandas as pd

COMP, COMM, MEM, OTHER = "COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER"
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")
KERNEL_CATS = ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy",
               "mtia_ccp_events")
LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC",
                "runFunction - job_prep_and_submit_for_execution")
MEMORY_LAUNCH_NAMES = ("cudaMemcpyAsync", "cudaMemsetAsync")
#: the runtime calls that enqueue work on a stream, for the queue length (HTA 0.5.0's
#: `get_runtime_launch_events_query`)
QUEUE_LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync",
                      "cudaMemsetAsync", "runFunction - job_prep_and_submit_for_execution", "hipLaunchKernel",
                      "hipExtModuleLaunchKernel", "hipMemsetAsync", "hipMemcpyAsync", "hipMemcpyWithStream")

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


def _types(gpu: Table) -> np.ndarray:
    """Kernel type of each GPU event (classified once per distinct name)."""
    kinds = np.array([kernel_type(n) for n in gpu.categories["name"]] + [OTHER], dtype=object)
    return kinds[gpu["name"]]


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


def _busy(gpu: Table, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    ts, end = gpu["ts"], gpu["end"]
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


def _is_in(table: Table, column: str, values: tuple[str, ...]) -> np.ndarray:
    """Whether each row's categorical `column` is one of `values`."""
    return np.array([v in values for v in table.categories[column]] + [False], dtype=bool)[table[column]]


def temporal_breakdown(traces: Sequence[RankTrace]) -> Table:
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
        ts, end = t.gpu["ts"], t.gpu["end"]
        by_start = _hta_order(ts)
        comp = by_start[(_types(t.gpu) == COMP)[by_start]]
        cs, ce = _merge(ts[comp], end[comp])
        compute = (ce - cs).sum()
        rows.append((idle, compute, kernel_time - compute - idle, kernel_time))
    values = np.array(rows, dtype=np.float64).reshape(-1, 4)
    kernel_time = values[:, 3]
    columns: dict[str, np.ndarray] = {"rank": np.array([t.rank for t in traces], dtype=np.int64)}
    for i, col in enumerate(("idle_time", "compute_time", "non_compute_time", "kernel_time")):
        columns[f"{col}(us)"] = values[:, i]
    for i, col in enumerate(("idle_time", "compute_time", "non_compute_time")):
        columns[f"{col}_pctg"] = np.round(100 * (values[:, i] / kernel_time), 2)
    return Table(columns)


def comm_comp_overlap(traces: Sequence[RankTrace]) -> Table:
    """% of communication time during which computation also runs, per rank (HTA
    `get_comm_comp_overlap`); NaN for a rank without communication kernels."""
    pctg = []
    for t in traces:
        types = _types(t.gpu)
        comm = _busy(t.gpu, types == COMM)
        running, length = _sweep([comm, _busy(t.gpu, types == COMP)])
        comm_time = (comm[1] - comm[0]).sum()
        ratio = length[running == 3].sum() / comm_time if comm_time else np.nan
        pctg.append(round(100 * ratio, 2))
    return Table({"rank": np.array([t.rank for t in traces], dtype=np.int64),
                  "comp_comm_overlap_pctg": np.array(pctg, dtype=np.float64)})


def _classify_idle(traces: Sequence[RankTrace], streams: Sequence[int] | None,
                   consecutive_kernel_delay: float) -> Table:
    """One row per kernel/memcpy/memset: rank, order (of its stream's first appearance), stream,
    idle_interval before it, idle_category (0 host_wait, 1 kernel_wait, 2 other)."""
    parts = []
    for t in traces:
        g = t.gpu.take(_is_in(t.gpu, "cat", KERNEL_CATS))
        if streams:
            g = g.take(np.isin(g["stream"], streams))
        pos, order = first_seen(g["stream"])   # streams in order of first appearance, as HTA lists them
        ts, end, launch = g["ts"], g["end"], g["launch_ts"]
        idx = np.lexsort((ts, pos))
        pos, ts, end, launch = pos[idx], ts[idx], end[idx], launch[idx]
        prev_end = np.concatenate(([np.nan], end[:-1]))
        prev_end[np.flatnonzero(np.diff(pos, prepend=-1))] = np.nan  # first event of a stream
        interval = ts - prev_end
        host_wait = launch > prev_end  # the CPU enqueued it after the stream had drained
        kernel_wait = ~host_wait & (interval < consecutive_kernel_delay)
        parts.append({"rank": np.full(len(pos), t.rank, dtype=np.int64), "order": pos,
                      "stream": order[pos], "idle_interval": interval,
                      "idle_category": np.select([host_wait, kernel_wait], [0, 1], 2)})
    return Table({k: np.concatenate([p[k] for p in parts]) for k in parts[0]})


def idle_time_breakdown(traces: Sequence[RankTrace], streams: Sequence[int] | None = None,
                        consecutive_kernel_delay: float = 30) -> Table:
    """GPU idle time per rank and stream split into host_wait / kernel_wait / other (HTA
    `get_idle_time_breakdown`, but for all ranks by default).

    Per stream, the gap before each kernel/memcpy/memset is host_wait when its CPU launch started
    after the previous event ended, else kernel_wait when shorter than `consecutive_kernel_delay`
    µs, else other. idle_time_ratio is the share of the stream's idle time (2 decimals).
    An event whose launch call is not in the trace is compared, as in HTA 0.5.0, with the start
    of the file's first event (see `load_trace`, option `ignore_unmatched_launches`).
    """
    rows = _classify_idle(traces, streams, consecutive_kernel_delay)
    rank, order, category = rows["rank"], rows["order"], rows["idle_category"]
    # groupby(["rank", "order", "stream", "idle_category"], sort=True): a stream's order names it
    keys = np.lexsort((category, order, rank))
    key = np.stack([rank[keys], order[keys], category[keys]], axis=1)
    new = np.ones(len(key), dtype=bool)
    new[1:] = np.any(key[1:] != key[:-1], axis=1)
    groups = np.empty(len(key), dtype=np.int64)
    groups[keys] = np.cumsum(new) - 1
    first = keys[new]
    idle_time = group_sum(groups, rows["idle_interval"], len(first))
    streams_of = np.unique(np.stack([rank[first], order[first]], axis=1), axis=0, return_inverse=True)[1].reshape(-1)
    total = group_sum(streams_of, idle_time, streams_of.max() + 1 if len(first) else 0)[streams_of]
    return Table({"rank": rank[first], "stream": rows["stream"][first],
                  "idle_category": texts(list(IDLE_CATEGORIES))[category[first]],
                  "idle_time": np.round(idle_time, 2),
                  "idle_time_ratio": np.round(idle_time / np.where(total != 0, total, np.nan), 2)})


def idle_interval_stats(traces: Sequence[RankTrace], streams: Sequence[int] | None = None,
                        consecutive_kernel_delay: float = 30) -> pd.DataFrame:
    """Statistics (pandas `describe`, 2 decimals) of the idle intervals per rank, stream and
    category, as HTA's `show_idle_interval_stats=True` (a DataFrame: pandas' own statistics)."""
    rows = _classify_idle(traces, streams, consecutive_kernel_delay).frame()
    df = (rows.groupby(["rank", "order", "stream", "idle_category"], sort=True)["idle_interval"]
          .describe().reset_index())
    df["idle_category"] = np.asarray(IDLE_CATEGORIES, dtype=object)[df["idle_category"]]
    return df.drop(columns="order").round(2)


def _inner_join(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(left rows, right rows) of pandas' inner merge on equal keys: the left rows in order, each
    with its matches in the right's order."""
    by_key = np.argsort(right, kind="stable")
    sorted_right = right[by_key]
    lo, hi = np.searchsorted(sorted_right, left, "left"), np.searchsorted(sorted_right, left, "right")
    counts = hi - lo
    left_rows = np.repeat(np.arange(len(left)), counts)
    offsets = np.arange(len(left_rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    return left_rows, by_key[np.repeat(lo, counts) + offsets]


def kernel_launch_stats(traces: Sequence[RankTrace], runtime_cutoff: float = 50,
                        launch_delay_cutoff: float = 100,
                        include_memory_events: bool = True) -> Table:
    """CPU launch duration, GPU duration and launch delay per correlation id (HTA
    `get_cuda_kernel_launch_stats`, for all ranks by default).

    launch_delay = max(0, gpu start − cpu end). HTA's plot buckets are columns: short_kernel
    (cpu_duration <= runtime_cutoff and gpu_duration < cpu_duration), runtime_outlier
    (cpu_duration > runtime_cutoff), launch_delay_outlier (launch_delay > launch_delay_cutoff).
    """
    names = LAUNCH_NAMES + (MEMORY_LAUNCH_NAMES if include_memory_events else ())
    parts = []
    for t in traces:
        launched = t.cpu["correlation"][_is_in(t.cpu, "name", names)]
        cpu = np.flatnonzero(isin(t.cpu["correlation"], launched))
        gpu = np.flatnonzero(isin(t.gpu["correlation"], launched))
        left, right = _inner_join(t.cpu["correlation"][cpu], t.gpu["correlation"][gpu])
        cpu, gpu = cpu[left], gpu[right]
        cpu_dur = t.cpu["dur"][cpu]
        delay = t.gpu["ts"][gpu] - t.cpu["ts"][cpu] - cpu_dur
        parts.append({"rank": np.full(len(cpu), t.rank, dtype=np.int64), "correlation": t.cpu["correlation"][cpu],
                      "cpu_duration": cpu_dur, "gpu_duration": t.gpu["dur"][gpu],
                      "launch_delay": np.where((delay >= 0) | np.isnan(delay), delay, 0.0)})
    columns = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    cpu_dur, gpu_dur = columns["cpu_duration"], columns["gpu_duration"]
    columns["short_kernel"] = (cpu_dur <= runtime_cutoff) & (gpu_dur < cpu_dur)
    columns["runtime_outlier"] = cpu_dur > runtime_cutoff
    columns["launch_delay_outlier"] = columns["launch_delay"] > launch_delay_cutoff
    return Table(columns)


def queue_length_series(traces: Sequence[RankTrace]) -> Table:
    """Queue length of each stream over time, per rank (HTA `get_queue_length_time_series`, for all
    ranks): +1 at each launch call (its stream: its GPU event's), -1 at the start of each GPU event,
    counting only launches whose GPU event is in the trace and GPU events whose launch is. One row per
    change: rank, ts (µs from the trace's origin), stream, queue_length."""
    parts = []
    for t in traces:
        launches = np.flatnonzero(_is_in(t.cpu, "name", QUEUE_LAUNCH_NAMES))
        launched = t.cpu["correlation"][launches]
        gpu = np.flatnonzero(isin(t.gpu["correlation"], launched))
        cpu_rows, gpu_rows = _inner_join(launched, t.gpu["correlation"][gpu])
        cpu, gpu_of_cpu = launches[cpu_rows], gpu[gpu_rows]
        kept = gpu[isin(t.gpu["correlation"][gpu], t.cpu["correlation"][cpu])]
        ts = np.concatenate([t.cpu["ts"][cpu], t.gpu["ts"][kept]])
        stream = np.concatenate([t.gpu["stream"][gpu_of_cpu], t.gpu["stream"][kept]])
        step = np.concatenate([np.ones(len(cpu), dtype=np.int64), -np.ones(len(kept), dtype=np.int64)])
        order = _hta_order(ts)
        ts, stream, step = ts[order], stream[order], step[order]
        by_stream = np.argsort(stream, kind="stable")  # groupby("stream"): sorted streams, time order kept
        ts, stream, step = ts[by_stream], stream[by_stream], step[by_stream]
        length = np.cumsum(step)
        if len(length):
            new = np.ones(len(stream), dtype=bool)
            new[1:] = stream[1:] != stream[:-1]
            first = np.flatnonzero(new)
            before = np.concatenate(([0], length[first[1:] - 1]))
            length -= np.repeat(before, np.diff(np.append(first, len(stream))))
        parts.append({"rank": np.full(len(ts), t.rank, dtype=np.int64), "ts": ts, "stream": stream,
                      "queue_length": length})
    return Table({k: np.concatenate([p[k] for p in parts]) for k in ("rank", "ts", "stream", "queue_length")})


def queue_length_summary(traces: Sequence[RankTrace]) -> pd.DataFrame:
    """Statistics of the queue length (pandas `describe` of its changes, HTA
    `get_queue_length_summary`) per rank and stream: count, mean, std, min, 25%, 50%, 75%, max."""
    frame = queue_length_series(traces).frame()
    df = frame[["rank", "stream", "queue_length"]].groupby(["rank", "stream"]).describe()
    df.columns = df.columns.droplevel(0)
    return df.reset_index()


def _analysed_types(include_memory_kernels: bool) -> list[str]:
    return [COMP, COMM] + ([MEM] if include_memory_kernels else [])


def kernel_type_breakdown(traces: Sequence[RankTrace], include_memory_kernels: bool = True,
                          per_rank: bool = False) -> Table:
    """GPU time by kernel type and by overlaps of types ("COMPUTATION overlapping
    COMMUNICATION", ...), summed over ranks as HTA's `get_gpu_kernel_breakdown` first table
    (`per_rank=True`: one table per rank, with a rank column). percentage: 1 decimal.

    Types whose overlap lasts 0 µs are left out (HTA may list them with sum 0, depending on
    sort order).
    """
    types = _analysed_types(include_memory_kernels)
    labels = [" overlapping ".join(k for i, k in enumerate(types) if mask >> i & 1)
              for mask in range(1 << len(types))]
    ranks, kinds, sums = [], [], []
    for t in traces:
        running, length = _sweep([_busy(t.gpu, _types(t.gpu) == k) for k in types])
        on = running > 0
        total = np.bincount(running[on], weights=length[on].astype(np.int64), minlength=1 << len(types))
        present = np.flatnonzero(total > 0)
        ranks += [t.rank] * len(present)
        kinds += [labels[i] for i in present]
        sums.append(total[present].astype(np.int64))
    rank, kind, value = np.array(ranks, dtype=np.int64), texts(kinds), np.concatenate(sums)
    # groupby(keys).sum() (kernel types in sorted order), then a stable sort by sum, descending (per rank)
    named = {k: i for i, k in enumerate(sorted(set(kinds)))}
    by_name = np.array([named[k] for k in kinds], dtype=np.int64)
    _, first, groups = np.unique(rank * len(named) + by_name if per_rank else by_name,
                                 return_index=True, return_inverse=True)
    groups = groups.reshape(-1)
    total_sum = np.bincount(groups, weights=value).astype(np.int64)
    rank, kind = rank[first], kind[first]
    order = np.lexsort((-total_sum, rank)) if per_rank else np.argsort(-total_sum, kind="stable")
    rank, kind, total_sum = rank[order], kind[order], total_sum[order]
    if per_rank:
        per = np.unique(rank, return_inverse=True)[1].reshape(-1)
        whole = np.bincount(per, weights=total_sum).astype(np.int64)[per]
    else:
        whole = np.full(len(total_sum), total_sum.sum())
    columns = {"rank": rank} if per_rank else {}
    return Table({**columns, "kernel_type": kind, "sum": total_sum,
                  "percentage": np.round(total_sum / whole * 100, 1)})


def kernel_breakdown(traces: Sequence[RankTrace], num_kernels: int = 10,
                     duration_ratio: float = 0.8,
                     include_memory_kernels: bool = True,
                     instance_stats: bool = False) -> Table:
    """Per rank and kernel type, sum/max/min/stddev/mean duration of each kernel name (HTA
    `get_gpu_kernel_breakdown` second table; stddev is the sample std, 0 for one instance).

    Beyond the `num_kernels` longest kernels of a type, or past the `duration_ratio` quantile of
    their cumulative time, kernels are collapsed into "others", and then, as HTA 0.5.0 does,
    every row is recomputed from per-kernel *totals*: a kept kernel shows max = min = mean = its
    sum and stddev 0, and "others" gives the statistics of its kernels' totals.
    `instance_stats=True` (a deviation from HTA, option `--instance-stats`) keeps each kept
    kernel's own statistics and gives "others" those of all its kernel instances. The sums are
    HTA's in both cases.

    The arithmetic is HTA's to the last bit: pandas groupby's aggregations over the same values in
    the same order (rows in file order, grouped by name in sorted order: table.group_stats, Kahan
    sums and Welford's stddev), and the collapse sorts by total with pandas' (unstable) sort.
    """
    parts = []
    for t in traces:
        codes, names = t.gpu["name"], t.gpu.categories["name"]
        by_name = np.argsort(names.astype(str), kind="stable")
        alphabetical = np.empty(len(names), dtype=np.int64)   # code -> rank of its name (groupby order)
        alphabetical[by_name] = np.arange(len(names))
        sorted_names = names[by_name]
        kinds, dur = _types(t.gpu), t.gpu["dur"].astype(np.float64)
        for kind in _analysed_types(include_memory_kernels):
            chosen = np.flatnonzero(kinds == kind)
            if len(chosen) == 0:
                continue
            present, group = np.unique(alphabetical[codes[chosen]], return_inverse=True)
            group, d = group.reshape(-1), dur[chosen]
            label = sorted_names[present]
            if len(present) > num_kernels:
                sums = group_sum(group, d, len(present))
                by_time = sort_descending(sums)
                label, sums = label[by_time], sums[by_time]
                keep = sums < 0                                    # HTA's "always false": negative totals stay
                cumulative = np.cumsum(sums)
                collapse = ~keep & (cumulative > quantile(cumulative, duration_ratio * 100.0 / 100))  # (HTA: percentile of ratio x 100)
                collapse |= ~keep & (np.arange(len(sums)) >= num_kernels)
                label = np.where(collapse, "others", label).astype(object)
                if instance_stats:
                    label, group = sorted_groups(label[np.argsort(by_time)][group])
                else:
                    label, group = sorted_groups(label)
                    d = sums
            stats = group_stats(group, d, len(label))
            parts.append({"name": label, **stats, "kernel_type": np.full(len(label), kind, dtype=object),
                          "rank": np.full(len(label), t.rank, dtype=np.int64)})
    columns = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = sorted(range(len(columns["name"])), key=lambda i: (columns["kernel_type"][i], columns["name"][i],
                                                               columns["rank"][i]))
    return Table({new: columns[old][order] for old, new in (
        ("name", "name"), ("sum", "sum (us)"), ("max", "max (us)"), ("min", "min (us)"), ("std", "stddev"),
        ("mean", "mean (us)"), ("kernel_type", "kernel_type"), ("rank", "rank"))})


def all_analyses(traces: Sequence[RankTrace]) -> dict[str, Table]:
    """HTA's five analyses with their defaults, on traces loaded once: temporal, overlap, idle,
    launch, kernels and kernel_types (per rank), each with a rank column."""
    return {
        tt.TEMPORAL.key: temporal_breakdown(traces),
        tt.OVERLAP.key: comm_comp_overlap(traces),
        tt.IDLE.key: idle_time_breakdown(traces),
        tt.LAUNCH.key: kernel_launch_stats(traces),
        tt.KERNELS.key: kernel_breakdown(traces),
        tt.KERNEL_TYPES.key: kernel_type_breakdown(traces, per_rank=True),
    }
