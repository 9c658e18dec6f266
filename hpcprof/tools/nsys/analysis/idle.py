"""An Nsight Systems export (.sqlite) as the idle attribution's timeline (hpcprof.analysis.idle): the
window is the step hook's `hpcprof:step` NVTX ranges; the device's busy time is its kernels, memcpys
and memsets; the host's intervals are the CUDA runtime calls of the thread that pushed the ranges
(synchronising calls and the host work after them: sync; every call, with the Python between
calls under LAUNCH_GLUE_US: launch). nsys sees no DataLoader or optimizer annotation by default:
the stack sampler's samples (epoch ns; the export's session start puts them on its clock) say
where the rest went (input, optimizer, program)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from hpcprof.analysis import idle as I

STEP_RANGE = "hpcprof:step"
_VERSION = re.compile(r"_v\d+$")
SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                        "cudaMemcpy2D", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize"})
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


#: SQL with `?` parameters -> its rows (an open export's query)
Query = Callable[[str, Sequence[object]], list[tuple]]


def timeline(path: Path, rank: int = 0, samples: Path | None = None) -> I.Timeline:
    """The idle attribution's timeline of one rank's export file (µs on the export's clock);
    `samples`: the stack sampler's file of that rank."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return export_timeline(lambda sql, params: db.execute(sql, params).fetchall(), tables, rank, samples)
    finally:
        db.close()


def export_timeline(query: Query, tables: set[str], rank: int = 0, samples: Path | None = None,
                    busy: I.Intervals | None = None) -> I.Timeline:
    """The idle attribution's timeline of an open export (its `query` and `tables`): `busy` the
    device's busy intervals (µs) where the caller has read its GPU operations, else read here."""
    steps = query("SELECT start, end, globalTid FROM NVTX_EVENTS WHERE text = ? AND end IS NOT NULL "
                  "ORDER BY start", (STEP_RANGE,)) if "NVTX_EVENTS" in tables else []
    if not steps:       # no step hook's steps: nothing to attribute (nothing more read)
        none = I.intervals(np.zeros(0), np.zeros(0))
        return I.Timeline(rank=rank, steps=none, busy=none, host={}, sync_ops=none)
    if busy is None:
        rows = [r for t in GPU_TABLES if t in tables for r in query(f"SELECT start, end FROM {t}", ())]
        busy = I.intervals(np.array([b[0] for b in rows], dtype=np.float64) / 1000,
                           np.array([b[1] for b in rows], dtype=np.float64) / 1000)
    main = steps[0][2]
    calls = query("SELECT r.start, r.end, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                  "ON r.nameId = s.id WHERE r.globalTid = ? ORDER BY r.start", (main,)) \
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables else []
    start_ns = query("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME", ())[:1] \
        if "TARGET_INFO_SESSION_START_TIME" in tables else None
    s = np.array([c[0] for c in calls], dtype=np.float64) / 1000
    e = np.array([c[1] for c in calls], dtype=np.float64) / 1000
    names = [_VERSION.sub("", c[2]) for c in calls]
    blocking = [i for i, n in enumerate(names) if n in SYNC_CALLS]
    sync_ops = I.intervals(s[blocking], e[blocking])
    after = I.after(e[blocking], s)
    issuing = I.intervals(s, e)
    if len(issuing[0]):
        keep = np.ones(len(issuing[0]), dtype=bool)
        keep[1:] = issuing[0][1:] - issuing[1][:-1] > I.LAUNCH_GLUE_US
        first = np.flatnonzero(keep)
        issuing = issuing[0][first], np.maximum.reduceat(issuing[1], first)
    window = (np.array([r[0] for r in steps], dtype=np.float64) / 1000,
              np.array([r[1] for r in steps], dtype=np.float64) / 1000)
    t = I.Timeline(rank=rank, steps=window, busy=busy,
                   host={"sync": I.intervals(np.concatenate([sync_ops[0], after[0]]),
                                             np.concatenate([sync_ops[1], after[1]])),
                         "launch": issuing},
                   sync_ops=sync_ops)
    steps_n = max(len(steps), 1)
    lo, hi = (window[0].min(), window[1].max()) if len(steps) else (0.0, 0.0)
    counts: dict[str, int] = {}
    for i in blocking:
        if lo <= s[i] < hi:
            counts[names[i]] = counts.get(names[i], 0) + 1
    if counts:
        t.evidence["sync"] = ", ".join(f"{n} x{c / steps_n:.3g}/step" for n, c in counts.items())
    launches = [e[i] - s[i] for i, n in enumerate(names) if n.startswith("cudaLaunchKernel") and lo <= s[i] < hi]
    t.evidence["launch"] = f"{len(launches) / steps_n:.0f} kernel launches a step, median launch " \
                           f"{float(np.median(launches)) if launches else float('nan'):.1f} us"
    if start_ns and samples is not None and samples.is_file():
        I.add_samples(t, samples, float(start_ns[0][0]))
    return t
