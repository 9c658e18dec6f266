"""The critical path across ranks from nsys exports (see hpcprof.analysis.critical_path).

Per export: the GPU operations with the start of their launching CUDA API call (the runtime
correlation), the NCCL kernels as collectives (channel: the NCCL stream in order of first use; seq:
launch order in the iteration), the iterations (the workload's NVTX `iteration`/`step<N>` ranges
inside its `timed` range when it has one, else all of them, else the optimizer step hook's
`hpcprof:step` ranges of a `command`, else Echo's `backward` window) and the
NVTX ranges inside them as phases. Then the cross-rank reduce over all ranks' rows. An export does
not say which communicator a kernel belongs to, so collectives are matched over all the ranks given:
right for one communicator per NCCL stream across them (data or sequence parallel); for disjoint
subgroups (tensor x pipeline parallel) give one group's files at a time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from hpcprof.analysis.critical_path import (  # noqa: F401  (re-exported for collect and the report)
    EVENTS_TABLE,
    collect_tables,
    critical_path,
    critical_path_sentence,
    empty_events,
    events_of_ranks,
    str_each,
)
from hpcprof.config.profile import STEP_RANGE
from hpcprof.tools.nsys.analysis.activity import launch_starts
from hpcprof.tools.nsys.analysis.distributed import Activity, collectives, exports_ranges, per_distinct
from hpcprof.tools.nsys.analysis.window import ECHO_RANGE, ITERATION_RANGE, TIMED_RANGE
from hpcprof.tools.nsys.stats.arrays import group_starts
from hpcprof.tools.nsys.stats.db import pid_of


def timed_iterations(names: np.ndarray, start: np.ndarray, end: np.ndarray,
                     iteration_range: str | None = None) -> dict[str, np.ndarray]:
    """The iteration ranges (number, start, end) among one process's NVTX ranges (names, start, end):
    those named `iteration_range` when given; else `iteration`/`step<N>` inside `timed` when there is
    such a range, else every one, else the step hook's `hpcprof:step`, else `backward`."""
    texts = per_distinct(names, str)                              # as str_each: str() of each

    def named(match: Callable[[str], bool]) -> np.ndarray:      # one test per distinct name
        return np.flatnonzero(per_distinct(texts, lambda n: isinstance(n, str) and match(n), bool))

    if iteration_range is not None:
        its = named(lambda n: n == iteration_range)
    else:
        its = named(lambda n: ITERATION_RANGE.fullmatch(n) is not None)
        if not len(its):                    # a `command`: the optimizer step hook's steps of the window
            its = named(lambda n: n == STEP_RANGE)
        if not len(its):
            its = named(lambda n: n == ECHO_RANGE)
    timed = named(lambda n: n == TIMED_RANGE)
    if len(timed) and len(its):             # inside some timed range: of those opened before, the latest end
        timed = timed[np.argsort(start[timed], kind="stable")]
        reach = np.maximum.accumulate(end[timed])
        before = np.searchsorted(start[timed], start[its], side="right") - 1
        its = its[(before >= 0) & (reach[np.maximum(before, 0)] >= end[its])]
    its = its[np.argsort(start[its], kind="stable")]
    return {"number": np.arange(len(its), dtype=np.int64), "start": start[its], "end": end[its]}


def rank_events(act: Activity, iteration_range: str | None = None) -> pd.DataFrame:
    """rank_event_columns as a DataFrame (empty_events when it has no row)."""
    columns = rank_event_columns(act, iteration_range)
    return pd.DataFrame(columns) if columns is not None else empty_events()


def rank_event_columns(act: Activity, iteration_range: str | None = None) -> dict[str, np.ndarray] | None:
    """Every rank's collectives per timed iteration (`iteration_range`: the NVTX range that marks one,
    see timed_iterations) with the GPU work before each (per-file part), as numpy columns; None
    when there is no row."""
    launch = launch_starts(act)
    comm = act.column("comm")
    collective = np.full(len(comm), None, dtype=object)
    collective[comm] = collectives(act.column("short")[comm], act.column("name")[comm])
    files, rank, pid = act.column("file"), act.column("rank"), act.column("pid")
    parts: list[tuple[int, dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]] = []
    for path, ranges, names in exports_ranges(act):
        range_name = names[ranges["name"]]
        range_start, range_end = ranges["start"].astype(np.int64, copy=False), ranges["end"].astype(np.int64, copy=False)
        range_pid = pid_of(ranges["globalTid"])
        mine_all = np.flatnonzero(files == str(path))
        if not len(mine_all):               # no GPU operations in this export
            continue
        order, first = group_starts(rank[mine_all], pid[mine_all])      # as groupby: sorted, rows in order
        for a, b in zip(first.tolist(), np.append(first[1:], len(order)).tolist(), strict=True):
            mine = mine_all[order[a:b]]
            own = np.flatnonzero(range_pid == pid[mine[0]])
            its = timed_iterations(range_name[own], range_start[own], range_end[own], iteration_range)
            phases = own[~(np.isin(range_start[own], its["start"]) & np.isin(range_end[own], its["end"]))]
            ops = {"start": act.column("start")[mine], "end": act.column("end")[mine], "launch": launch[mine],
                   "stream": act.column("stream")[mine], "name": act.column("short")[mine],
                   "collective": collective[mine]}
            parts.append((int(rank[mine[0]]), ops, its, {"name": range_name[phases], "start": range_start[phases],
                                                         "end": range_end[phases]}))
    return events_of_ranks(parts)
