"""Steps of an nsys export without iteration ranges (hpcprof.analysis.detect_steps on one rank's kernels):
the window that nsys/window.py uses instead of the whole capture.

A rank's kernels are read in launch order (their process's correlation ids; a kernel whose CUDA call
is not in the export is left out); a rank file holding
several processes (torchrun under one nsys) is read in its process with the most kernels. Each
step is projected onto the GPU as an NVTX range is: its host interval runs from the launch of its
first kernel to that of the next step's first kernel (to its own last kernel where no step follows
at once), and the step lasts from the first start to the last end of the GPU operations
(kernels, memcpys, memsets) launched in it.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from hpcprof.analysis.categories import run_categories
from hpcprof.analysis.detect_steps import find_steps, project, uneven
from hpcprof.tools.nsys.analysis.distributed import Activity, call_op_codes

#: a launch time that is not known (the operation's API call is not in the export)
UNKNOWN = -1


def launch_times(act: Activity) -> np.ndarray:
    """The start of the CUDA API call that launched each operation of `act` (UNKNOWN where none
    is in the export); made once per activity."""
    got = act.derived.get("launch_times")
    if got is None:
        call_code, op_code = call_op_codes(act)
        by_code = np.full(int(max(call_code.max(initial=-1), op_code.max(initial=-1))) + 1, UNKNOWN, dtype=np.int64)
        by_code[call_code] = act.call("start")
        got = act.derived["launch_times"] = by_code[op_code]
    return cast(np.ndarray, got)


def rank_steps(act: Activity, ops: np.ndarray) -> tuple[str, dict[str, np.ndarray]] | None:
    """The steps found in one rank's operations (`ops`: their positions in `act`): (the window's
    label, per step its GPU start_ns, end_ns and host cpu_start, cpu_end), or None when the
    detection refuses (too few kernels, no clear period, steps far from alike: detect_steps.uneven)."""
    launch = launch_times(act)
    kernel = ops[act.column("kernel")[ops] & (launch[ops] != UNKNOWN)]
    if not len(kernel) or not act.exports:
        return None
    pid = act.column("pid")
    pids, counts = np.unique(pid[kernel], return_counts=True)
    main = pids[np.argmax(counts)]
    kernel = kernel[pid[kernel] == main]
    kernel = kernel[np.lexsort((act.column("start")[kernel], act.column("corr")[kernel]))]
    found = find_steps(act.column("name")[kernel], run_categories(next(iter(act.exports))))
    if isinstance(found, str):
        return None
    mine = ops[pid[ops] == main]
    step = project(found, launch[kernel], launch[mine], act.column("start")[mine].astype(np.int64),
                   act.column("end")[mine].astype(np.int64))
    if uneven(step["start"], step["end"]):
        return None
    return found.label, {"iteration": found.first + np.arange(len(found.starts), dtype=np.int64),
                         "start_ns": step["start"], "end_ns": step["end"], "cpu_start": step["cpu_start"],
                         "cpu_end": step["cpu_end"]}
