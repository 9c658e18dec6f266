"""`nsys stats` trace reports (one row per call): `cuda_api_trace` (2022.4: `cudaapitrace`; every
CUDA API call) and `cuda_kern_exec_trace` (2022.4: `kernexectrace`; every kernel joined with the
API call that launched it). nsys 2025.3.1's SQL is 2022.4's (the kernel name through a view of
the same join); the layouts differ in the NULL text only. Same columns, NULL text and row order
as nsys's SQL: rows by start time (`ORDER BY 1`), rows with equal start times in the order
SQLite's join produces them (the driving table in rowid order), which a stable sort of the
joined rows reproduces. Checked against nsys 2022.4 and 2025.3.1 by the
differential tests.
"""

from __future__ import annotations

import numpy as np

from hpcprof.tools.nsys.stats.db import Export, process_of
from hpcprof.tools.nsys.stats.loaders import clean_api_names, grid_block_text, kernels
from hpcprof.tools.nsys.stats.numerics import join_rows
from hpcprof.tools.nsys.stats.schema import OLD, RUNTIME
from hpcprof.tools.nsys.stats.table import Table, make_table, null_text


def cuda_api_trace(export: Export, layout: str = OLD) -> Table:
    """One row per CUDA API call: start, duration, name (`_vNNNN` dropped), result, correlation
    id, process and thread, thread priority and name (from ThreadNames)."""
    r = export.int_columns(RUNTIME, ("start", "end", "nameId", "returnValue", "correlationId", "globalTid"))
    threads = export.int_columns("ThreadNames", ("globalTid", "nameId", "priority"))
    # LEFT JOIN ThreadNames: calls in table order (each once per name row of its thread), then by start
    ci, ti = join_rows([r["globalTid"]], [threads["globalTid"]], keep_unmatched=True)
    by_start = np.argsort(r["start"][ci], kind="stable")
    ci, ti = ci[by_start], ti[by_start]
    gtid = r["globalTid"][ci]
    has_thread = ti >= 0
    thread_names = np.full(len(ci), None, dtype=object)
    prio = np.full(len(ci), None, dtype=object)
    if has_thread.any():
        thread_names[has_thread] = export.strings(threads["nameId"][ti[has_thread]])
        prio[has_thread] = threads["priority"][ti[has_thread]].tolist()
    cols = {"Start (ns)": r["start"][ci], "Duration (ns)": (r["end"] - r["start"])[ci],
            "Name": clean_api_names(export.strings(r["nameId"][ci])),
            "Result": r["returnValue"][ci], "CorrID": r["correlationId"][ci],
            "Pid": (gtid >> 24) & 0xFFFFFF, "Tid": gtid & 0xFFFFFF, "T-Pri": prio, "Thread Name": thread_names}
    return make_table(cols, ["i", "i", "s", "i", "i", "i", "i", "i", "s"], null=null_text(layout))


def cuda_kern_exec_trace(export: Export, layout: str = OLD) -> Table:
    """One row per kernel with its launch call: API start and duration, queue start and duration
    (NULL where the kernel started before the call returned), kernel start and duration, total
    (call start to the later of call end and kernel end), PID, TID, device, API name, grid, block
    and kernel name."""
    dims = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
    k = kernels(export, ("deviceId", "correlationId", "globalPid", *dims))
    r = export.int_columns(RUNTIME, ("start", "end", "correlationId", "globalTid", "nameId"))
    # INNER JOIN on (correlation id, process): kernels in table order, then by call start
    ki, ri = join_rows([k["correlationId"], k["globalPid"]], [r["correlationId"], process_of(r["globalTid"])])
    by_start = np.argsort(r["start"][ri], kind="stable")
    ki, ri = ki[by_start], ri[by_start]
    kstart, kend, rstart, rend = k["start"][ki], k["end"][ki], r["start"][ri], r["end"][ri]
    queue = kstart - rend
    queued = queue >= 0
    gtid = r["globalTid"][ri]
    d = {c: k[c][ki] for c in dims}
    cols = {"API Start (ns)": rstart, "API Dur (ns)": rend - rstart,
            "Queue Start (ns)": _where(queued, rend), "Queue Dur (ns)": _where(queued, queue),
            "Kernel Start (ns)": kstart, "Kernel Dur (ns)": kend - kstart,
            "Total Dur (ns)": np.maximum(rend, kend) - rstart,
            "PID": (gtid >> 24) & 0xFFFFFF, "TID": gtid & 0xFFFFFF, "DevId": k["deviceId"][ki],
            "API Function": clean_api_names(export.strings(r["nameId"][ri])),
            "GridXYZ": grid_block_text(d, "grid"), "BlockXYZ": grid_block_text(d, "block"),
            "Kernel Name": export.strings(k["nameId"][ki])}
    return make_table(cols, ["i"] * 10 + ["s"] * 4, null=null_text(layout))


def _where(keep: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`values` as objects, NULL (None) where not `keep`."""
    out = values.astype(object)
    out[~keep] = None
    return out

