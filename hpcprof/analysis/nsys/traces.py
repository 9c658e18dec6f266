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

from hpcprof.analysis.nsys.db import Export, process_of
from hpcprof.analysis.nsys.loaders import clean_api_names, grid_block_text, kernels
from hpcprof.analysis.nsys.schema import OLD, RUNTIME
from hpcprof.analysis.nsys.table import Table, make_table, null_text
from hpcprof.lazy import LazyModule

sa = LazyModule("sqlalchemy")


def cuda_api_trace(export: Export, layout: str = OLD) -> Table:
    """One row per CUDA API call: start, duration, name (`_vNNNN` dropped), result, correlation
    id, process and thread, thread priority and name (from ThreadNames)."""
    import pandas as pd

    rt = export.table(RUNTIME)
    r = export.ints(sa.select(rt.c.start, rt.c.end, rt.c.nameId, rt.c.returnValue, rt.c.correlationId,
                              rt.c.globalTid))
    tn = export.table("ThreadNames")
    threads = export.ints(sa.select(tn.c.globalTid, tn.c.nameId, tn.c.priority))
    calls = pd.DataFrame({"start": r["start"], "dur": r["end"] - r["start"], "name": r["nameId"],
                          "result": r["returnValue"], "corr": r["correlationId"], "gtid": r["globalTid"]})
    names = pd.DataFrame({"gtid": threads["globalTid"], "tname": threads["nameId"], "prio": threads["priority"]})
    j = calls.merge(names, on="gtid", how="left", sort=False)        # LEFT JOIN: calls in table order
    j = j.sort_values("start", kind="stable", ignore_index=True)
    gtid = j["gtid"].to_numpy(np.int64)
    has_thread = j["tname"].notna().to_numpy()
    thread_names = np.full(len(j), None, dtype=object)
    if has_thread.any():
        thread_names[has_thread] = export.strings(j["tname"].to_numpy()[has_thread].astype(np.int64))
    prio = j["prio"].astype(object).where(has_thread, None).to_numpy(dtype=object)
    cols = {"Start (ns)": j["start"].to_numpy(), "Duration (ns)": j["dur"].to_numpy(),
            "Name": clean_api_names(export.strings(j["name"].to_numpy(np.int64))),
            "Result": j["result"].to_numpy(), "CorrID": j["corr"].to_numpy(),
            "Pid": (gtid >> 24) & 0xFFFFFF, "Tid": gtid & 0xFFFFFF, "T-Pri": prio, "Thread Name": thread_names}
    return make_table(cols, ["i", "i", "s", "i", "i", "i", "i", "i", "s"], null=null_text(layout))


def cuda_kern_exec_trace(export: Export, layout: str = OLD) -> Table:
    """One row per kernel with its launch call: API start and duration, queue start and duration
    (NULL where the kernel started before the call returned), kernel start and duration, total
    (call start to the later of call end and kernel end), PID, TID, device, API name, grid, block
    and kernel name."""
    import pandas as pd

    dims = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
    k = kernels(export, ("deviceId", "correlationId", "globalPid", *dims))
    rt = export.table(RUNTIME)
    r = export.ints(sa.select(rt.c.start, rt.c.end, rt.c.correlationId, rt.c.globalTid, rt.c.nameId))
    kf = pd.DataFrame({"kstart": k["start"], "kend": k["end"], "dev": k["deviceId"], "kname": k["nameId"],
                       "corr": k["correlationId"], "proc": k["globalPid"], **{c: k[c] for c in dims}})
    rf = pd.DataFrame({"rstart": r["start"], "rend": r["end"], "corr": r["correlationId"],
                       "proc": process_of(r["globalTid"]), "gtid": r["globalTid"], "rname": r["nameId"]})
    j = kf.merge(rf, on=["corr", "proc"], how="inner", sort=False)      # kernels in table order
    j = j.sort_values("rstart", kind="stable", ignore_index=True)
    queue = (j["kstart"] - j["rend"]).to_numpy(np.int64)
    queued = queue >= 0
    gtid = j["gtid"].to_numpy(np.int64)
    d = {c: j[c].to_numpy(np.int64) for c in dims}
    cols = {"API Start (ns)": j["rstart"].to_numpy(), "API Dur (ns)": (j["rend"] - j["rstart"]).to_numpy(),
            "Queue Start (ns)": _where(queued, j["rend"].to_numpy()), "Queue Dur (ns)": _where(queued, queue),
            "Kernel Start (ns)": j["kstart"].to_numpy(), "Kernel Dur (ns)": (j["kend"] - j["kstart"]).to_numpy(),
            "Total Dur (ns)": (np.maximum(j["rend"], j["kend"]) - j["rstart"]).to_numpy(),
            "PID": (gtid >> 24) & 0xFFFFFF, "TID": gtid & 0xFFFFFF, "DevId": j["dev"].to_numpy(),
            "API Function": clean_api_names(export.strings(j["rname"].to_numpy(np.int64))),
            "GridXYZ": grid_block_text(d, "grid"), "BlockXYZ": grid_block_text(d, "block"),
            "Kernel Name": export.strings(j["kname"].to_numpy(np.int64))}
    return make_table(cols, ["i"] * 10 + ["s"] * 4, null=null_text(layout))


def _where(keep: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`values` as objects, NULL (None) where not `keep`."""
    out = values.astype(object)
    out[~keep] = None
    return out

