"""Analyses over one nsys export per rank: NCCL collectives, compute/communication
overlap, GPU idle gaps, GPU time per NVTX phase and Echo's slowdown.

Each analysis is a function from loaded GPU activity (`load_activity`) to a
DataFrame. Interval work is a sorted sweep (O(n log n)), never a pairwise join.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

from hpcprof.analysis.nsys.db import (
    KERNEL,
    MEMCPY,
    MEMSET,
    NVTX,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    RUNTIME,
    Export,
    NsysInputError,
    pid_of,
    process_of,
)
from hpcprof.analysis.nsys.loaders import nvtx_ranges
from hpcprof.analysis.nsys.schema import OLD
from hpcprof.ranks import rank_from_filename

NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z0-9]+?)(?:_|\(|$)")


def parse_rank_map(spec: str) -> dict[str, int]:
    """`--rank-map` text `FILE=RANK[,FILE=RANK...]` → {file name or path: rank}."""
    out: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, rank = item.rpartition("=")
        if not sep or not rank.strip().isdigit():
            raise ValueError(f"bad --rank-map entry {item!r}; expected FILE=RANK")
        out[name.strip()] = int(rank)
    return out


def collective_of(names: pd.Series) -> pd.Series:
    """Collective type of NCCL kernel names (AllGather, ReduceScatter, SendRecv, ...); NaN otherwise."""
    return names.str.extract(NCCL_KERNEL, expand=False)


def is_nccl(names: pd.Series) -> np.ndarray:
    """Communication kernels: names starting with `nccl` (the nsys recipes' rule)."""
    return names.str.startswith("nccl").to_numpy(dtype=bool)


@dataclass
class Activity:
    """GPU activity of all ranks: one row per kernel or memory operation."""

    ops: pd.DataFrame        # rank, file, pid, device, stream, start, end, kind, name, short, corr, gpid
    runtime: pd.DataFrame    # rank, file, gtid, gpid, start, end, corr (CUDA API calls)
    exports: dict[Path, Export]
    #: exports that failed while being read (damaged part of a file): path -> one-line reason.
    #: They are left out of every result; the other exports are still analysed.
    failed: dict[Path, str] = field(default_factory=dict)

    @property
    def kernels(self) -> pd.DataFrame:
        """Kernel rows only."""
        return self.ops[self.ops["kind"] == "kernel"]


def _int_columns(export: Export, table: str, columns: list[str]) -> dict[str, np.ndarray]:
    """Integer columns of `table` (NULL -> -1) as int64 arrays, by name: plain SQL, no
    SQLAlchemy statement to build and compile per read."""
    sql = ", ".join(f'coalesce("{c}", -1)' for c in columns)
    return dict(zip(columns, export.sql_ints(sql, table, "", len(columns)), strict=True))


def _file_ops(export: Export) -> pd.DataFrame:
    """Kernels, memcpys and memsets of one export (numpy columns, one frame built)."""
    columns = ("start", "end", "device", "stream", "gpid", "corr", "kind", "name", "short")
    parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}

    def add(table: dict[str, np.ndarray], kind: str, name: np.ndarray, short: np.ndarray) -> None:
        for column, source in (("start", "start"), ("end", "end"), ("device", "deviceId"), ("stream", "streamId"),
                               ("gpid", "globalPid"), ("corr", "correlationId")):
            parts[column].append(table[source])
        parts["kind"].append(np.full(len(table["start"]), kind, dtype=object))
        parts["name"].append(name)
        parts["short"].append(short)

    common = ["start", "end", "deviceId", "streamId", "globalPid", "correlationId"]
    if export.has(KERNEL):
        k = _int_columns(export, KERNEL, common + ["demangledName", "shortName"])
        short = np.where(k["shortName"] >= 0, k["shortName"], k["demangledName"])
        add(k, "kernel", export.strings(k["demangledName"]), export.strings(short))
    for table, label in ((MEMCPY, "memcpy"), (MEMSET, "memset")):
        if export.has(table):
            m = _int_columns(export, table, common)
            same = np.full(len(m["start"]), f"[CUDA {label}]", dtype=object)
            add(m, label, same, same)
    if not parts["start"]:
        ops = pd.DataFrame(columns=list(columns))
    else:
        ops = pd.DataFrame({c: np.concatenate(parts[c]) for c in columns})
        ops["kind"] = ops["kind"].astype("str")       # as a frame of string scalars infers it
    ops["pid"] = pid_of(ops["gpid"].to_numpy(np.int64))
    return ops


def _file_runtime(export: Export) -> pd.DataFrame:
    if not export.has(RUNTIME):
        return pd.DataFrame({c: np.empty(0, dtype=np.int64) for c in ("gtid", "gpid", "start", "end", "corr")})
    r = _int_columns(export, RUNTIME, ["globalTid", "start", "end", "correlationId"])
    return pd.DataFrame({"gtid": r["globalTid"], "gpid": process_of(r["globalTid"]), "start": r["start"],
                         "end": r["end"], "corr": r["correlationId"]})


def load_activity(exports: list[Export], rank_map: dict[str, int] | None = None) -> Activity:
    """GPU activity and CUDA API calls of each export, with the global rank of each row.

    Rank: `rank_map` (by path or file name), else `rank<N>` in the file name, else
    the next free rank in input order; an export holding several GPU processes
    (e.g. torchrun under one nsys) gives one rank per process, in pid order."""
    rank_map = rank_map or {}
    ops_parts, rt_parts = [], []
    taken: set[int] = set()
    pending: list[tuple[pd.DataFrame, pd.DataFrame]] = []
    failed: dict[Path, str] = {}
    for export in exports:
        try:
            ops, rt = _file_ops(export), _file_runtime(export)
        except NsysInputError as exc:
            failed[export.path] = str(exc)
            continue
        ops["file"] = rt["file"] = str(export.path)
        rank = rank_map.get(str(export.path), rank_map.get(export.path.name, rank_from_filename(export.path)))
        if rank is None:
            pending.append((ops, rt))
            continue
        ops["rank"], rt["rank"] = rank, rank
        taken.add(rank)
        ops_parts.append(ops)
        rt_parts.append(rt)
    next_rank = 0
    for ops, rt in pending:
        pids = np.unique(ops["pid"].to_numpy(np.int64)) if len(ops) else np.array([0])
        ranks = {}
        for pid in pids:
            while next_rank in taken:
                next_rank += 1
            ranks[int(pid)] = next_rank
            taken.add(next_rank)
        ops["rank"] = ops["pid"].map(ranks).astype(np.int64)
        rt_pid = pid_of(rt["gpid"].to_numpy(np.int64))
        rt["rank"] = pd.Series(rt_pid).map(ranks).fillna(-1).astype(np.int64).to_numpy()
        ops_parts.append(ops)
        rt_parts.append(rt)
    if not ops_parts:
        raise NsysInputError("; ".join(failed.values()) or "no export given")
    ops = pd.concat(ops_parts, ignore_index=True)
    for c in ("start", "end", "device", "stream", "gpid", "corr", "pid", "rank"):
        ops[c] = ops[c].astype(np.int64)
    ops["name"] = ops["name"].astype(object)
    ops["short"] = ops["short"].astype(object)
    return Activity(ops.sort_values(["rank", "start"], kind="stable").reset_index(drop=True),
                    pd.concat(rt_parts, ignore_index=True),
                    {e.path: e for e in exports if e.path not in failed}, failed)


# ---------------------------------------------------------------------------------------
# interval helpers


def merge_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (start, end) arrays."""
    if len(start) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    order = np.argsort(start, kind="stable")
    s, e = np.asarray(start)[order], np.asarray(end)[order]
    reach = np.maximum.accumulate(e)
    new = np.concatenate(([True], s[1:] > reach[:-1]))
    idx = np.flatnonzero(new)
    seg_end = np.maximum.reduceat(e, idx)
    return s[idx], seg_end


def covered(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of intervals."""
    s, e = merge_intervals(start, end)
    return int((e - s).sum())


def intersection(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Length of the intersection of two unions of disjoint sorted intervals (a sweep)."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return 0
    times = np.concatenate((a[0], a[1], b[0], b[1]))
    da = np.concatenate((np.ones(len(a[0])), -np.ones(len(a[1])), np.zeros(len(b[0]) + len(b[1]))))
    db = np.concatenate((np.zeros(len(a[0]) + len(a[1])), np.ones(len(b[0])), -np.ones(len(b[1]))))
    order = np.argsort(times, kind="stable")
    t = times[order]
    both = (np.cumsum(da[order]) > 0) & (np.cumsum(db[order]) > 0)
    return int((np.diff(t) * both[:-1]).sum())


def covered_within(union: tuple[np.ndarray, np.ndarray], start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each interval [start, end): how much of it the disjoint sorted `union` covers."""
    us, ue = union
    if len(us) == 0:
        return np.zeros(len(start), dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(ue - us)))

    def upto(t: np.ndarray) -> np.ndarray:            # covered length in (-inf, t)
        i = np.searchsorted(us, t, side="right")       # segments starting before or at t
        full = cum[np.maximum(i - 1, 0)]
        last = np.where(i > 0, np.clip(t - us[np.maximum(i - 1, 0)], 0, (ue - us)[np.maximum(i - 1, 0)]), 0)
        return np.where(i > 0, full + last, 0)

    return upto(np.asarray(end)) - upto(np.asarray(start))


# ---------------------------------------------------------------------------------------
# analyses


def nccl_per_rank(act: Activity) -> pd.DataFrame:
    """Per rank and collective type: count, total, mean, min, max (`scope == "rank"`)."""
    k = act.kernels
    k = k[is_nccl(k["short"]) | is_nccl(k["name"])].copy()
    k["collective"] = collective_of(k["short"]).fillna(collective_of(k["name"])).fillna("other")
    k["dur"] = k["end"] - k["start"]
    dur = k.groupby(["rank", "collective"])["dur"]  # one reduction a column: named aggregation costs ~10x
    per = pd.DataFrame({"count": dur.count(), "total_ns": dur.sum(), "mean_ns": dur.mean(), "min_ns": dur.min(),
                        "max_ns": dur.max()}).reset_index()
    per.insert(0, "scope", "rank")
    return per


def nccl_across_ranks(per: pd.DataFrame) -> pd.DataFrame:
    """The per-rank rows (`scope == "rank"`, any number of ranks, as nccl_per_rank gives them)
    followed by one row per collective across all ranks (`scope == "all"`) with the slowest rank;
    a `window` column (collect's tables) is kept, the row across ranks naming every rank's window.
    Only the per-rank rows are needed, so the ranks can be analysed one file at a time: the one
    reduction `hpcprof nsys nccl` and `collect`'s nsys_nccl table both use (mean_ns to 0.1 ns)."""
    per = per[per["scope"] == "rank"]
    windowed = "window" in per.columns
    rows = []
    for coll, g in per.groupby("collective", sort=True):
        slow = g.loc[g["total_ns"].idxmax()]
        total, count = int(g["total_ns"].sum()), int(g["count"].sum())
        row = {"scope": "all", "rank": pd.NA, "collective": coll, "count": count, "total_ns": total,
               "mean_ns": total / count, "min_ns": int(g["min_ns"].min()), "max_ns": int(g["max_ns"].max()),
               "slowest_rank": int(slow["rank"]), "slowest_total_ns": int(slow["total_ns"])}
        if windowed:
            row["window"] = "+".join(sorted(set(g["window"].astype(str))))
        rows.append(row)
    out = pd.concat([per, pd.DataFrame(rows)], ignore_index=True) if rows else per.copy()
    out["rank"] = out["rank"].astype("Int64")
    for c in ("slowest_rank", "slowest_total_ns"):
        out[c] = out[c].astype("Int64") if c in out else pd.array([pd.NA] * len(out), dtype="Int64")
    out["mean_ns"] = out["mean_ns"].astype(float).round(1)
    return out[["scope", "rank", *(["window"] if windowed else []), "collective", "count", "total_ns", "mean_ns",
                "min_ns", "max_ns", "slowest_rank", "slowest_total_ns"]]


def nccl_summary(act: Activity) -> pd.DataFrame:
    """Per collective type: count, total, mean, min, max per rank, and across ranks with the slowest rank."""
    return nccl_across_ranks(nccl_per_rank(act))


def overlap(act: Activity) -> pd.DataFrame:
    """Per rank and device: compute, communication, compute-during-communication and idle time.

    HTA's definition: overlap % = 100 · |compute ∩ comm| / |comm| (merged intervals);
    idle = span of all GPU activity − its union."""
    ops = act.ops
    rank, device = ops["rank"].to_numpy(np.int64), ops["device"].to_numpy(np.int64)
    start, end = ops["start"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
    kernel = ops["kind"].to_numpy(object) == "kernel"
    comm = kernel & (is_nccl(ops["short"]) | is_nccl(ops["name"]))
    compute = kernel & ~comm
    rows = []
    for r, dev in np.unique(np.stack((rank, device), axis=1), axis=0).tolist():   # as groupby: sorted
        mine = (rank == r) & (device == dev)
        comm_union = merge_intervals(start[mine & comm], end[mine & comm])
        comp_union = merge_intervals(start[mine & compute], end[mine & compute])
        comm_ns, comp_ns = int((comm_union[1] - comm_union[0]).sum()), int((comp_union[1] - comp_union[0]).sum())
        both = intersection(comp_union, comm_union)
        busy = covered(start[mine], end[mine])
        span = int(end[mine].max() - start[mine].min())
        rows.append({"rank": r, "device": dev, "compute_ns": comp_ns, "comm_ns": comm_ns, "overlap_ns": both,
                     "overlap_pct": round(100.0 * both / comm_ns, 2) if comm_ns else 0.0,
                     "idle_ns": span - busy, "span_ns": span})
    return pd.DataFrame(rows, columns=["rank", "device", "compute_ns", "comm_ns", "overlap_ns", "overlap_pct",
                                       "idle_ns", "span_ns"])


def _overhead(act: Activity) -> pd.DataFrame:
    """PROFILER_OVERHEAD intervals of every export: file, pid, start, end."""
    parts = []
    for path, export in act.exports.items():
        if export.has("PROFILER_OVERHEAD"):
            o = _int_columns(export, "PROFILER_OVERHEAD", ["start", "end", "globalTid"])
            parts.append(pd.DataFrame({"file": str(path), "pid": pid_of(o["globalTid"]),
                                       "start": o["start"], "end": o["end"]}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["file", "pid", "start", "end"])


def gaps(act: Activity, threshold_ns: int = 500_000_000, skip_overhead: bool = True) -> pd.DataFrame:
    """GPU idle gaps longer than `threshold_ns` per process and device (nsys's gpu_gaps rule:
    no gap before the first or after the last operation; with `skip_overhead`, gaps holding
    profiler overhead of the process are dropped)."""
    overhead = _overhead(act) if skip_overhead else pd.DataFrame(columns=["file", "pid", "start", "end"])
    rows = []
    for (rank, file, pid, dev), g in act.ops.groupby(["rank", "file", "pid", "device"], sort=True):
        g = g.sort_values("start", kind="stable")
        start, end = g["start"].to_numpy(), g["end"].to_numpy()
        reach = np.maximum.accumulate(end)
        prev_end, next_start = reach[:-1], start[1:]
        idx = np.flatnonzero(next_start - prev_end > threshold_ns)
        if len(idx) == 0:
            continue
        o = overhead[(overhead["file"] == file) & (overhead["pid"] == pid)]
        # the operation before a gap is the one that reached the furthest end so far
        last_reach = np.maximum.accumulate(np.where(end == reach, np.arange(len(end)), 0))
        prev_op = g["short"].to_numpy()[last_reach[idx]]
        for j, i in enumerate(idx):
            gs, ge = int(prev_end[i]), int(next_start[i])
            if len(o) and ((o["start"] < ge) & (o["end"] > gs)).any():
                continue
            rows.append({"rank": rank, "pid": pid, "device": dev, "start_ns": gs, "end_ns": ge,
                         "duration_ns": ge - gs, "before": prev_op[j], "after": g["short"].to_numpy()[i + 1]})
    return pd.DataFrame(rows, columns=["rank", "pid", "device", "start_ns", "end_ns", "duration_ns", "before",
                                       "after"])


def process_ranges(export: Export) -> tuple[pd.DataFrame, np.ndarray]:
    """The push/pop and start/end NVTX ranges of `export` with their times and names
    (loaders.nvtx_ranges): read once per export, shared by the window, phases and critical-path
    analyses; each caller gets its own copy of the ranges."""
    read = export.memo("process_ranges", lambda: nvtx_ranges(export, NVTX_PUSHPOP + NVTX_STARTEND, OLD,
                                                            with_times=True))
    ranges, names = cast(tuple[pd.DataFrame, np.ndarray], read)
    return ranges.copy(), names


def call_op_codes(act: Activity) -> tuple[np.ndarray, np.ndarray]:
    """One code per (file, process, correlation id): that of each CUDA API call of `act`, and that of
    each GPU operation (equal codes: the call launched the operation)."""
    rt, ops = act.runtime, act.ops
    files = pd.factorize(np.concatenate((rt["file"].to_numpy(object), ops["file"].to_numpy(object))))[0]
    keys = np.stack((files, np.concatenate((rt["gpid"].to_numpy(np.int64), ops["gpid"].to_numpy(np.int64))),
                     np.concatenate((rt["corr"].to_numpy(np.int64), ops["corr"].to_numpy(np.int64)))), axis=1)
    code = np.unique(keys, axis=0, return_inverse=True)[1].reshape(-1)
    return code[:len(rt)], code[len(rt):]


def _launched_ops(act: Activity) -> dict[str, np.ndarray]:
    """Each CUDA API call with each GPU operation it launched (same file, process and correlation id):
    the call's file, gtid, gpid and start, then the operation's start_op, end_op, kind and rank, as
    numpy columns; in call order, an operation order within a call (pandas' inner merge, as a sorted
    search: no hash join to build)."""
    rt, ops = act.runtime, act.ops
    call_code, op_code = call_op_codes(act)
    order = np.argsort(op_code, kind="stable")
    lo = np.searchsorted(op_code[order], call_code, side="left")
    counts = np.searchsorted(op_code[order], call_code, side="right") - lo
    calls = np.repeat(np.arange(len(rt)), counts)
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    launched = order[np.repeat(lo, counts) + within]
    out = {c: rt[c].to_numpy()[calls] for c in ("file", "gtid", "gpid", "start")}
    for col, name in (("start", "start_op"), ("end", "end_op"), ("kind", "kind"), ("rank", "rank")):
        out[name] = ops[col].to_numpy()[launched]
    return out


def range_instances(act: Activity) -> pd.DataFrame:
    """Every NVTX range instance of every export with its GPU projection, as nsys's NVTX GPU
    projection attributes work: the GPU operations (kernels, memcpys, memsets) whose launching
    CUDA API call starts inside the range, on the range's thread for push/pop ranges, in its
    process for start/end ranges.

    Columns: rank, range, start, end (CPU ns), range_ns, gpu_ops, kernels, gpu_ns (Σ kernel
    durations), proj_start, proj_end (first op start, last op end; 0 without ops), proj_ns."""
    launches = _launched_ops(act)
    is_kernel = launches["kind"] == "kernel"
    kernel_ns = np.where(is_kernel, launches["end_op"] - launches["start_op"], 0)
    rows: list[dict[str, np.ndarray]] = []
    for path, export in act.exports.items():
        try:
            if not export.has(NVTX):
                continue
            ranges, names = process_ranges(export)
        except NsysInputError as exc:
            act.failed[path] = str(exc)
            continue
        if ranges.empty:
            continue
        range_name = names[ranges["name"].to_numpy()]
        range_start, duration = ranges["start"].to_numpy(np.int64), ranges["duration"].to_numpy()
        range_end = ranges["end"].to_numpy()          # as recorded (an unterminated range's is -1)
        gtid = ranges["globalTid"].to_numpy(np.int64)
        pushpop = np.isin(ranges["eventType"], NVTX_PUSHPOP)
        mine = launches["file"] == str(path)
        call_start, first_op, last_op = launches["start"][mine], launches["start_op"][mine], launches["end_op"][mine]
        call_kernel, call_kernel_ns, call_rank = is_kernel[mine], kernel_ns[mine], launches["rank"][mine]
        for selected, owner_of_range, owner_of_call in ((pushpop, gtid, launches["gtid"][mine]),
                                                        (~pushpop, process_of(gtid), launches["gpid"][mine])):
            chosen = np.flatnonzero(selected)
            by_owner = chosen[np.argsort(owner_of_range[chosen], kind="stable")]   # groupby: owners sorted
            calls_by_owner = np.lexsort((call_start, owner_of_call))                 # owner, then start; stable
            owners_sorted = owner_of_call[calls_by_owner]
            for owner in np.unique(owner_of_range[chosen]):
                group = by_owner[owner_of_range[by_owner] == owner]
                a, b = np.searchsorted(owners_sorted, owner, "left"), np.searchsorted(owners_sorted, owner, "right")
                calls = calls_by_owner[a:b]
                rank = int(call_rank[calls[0]]) if len(calls) else _rank_of_process(act, str(path), int(owner))
                t = call_start[calls]
                cum = np.concatenate(([0], np.cumsum(call_kernel_ns[calls])))
                kcum = np.concatenate(([0], np.cumsum(call_kernel[calls])))
                os_, oe = first_op[calls], last_op[calls]
                lo = np.searchsorted(t, range_start[group], side="left")
                hi = np.searchsorted(t, range_end[group], side="right")
                first = np.array([os_[x:y].min() if y > x else 0 for x, y in zip(lo, hi, strict=True)], dtype=np.int64)
                last = np.array([oe[x:y].max() if y > x else 0 for x, y in zip(lo, hi, strict=True)], dtype=np.int64)
                rows.append({"rank": np.full(len(group), rank, dtype=np.int64), "range": range_name[group],
                             "start": range_start[group], "end": range_start[group] + duration[group].astype(np.int64),
                             "range_ns": duration[group], "gpu_ops": hi - lo, "kernels": kcum[hi] - kcum[lo],
                             "gpu_ns": cum[hi] - cum[lo], "proj_start": first, "proj_end": last,
                             "proj_ns": last - first})
    cols = ["rank", "range", "start", "end", "range_ns", "gpu_ops", "kernels", "gpu_ns", "proj_start", "proj_end",
            "proj_ns"]
    if not rows:
        return pd.DataFrame(columns=cols)
    return pd.DataFrame({c: np.concatenate([r[c] for r in rows]) for c in cols})


def phases(act: Activity, instances: pd.DataFrame | None = None) -> pd.DataFrame:
    """GPU work under each NVTX range, per rank (range_instances summed per range name; pass
    `instances` to sum a selection, e.g. those inside the measured window).

    Columns: instances, gpu_ops, kernels, gpu_time_ns (Σ kernel durations), proj_time_ns
    (Σ over instances of last op end − first op start, nsys's "Total Proj Time") and
    range_time_ns (Σ CPU durations of the range)."""
    r = range_instances(act) if instances is None else instances
    cols = ["rank", "range", "instances", "gpu_ops", "kernels", "gpu_time_ns", "proj_time_ns", "range_time_ns"]
    r = r[r["range"].notna()] if len(r) else r
    if r.empty:
        return pd.DataFrame(columns=cols)
    # a sort and np.add.reduceat: pandas' named aggregation costs ~10 ms a call on small frames
    codes, names = pd.factorize(r["range"].to_numpy(object), sort=True)
    rank = r["rank"].to_numpy(np.int64)
    order = np.lexsort((codes, rank))
    rank, codes = rank[order], codes[order]
    first = np.flatnonzero(np.concatenate(([True], (rank[1:] != rank[:-1]) | (codes[1:] != codes[:-1]))))
    out = {"rank": rank[first], "range": np.asarray(names, dtype=object)[codes[first]],
           "instances": np.diff(np.append(first, len(order))).astype(np.int64)}
    for name, source in (("gpu_ops", "gpu_ops"), ("kernels", "kernels"), ("gpu_time_ns", "gpu_ns"),
                         ("proj_time_ns", "proj_ns"), ("range_time_ns", "range_ns")):
        out[name] = np.add.reduceat(r[source].to_numpy(np.int64)[order], first)
    return pd.DataFrame(out, columns=cols)


def _rank_of_process(act: Activity, file: str, owner: int) -> int:
    """Rank of the process owning a globalTid/globalPid in `file` (first rank of the file if unknown)."""
    ops = act.ops[act.ops["file"] == file]
    match = ops[ops["gpid"] == process_of(np.array([owner]))[0]]
    return int((match if len(match) else ops)["rank"].iloc[0]) if len(ops) else -1


def compute_kernels(act: Activity) -> pd.DataFrame:
    """Non-NCCL kernels with duration > 0, per rank and device, with their overlap with
    NCCL kernels on the same device: occurrence (index of the name within the window),
    duration_ns, overlap_ns and overlap_ratio = overlap/duration."""
    out = []
    for (rank, dev), g in act.kernels.groupby(["rank", "device"], sort=True):
        comm_mask = is_nccl(g["short"]) | is_nccl(g["name"])
        comm = merge_intervals(g["start"].to_numpy()[comm_mask], g["end"].to_numpy()[comm_mask])
        c = g[~comm_mask & (g["end"] > g["start"]).to_numpy()].sort_values("start", kind="stable")
        ov = covered_within(comm, c["start"].to_numpy(), c["end"].to_numpy())
        dur = (c["end"] - c["start"]).to_numpy()
        out.append(pd.DataFrame({"rank": rank, "device": dev, "name": c["name"].to_numpy(),
                                 "short": c["short"].to_numpy(), "occurrence": c.groupby("name").cumcount().to_numpy(),
                                 "start": c["start"].to_numpy(), "duration_ns": dur, "overlap_ns": ov,
                                 "overlap_ratio": ov / dur}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(
        columns=["rank", "device", "name", "short", "occurrence", "start", "duration_ns", "overlap_ns", "overlap_ratio"])


def slowdown(baseline: Activity, distributed: Activity) -> pd.DataFrame:
    """Echo's slowdown of each compute kernel of each distributed device against the baseline:
    slowdown = (dur_N − dur_1) / (overlap_ratio · dur_1), 0 without overlap.

    Kernels are matched by name and occurrence index (k-th launch of that name in the
    captured window), per device: the baseline device with the same id, or the baseline's
    only device. Kernels present on one side only are listed with status
    `baseline only` / `distributed only`."""
    base = compute_kernels(baseline)
    dist = compute_kernels(distributed)
    base_devices = sorted(base["device"].unique())
    parts = []
    for (rank, dev), d in dist.groupby(["rank", "device"], sort=True):
        bdev = dev if dev in base_devices else (base_devices[0] if len(base_devices) == 1 else None)
        b = base[base["device"] == bdev] if bdev is not None else base.iloc[0:0]
        m = d.merge(b[["name", "occurrence", "duration_ns"]].rename(columns={"duration_ns": "baseline_ns"}),
                    on=["name", "occurrence"], how="outer", indicator=True)
        m["rank"], m["device"] = rank, dev
        m["status"] = m["_merge"].map({"both": "matched", "left_only": "distributed only",
                                       "right_only": "baseline only"}).astype(object)
        m["short"] = m["short"].fillna(m["name"].map(dict(zip(b["name"], b["short"], strict=True))))
        parts.append(m.drop(columns="_merge"))
    cols = ["rank", "device", "name", "short", "occurrence", "status", "baseline_ns", "duration_ns", "overlap_ns",
            "overlap_ratio", "slowdown"]
    if not parts:
        return pd.DataFrame(columns=cols)
    r = pd.concat(parts, ignore_index=True)
    ratio = r["overlap_ratio"].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        sd = (r["duration_ns"].astype(float) - r["baseline_ns"].astype(float)) / (ratio * r["baseline_ns"].astype(float))
    r["slowdown"] = np.where(r["status"] != "matched", np.nan, np.where(ratio > 0, sd, 0.0))
    for c in ("baseline_ns", "duration_ns", "overlap_ns"):
        r[c] = r[c].astype("Int64")
    r["order"] = r["status"].map({"matched": 0, "distributed only": 1, "baseline only": 2})
    r = r.sort_values(["rank", "device", "order", "start", "name", "occurrence"], kind="stable", na_position="last")
    return r[cols].reset_index(drop=True)
