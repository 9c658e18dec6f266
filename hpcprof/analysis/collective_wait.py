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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hpcprof.analysis.busbw import collective_type
from hpcprof.analysis.nccl import collective_kind

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ["scope", "collective", "rank", "instances", "ranks", "kernel_ns", "transfer_ns", "wait_ns", "wait_pct",
           "last_rank", "last_pct"]


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
    frame = pd.DataFrame({"rank": coll["rank"].to_numpy(np.int64), "dur": (coll["end"] - coll["start"]).to_numpy(float),
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
                     "last_pct": 100.0 * int(lasts[top]) / instances if top is not None else 0.0})
        for rank, r in g.groupby("rank", sort=True):
            kernel = float(r["dur"].sum())
            rows.append({"scope": "rank", "collective": kind, "rank": int(rank), "instances": len(r), "ranks": None,
                         "kernel_ns": kernel, "transfer_ns": float(r["transfer"].sum()), "wait_ns": float(r["wait"].sum()),
                         "wait_pct": 100.0 * float(r["wait"].sum()) / kernel if kernel > 0 else float("nan"),
                         "last_rank": None, "last_pct": 100.0 * int(r["last"].sum()) / len(r)})
    out = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("rank", "instances", "ranks", "last_rank"):
        out[col] = out[col].astype("Int64")
    for col in ("kernel_ns", "transfer_ns", "wait_ns", "wait_pct", "last_pct"):
        out[col] = out[col].astype(float).round(1)
    return out
