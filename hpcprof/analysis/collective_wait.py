"""Transfer against wait per collective across ranks, as TraceLens and NCCL Inspector separate them.

A collective instance is one collective kernel on each rank, matched across ranks as the critical
path matches them (hpcprof.analysis.critical_path: iteration, channel, seq; the events table its
`rank_events` gives per rank). Its kernels end on every rank at about the same time, so the rank
that arrived last has the shortest kernel: that kernel is the instance's *transfer* (the time after
the last rank arrived, the data moving), and every rank's kernel time beyond it is its *wait* for
the last rank (`wait_r = dur_r − min dur`). Durations, not starts, are compared: each rank's times
are on its own clock, its durations are not. An instance seen on one rank only is left out.

One row per collective type across ranks (`scope == "all"`): instances matched, ranks, the mean
kernel time of a rank in one instance (`kernel_ns`) and its split into `transfer_ns` + `wait_ns`
(means over instances and ranks: kernel = transfer + wait), `wait_pct` = 100 · wait / kernel, the
rank that arrived last most often (`last_rank`, the one the others waited for) and in what share of
instances (`last_pct`; an instance whose kernels all took as long has no last rank: none was late). Then one row per collective type and rank (`scope == "rank"`): that rank's
totals over the instances (`kernel_ns`, `transfer_ns`, `wait_ns`: sums, ns) and how often it came
last. All times ns.

`exposed_ns`, last: the part of the transfer no other work of the rank overlapped (the rank's
`overlap` rows of the events, hpcprof.analysis.critical_path, inside its kernel's last
`transfer` ns, where the data moves): the transfer that lengthens the step (DDP's all-reduce under
backward: little or none). A mean over instances and ranks (`all`), a sum (`rank`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hpcprof.analysis.busbw import collective_type
from hpcprof.analysis.critical_path import OVERLAP
from hpcprof.analysis.nccl import collective_kind
from hpcprof.analysis.ranges import covered_within, merge_intervals

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ["scope", "collective", "rank", "instances", "ranks", "kernel_ns", "transfer_ns", "wait_ns", "wait_pct",
           "last_rank", "last_pct", "exposed_ns"]


def kind_of(name: object) -> str:
    """The collective type of a collective kernel's name (busbw's spelling), else the name."""
    return collective_type(collective_kind(name)) or collective_type(name) or str(name)


def transfer_wait(events: pd.DataFrame) -> pd.DataFrame:
    """The transfer/wait table (module docstring) of the critical path's events of every rank
    (critical_path.EVENT_COLUMNS, clocks need not agree); no rows without an instance seen on two
    or more ranks."""
    import pandas as pd

    empty = pd.DataFrame({c: pd.Series(dtype=object if c in ("scope", "collective") else float) for c in COLUMNS})
    if events is None or events.empty:
        return empty
    coll = events[events["kind"] == "collective"]
    keys = ["iteration", "channel", "seq"]
    frame = pd.DataFrame({"rank": coll["rank"].to_numpy(np.int64), "end": coll["end"].to_numpy(np.int64),
                          "dur": (coll["end"] - coll["start"]).to_numpy(float),
                          "collective": [kind_of(n) for n in coll["name"].tolist()],
                          **{k: coll[k].to_numpy() for k in keys}})
    group = frame.groupby(keys, sort=False)
    frame["ranks"] = group["rank"].transform("nunique")
    frame = frame[frame["ranks"] >= 2].copy()
    if frame.empty:
        return empty
    group = frame.groupby(keys, sort=False)
    frame["transfer"] = group["dur"].transform("min")
    frame["wait"] = frame["dur"] - frame["transfer"]
    frame["exposed"] = frame["transfer"] - hidden(events, frame["rank"].to_numpy(), frame["end"].to_numpy(float),
                                                  frame["transfer"].to_numpy(float))
    # the last rank to arrive: the shortest kernel of its instance (the first of equals in rank order),
    # where some rank's kernel was longer (someone waited)
    frame = frame.sort_values([*keys, "dur", "rank"], kind="stable")
    frame["last"] = ~frame.duplicated(keys) & (frame.groupby(keys, sort=False)["wait"].transform("max") > 0)
    rows = []
    for kind, g in frame.groupby("collective", sort=True):
        instances = len(g.drop_duplicates(keys))
        lasts = g.loc[g["last"], "rank"].value_counts().sort_index()
        top = int(lasts.idxmax()) if len(lasts) else None
        kernel = float(g["dur"].mean())
        rows.append({"scope": "all", "collective": kind, "rank": None, "instances": instances,
                     "ranks": int(g["rank"].nunique()), "kernel_ns": kernel, "transfer_ns": float(g["transfer"].mean()),
                     "wait_ns": float(g["wait"].mean()), "wait_pct": 100.0 * float(g["wait"].mean()) / kernel
                     if kernel > 0 else float("nan"), "last_rank": top,
                     "last_pct": 100.0 * int(lasts[top]) / instances if top is not None else 0.0,
                     "exposed_ns": float(g["exposed"].mean())})
        for rank, r in g.groupby("rank", sort=True):
            kernel = float(r["dur"].sum())
            rows.append({"scope": "rank", "collective": kind, "rank": int(rank), "instances": len(r), "ranks": None,
                         "kernel_ns": kernel, "transfer_ns": float(r["transfer"].sum()), "wait_ns": float(r["wait"].sum()),
                         "wait_pct": 100.0 * float(r["wait"].sum()) / kernel if kernel > 0 else float("nan"),
                         "last_rank": None, "last_pct": 100.0 * int(r["last"].sum()) / len(r),
                         "exposed_ns": float(r["exposed"].sum())})
    out = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("rank", "instances", "ranks", "last_rank"):
        out[col] = out[col].astype("Int64")
    for col in ("kernel_ns", "transfer_ns", "wait_ns", "wait_pct", "last_pct", "exposed_ns"):
        out[col] = out[col].astype(float).round(1)
    return out


def hidden(events: pd.DataFrame, rank: np.ndarray, end: np.ndarray, transfer: np.ndarray) -> np.ndarray:
    """For each collective kernel (its rank, end, transfer): how much of its last `transfer` ns the
    rank's `overlap` rows of `events` cover (the union of each rank's rows: ranges.covered_within)."""
    over = events[events["kind"] == OVERLAP]
    out = np.zeros(len(rank))
    for r, mine in over.groupby("rank"):
        at = np.flatnonzero(rank == int(r))
        union = merge_intervals(mine["start"].to_numpy(np.int64), mine["end"].to_numpy(np.int64))
        out[at] = covered_within(union, end[at] - transfer[at], end[at])
    return out
