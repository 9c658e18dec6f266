"""Steps of a Kineto trace without ProfilerStep annotations (hpcprof.analysis.detect_steps on the rank's
kernels launched in the trace, in launch order: their correlation ids): the iterations
trace/window.py uses instead of the whole trace, each projected onto the GPU as a ProfilerStep is
(the GPU events launched in it). Kernels launched before the trace began (their CUDA call is not
in it) are left out."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hpcprof.analysis.categories import run_categories
from hpcprof.analysis.detect_steps import find_steps, project, uneven
from hpcprof.tools.torch.analysis.load import RankTrace

#: the trace categories of GPU work (kernels, memcpys, memsets; not the syncs), kernels first
WORK = ("kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset")


def trace_steps(trace: RankTrace) -> tuple[str, pd.DataFrame] | None:
    """(the window's label, per step its iteration number, GPU start_us, end_us and host
    cpu_start_us, cpu_end_us relative to the trace's origin) of the steps found in `trace`, or
    None when the detection refuses."""
    gpu = trace.gpu
    correlation, ts = gpu["correlation"], gpu["ts"]
    launched = np.isin(correlation, trace.cpu["correlation"])     # its launch is in the trace
    launch = np.where(launched, gpu["launch_ts"], np.nan)
    cat = gpu.values("cat").astype(str)
    work = np.flatnonzero(np.isin(cat, WORK))
    kernel = work[np.isin(cat[work], WORK[:2]) & launched[work]]
    kernel = kernel[np.lexsort((ts[kernel], correlation[kernel]))]
    found = find_steps(gpu.values("name")[kernel], run_categories(trace.path))
    if isinstance(found, str):
        return None
    step = project(found, launch[kernel], launch[work], ts[work], gpu["end"][work])
    if uneven(step["start"], step["end"]):
        return None
    return found.label, pd.DataFrame({"iteration": found.first + np.arange(len(found.starts)), "start_us": step["start"],
                                      "end_us": step["end"], "cpu_start_us": step["cpu_start"],
                                      "cpu_end_us": step["cpu_end"]})
