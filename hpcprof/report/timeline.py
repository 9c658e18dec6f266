"""A merged timeline of all ranks of a run as Chrome trace JSON (the Trace Event Format that Perfetto
and chrome://tracing open): one process per rank, on one clock.

From what `collect` keeps of the critical path (`<tool>_critical_path_events`, nsys exports and
torch traces alike; hpcprof.analysis.critical_path): each rank's steps, its GPU work between
collectives (runs of kernels per NVTX phase or annotation, `[GPU idle]` where there was none), its
collectives split into the wait for the last rank and the transfer after it (as
hpcprof.analysis.collective_wait splits them), and the critical path's segments on their rank
(`<tool>_critical_path_segments`). The ranks' clocks are put on one by the ends of the collectives
they share (clocks.rank_offsets); times are µs from the earliest event. A step's slice spans its
first to its last GPU operation or collective on that rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hpcprof.analysis.critical_path import EVENTS_TABLE, SEGMENTS_TABLE
from hpcprof.core import catalog as c
from hpcprof.core.errors import UserError
from hpcprof.run.results import read_table

if TYPE_CHECKING:
    import pandas as pd

    from hpcprof.report.runs import RunInfo

#: the threads of a rank's process: (tid, name)
THREADS = ((0, "steps"), (1, "GPU work"), (2, "collectives"), (3, "critical path"))


def _slice(pid: int, tid: int, name: str, cat: str, start_ns: float, end_ns: float, origin: float,
           args: dict[str, Any] | None = None) -> dict[str, Any]:
    """One complete event ("X"), times in µs from `origin` (ns)."""
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": cat, "ts": round((start_ns - origin) / 1e3, 3),
            "dur": round(max(end_ns - start_ns, 0.0) / 1e3, 3), "args": args or {}}


def _metadata(ranks: list[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for rank in ranks:
        out += [{"ph": "M", "pid": rank, "tid": 0, "name": "process_name", "args": {"name": f"rank {rank}"}},
                {"ph": "M", "pid": rank, "tid": 0, "name": "process_sort_index", "args": {"sort_index": rank}}]
        out += [{"ph": "M", "pid": rank, "tid": tid, "name": "thread_name", "args": {"name": name}}
                for tid, name in THREADS]
    return out


def chrome_trace(events: pd.DataFrame, segments: pd.DataFrame | None) -> dict[str, Any]:
    """The Chrome trace document of a run's critical-path events (each rank on its own clock) and
    the segments the critical path made of them (after clocks.aligned, as collect makes them).
    Every rank is moved onto the lowest rank's clock by the ends of the collectives they share
    (clocks.rank_offsets: collect's alignment moves only clocks over a second apart; here every
    offset counts, the segments moved by what collect left)."""
    from hpcprof.analysis.clocks import SKEW_NS, rank_offsets

    offsets = rank_offsets(events)
    shift = events["rank"].map(offsets).fillna(0).to_numpy(np.int64)
    events = events.assign(start=events["start"] - shift, end=events["end"] - shift)
    if segments is not None:
        left = segments["rank"].map({r: o for r, o in offsets.items() if abs(o) <= SKEW_NS}).fillna(0)
        segments = segments.assign(start_ns=segments["start_ns"] - left, end_ns=segments["end_ns"] - left)
    origin = float(events["start"].min())
    out: list[dict[str, Any]] = []
    for (rank, it), g in events.groupby(["rank", "iteration"], sort=True):
        out.append(_slice(int(rank), 0, f"step {int(it)}", "step", float(g["start"].min()), float(g["end"].max()),
                          origin, {"iteration": int(it)}))
    for row in events[events["kind"] == "compute"].itertuples():
        out.append(_slice(int(row.rank), 1, str(row.name), "gpu", float(row.start), float(row.end), origin,
                          {"iteration": int(row.iteration)}))
    coll = events[events["kind"] == "collective"].copy()
    dur = coll["end"].astype(float) - coll["start"].astype(float)
    coll["wait"] = dur - dur.groupby([coll["iteration"], coll["channel"], coll["seq"]]).transform("min")
    for row in coll.itertuples():
        args = {"iteration": int(row.iteration), "channel": str(row.channel), "seq": int(row.seq),
                "wait_ns": float(row.wait)}
        split = float(row.start) + float(row.wait)
        if row.wait > 0:
            out.append(_slice(int(row.rank), 2, f"{row.name} wait", "wait", float(row.start), split, origin, args))
        out.append(_slice(int(row.rank), 2, str(row.name), "collective", split, float(row.end), origin, args))
    if segments is not None:
        for seg in segments.itertuples():
            out.append(_slice(int(seg.rank), 3, f"{seg.kind}: {seg.name}", "critical_path", float(seg.start_ns),
                              float(seg.end_ns), origin, {"iteration": int(seg.iteration), "segment": int(seg.segment)}))
    ranks = sorted(int(r) for r in np.unique(events["rank"]))
    return {"traceEvents": _metadata(ranks) + out, "displayTimeUnit": "ms",
            "otherData": {"clock": "the ranks' clocks aligned (hpcprof.analysis.clocks); µs from the first event"}}


def run_timeline(info: RunInfo) -> dict[str, Any]:
    """The merged timeline of one collected run; UserError where it has no critical-path events."""
    events = read_table(info.run.path, c.table_name(info.tool, EVENTS_TABLE))
    if events is None or events.empty:
        raise UserError(f"--timeline: run {info.run.run_id} has no critical-path events (profile it with nsys or "
                        "torch on two or more ranks with collectives, then `hpcprof collect` it)")
    return chrome_trace(events, read_table(info.run.path, c.table_name(info.tool, SEGMENTS_TABLE)))
