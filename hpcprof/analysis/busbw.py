"""Bus bandwidth per collective and message size: nccl-tests' algbw and busbw of every NCCL
collective a profile records with its size, for any workload (DDP's all-reduce buckets, FSDP's
all-gathers and reduce-scatters, a tensor-parallel layer's collectives).

One collective instance is one NCCL kernel on one rank: its collective type, process group (and
that group's size), message bytes (nccl-tests' `size`: AllGather's whole output, ReduceScatter's
whole input, the buffer of the others) and the kernel's duration. Per rank, process group,
collective and message-size bucket (powers of two: [2^k, 2^(k+1)) bytes) over the measured window:

* `bytes` and `median_ns`: the median message size and the median kernel time of the bucket's
  instances; `algbw` = bytes / median_ns, `busbw` = algbw · factor (nccl-tests' PERFORMANCE.md):
  AllReduce 2(n−1)/n; AllGather, ReduceScatter, AllToAll (n−1)/n; Broadcast, Reduce, SendRecv 1 (n:
  the group's ranks); in GB/s (10^9 bytes/s). Every row's columns agree: its bytes over its time
  are its algbw, its algbw times the factor its busbw;
* across ranks (`scope == "all"`): bytes and median_ns the median of the ranks' (algbw and busbw
  from them, as above), and the slowest rank's busbw against the fastest rank's (`skew_pct`). A rank's kernel time includes its wait for
  the last rank to arrive, so the rank that arrives last shows the highest busbw.

The profiles give the instances (hpcprof.tools.torch.analysis.collectives: Kineto's `record_param_comms`
sizes; hpcprof.tools.nsys.analysis.collectives: NCCL's NVTX payloads); this module is the arithmetic.
"""

from __future__ import annotations

import functools
import math
import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from collections.abc import Mapping

    from hpcprof.analysis.collector import Log, ReadTable

#: one collective instance (a kernel of a rank): the columns the profiles' readers give
INSTANCE_COLUMNS = ["rank", "group", "group_size", "collective", "dtype", "bytes", "start_ns", "end_ns"]
#: the busbw tables' columns (hpcprof.tools.nsys.tables.BUSBW, hpcprof.tools.torch.tables.BUSBW)
COLUMNS = ["scope", "rank", "window", "group", "group_size", "collective", "bucket", "bucket_lo", "bucket_hi",
           "count", "bytes", "total_bytes", "median_ns", "algbw_gbps", "busbw_gbps",
           "slowest_rank", "slowest_busbw_gbps", "fastest_rank", "fastest_busbw_gbps", "skew_pct", "note"]
#: COLUMNS by type: nullable integers (a row across ranks has no rank), floats (rounded to 4 places), texts
INT_COLUMNS = ("rank", "group_size", "bucket_lo", "bucket_hi", "count", "slowest_rank", "fastest_rank")
FLOAT_COLUMNS = ("bytes", "total_bytes", "median_ns", "algbw_gbps", "busbw_gbps", "slowest_busbw_gbps",
                 "fastest_busbw_gbps", "skew_pct")
TEXT_COLUMNS = ("scope", "window", "group", "collective", "bucket", "note")
#: nccl-tests' bus bandwidth factor of each collective type for a group of n ranks
FACTORS = {"AllReduce": lambda n: 2 * (n - 1) / n, "AllGather": lambda n: (n - 1) / n,
           "ReduceScatter": lambda n: (n - 1) / n, "AllToAll": lambda n: (n - 1) / n,
           "Broadcast": lambda n: 1.0, "Reduce": lambda n: 1.0, "SendRecv": lambda n: 1.0}
#: collective names as PyTorch's record_param_comms, NCCL's NVTX ranges and kernel names spell them
_ALIASES = {"allreduce": "AllReduce", "allreducecoalesced": "AllReduce",
            "allgather": "AllGather", "allgatherbase": "AllGather", "allgatherintotensorcoalesced": "AllGather",
            "allgathercoalesced": "AllGather",
            "reducescatter": "ReduceScatter", "reducescatterbase": "ReduceScatter",
            "reducescattertensorcoalesced": "ReduceScatter",
            "alltoall": "AllToAll", "alltoallbase": "AllToAll", "alltoallv": "AllToAll",
            "broadcast": "Broadcast", "reduce": "Reduce", "send": "SendRecv", "recv": "SendRecv",
            "sendrecv": "SendRecv", "barrier": "Barrier"}
#: element bytes of Kineto's `dtype` names (c10's ScalarType names)
DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8, "Short": 2, "Char": 1,
               "Byte": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "ComplexFloat": 8, "ComplexDouble": 16,
               "UInt16": 2, "UInt32": 4, "UInt64": 8}
#: a note of a row whose sizes the profile does not carry
SIZES_UNKNOWN = "sizes unknown"
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


@functools.lru_cache(maxsize=4096)
def collective_type(name: object) -> str | None:
    """The collective type (FACTORS' spelling, or Barrier) of a name as PyTorch or NCCL writes it
    (`allreduce`, `_allgather_base`, `ncclAllReduce`, `reduce_scatter_tensor_coalesced`), else None."""
    if not isinstance(name, str):
        return None
    key = re.sub(r"[^a-z]", "", name.lower().removeprefix("nccl"))
    return _ALIASES.get(key)


def factor(collective: str, group_size: float) -> float:
    """nccl-tests' busbw / algbw of `collective` in a group of `group_size` ranks (NaN: no factor)."""
    rule = FACTORS.get(collective)
    if rule is None or not group_size or group_size != group_size or group_size < 1:
        return math.nan
    return float(rule(int(group_size)))


def buckets(nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The power-of-two bucket [lo, hi) holding each message of `nbytes` bytes (int64 arrays: lo = the
    highest power of two at or below its whole bytes; (0, 1) below 1 byte), (-1, -1) where the size is
    unknown (NaN or negative)."""
    sized = nbytes >= 1                                                  # NaN >= 1 is False
    exponent = np.frexp(np.trunc(np.where(sized, nbytes, 1.0)))[1]       # whole bytes in [2^(e-1), 2^e)
    lo = np.where(sized, np.ldexp(1.0, exponent - 1).astype(np.int64), 0)
    unknown = ~(nbytes >= 0)
    return np.where(unknown, -1, lo), np.where(unknown, -1, np.where(sized, 2 * lo, 1))


def bucket_label(lo: int, hi: int) -> str:
    """`1-2 MiB` for the bucket [1 MiB, 2 MiB)."""
    unit = 0
    while unit < len(_UNITS) - 1 and hi > 1024 ** (unit + 1):
        unit += 1
    scale = 1024 ** unit
    return f"{lo / scale:g}-{hi / scale:g} {_UNITS[unit]}"


def in_window(instances: pd.DataFrame, lo_ns: float, hi_ns: float) -> pd.DataFrame:
    """The instances whose kernel's midpoint lies in [lo_ns, hi_ns] (the measured window: a
    collective is whole or not at all, its duration uncut)."""
    mid = (instances["start_ns"] + instances["end_ns"]) / 2
    return instances[(mid >= lo_ns) & (mid <= hi_ns)]


def rank_table(instances: pd.DataFrame | Mapping[str, np.ndarray], windows: Mapping[int, str],
               notes: Mapping[int, str] | None = None) -> pd.DataFrame:
    """The per-rank rows (`scope == "rank"`) of the busbw table (rank_columns) as a frame."""
    return frame_of(rank_columns(instances, windows, notes))


def rank_columns(instances: pd.DataFrame | Mapping[str, np.ndarray], windows: Mapping[int, str],
                 notes: Mapping[int, str] | None = None) -> dict[str, np.ndarray]:
    """The per-rank rows (`scope == "rank"`) of the busbw table as numpy columns (_columns) from one
    or more ranks' instances (INSTANCE_COLUMNS as a frame or numpy columns, each rank's already cut
    to its window, named in `windows`), in one pass over all of them: the rows grouped by sorting on
    their keys (rank, group, collective, bucket), each group's medians picked from its sorted values
    (a pass per rank, then per group, cost a batch of 32 small exports 10 ms a file). A rank's
    instances without a size form one row per collective with `bytes` unknown and its `notes` entry
    (why) as its note."""
    group, groups = _codes(instances["group"], "")
    coll, colls = _codes(instances["collective"], "other")
    rank, nbytes = np.asarray(instances["rank"], dtype=np.int64), np.asarray(instances["bytes"], dtype=np.float64)
    lo, hi = buckets(nbytes)
    order = np.lexsort((lo, coll, group, rank))                 # the groups in key order (hi follows lo)
    rank, group, coll, lo, hi, nbytes = rank[order], group[order], coll[order], lo[order], hi[order], nbytes[order]
    time = (np.asarray(instances["end_ns"], dtype=np.int64) - np.asarray(instances["start_ns"], dtype=np.int64)
            )[order].astype(np.float64)
    size = np.asarray(instances["group_size"], dtype=np.float64)[order]
    new = np.zeros(len(order), dtype=bool)
    for key in (rank, group, coll, lo):
        new[1:] |= key[1:] != key[:-1]
    new[:1] = True
    first = np.flatnonzero(new)                                 # each group's first row (rows in order within it)
    member = np.cumsum(new) - 1                                 # each row's group
    sized = np.flatnonzero(~np.isnan(size))
    with_size, at = np.unique(member[sized], return_index=True)
    n = np.full(len(first), np.nan)
    n[with_size] = np.trunc(size[sized[at]])                    # the group's first size given, as int() takes it
    known, has_n = lo[first] >= 0, ~np.isnan(n) & (n != 0)
    med_bytes, med_time = _medians(member, nbytes, len(first)), _medians(member, time, len(first))
    med_alg = np.where(known & (med_time > 0), med_bytes / np.where(med_time > 0, med_time, np.nan), np.nan)
    coll_of = [colls[c] for c in coll[first].tolist()]
    fac = np.array([factor(c, s) if h else math.nan for c, s, h in zip(coll_of, n.tolist(), has_n.tolist(),
                                                                         strict=True)], dtype=np.float64)
    labels = {b: bucket_label(b, 2 * b or 1) for b in set(lo[first].tolist()) if b >= 0}
    note_of = notes or {}
    return _columns(len(first), {
        "rank": (rank[first], None), "group_size": (n, np.isnan(n)), "bucket_lo": (lo[first], ~known),
        "bucket_hi": (hi[first], ~known), "count": (np.diff(first, append=len(order)), None),
        "bytes": med_bytes, "total_bytes": np.where(known, _sums(nbytes, first), np.nan),
        "median_ns": med_time, "algbw_gbps": med_alg,
        "busbw_gbps": np.where(has_n, med_alg * fac, np.nan),
        "scope": ["rank"] * len(first), "window": [windows[r] for r in rank[first].tolist()],
        "group": [groups[g] for g in group[first].tolist()], "collective": coll_of,
        "bucket": [labels.get(b, SIZES_UNKNOWN) for b in lo[first].tolist()],
        "note": [("" if h else "group size unknown") if k else (note_of.get(r, "") or SIZES_UNKNOWN)
                 for r, k, h in zip(rank[first].tolist(), known.tolist(), has_n.tolist(), strict=True)]})


def _codes(values: pd.Series | np.ndarray, missing: str) -> tuple[np.ndarray, list[str]]:
    """Each value's position in the sorted distinct texts (its str, `missing` for None and NaN: as
    pandas' fillna(missing).astype(str)), and those texts; one look-up per distinct value."""
    listed = values.tolist()
    text = {v: missing if pd.isna(v) else str(v) for v in dict.fromkeys(listed)}
    distinct = sorted(set(text.values()))
    position = {t: i for i, t in enumerate(distinct)}
    code = {v: position[t] for v, t in text.items()}
    return np.fromiter(map(code.__getitem__, listed), dtype=np.int64, count=len(listed)), distinct


def _medians(group: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """np.median of each group's values (`group`: each value's, 0 .. groups - 1), NaN values left out
    (np.nanmedian); NaN for a group without values. Each group's values sorted: its middle one, or
    the mean of its middle two as np.median takes it ((a + b) / 2)."""
    keep = ~np.isnan(values)
    group, values = group[keep], values[keep]
    values = values[np.lexsort((values, group))]
    count = np.bincount(group, minlength=groups)
    has = np.flatnonzero(count)
    low = (np.cumsum(count) - count + (count - 1) // 2)[has]
    high = low + 1 - count[has] % 2
    out = np.full(groups, np.nan)
    out[has] = np.where(count[has] % 2, values[low], (values[low] + values[high]) / 2)
    return out


def _sums(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """np.sum of each group's values (the rows from each of `first` to the next): one np.add.reduceat
    where the (finite) values are whole numbers whose sum stays below 2^53, every partial sum then
    exact in any order (message sizes are whole bytes); else each group's np.sum (its pairwise
    summation rounds as the reduceat's running sum need not)."""
    finite = values[np.isfinite(values)]
    if (finite == np.trunc(finite)).all() and np.abs(finite).sum() < 2.0**53:
        return np.add.reduceat(values, first) if len(first) else np.zeros(0)
    return np.array([values[a:b].sum() for a, b in zip(first.tolist(), [*first[1:].tolist(), len(values)],
                                                       strict=True)], dtype=np.float64)


def _columns(rows: int, given: Mapping[str, object]) -> dict[str, np.ndarray]:
    """COLUMNS as numpy columns from those `given` (the others NA, NaN, ""): integers as masked arrays
    (given as values and the mask of the missing ones, or None), floats rounded as _typed rounds
    them, texts as object arrays of str."""
    out: dict[str, np.ndarray] = {}
    for col in COLUMNS:
        value = given.get(col)
        if col in INT_COLUMNS:
            values, missing = value if isinstance(value, tuple) else (np.zeros(rows), np.ones(rows, dtype=bool))
            mask = np.zeros(rows, dtype=bool) if missing is None else missing
            out[col] = np.ma.MaskedArray(np.where(mask, 0, values).astype(np.int64), mask=mask)
        elif col in FLOAT_COLUMNS:
            out[col] = np.round(np.full(rows, np.nan) if value is None else np.asarray(value, dtype=np.float64), 4)
        else:
            out[col] = np.array([""] * rows if value is None else value, dtype=object)
    return out


def frame_of(columns: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """The busbw table of rank_columns' columns as a frame, in the types _typed gives them."""
    return pd.DataFrame({
        col: pd.arrays.IntegerArray(np.ma.getdata(values), np.ma.getmaskarray(values)) if col in INT_COLUMNS
        else pd.Series(values, dtype=str) if col in TEXT_COLUMNS else values for col, values in columns.items()})


def _typed(table: pd.DataFrame) -> pd.DataFrame:
    """COLUMNS in their types (integers nullable: a row across ranks has no rank)."""
    for col in INT_COLUMNS:
        table[col] = table[col].astype("Int64")
    for col in FLOAT_COLUMNS:
        table[col] = table[col].astype(float).round(4)
    for col in TEXT_COLUMNS:
        table[col] = table[col].fillna("").astype(str)
    return table[COLUMNS]


def across_ranks(per: pd.DataFrame) -> pd.DataFrame:
    """The per-rank rows followed by one row per process group, collective and bucket across all
    ranks (`scope == "all"`): count and total bytes summed, bytes and time the median of the ranks'
    medians, algbw and busbw from them (bytes / time, · factor), the slowest and the fastest rank by median busbw and how far apart they are
    (`skew_pct` = 100 · (fastest / slowest − 1))."""
    per = per[per["scope"] == "rank"]
    rows = []
    keys = ["group", "collective", "bucket"]
    for (group, coll, bucket), g in per.groupby(keys, sort=True):
        size = g["group_size"].dropna().max() if g["group_size"].notna().any() else None
        nbytes, time = g["bytes"].median(), g["median_ns"].median()
        alg = nbytes / time if time > 0 else math.nan               # NaN bytes or time: NaN
        row = {"scope": "all", "rank": None, "window": "+".join(sorted(set(g["window"].astype(str)))),
               "group": group, "group_size": size, "collective": coll, "bucket": bucket,
               "bucket_lo": g["bucket_lo"].iloc[0], "bucket_hi": g["bucket_hi"].iloc[0],
               "count": int(g["count"].sum()), "bytes": nbytes, "total_bytes": g["total_bytes"].sum(min_count=1),
               "median_ns": time, "algbw_gbps": alg,
               "busbw_gbps": alg * factor(str(coll), math.nan if size is None else float(size)),
               "note": "; ".join(sorted({n for n in g["note"] if n}))}
        bw = g["busbw_gbps"]
        if bw.notna().any():
            slow, fast = g.loc[bw.idxmin()], g.loc[bw.idxmax()]
            row |= {"slowest_rank": int(slow["rank"]), "slowest_busbw_gbps": slow["busbw_gbps"],
                    "fastest_rank": int(fast["rank"]), "fastest_busbw_gbps": fast["busbw_gbps"],
                    "skew_pct": 100.0 * (fast["busbw_gbps"] / slow["busbw_gbps"] - 1)
                    if slow["busbw_gbps"] > 0 else math.nan}
        rows.append(row)
    out = pd.concat([per, pd.DataFrame(rows, columns=COLUMNS)], ignore_index=True) if rows else per.copy()
    return _typed(out)


def reduce_table(key: str, read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    """collect's reducer of the busbw table `key` (its producer's): the rows across ranks appended,
    and a line naming the ranks whose sizes the profile did not carry."""
    per = read(key)
    if per is None or per.empty:
        return {}
    unknown = per[per["bytes"].isna()]
    if len(unknown):
        ranks = ", ".join(map(str, sorted({int(r) for r in unknown["rank"].dropna()})))
        log(f"{key}: {int(unknown['count'].sum())} NCCL kernels without a size (ranks {ranks}); rank "
            f"{int(unknown['rank'].iloc[0])}: {unknown['note'].iloc[0]}")
    return {key: across_ranks(per)}
