"""torch.profiler's result tables (`torch_<key>`, hpcprof.core.catalog's TableSpec), each declared once,
and its part in the tool-neutral metrics (hpcprof.core.catalog's Feed): its collector, its headline
metrics and its figures take the names from here; the profiler table gathers them (CATALOG)."""

from __future__ import annotations

from hpcprof.core import catalog as c
from hpcprof.core.catalog import CAPTURE, EACH_ITERATION, EACH_KERNEL, MEASURED, PER_RANK, Feed, TableSpec, ToolCatalog

TORCH = "torch"

WINDOW = TableSpec(TORCH, "window", PER_RANK, MEASURED,
                   "nsys_window's columns, and span, compute, communication and overlap time (ns)",
                   "HTA `get_temporal_breakdown` (kernel_time, idle_time) where the steps span the trace")
ITERATIONS = TableSpec(TORCH, "iterations", "rank and ProfilerStep", EACH_ITERATION, "nsys_iterations' columns")
TEMPORAL = TableSpec(TORCH, "temporal", PER_RANK, CAPTURE,
                     "idle, compute and non-compute time (us) and their % of the kernel time",
                     "HTA `get_temporal_breakdown`")
OVERLAP = TableSpec(TORCH, "overlap", PER_RANK, CAPTURE, "% of communication time overlapped by computation",
                    "HTA `get_comm_comp_overlap`")
IDLE = TableSpec(TORCH, "idle", "rank, stream and cause", CAPTURE,
                 "GPU idle time by cause: host wait, kernel wait, other", "HTA `get_idle_time_breakdown`")
IDLE_CAUSES, STEP_IDLE, LINES = c.idle_tables(TORCH, "ProfilerStep spans but the last")
LAUNCH = TableSpec(TORCH, "launch", "kernel launch", EACH_KERNEL,
                   "CPU and GPU duration and launch delay of each kernel, outliers flagged",
                   "HTA `get_cuda_kernel_launch_stats`")
KERNELS = TableSpec(TORCH, "kernels", "kernel name (the top ones; `others`), per rank", CAPTURE,
                    "GPU time per kernel: sum, max, min, mean (us), stddev, kernel type",
                    "HTA `get_gpu_kernel_breakdown`")
WINDOW_KERNELS = TableSpec(TORCH, "window_kernels", "rank and kernel name", MEASURED,
                           "GPU time of the kernels, memcpys and memsets inside the window (cut to it): "
                           "instances, total_ns (nsys_kernels' columns)")
KERNEL_TYPES = TableSpec(TORCH, "kernel_types", "rank and kernel type", CAPTURE,
                         "GPU time per kernel type (computation, communication, memory) and its %",
                         "HTA `get_gpu_kernel_breakdown` (kernel types)")
BUSBW = TableSpec(TORCH, "busbw", c.BUSBW_ROWS, MEASURED,
                  c.BUSBW + "; sizes from PyTorch's record_param_comms (`In msg nelems`, `Out msg nelems`, `dtype`, "
                  "`Group size`, on the NCCL kernel or its cpu_op by External id); barriers left out",
                  "TraceLens' NcclAnalyser (sizes, algbw, busbw; GB/s here are 1e9 B/s, TraceLens' 2^30); "
                  "nccl-tests' PERFORMANCE.md")
CRITICAL_EVENTS, CRITICAL_PATH, CRITICAL_SEGMENTS = c.critical_path_tables(TORCH)

#: torch.profiler's tables and the tool-neutral metrics computed from them
CATALOG = ToolCatalog(
    tables=(WINDOW, ITERATIONS, TEMPORAL, OVERLAP, IDLE, IDLE_CAUSES, STEP_IDLE, LINES, LAUNCH, KERNELS,
            WINDOW_KERNELS, BUSBW, KERNEL_TYPES, CRITICAL_EVENTS, CRITICAL_PATH, CRITICAL_SEGMENTS),
    feeds={c.WINDOW_DURATION: Feed((WINDOW,), WINDOW.reference),
           c.WINDOW_ITERATIONS: Feed((WINDOW,)), c.WINDOW_DETECTED: Feed((WINDOW,)),
           c.WINDOW_STEP_CV: Feed((ITERATIONS,)),
           **{m: Feed((WINDOW_KERNELS,), "the window's kernels, memcpys and memsets cut to it")
              for m in c.GPU_TIME},
           c.OVERLAP_PCT: Feed((WINDOW,)), c.IDLE_PCT: Feed((WINDOW,)),
           c.CAPTURE_OVERLAP_PCT: Feed((OVERLAP,)), c.CAPTURE_IDLE_PCT: Feed((TEMPORAL,)),
           c.IDLE_CAUSE: Feed((IDLE_CAUSES,)), c.ITERATION_IDLE_PCT: Feed((ITERATIONS,)),
           c.TOP_KERNEL_TIME: Feed((KERNELS,))})
