"""Nsight Systems' result tables (`nsys_<key>`, hpcprof.core.catalog's TableSpec), each declared once,
and its part in the tool-neutral metrics (hpcprof.core.catalog's Feed): its collector, its headline
metrics and its figures take the names from here; the profiler table gathers them (CATALOG)."""

from __future__ import annotations

from hpcprof.core import catalog as c
from hpcprof.core.catalog import CAPTURE, EACH_ITERATION, MEASURED, PER_RANK, Feed, TableSpec, ToolCatalog

NSYS = "nsys"
NSYS_STATS = "`nsys stats --report {}` (2025.3.1), per rank"

# -- the measured window -----------------------------------------------------------------------------
WINDOW = TableSpec(NSYS, "window", PER_RANK, MEASURED,
                   "the window's name, GPU start and end, duration, iterations, GPU busy and idle time (ns)",
                   "`nsys stats --report nvtx_gpu_proj_sum`: the projection of the `timed` range")
ITERATIONS = TableSpec(NSYS, "iterations", "rank and iteration", EACH_ITERATION,
                       "each iteration's GPU start and end (first kernel start to last kernel end of its "
                       "projected range), gpu_ns, busy_ns and idle_ns",
                       "`nsys stats --report nvtx_gpu_proj_sum`: the iteration ranges' projections")
KERNELS = TableSpec(NSYS, "kernels", "rank and kernel name", MEASURED,
                    "GPU time per kernel name inside the window: instances, total_ns",
                    "`nsys stats --report cuda_gpu_kern_sum`, cut to the window")
NCCL = TableSpec(NSYS, "nccl", "collective type, per rank and over all ranks (`scope`)", MEASURED,
                 "NCCL kernels per collective: count, total, mean, min, max (ns), the slowest rank")
OVERLAP = TableSpec(NSYS, "overlap", "rank and device", MEASURED,
                    "compute, communication and compute-during-communication time (merged intervals), "
                    "overlap_pct, idle_ns and span_ns of the GPU work",
                    "HTA `get_comm_comp_overlap` (overlap) and `get_temporal_breakdown` (idle)")
PHASES = TableSpec(NSYS, "phases", "rank and NVTX range", MEASURED,
                   "GPU work under each NVTX range inside the window: instances, GPU operations, kernels, "
                   "kernel time, projected time, CPU time",
                   "`nsys stats --report nvtx_gpu_proj_sum` (projected time)")
TIMELINE = TableSpec(NSYS, "timeline", "range or kernel of the median iteration, per rank", EACH_ITERATION,
                     "one iteration (the window's median) on every rank: ranges and kernels, start and end in "
                     "ms from the iteration's GPU start")
#: the shortest GPU idle gap nsys_gaps keeps (ns)
GAP_NS = 100_000
GAPS = TableSpec(NSYS, "gaps", "gap, per process and device", MEASURED,
                 "GPU idle gaps longer than 0.1 ms: start, end, duration, the operations before and after",
                 "`nsys analyze` rule gpu_gaps")
BUSBW = TableSpec(NSYS, "busbw", c.BUSBW_ROWS, MEASURED,
                  c.BUSBW + "; sizes from NCCL's NVTX ranges (`ncclAllReduce`, ...: the payload's `Message size "
                  "[bytes]`, in exports made with `nsys export --include-blobs=true`), matched to the NCCL kernel "
                  "each launched (the CUDA launch inside the range on its thread, by correlation id)",
                  "nccl-tests' PERFORMANCE.md (algbw, busbw); NCCL Inspector")
IDLE_CAUSES, STEP_IDLE, LINES = c.idle_tables(NSYS, "the step hook's hpcprof:step ranges")
# -- the whole capture -------------------------------------------------------------------------------
CAPTURE_OVERLAP = TableSpec(NSYS, "capture_overlap", "rank and device", CAPTURE,
                            "nsys_overlap's columns over the whole capture", OVERLAP.reference)
CAPTURE_PHASES = TableSpec(NSYS, "capture_phases", "rank and NVTX range", CAPTURE,
                           "nsys_phases' columns over the whole capture", PHASES.reference)
SUMMARIES = tuple(TableSpec(NSYS, report, "row of the report, per rank", CAPTURE, about, NSYS_STATS.format(report))
                  for report, about in (
                      ("cuda_gpu_kern_sum", "GPU time per kernel"),
                      ("cuda_api_sum", "CUDA API calls"),
                      ("cuda_gpu_mem_time_sum", "GPU memory operations by time"),
                      ("cuda_gpu_mem_size_sum", "GPU memory operations by size"),
                      ("nvtx_sum", "NVTX ranges (CPU time)"),
                      ("osrt_sum", "OS runtime calls")))
CUDA_GPU_KERN_SUM = SUMMARIES[0]
CRITICAL_EVENTS, CRITICAL_PATH, CRITICAL_SEGMENTS = c.critical_path_tables(NSYS)

#: nsys's tables and the tool-neutral metrics computed from them
CATALOG = ToolCatalog(
    tables=(WINDOW, ITERATIONS, KERNELS, NCCL, BUSBW, OVERLAP, PHASES, TIMELINE, GAPS, IDLE_CAUSES, STEP_IDLE, LINES,
            CAPTURE_OVERLAP, CAPTURE_PHASES, *SUMMARIES, CRITICAL_EVENTS, CRITICAL_PATH, CRITICAL_SEGMENTS),
    feeds={c.WINDOW_DURATION: Feed((WINDOW,), WINDOW.reference),
           c.WINDOW_ITERATIONS: Feed((WINDOW,)), c.WINDOW_DETECTED: Feed((WINDOW,)),
           c.WINDOW_STEP_CV: Feed((ITERATIONS,)),
           **{m: Feed((KERNELS,), "`nsys stats` cuda_gpu_kern_sum over the window") for m in c.GPU_TIME},
           **{m: Feed((CUDA_GPU_KERN_SUM,), CUDA_GPU_KERN_SUM.reference) for m in c.CAPTURE_GPU_TIME},
           c.OVERLAP_PCT: Feed((OVERLAP,)), c.IDLE_PCT: Feed((OVERLAP,)),
           c.CAPTURE_OVERLAP_PCT: Feed((CAPTURE_OVERLAP,)), c.CAPTURE_IDLE_PCT: Feed((CAPTURE_OVERLAP,)),
           c.IDLE_CAUSE: Feed((IDLE_CAUSES,)), c.ITERATION_IDLE_PCT: Feed((ITERATIONS,)),
           c.TOP_KERNEL_TIME: Feed((KERNELS,))})
