"""The critical path across ranks from nsys exports (see hpcprof.analysis.critical_path).

Per export: the GPU operations with the start of their launching CUDA API call (the runtime
correlation), the NCCL kernels as collectives (channel: the NCCL stream in order of first use; seq:
launch order in the iteration), the iterations (the workload's NVTX `iteration`/`step<N>` ranges
inside its `timed` range when it has one, else all of them, else Echo's `backward` window) and the
NVTX ranges inside them as phases. Then the cross-rank reduce over all ranks' rows. An export does
not say which communicator a kernel belongs to, so collectives are matched over all the ranks given:
right for one communicator per NCCL stream across them (data or sequence parallel); for disjoint
subgroups (tensor x pipeline parallel) give one group's files at a time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hpcprof.analysis.critical_path import (  # noqa: F401  (re-exported for collect and the report)
    EVENTS_TABLE,
    collect_tables,
    critical_path,
    critical_path_sentence,
    empty_events,
)
from hpcprof.analysis.critical_path import rank_events as events_of_rank
from hpcprof.analysis.nsys.db import (
    NVTX,
    NsysInputError,
    pid_of,
)
from hpcprof.analysis.nsys.distributed import Activity, call_op_codes, collective_of, is_nccl, process_ranges
from hpcprof.analysis.nsys.window import ECHO_RANGE, ITERATION_RANGE, TIMED_RANGE


def timed_iterations(ranges: pd.DataFrame, iteration_range: str | None = None) -> pd.DataFrame:
    """The iteration ranges (number, start, end) among one process's NVTX ranges (name, start, end):
    those named `iteration_range` when given; else `iteration`/`step<N>` inside `timed` when there is
    such a range, else every one, else `backward`."""
    names = ranges["name"].astype(str)
    if iteration_range is not None:
        its = ranges[names == iteration_range]
    else:
        its = ranges[names.str.fullmatch(ITERATION_RANGE.pattern)]
        if its.empty:
            its = ranges[names == ECHO_RANGE]
    timed = ranges[names == TIMED_RANGE]
    if len(timed) and len(its):
        within = np.zeros(len(its), dtype=bool)
        for s, e in zip(timed["start"], timed["end"], strict=True):
            within |= (its["start"].to_numpy() >= s) & (its["end"].to_numpy() <= e)
        its = its[within]
    its = its.sort_values("start", kind="stable")
    return pd.DataFrame({"number": np.arange(len(its), dtype=np.int64), "start": its["start"].to_numpy(np.int64),
                         "end": its["end"].to_numpy(np.int64)})


def launch_starts(act: Activity) -> np.ndarray:
    """For each GPU operation of `act`, the start of the CUDA API call that launched it (the first
    call of the same file, process and correlation id), NaN when none did: a left join as a
    sorted search, no hash join to build."""
    rt = act.runtime
    call_code, op_code = call_op_codes(act)
    code = np.concatenate((call_code, op_code))
    first_call = np.full(int(code.max()) + 1 if len(code) else 0, -1, dtype=np.int64)
    first_call[call_code[::-1]] = np.arange(len(rt) - 1, -1, -1)          # the first call of each key wins
    call = first_call[op_code]
    return np.where(call >= 0, rt["start"].to_numpy(np.float64)[np.maximum(call, 0)] if len(rt) else np.nan, np.nan)


def rank_events(act: Activity, iteration_range: str | None = None) -> pd.DataFrame:
    """Every rank's collectives per timed iteration (`iteration_range`: the NVTX range that marks one,
    see timed_iterations) with the GPU work before each (per-file part)."""
    ops = act.ops[["rank", "file", "pid", "gpid", "corr", "stream", "start", "end", "name", "short"]].copy()
    ops["launch"] = launch_starts(act)
    nccl = is_nccl(ops["short"]) | is_nccl(ops["name"])
    ops["collective"] = np.where(nccl, collective_of(ops["short"]).fillna(collective_of(ops["name"]))
                                 .fillna("other").to_numpy(object), None)
    parts = []
    for path, export in act.exports.items():
        try:
            if not export.has(NVTX):
                continue
            ranges, names = process_ranges(export)
        except NsysInputError as exc:       # as dist.phases: the export is named, the others analysed
            act.failed[path] = str(exc)
            continue
        ranges = pd.DataFrame({"name": names[ranges["name"].to_numpy()], "start": ranges["start"].to_numpy(np.int64),
                               "end": ranges["end"].to_numpy(np.int64), "pid": pid_of(ranges["globalTid"])})
        for (rank, pid), mine in ops[ops["file"] == str(path)].groupby(["rank", "pid"], sort=True):
            own = ranges[ranges["pid"] == pid]
            its = timed_iterations(own, iteration_range)
            phases = own.drop(own.index[own["start"].isin(its["start"]) & own["end"].isin(its["end"])])
            parts.append(events_of_rank(int(rank), mine.assign(name=mine["short"]), its, phases))
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else empty_events()


def critical_path_table(act: Activity) -> pd.DataFrame:
    """The per-iteration table of all ranks in `act` (`hpcprof nsys critical-path` with ranks inside files)."""
    return critical_path(rank_events(act))[0]
