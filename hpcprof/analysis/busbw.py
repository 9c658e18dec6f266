"""Bus bandwidth per collective and message size: nccl-tests' algbw and busbw of every NCCL
collective a profile records with its size, for any workload (DDP's all-reduce buckets, FSDP's
all-gathers and reduce-scatters, a tensor-parallel layer's collectives).

One collective instance is one NCCL kernel on one rank: its collective type, process group (and
that group's size), message bytes (nccl-tests' `size`: AllGather's whole output, ReduceScatter's
whole input, the buffer of the others) and the kernel's duration. Per rank, process group,
collective and message-size bucket (powers of two: [2^k, 2^(k+1)) bytes) over the measured window:

* `algbw` = bytes / time, `busbw` = algbw · factor (nccl-tests' PERFORMANCE.md): AllReduce 2(n−1)/n;
  AllGather, ReduceScatter, AllToAll (n−1)/n; Broadcast, Reduce, SendRecv 1 (n: the group's ranks);
  in GB/s (10^9 bytes/s), the median over the bucket's instances;
* across ranks (`scope == "all"`): the median of the ranks' medians, and the slowest rank's
  median busbw against the fastest rank's (`skew_pct`). A rank's kernel time includes its wait for
  the last rank to arrive, so the rank that arrives last shows the highest busbw.

The profiles give the instances (hpcprof.analysis.trace.collectives: Kineto's `record_param_comms`
sizes; hpcprof.analysis.nsys.collectives: NCCL's NVTX payloads); this module is the arithmetic.
"""

from __future__ import annotations

import functools
import math
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pandas as pd

    from hpcprof.analysis.collector import Log, ReadTable

#: one collective instance (a kernel of a rank): the columns the profiles' readers give
INSTANCE_COLUMNS = ["rank", "group", "group_size", "collective", "dtype", "bytes", "start_ns", "end_ns"]
#: the busbw tables' columns (catalog: TORCH_BUSBW, NSYS_BUSBW)
COLUMNS = ["scope", "rank", "window", "group", "group_size", "collective", "bucket", "bucket_lo", "bucket_hi",
           "count", "bytes", "total_bytes", "median_ns", "algbw_gbps", "busbw_gbps",
           "slowest_rank", "slowest_busbw_gbps", "fastest_rank", "fastest_busbw_gbps", "skew_pct", "note"]
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


def bucket_of(nbytes: float) -> tuple[int, int]:
    """The power-of-two bucket [lo, hi) holding a message of `nbytes` bytes ((0, 1) for 0)."""
    if not nbytes or nbytes < 1:
        return 0, 1
    lo = 1 << (int(nbytes).bit_length() - 1)
    return lo, lo * 2


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


def rank_table(instances: pd.DataFrame, windows: Mapping[int, str], notes: Mapping[int, str] | None = None
               ) -> pd.DataFrame:
    """The per-rank rows (`scope == "rank"`) of the busbw table from one or more ranks' instances
    (INSTANCE_COLUMNS, each rank's already cut to its window, named in `windows`), in one pass
    over all of them (a pass per rank cost a batch of 32 small exports 10 ms a file). A rank's
    instances without a size form one row per collective with `bytes` unknown and its `notes`
    entry (why) as its note."""
    import numpy as np
    import pandas as pd

    rows = []
    if len(instances):
        nbytes_all = instances["bytes"].to_numpy(np.float64, na_value=np.nan)
        time_all = (instances["end_ns"] - instances["start_ns"]).to_numpy().astype(np.int64).astype(np.float64)
        size_all = instances["group_size"].to_numpy(np.float64, na_value=np.nan)
        lo_hi = [bucket_of(b) if b >= 0 else (-1, -1) for b in nbytes_all.tolist()]      # NaN >= 0 is False
        keys = pd.DataFrame({"rank": instances["rank"].to_numpy(np.int64),
                             "group": instances["group"].fillna("").astype(str).to_numpy(),
                             "collective": instances["collective"].fillna("other").astype(str).to_numpy(),
                             "bucket_lo": [lo for lo, _ in lo_hi], "bucket_hi": [hi for _, hi in lo_hi]})
        groups = keys.groupby(list(keys.columns), sort=True).indices
        for (rank, group, coll, lo, hi) in sorted(groups):
            at = groups[rank, group, coll, lo, hi]
            size = size_all[at][~np.isnan(size_all[at])]
            n = int(size[0]) if len(size) else None
            known = lo >= 0
            nbytes, time = nbytes_all[at], time_all[at]
            algbw = nbytes / np.where(time > 0, time, np.nan) if known else np.full(len(at), np.nan)
            med_alg = float(np.nanmedian(algbw)) if known and np.isfinite(algbw).any() else math.nan
            fac = factor(coll, n) if n else math.nan
            note = (notes or {}).get(int(rank), "")
            rows.append({"scope": "rank", "rank": int(rank), "window": windows[int(rank)], "group": group,
                         "group_size": n, "collective": coll,
                         "bucket": bucket_label(lo, hi) if known else SIZES_UNKNOWN,
                         "bucket_lo": lo if known else None, "bucket_hi": hi if known else None,
                         "count": len(at), "bytes": float(np.median(nbytes)) if known else math.nan,
                         "total_bytes": float(nbytes.sum()) if known else math.nan,
                         "median_ns": float(np.median(time)), "algbw_gbps": med_alg,
                         "busbw_gbps": med_alg * fac if n else math.nan,
                         "note": (note or SIZES_UNKNOWN) if not known else ("" if n else "group size unknown")})
    return _typed(pd.DataFrame(rows, columns=COLUMNS))


def _typed(table: pd.DataFrame) -> pd.DataFrame:
    """COLUMNS in their types (integers nullable: a row across ranks has no rank)."""
    for col in ("rank", "group_size", "bucket_lo", "bucket_hi", "count", "slowest_rank", "fastest_rank"):
        table[col] = table[col].astype("Int64")
    for col in ("bytes", "total_bytes", "median_ns", "algbw_gbps", "busbw_gbps", "slowest_busbw_gbps",
                "fastest_busbw_gbps", "skew_pct"):
        table[col] = table[col].astype(float).round(4)
    for col in ("scope", "window", "group", "collective", "bucket", "note"):
        table[col] = table[col].fillna("").astype(str)
    return table[COLUMNS]


def across_ranks(per: pd.DataFrame) -> pd.DataFrame:
    """The per-rank rows followed by one row per process group, collective and bucket across all
    ranks (`scope == "all"`): count and bytes summed, the median time and bandwidths the median of
    the ranks' medians, the slowest and the fastest rank by median busbw and how far apart they are
    (`skew_pct` = 100 · (fastest / slowest − 1))."""
    import pandas as pd

    per = per[per["scope"] == "rank"]
    rows = []
    keys = ["group", "collective", "bucket"]
    for (group, coll, bucket), g in per.groupby(keys, sort=True):
        row = {"scope": "all", "rank": None, "window": "+".join(sorted(set(g["window"].astype(str)))),
               "group": group, "group_size": g["group_size"].dropna().max() if g["group_size"].notna().any() else None,
               "collective": coll, "bucket": bucket, "bucket_lo": g["bucket_lo"].iloc[0],
               "bucket_hi": g["bucket_hi"].iloc[0], "count": int(g["count"].sum()),
               "bytes": g["bytes"].median(), "total_bytes": g["total_bytes"].sum(min_count=1),
               "median_ns": g["median_ns"].median(), "algbw_gbps": g["algbw_gbps"].median(),
               "busbw_gbps": g["busbw_gbps"].median(), "note": "; ".join(sorted({n for n in g["note"] if n}))}
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
