"""The measured window of an nsys capture: the timed iterations projected onto GPU time.

A capture holds start-up (NCCL communicator set-up, warm-up iterations) and teardown around
the iterations a benchmark times; metrics over the whole capture mostly measure those. The
window is found from NVTX ranges projected onto the GPU (range_instances):

* `nvtx:<NAME>` given (a `command` workload's `profile.window.nvtx`): every instance of that
  range is one iteration; the window runs from the first one's GPU start to the last one's end;
* else the optimizer step hook's `hpcprof:step` ranges (a `command` with `profile.window.auto`:
  the steps of its window), each one iteration;
* else seqpar's `timed` range: its projection is the window, and the `iteration` ranges inside
  it are the iterations;
* else iteration ranges (`iteration`, ddp's `step`, `step<N>`), else Echo's `backward` window;
* else the steps found in the rank's kernels (`detected:optimizer`, `detected:sequence`:
  nsys/steps.py, hpcprof/analysis/detect_steps.py);
* else the whole capture (`capture`): first GPU operation to the last.

Every table computed over the window carries a `window` column naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd
import pyarrow as pa

from hpcprof.analysis.ranges import covered_within, merge_intervals
from hpcprof.config.profile import STEP_RANGE
from hpcprof.core.catalog import CAPTURE_WINDOW
from hpcprof.core.errors import UserError
from hpcprof.run.record import profile_record
from hpcprof.run.results import arrow_table
from hpcprof.tools.nsys.analysis.distributed import Activity, instance_columns, instance_frame
from hpcprof.tools.nsys.analysis.steps import rank_steps
from hpcprof.tools.nsys.stats.arrays import Columns, group_starts

TIMED_RANGE = "timed"
ITERATION_RANGE = re.compile(r"(?:iteration|step)\d*")
ECHO_RANGE = "backward"
CAPTURE = CAPTURE_WINDOW
ITERATION_COLUMNS = ["rank", "window", "iteration", "start_ns", "end_ns", "gpu_ns", "busy_ns", "idle_ns"]
WINDOW_COLUMNS = ["rank", "window", "start_ns", "end_ns", "cpu_start", "cpu_end"]
#: the columns of Window.iterations, and the integer ones among them
ITERATION_RANGES = ["rank", "window", "iteration", "range", "start_ns", "end_ns", "cpu_start", "cpu_end"]
ITERATION_DTYPES = {c: np.int64 for c in ("rank", "iteration", "start_ns", "end_ns", "cpu_start", "cpu_end")}
#: a column of no rows (the tables of no window: columns of no type, as in a frame of no rows)
NO_ROWS = np.empty(0, dtype=object)


@dataclass
class Window:
    """The measured window of each rank on its GPU clock, with its iterations."""

    bounds: dict[str, np.ndarray]       # WINDOW_COLUMNS: rank, window, start_ns, end_ns (GPU), cpu_start, cpu_end
    iterations: dict[str, np.ndarray]   # ITERATION_RANGES: rank, window, iteration, range, GPU and CPU start, end
    instance_columns: Columns           # every NVTX range instance (distributed.instance_columns)

    @property
    def instances(self) -> pd.DataFrame:
        """The NVTX range instances as a frame (distributed.range_instances)."""
        return instance_frame(self.instance_columns)

    @property
    def labels(self) -> dict[int, str]:
        """The window's name of each rank."""
        return dict(zip(self.bounds["rank"].tolist(), self.bounds["window"].tolist(), strict=True))


def run_window_range(path: Path) -> str | None:
    """The NVTX range a run names as its window (`profile.window.nvtx` in its config.json), for an
    export under `<run>/profiles/nsys/` or `<run>/derived/nsys/`; None when there is none."""
    record = profile_record(path)
    return record.experiment.profile.window.nvtx if record is not None else None


def window_range(spec: str, files: Sequence[Path]) -> str | None:
    """The NVTX range that marks one iteration under `--window spec` (auto or nvtx:NAME) for these
    exports: NAME, else (auto) the range their run names (run_window_range; None: the module's
    rules). UserError when the files' runs name different ranges."""
    if spec.startswith("nvtx:"):
        return spec.removeprefix("nvtx:")
    named = {run_window_range(path) for path in files}
    if len(named) > 1:
        raise UserError(f"--window auto: the files name different windows ({', '.join(sorted(map(str, named)))}: "
                        "exports of different runs); give --window nvtx:NAME or capture")
    return named.pop() if named else None


def _rank_window(inst: dict[str, np.ndarray], op_start: np.ndarray, op_end: np.ndarray,
                 nvtx: str | None) -> tuple[dict, np.ndarray]:
    """(bounds row, positions of the iteration instances in `inst`, one rank's instance columns)."""
    names = [str(n) for n in inst["range"].tolist()]
    projected = inst["gpu_ops"] > 0

    def named(match: Callable[[str], bool]) -> np.ndarray:
        return np.flatnonzero(np.fromiter(map(match, names), dtype=bool, count=len(names)) & projected)

    outer = None
    steps = named(lambda n: n == STEP_RANGE) if nvtx is None else None
    if nvtx is not None:
        its, label = named(lambda n: n == nvtx), f"nvtx:{nvtx}"
    elif steps is not None and len(steps):
        its, label = steps, f"nvtx:{STEP_RANGE}"
    else:
        timed = named(lambda n: n == TIMED_RANGE)
        outer = int(timed[0]) if len(timed) else None
        its = named(lambda n: ITERATION_RANGE.fullmatch(n) is not None)
        if outer is not None:
            its = its[(inst["start"][its] >= inst["start"][outer]) & (inst["end"][its] <= inst["end"][outer])]
            label = f"nvtx:{TIMED_RANGE}"
        elif len(its):
            label = f"nvtx:{names[its[0]]}" if len({names[i] for i in its.tolist()}) == 1 else "nvtx:iteration"
        else:
            its, label = named(lambda n: n == ECHO_RANGE), f"nvtx:{ECHO_RANGE}"
    its = its[np.argsort(inst["proj_start"][its], kind="stable")]
    if outer is not None:
        row = {"start_ns": int(inst["proj_start"][outer]), "end_ns": int(inst["proj_end"][outer]),
               "cpu_start": int(inst["start"][outer]), "cpu_end": int(inst["end"][outer])}
    elif len(its):
        row = {"start_ns": int(inst["proj_start"][its].min()), "end_ns": int(inst["proj_end"][its].max()),
               "cpu_start": int(inst["start"][its].min()), "cpu_end": int(inst["end"][its].max())}
    else:
        label = CAPTURE
        row = {"start_ns": int(op_start.min()), "end_ns": int(op_end.max()),
               "cpu_start": int(np.iinfo(np.int64).min), "cpu_end": int(np.iinfo(np.int64).max)}
    return {"window": label, **row}, its


def detected(label: str, steps: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """The bounds row and iteration columns of a rank's detected steps."""
    row = {"window": label, "start_ns": int(steps["start_ns"].min()), "end_ns": int(steps["end_ns"].max()),
           "cpu_start": int(steps["cpu_start"].min()), "cpu_end": int(steps["cpu_end"].max())}
    return row, {"range": np.full(len(steps["start_ns"]), "step", dtype=object), **steps}


def find_window(act: Activity, nvtx: str | None = None) -> Window:
    """The measured window of every rank of `act` (see the module's rules); `nvtx` names the range
    that marks one iteration (a `command` workload's own)."""
    instances = instance_columns(act)
    inst = {c: instances[c] for c in ("rank", "range", "start", "end", "gpu_ops", "proj_start", "proj_end")}
    rank, start, end = act.column("rank"), act.column("start"), act.column("end")
    bounds: dict[str, list] = {c: [] for c in WINDOW_COLUMNS}
    iterations: dict[str, list[np.ndarray]] = {c: [] for c in ITERATION_RANGES}
    order, first = group_starts(rank)
    for a, b in zip(first.tolist(), np.append(first[1:], len(order)).tolist(), strict=True):
        r = int(rank[order[a]])
        mine = np.flatnonzero(inst["rank"] == r)
        row, its = _rank_window({c: v[mine] for c, v in inst.items()}, start[order[a:b]], end[order[a:b]], nvtx)
        its = mine[its]
        steps = {"range": inst["range"][its], "start_ns": inst["proj_start"][its], "end_ns": inst["proj_end"][its],
                 "cpu_start": inst["start"][its], "cpu_end": inst["end"][its]}
        found = rank_steps(act, order[a:b]) if row["window"] == CAPTURE else None
        if found is not None:                   # no marks: the steps found in the kernels (nsys/steps.py)
            row, steps = detected(*found)
        for c, v in {"rank": r, **row}.items():
            bounds[c].append(v)
        count = len(steps["start_ns"])
        numbers = steps.pop("iteration", np.arange(count, dtype=np.int64))    # detected: past the warm-up
        for c, v in (("rank", np.full(count, r, dtype=np.int64)), ("window", np.full(count, row["window"], dtype=object)),
                     ("iteration", numbers), *steps.items()):
            iterations[c].append(np.asarray(v))
    dtype = {c: ITERATION_DTYPES.get(c, object) for c in (*WINDOW_COLUMNS, *ITERATION_RANGES)}
    if not bounds["rank"]:
        return Window({c: np.empty(0, dtype[c]) for c in WINDOW_COLUMNS},
                      {c: np.empty(0, dtype[c]) for c in ITERATION_RANGES}, instances)
    return Window({c: np.array(v, dtype=dtype[c]) for c, v in bounds.items()},
                  {c: np.concatenate(v).astype(dtype[c]) for c, v in iterations.items()}, instances)


def _bounds_of(window: Window, ranks: np.ndarray, *columns: str) -> tuple[np.ndarray, ...]:
    """Whether each of `ranks` has a window, then the window's `columns` (bounds) of each."""
    b_rank = window.bounds["rank"]
    by_rank = np.argsort(b_rank, kind="stable")
    at = by_rank[np.minimum(np.searchsorted(b_rank[by_rank], ranks), max(len(b_rank) - 1, 0))]
    found = b_rank[at] == ranks if len(b_rank) else np.zeros(len(ranks), dtype=bool)
    return found, *(window.bounds[c][at] for c in columns)


def clip(act: Activity, window: Window) -> Activity:
    """The activity inside each rank's window: operations that overlap it, cut to its bounds."""
    rank, start, end = act.column("rank"), act.column("start"), act.column("end")
    found, lo, hi = _bounds_of(window, rank, "start_ns", "end_ns")
    keep = found & (end > lo) & (start < hi)
    return act.subset(keep, start=np.maximum(start[keep], lo[keep]), end=np.minimum(end[keep], hi[keep]))


def _busy_by_rank(act: Activity, rank: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each interval [start, end) of a rank: the time some GPU operation of that rank runs in it
    (each rank's union of operations made once per activity, for the window and its iterations)."""
    busy = np.zeros(len(rank), dtype=np.int64)
    unions = cast(dict[int, tuple[np.ndarray, np.ndarray]], act.derived.setdefault("busy_unions", {}))
    for r in np.unique(rank).tolist():
        if r not in unions:
            mine = act.column("rank") == r
            unions[r] = merge_intervals(act.column("start")[mine], act.column("end")[mine])
        at = rank == r
        busy[at] = covered_within(unions[r], start[at], end[at])
    return busy


def iteration_series(act: Activity, window: Window) -> pa.Table:
    """Per rank and iteration of the window: GPU start and end (first kernel start to last kernel
    end of the iteration's projected range), its length, the time the GPU was busy in it and idle."""
    its = window.iterations
    if not len(its["rank"]):
        return arrow_table(dict.fromkeys(ITERATION_COLUMNS, NO_ROWS))
    order = np.argsort(its["rank"], kind="stable")            # as groupby: ranks sorted, rows in order
    rank, start, end = its["rank"][order], its["start_ns"][order], its["end_ns"][order]
    busy = _busy_by_rank(act, rank, start, end)
    return arrow_table({"rank": rank, "window": its["window"][order], "iteration": its["iteration"][order],
                        "start_ns": start, "end_ns": end,
                        "gpu_ns": end - start, "busy_ns": busy, "idle_ns": end - start - busy})


def window_summary(act: Activity, window: Window) -> pa.Table:
    """Per rank: the window's name, GPU start/end, duration, iterations, busy and idle time."""
    b = window.bounds
    rank, start, end = b["rank"], b["start_ns"], b["end_ns"]
    busy = _busy_by_rank(act, rank, start, end)
    it_rank = window.iterations["rank"]
    count = np.array([int((it_rank == r).sum()) for r in rank.tolist()], dtype=np.int64)
    columns = {"rank": rank, "window": b["window"], "start_ns": start, "end_ns": end,
               "duration_ns": end - start, "iterations": count, "busy_ns": busy, "idle_ns": end - start - busy}
    return arrow_table(columns if len(rank) else dict.fromkeys(columns, NO_ROWS))


def instances_inside(window: Window) -> Columns:
    """The NVTX range instances inside each rank's window on the CPU (the window's own range
    included), for the per-range table of the window."""
    inst = window.instance_columns
    found, lo, hi = _bounds_of(window, inst["rank"], "cpu_start", "cpu_end")
    keep = found & (inst["start"] >= lo) & (inst["end"] <= hi)
    return {c: v[keep] for c, v in inst.items()}


def kernel_sum(act: Activity) -> pa.Table:
    """GPU time per rank and kernel name: instances and total_ns (most first)."""
    kernel = act.column("kernel")
    rank, dur = act.column("rank")[kernel], (act.column("end") - act.column("start"))[kernel]
    codes, names = pd.factorize(act.column("name")[kernel], sort=True)
    named = codes >= 0                                          # as groupby: no group of a missing name
    rank, dur, codes = rank[named], dur[named], codes[named]
    order, first = group_starts(rank, codes)
    count = np.diff(np.append(first, len(order))).astype(np.int64)
    total = np.add.reduceat(dur[order], first) if len(first) else np.empty(0, dtype=np.int64)
    g_rank = rank[order][first]
    top = np.lexsort((-total, g_rank))                          # by rank, then most time first; stable
    return arrow_table({"rank": g_rank[top], "name": np.asarray(names, dtype=object)[codes[order][first]][top],
                        "instances": count[top], "total_ns": total[top]})


def with_window(table: pa.Table, window: Window) -> pa.Table:
    """`table` (with a rank column) with the window's name of each rank inserted after `rank`."""
    labels = window.labels
    names = [labels.get(rank, CAPTURE) for rank in table.column("rank").to_pylist()]
    return table.add_column(table.schema.get_field_index("rank") + 1, "window",
                            pa.array(names, pa.string()) if names else pa.nulls(0))
