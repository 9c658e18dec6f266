"""Analyses over one nsys export per rank: NCCL collectives, compute/communication
overlap, GPU idle gaps, GPU time per NVTX phase and Echo's slowdown.

Each analysis is a function from loaded GPU activity (activity.load_activity) to numpy
columns (`*_columns`: what collect turns into Arrow tables, no frame on the way) and a
DataFrame of them (the commands). Interval work is a sorted sweep (O(n log n)), never a
pairwise join.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from hpcprof.analysis.nccl import collective_kind
from hpcprof.analysis.ranges import covered, covered_within, intersection, merge_intervals, range_reduce
from hpcprof.tools.nsys.analysis.activity import (  # noqa: F401  (Activity, load_activity, is_nccl: re-exported)
    Activity,
    call_op_codes,
    is_nccl,
    load_activity,
    per_distinct,
)
from hpcprof.tools.nsys.stats import nvtx
from hpcprof.tools.nsys.stats.arrays import Columns, group_starts, no_rows, one_of, rows_of
from hpcprof.tools.nsys.stats.db import NVTX, NVTX_PUSHPOP, Export, NsysInputError, pid_of, process_of
from hpcprof.tools.nsys.stats.schema import OLD


def parse_rank_map(spec: str) -> dict[str, int]:
    """`--rank-map` text `FILE=RANK[,FILE=RANK...]` → {file name or path: rank}."""
    out: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, rank = item.rpartition("=")
        if not sep or not rank.strip().isdigit():
            raise ValueError(f"bad --rank-map entry {item!r}; expected FILE=RANK")
        out[name.strip()] = int(rank)
    return out


# ---------------------------------------------------------------------------------------
# analyses


def collectives(short: np.ndarray, name: np.ndarray) -> np.ndarray:
    """Collective type of each NCCL kernel (AllGather, ReduceScatter, SendRecv, ...: short name first,
    then the full name, else `other`: names.collective_of); one regex match per distinct name."""
    out = per_distinct(short, collective_kind)
    missing = np.flatnonzero(per_distinct(out, lambda k: k is None, bool))
    if len(missing):
        by_name = per_distinct(np.asarray(name)[missing], lambda n: collective_kind(n) or "other")
        out[missing] = by_name
    return out


def nccl_rank_columns(act: Activity) -> Columns:
    """Per rank and collective type: count, total, mean, min, max (`scope == "rank"`), as columns
    (scope and collective as object arrays of text)."""
    comm = act.column("comm")
    rank = act.column("rank")[comm]
    coll = collectives(act.column("short")[comm], act.column("name")[comm])
    dur = (act.column("end") - act.column("start"))[comm]
    codes, names = pd.factorize(coll, sort=True)
    order, first = group_starts(rank, codes)
    dur = dur[order]
    count = np.diff(np.append(first, len(order))).astype(np.int64)
    some = len(first) > 0
    total = np.add.reduceat(dur, first) if some else np.empty(0, dtype=np.int64)
    scope = np.empty(len(first), dtype=object)
    scope.fill("rank")
    return {"scope": scope, "rank": rank[order][first], "collective": np.asarray(names, dtype=object)[codes[order][first]],
            "count": count, "total_ns": total, "mean_ns": total / count if some else np.empty(0),
            "min_ns": np.minimum.reduceat(dur, first) if some else np.empty(0, dtype=np.int64),
            "max_ns": np.maximum.reduceat(dur, first) if some else np.empty(0, dtype=np.int64)}


def nccl_per_rank(act: Activity) -> pd.DataFrame:
    """nccl_rank_columns as a frame (scope and collective of pandas' str dtype)."""
    cols = nccl_rank_columns(act)
    text = "str" if len(cols["rank"]) else object
    return pd.DataFrame(cols | {"scope": pd.array(cols["scope"], dtype="str"),
                                "collective": pd.array(cols["collective"], dtype=text)})


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


OVERLAP_COLUMNS = ["rank", "device", "compute_ns", "comm_ns", "overlap_ns", "overlap_pct", "idle_ns", "span_ns"]


def overlap_columns(act: Activity) -> Columns:
    """Per rank and device: compute, communication, compute-during-communication and idle time.

    HTA's definition: overlap % = 100 · |compute ∩ comm| / |comm| (merged intervals);
    idle = span of all GPU activity − its union."""
    rank, device = act.column("rank"), act.column("device")
    start, end = act.column("start"), act.column("end")
    comm = act.column("comm")
    compute = act.column("kernel") & ~comm
    order, first = group_starts(rank, device)                # as groupby: sorted
    rows = []
    for a, b in zip(first.tolist(), np.append(first[1:], len(order)).tolist(), strict=True):
        mine = order[a:b]
        s, e, c, k = start[mine], end[mine], comm[mine], compute[mine]
        comm_union, comp_union = merge_intervals(s[c], e[c]), merge_intervals(s[k], e[k])
        comm_ns, comp_ns = int((comm_union[1] - comm_union[0]).sum()), int((comp_union[1] - comp_union[0]).sum())
        both = intersection(comp_union, comm_union)
        busy, span = covered(s, e), int(e.max() - s.min())
        rows.append((int(rank[mine[0]]), int(device[mine[0]]), comp_ns, comm_ns, both,
                     round(100.0 * both / comm_ns, 2) if comm_ns else 0.0, span - busy, span))
    if not rows:
        return no_rows(OVERLAP_COLUMNS)
    return {c: np.array(v, dtype=np.float64 if c == "overlap_pct" else np.int64)
            for c, v in zip(OVERLAP_COLUMNS, zip(*rows, strict=True), strict=True)}


def overlap(act: Activity) -> pd.DataFrame:
    """overlap_columns as a frame."""
    return pd.DataFrame(overlap_columns(act))


def _overhead(act: Activity) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    """PROFILER_OVERHEAD intervals of every export per (file, pid): starts (sorted) and the
    running maximum of their ends."""
    out = {}
    for path, export in act.exports.items():
        if export.has("PROFILER_OVERHEAD"):
            o = export.int_columns("PROFILER_OVERHEAD", ["start", "end", "globalTid"])
            pid = pid_of(o["globalTid"])
            for p in np.unique(pid).tolist():
                mine = np.flatnonzero(pid == p)
                mine = mine[np.argsort(o["start"][mine], kind="stable")]
                out[(str(path), p)] = (o["start"][mine], np.maximum.accumulate(o["end"][mine]))
    return out


GAP_COLUMNS = ["rank", "pid", "device", "start_ns", "end_ns", "duration_ns", "before", "after"]


def gaps(act: Activity, threshold_ns: int = 500_000_000, skip_overhead: bool = True) -> pd.DataFrame:
    """gap_columns as a frame."""
    return pd.DataFrame(gap_columns(act, threshold_ns, skip_overhead))


def gap_columns(act: Activity, threshold_ns: int = 500_000_000, skip_overhead: bool = True) -> Columns:
    """GPU idle gaps longer than `threshold_ns` per process and device (nsys's gpu_gaps rule:
    no gap before the first or after the last operation; with `skip_overhead`, gaps holding
    profiler overhead of the process are dropped)."""
    overhead: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] | None = None    # read at the first gap
    rank, pid, device = act.column("rank"), act.column("pid"), act.column("device")
    file_code, files = pd.factorize(act.column("file"), sort=True)
    order, first = group_starts(rank, file_code, pid, device)     # the groups as groupby's
    parts = []
    for a, b in zip(first.tolist(), np.append(first[1:], len(order)).tolist(), strict=True):
        g = order[a:b]
        g = g[np.argsort(act.column("start")[g], kind="stable")]
        start, end, short = act.column("start")[g], act.column("end")[g], act.column("short")[g]
        reach = np.maximum.accumulate(end)
        prev_end, next_start = reach[:-1], start[1:]
        idx = np.flatnonzero(next_start - prev_end > threshold_ns)
        if len(idx) == 0:
            continue
        # the operation before a gap is the one that reached the furthest end so far
        last_reach = np.maximum.accumulate(np.where(end == reach, np.arange(len(end)), 0))
        gs, ge = prev_end[idx], next_start[idx]
        if overhead is None:
            overhead = _overhead(act) if skip_overhead else {}
        o = overhead.get((str(files[file_code[g[0]]]), int(pid[g[0]])))
        if o is not None:                  # an overhead interval starting before the gap's end ends after its start
            before = np.searchsorted(o[0], ge, side="left")
            held = (before > 0) & (o[1][np.maximum(before - 1, 0)] > gs)
            idx, gs, ge = idx[~held], gs[~held], ge[~held]
        n = len(idx)
        parts.append({"rank": np.full(n, rank[g[0]]), "pid": np.full(n, pid[g[0]]), "device": np.full(n, device[g[0]]),
                      "start_ns": gs, "end_ns": ge, "duration_ns": ge - gs, "before": short[last_reach[idx]],
                      "after": short[idx + 1]})
    if not any(len(p["rank"]) for p in parts):
        return no_rows(GAP_COLUMNS)
    return {c: np.concatenate([p[c] for p in parts]) for c in GAP_COLUMNS}


def process_ranges(export: Export) -> tuple[Columns, np.ndarray]:
    """The push/pop and start/end NVTX ranges of `export` with their times and 2022.4's names
    (nvtx.process_ranges: read once per export, shared by the window, phases and
    critical-path analyses)."""
    return nvtx.process_ranges(export, OLD)


def read_process_ranges(act: Activity) -> None:
    """process_ranges of the activity's exports not read yet, read together (nvtx.read_process_ranges)."""
    nvtx.read_process_ranges(list(act.exports.values()), (OLD,))


def exports_ranges(act: Activity) -> Iterator[tuple[Path, Columns, np.ndarray]]:
    """(path, ranges, names) of each export of the activity that has NVTX ranges (process_ranges,
    read together first); an export that fails is named in act.failed and the others analysed."""
    read_process_ranges(act)
    for path, export in act.exports.items():
        try:
            if not export.has(NVTX):
                continue
            ranges, names = process_ranges(export)
        except NsysInputError as exc:
            act.failed[path] = str(exc)
            continue
        yield path, ranges, names


def _launched_ops(act: Activity) -> dict[str, np.ndarray]:
    """Each CUDA API call with each GPU operation it launched (same file, process and correlation id):
    the call's file, gtid, gpid and start, then the operation's start_op, end_op, kind and rank, as
    numpy columns; in call order, an operation order within a call (pandas' inner merge, as counts
    and offsets per code: no hash join to build)."""
    call_code, op_code = call_op_codes(act)
    size = int(max(call_code.max(initial=-1), op_code.max(initial=-1))) + 1
    order = np.argsort(op_code, kind="stable")
    per_code = np.bincount(op_code, minlength=size)
    offset = np.concatenate(([0], np.cumsum(per_code)[:-1]))
    lo, counts = offset[call_code], per_code[call_code]
    calls = np.repeat(np.arange(len(call_code)), counts)
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    launched = order[np.repeat(lo, counts) + within]
    out = {c: act.call(c)[calls] for c in ("file", "gtid", "gpid", "start")}
    for col, name in (("start", "start_op"), ("end", "end_op"), ("kind", "kind"), ("rank", "rank")):
        out[name] = act.column(col)[launched]
    return out


INSTANCE_COLUMNS = ["rank", "range", "start", "end", "range_ns", "gpu_ops", "kernels", "gpu_ns", "proj_start",
                    "proj_end", "proj_ns"]


def range_instances(act: Activity) -> pd.DataFrame:
    """instance_columns as a frame."""
    return instance_frame(instance_columns(act))


def instance_frame(columns: Columns) -> pd.DataFrame:
    """Range instance columns as a frame (no rows: a frame of the column names, of no types)."""
    return pd.DataFrame(columns) if len(columns["rank"]) else pd.DataFrame(columns=INSTANCE_COLUMNS)


def instance_columns(act: Activity) -> Columns:
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
    for path, ranges, names in exports_ranges(act):
        if not len(ranges["start"]):
            continue
        range_name = names[ranges["name"]]
        range_start, duration = ranges["start"].astype(np.int64, copy=False), ranges["duration"]
        range_end = ranges["end"]
        gtid = ranges["globalTid"].astype(np.int64, copy=False)
        pushpop = one_of(ranges["eventType"], NVTX_PUSHPOP)
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
                first = range_reduce(os_.astype(np.int64), lo, hi, np.minimum, 0)
                last = range_reduce(oe.astype(np.int64), lo, hi, np.maximum, 0)
                rows.append({"rank": np.full(len(group), rank, dtype=np.int64), "range": range_name[group],
                             "start": range_start[group], "end": range_start[group] + duration[group].astype(np.int64),
                             "range_ns": duration[group], "gpu_ops": hi - lo, "kernels": kcum[hi] - kcum[lo],
                             "gpu_ns": cum[hi] - cum[lo], "proj_start": first, "proj_end": last,
                             "proj_ns": last - first})
    if not rows:
        return {c: np.empty(0, dtype=object if c == "range" else np.int64) for c in INSTANCE_COLUMNS}
    return {c: np.concatenate([r[c] for r in rows]) for c in INSTANCE_COLUMNS}


PHASE_COLUMNS = ["rank", "range", "instances", "gpu_ops", "kernels", "gpu_time_ns", "proj_time_ns", "range_time_ns"]


def phases(act: Activity, instances: pd.DataFrame | Columns | None = None) -> pd.DataFrame:
    """phase_columns as a frame."""
    return pd.DataFrame(phase_columns(act, instances))


def phase_columns(act: Activity, instances: pd.DataFrame | Columns | None = None) -> Columns:
    """GPU work under each NVTX range, per rank (range instances summed per range name; pass
    `instances` (instance_columns or range_instances) to sum a selection, e.g. those inside the
    measured window).

    Columns: instances, gpu_ops, kernels, gpu_time_ns (Σ kernel durations), proj_time_ns
    (Σ over instances of last op end − first op start, nsys's "Total Proj Time") and
    range_time_ns (Σ CPU durations of the range)."""
    r = instance_columns(act) if instances is None else instances
    # a sort and np.add.reduceat: pandas' named aggregation costs ~10 ms a call on small frames
    some = rows_of(r) > 0
    codes, names = pd.factorize(np.asarray(r["range"], dtype=object), sort=True) if some else (np.empty(0, np.int64), [])
    named = np.flatnonzero(codes >= 0)                   # instances of a range without a name left out
    if not len(named):
        return no_rows(PHASE_COLUMNS)
    rank = np.asarray(r["rank"], dtype=np.int64)[named]
    order = np.lexsort((codes[named], rank))
    rank, codes = rank[order], codes[named][order]
    first = np.flatnonzero(np.concatenate(([True], (rank[1:] != rank[:-1]) | (codes[1:] != codes[:-1]))))
    out = {"rank": rank[first], "range": np.asarray(names, dtype=object)[codes[first]],
           "instances": np.diff(np.append(first, len(order))).astype(np.int64)}
    for name, source in (("gpu_ops", "gpu_ops"), ("kernels", "kernels"), ("gpu_time_ns", "gpu_ns"),
                         ("proj_time_ns", "proj_ns"), ("range_time_ns", "range_ns")):
        out[name] = np.add.reduceat(np.asarray(r[source], dtype=np.int64)[named][order], first)
    return out


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
