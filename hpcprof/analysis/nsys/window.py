"""The measured window of an nsys capture: the timed iterations projected onto GPU time.

A capture holds start-up (NCCL communicator set-up, warm-up iterations) and teardown around
the iterations a benchmark times; metrics over the whole capture mostly measure those. The
window is found from NVTX ranges projected onto the GPU (range_instances):

* `nvtx:<NAME>` given (a `command` workload's `profile.window.nvtx`): every instance of that
  range is one iteration; the window runs from the first one's GPU start to the last one's end;
* else seqpar's `timed` range: its projection is the window, and the `iteration` ranges inside
  it are the iterations;
* else iteration ranges (`iteration`, ddp's `step`, `step<N>`), else Echo's `backward` window;
* else the whole capture (`capture`): first GPU operation to the last.

Every table computed over the window carries a `window` column naming it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hpcprof.analysis.nsys.distributed import (
    Activity,
    covered_within,
    merge_intervals,
    range_instances,
)

TIMED_RANGE = "timed"
ITERATION_RANGE = re.compile(r"(?:iteration|step)\d*")
ECHO_RANGE = "backward"
CAPTURE = "capture"
ITERATION_COLUMNS = ["rank", "window", "iteration", "start_ns", "end_ns", "gpu_ns", "busy_ns", "idle_ns"]


@dataclass
class Window:
    """The measured window of each rank on its GPU clock, with its iterations."""

    bounds: pd.DataFrame       # rank, window, start_ns, end_ns (GPU), cpu_start, cpu_end (CPU, NVTX)
    iterations: pd.DataFrame   # rank, window, iteration, start_ns, end_ns (GPU projection of each)
    instances: pd.DataFrame    # every NVTX range instance (range_instances)


def run_window_range(path: Path) -> str | None:
    """The NVTX range a run names as its window (`profile.window.nvtx` in its config.json), for an
    export under `<run>/profiles/nsys/` or `<run>/derived/nsys/`; None when there is none."""
    run = path.resolve().parents[2] if len(path.resolve().parents) > 2 else None
    if run is None or path.resolve().parent.parent.name not in ("profiles", "derived"):
        return None
    try:
        config = json.loads((run / "config.json").read_text())
        window = config["experiment"]["profile"].get("window") or {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return window.get("nvtx") if isinstance(window, dict) else None


def _projected(instances: pd.DataFrame) -> pd.DataFrame:
    return instances[instances["gpu_ops"] > 0]


def _rank_window(rank: int, inst: pd.DataFrame, ops: pd.DataFrame, nvtx: str | None) -> tuple[dict, pd.DataFrame]:
    """(bounds row, iteration instances) of one rank."""
    names = inst["range"].astype(str)
    if nvtx is not None:
        its, label, outer = _projected(inst[names == nvtx]), f"nvtx:{nvtx}", None
    else:
        timed = _projected(inst[names == TIMED_RANGE])
        outer = timed.iloc[0] if len(timed) else None
        its = _projected(inst[names.str.fullmatch(ITERATION_RANGE.pattern)])
        if outer is not None:
            its = its[(its["start"] >= outer["start"]) & (its["end"] <= outer["end"])]
            label = f"nvtx:{TIMED_RANGE}"
        elif len(its):
            label = f"nvtx:{its['range'].iloc[0]}" if its["range"].nunique() == 1 else "nvtx:iteration"
        else:
            its = _projected(inst[names == ECHO_RANGE])
            label = f"nvtx:{ECHO_RANGE}"
    its = its.sort_values("proj_start", kind="stable")
    if outer is not None:
        row = {"start_ns": int(outer["proj_start"]), "end_ns": int(outer["proj_end"]),
               "cpu_start": int(outer["start"]), "cpu_end": int(outer["end"])}
    elif len(its):
        row = {"start_ns": int(its["proj_start"].min()), "end_ns": int(its["proj_end"].max()),
               "cpu_start": int(its["start"].min()), "cpu_end": int(its["end"].max())}
    else:
        label = CAPTURE
        row = {"start_ns": int(ops["start"].min()), "end_ns": int(ops["end"].max()),
               "cpu_start": np.iinfo(np.int64).min, "cpu_end": np.iinfo(np.int64).max}
    return {"rank": rank, "window": label, **row}, its


def find_window(act: Activity, nvtx: str | None = None) -> Window:
    """The measured window of every rank of `act` (see the module's rules); `nvtx` names the range
    that marks one iteration (a `command` workload's own)."""
    instances = range_instances(act)
    bounds, iterations = [], []
    for rank, ops in act.ops.groupby("rank", sort=True):
        inst = instances[instances["rank"] == rank] if len(instances) else instances
        row, its = _rank_window(int(rank), inst, ops, nvtx)
        bounds.append(row)
        iterations.append(pd.DataFrame({"rank": int(rank), "window": row["window"],
                                        "iteration": np.arange(len(its)), "range": its["range"].to_numpy(),
                                        "start_ns": its["proj_start"].to_numpy(np.int64),
                                        "end_ns": its["proj_end"].to_numpy(np.int64),
                                        "cpu_start": its["start"].to_numpy(np.int64),
                                        "cpu_end": its["end"].to_numpy(np.int64)}))
    return Window(pd.DataFrame(bounds, columns=["rank", "window", "start_ns", "end_ns", "cpu_start", "cpu_end"]),
                  pd.concat(iterations, ignore_index=True) if iterations else pd.DataFrame(
                      columns=["rank", "window", "iteration", "range", "start_ns", "end_ns", "cpu_start", "cpu_end"]),
                  instances)


def clip(act: Activity, window: Window) -> Activity:
    """The activity inside each rank's window: operations that overlap it, cut to its bounds."""
    b = window.bounds.set_index("rank")
    lo = act.ops["rank"].map(b["start_ns"]).to_numpy(np.int64)
    hi = act.ops["rank"].map(b["end_ns"]).to_numpy(np.int64)
    keep = (act.ops["end"].to_numpy() > lo) & (act.ops["start"].to_numpy() < hi)
    ops = act.ops[keep].copy()
    ops["start"] = np.maximum(ops["start"].to_numpy(), lo[keep])
    ops["end"] = np.minimum(ops["end"].to_numpy(), hi[keep])
    return Activity(ops.reset_index(drop=True), act.runtime, act.exports, act.failed)


def busy_within(ops: pd.DataFrame, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each interval [start, end): the time some GPU operation of `ops` runs in it."""
    union = merge_intervals(ops["start"].to_numpy(np.int64), ops["end"].to_numpy(np.int64))
    return covered_within(union, np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64))


def iteration_series(act: Activity, window: Window) -> pd.DataFrame:
    """Per rank and iteration of the window: GPU start and end (first kernel start to last kernel
    end of the iteration's projected range), its length, the time the GPU was busy in it and idle."""
    parts = []
    for rank, its in window.iterations.groupby("rank", sort=True):
        ops = act.ops[act.ops["rank"] == rank]
        start, end = its["start_ns"].to_numpy(np.int64), its["end_ns"].to_numpy(np.int64)
        busy = busy_within(ops, start, end)
        parts.append(pd.DataFrame({"rank": rank, "window": its["window"].to_numpy(),
                                   "iteration": its["iteration"].to_numpy(), "start_ns": start, "end_ns": end,
                                   "gpu_ns": end - start, "busy_ns": busy, "idle_ns": end - start - busy}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=ITERATION_COLUMNS)


def window_summary(act: Activity, window: Window) -> pd.DataFrame:
    """Per rank: the window's name, GPU start/end, duration, iterations, busy and idle time."""
    rows = []
    for row in window.bounds.to_dict("records"):
        ops = act.ops[act.ops["rank"] == row["rank"]]
        busy = int(busy_within(ops, np.array([row["start_ns"]]), np.array([row["end_ns"]]))[0])
        n = int((window.iterations["rank"] == row["rank"]).sum())
        duration = row["end_ns"] - row["start_ns"]
        rows.append({"rank": row["rank"], "window": row["window"], "start_ns": row["start_ns"],
                     "end_ns": row["end_ns"], "duration_ns": duration, "iterations": n, "busy_ns": busy,
                     "idle_ns": duration - busy})
    return pd.DataFrame(rows, columns=["rank", "window", "start_ns", "end_ns", "duration_ns", "iterations",
                                       "busy_ns", "idle_ns"])


def instances_inside(window: Window) -> pd.DataFrame:
    """The NVTX range instances inside each rank's window on the CPU (the window's own range
    included), for the per-range table of the window."""
    inst = window.instances
    if inst.empty:
        return inst
    b = window.bounds.set_index("rank")
    lo, hi = inst["rank"].map(b["cpu_start"]), inst["rank"].map(b["cpu_end"])
    return inst[(inst["start"] >= lo) & (inst["end"] <= hi)]


def kernel_sum(act: Activity) -> pd.DataFrame:
    """GPU time per rank and kernel name: instances and total_ns (most first)."""
    ops = act.kernels.assign(dur=act.kernels["end"] - act.kernels["start"])
    dur = ops.groupby(["rank", "name"], sort=True)["dur"]  # one reduction a column: named aggregation costs ~10x
    out = pd.DataFrame({"instances": dur.size(), "total_ns": dur.sum()}).reset_index()
    return out.sort_values(["rank", "total_ns"], ascending=[True, False], kind="stable").reset_index(drop=True)


def with_window(df: pd.DataFrame, window: Window) -> pd.DataFrame:
    """`df` (with a rank column) with the window's name of each rank inserted after `rank`."""
    df = df.copy()
    labels = dict(zip(window.bounds["rank"].tolist(), window.bounds["window"].tolist(), strict=True))
    names = [labels.get(rank, CAPTURE) for rank in df["rank"].tolist()]
    df.insert(list(df.columns).index("rank") + 1, "window", pd.Series(names, index=df.index, dtype=object))
    return df
