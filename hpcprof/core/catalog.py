"""The tool-neutral names the rooms share, each declared once: the time windows, the result tables
`collect` writes that no profiler tool owns (Echo's slowdown, the workloads', collect's manifest,
forensics, the step hook's, the ceilings) and every headline metric, with its unit, the time
window it is computed over, its formula in words, the tables it comes from and the reference tool
whose definition it follows. A profiler tool declares its own tables in its package
(hpcprof/tools/<tool>/tables.py, a ToolCatalog: its TableSpecs and the Feed of its tables into
each metric here); the profiler table (hpcprof.profilers) gathers them, and
docs/reference/metrics.md is `metrics_page` of every tool's catalog.

A metric's name may hold a part the data names (`phase.{phase}.time`: one metric per workload
phase); `MetricSpec.match` reads such a name back, `MetricSpec.value` makes one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

#: the time windows a table or metric covers, with what each means
WINDOWS: dict[str, str] = {
    "measured window": "the timed iterations projected onto GPU time, per rank: nsys: a `command`'s "
                       "`profile.window.nvtx`, else the step hook's `hpcprof:step` ranges (a `command`'s optimizer "
                       "steps skip_steps+1 .. skip_steps+steps), else seqpar's `timed` NVTX range, else the "
                       "iteration ranges (`iteration`, ddp's `step`, `step<N>`), else Echo's `backward`; torch: the "
                       "`ProfilerStep#N` steps (the step hook's on a `command`). Without any, the whole capture "
                       "(the `window` column says which)",
    "whole capture": "everything the profiler recorded on the rank, start-up, warm-up, NCCL set-up and "
                     "teardown included (first GPU operation to the last)",
    "counted iterations": "the workload's own timing of each iteration on each rank, without its warm-up "
                          "iterations and the step the profiler's window took (ddp); a `command`'s: the step "
                          "hook's wall time of each optimizer step of the window (from the previous step's end)",
    "each iteration": "one value per iteration of the measured window",
    "each kernel": "one value per GPU kernel the profiler recorded",
    "the run": "the run as a whole",
}
MEASURED, CAPTURE, COUNTED, EACH_ITERATION, EACH_KERNEL, RUN = WINDOWS
#: the name a `window` column gives a measured window that is the whole capture (no iteration range found)
CAPTURE_WINDOW = "capture"

#: who writes a tool-neutral table (a tool's own tables: its name): `collect` names it `<producer>_<key>`
ECHO, WORKLOAD, FILES, FORENSICS = "echo", "workload", "files", "forensics"
STEPS = "steps"     # the optimizer step hook's records (<run>/steps/)
BENCH = "bench"     # `hpcprof bench ceilings` run in the same job (experiment `ceilings:`; <run>/ceilings.json)


def table_name(producer: str, key: str) -> str:
    """The result table a producer's table `key` is written as (`nsys`, `iterations` -> `nsys_iterations`)."""
    return f"{producer}_{key}"


@dataclass(frozen=True)
class TableSpec:
    """One result table (`results/<name>.parquet`)."""

    producer: str       # a profiler tool (its collector), echo, workload (its JSON results), files,
    #                     forensics (a failed or timed-out run's dumps), bench (`hpcprof bench ceilings` in the job)
    key: str            # the producer's own name for it
    rows: str           # one row per ...
    window: str         # a key of WINDOWS
    about: str
    reference: str = ""     # the tool whose output or definition it follows

    @property
    def name(self) -> str:
        return table_name(self.producer, self.key)


def _t(producer: str, key: str, rows: str, window: str, about: str, reference: str = "") -> TableSpec:
    return TableSpec(producer, key, rows, window, about, reference)


PER_RANK = "rank (one row per rank)"

# -- what several tools' tables share ----------------------------------------------------------------
#: the critical path's tables (hpcprof.analysis.critical_path), one set per tool that has one
CRITICAL_PATH_KEYS = ("critical_path_events", "critical_path", "critical_path_segments")
_CRITICAL = (("rank, iteration and collective kernel", "each rank's collective kernels per iteration with "
              "the GPU work before each (the per-rank input of the critical path)"),
             ("iteration", "the iteration's length on the critical path, the collective that waited most, "
              "its critical rank, what held it and for how long, the ranks that waited"),
             ("segment of the chain", "the chain of compute, collective and wait segments that set the "
              "iteration's length (rank, kind, name, start, end, duration)"))


def critical_path_tables(tool: str) -> tuple[TableSpec, TableSpec, TableSpec]:
    """A tool's critical path (hpcprof.analysis.critical_path): its events, iterations and segments."""
    events, path, segments = (_t(tool, key, rows, EACH_ITERATION, about)
                              for key, (rows, about) in zip(CRITICAL_PATH_KEYS, _CRITICAL, strict=True))
    return events, path, segments


#: a busbw table's rows and columns (hpcprof.analysis.busbw); each tool adds where its sizes come from
BUSBW_ROWS = "rank, process group, collective and message-size bucket (`scope` rank); the same across ranks (`scope` all)"
BUSBW = ("bus bandwidth per collective and message size: scope (rank, all), rank, window, group (process group: "
         "name and ranks, nsys: NCCL communicator id), group_size (its ranks, n), collective (AllReduce, AllGather, "
         "ReduceScatter, AllToAll, Broadcast, Reduce, SendRecv), bucket (message-size range, powers of two; `sizes "
         "unknown` where the profile has none) with bucket_lo, bucket_hi (bytes, [lo, hi)), count (collectives), "
         "bytes (median message size: nccl-tests' size, AllGather's whole output, ReduceScatter's whole input), "
         "total_bytes, median_ns (median NCCL kernel time), algbw_gbps (median of bytes / kernel time, GB/s = "
         "1e9 B/s), busbw_gbps (algbw · nccl-tests' factor: AllReduce 2(n−1)/n; AllGather, ReduceScatter, "
         "AllToAll (n−1)/n; Broadcast, Reduce, SendRecv 1); across ranks the medians of the ranks' medians, "
         "slowest_rank and fastest_rank with their busbw (slowest_busbw_gbps, fastest_busbw_gbps) and "
         "skew_pct = 100 · (fastest / slowest − 1); note: why sizes or the group size are unknown. A collective "
         "is in the window when its kernel's midpoint is; a rank's kernel time includes its wait for the others")


def idle_tables(tool: str, steps: str) -> tuple[TableSpec, TableSpec, TableSpec]:
    """A tool's idle attribution (hpcprof.analysis.idle) over its `steps`: the causes, one typical
    step's intervals, and the time per line of the program."""
    return (_t(tool, "idle_causes", "rank and cause", MEASURED,
               "each step's GPU idle by host-side cause (gc, input, sync, collective, compile, optimizer, "
               "launch, program, unattributed): ms per step, % of idle and step, the line, the fix",
               f"hpcprof.analysis.idle ({steps}; the stack sampler's lines)"),
            _t(tool, "step_idle", "busy interval or idle gap of the median step, per rank", EACH_ITERATION,
               "one step (the window's median) on every rank: the device's busy intervals and each idle gap "
               "under its host-side cause and line, ms from the step's start", "hpcprof.analysis.idle.typical_step"),
            _t(tool, "lines", "rank and line", MEASURED,
               "each line of the program (the innermost user frame of the stack samples): the time a step "
               "spends there, busy or idle, ms per step", "hpcprof.analysis.idle.line_time (the stack sampler)"))


# -- Echo, the workloads, collect's manifest ---------------------------------------------------------
ECHO_SLOWDOWN = _t(ECHO, "slowdown", "compute kernel of each device", EACH_KERNEL,
                   "each kernel of a world-size-N DDP run against the same kernel of its world-size-1 run: "
                   "durations, overlap with communication, slowdown", "Echo's analyse.py")
SEQPAR_FILE, DDP_FILE = "seqpar", "ddp_steps"      # the workloads' JSON results (results/<file>.json)
#: the job's unprofiled reference run's folder (profile.reference): under `steps/` a `command`'s steps,
#: under `results/` seqpar's and ddp's JSON results
REFERENCE_DIR = "reference"
WORKLOAD_SEQPAR = _t(WORKLOAD, SEQPAR_FILE, "run", RUN, "seqpar.json's scalar fields (schema, workload)")
SEQPAR_PHASES = _t(WORKLOAD, f"{SEQPAR_FILE}.phases", "phase", COUNTED,
                   "per phase (allgather, matmul1, matmul2, reduce_scatter, iteration): mean, median, min, max "
                   "time over ranks (ms), bytes and bus bandwidth of the collectives, FLOPs and TFLOP/s of "
                   "the matmuls", "nccl-tests' bus bandwidth (busbw)")
SEQPAR_ITERATIONS = _t(WORKLOAD, f"{SEQPAR_FILE}.iterations", "rank, iteration and phase", COUNTED,
                       "each iteration's time per phase (ms); on CUDA the `iteration` phase's peak allocated and "
                       "reserved bytes (allocated_peak, reserved_peak) and the device's capacity")
SEQPAR_RANKS = _t(WORKLOAD, f"{SEQPAR_FILE}.ranks", "rank", RUN, "host, device and its name, CUDA_VISIBLE_DEVICES")
SEQPAR_LOOP = _t(WORKLOAD, f"{SEQPAR_FILE}.loop", "rank", RUN, "the timed loop's wall time (s)")
SEQPAR_CHECK = _t(WORKLOAD, f"{SEQPAR_FILE}.check", "rank", RUN,
                  "the reference check of the result (with `check: true`): relative error, passed")
WORKLOAD_DDP = _t(WORKLOAD, DDP_FILE, "run", RUN, "ddp_steps.json's scalar fields (schema, workload)")
DDP_PHASES = _t(WORKLOAD, f"{DDP_FILE}.phases", "phase", COUNTED,
                "per phase (forward, backward, optimizer, step): mean, median, min, max time over ranks (ms)")
DDP_STEPS = _t(WORKLOAD, f"{DDP_FILE}.steps", "rank, step and phase", EACH_ITERATION,
               "each step's time per phase (ms), its epoch, whether it is counted, whether it is the profiled "
               "window; on CUDA the `step` phase's peak allocated and reserved bytes (allocated_peak, "
               "reserved_peak) and the device's capacity")
DDP_RANKS = _t(WORKLOAD, f"{DDP_FILE}.ranks", "rank", RUN, SEQPAR_RANKS.about)
FILES_MANIFEST = _t(FILES, "manifest", "file", RUN, "every log, profile and workload result file: kind, path, "
                    "rank, bytes")
FORENSICS_RANKS = _t(FORENSICS, "ranks", "rank (and process group)", RUN,
                     "a failed or timed-out run: the last collective each rank entered and completed, how long "
                     "it waited, its error and where it was (stack), which dumps it left", "PyTorch's Flight Recorder")
FORENSICS_COLLECTIVES = _t(FORENSICS, "collectives", "collective that went wrong", RUN,
                           "the first collective of each process group that some ranks never entered, or "
                           "entered with different sizes: which ranks were present or missing, how long they "
                           "waited", "PyTorch's fr_trace")
STEPS_TIMES = _t(STEPS, "times", "rank and optimizer step", EACH_ITERATION,
                 "each optimizer step of a `command` (the step hook, profile.window.auto): its end (wall clock, "
                 "ns), its length from the previous step's end (ns; none for the first), whether it is in the "
                 "window (in_window), the rank's profiler (tool) and process (pid)",
                 "PyTorch's global optimizer step hooks (torch.optim.optimizer.register_optimizer_step_post_hook)")
STEPS_MEMORY = _t(STEPS, "memory", PER_RANK, COUNTED,
                  "each rank's device memory over the window's optimizer steps (the step hook, where CUDA is in "
                  "use; bytes): the steps, peak_allocated and peak_reserved (the largest of each step's peaks), "
                  "fragmentation (reserved − allocated peak of the step with the allocated peak), the device's "
                  "capacity and headroom (capacity − peak_reserved)",
                  "the caching allocator's torch.cuda.max_memory_allocated / max_memory_reserved of each step "
                  "(reset_peak_memory_stats at each step's end)")
_HISTORY = ("`profile.memory`'s snapshot per rank (PyTorch's memory history over the window: from the end of "
            "step skip_steps to the window's last step; hpcprof.analysis.memory, as `hpcprof memory` reads it)")
STEPS_MEMORY_SITES = _t(STEPS, "memory_sites", "rank, device and site", COUNTED,
                        "the bytes and blocks each site (the innermost frame of the program's own code) held at the "
                        "rank's peak of allocated bytes over the history; `(before the history)`: allocated before "
                        "it began", _HISTORY)
STEPS_MEMORY_KINDS = _t(STEPS, "memory_kinds", "rank, device and kind", COUNTED,
                        "the same bytes and blocks as memory_sites, by kind from each allocation's whole stack: "
                        "parameters, optimizer state, optimizer step, forward, backward (no Python frame: the "
                        "autograd engine's thread, the gradients among them), the program's own, `(before the "
                        "history)`", _HISTORY)
STEPS_MEMORY_GROWTH = _t(STEPS, "memory_growth", "rank, device and site", COUNTED,
                         "the bytes and blocks each site allocated during the history and still held at its end "
                         "(a leak: a site whose blocks keep growing)", _HISTORY)
STEPS_PERTURBATION = _t(STEPS, "perturbation", PER_RANK, COUNTED,
                        "the profiler's perturbation of the rank's steps: the median of the window's steps "
                        "(profiled_ms; seqpar and ddp: of their counted iterations, seqpar's under torch.profiler "
                        "those it recorded in) and of the same process's steps the profiler did not touch "
                        "(unprofiled_ms: under torch.profiler, those before its warm-up step and after its trace "
                        "was written; else the same steps of the job's unprofiled reference run, "
                        "profile.reference: a `command`'s window steps, seqpar's and ddp's counted iterations), "
                        "slowdown_pct = 100 · (profiled_ms / unprofiled_ms − 1) with its 95 % "
                        "percentile bootstrap interval (low_pct, high_pct), the steps of each side and where the "
                        "unprofiled ones come from (baseline: `same process` or `reference run`); ranks with "
                        "3 steps or more on each side")
#: the file `hpcprof bench ceilings` writes into the run directory (rank 0)
CEILINGS_FILE = "ceilings.json"
#: bench_ceilings' columns and what each holds
CEILINGS_COLUMNS: dict[str, str] = {
    "kind": "gemm or collective",
    "op": "matmul (a GEMM), all_gather, reduce_scatter or all_reduce",
    "dtype": "a GEMM's precision: float32 (TF32 off), tf32, bfloat16, float16; a collective's element type",
    "m": "a GEMM's rows of A and C (none for a collective)",
    "n": "a GEMM's columns of B and C",
    "k": "a GEMM's inner dimension",
    "bytes": "a collective's size as nccl-tests counts it: the all-gather's output, the reduce-scatter's "
             "input, the all-reduce's buffer (none for a GEMM)",
    "flops": "a GEMM's 2·m·n·k",
    "time_s": "seconds per call: a GEMM's median over its timed calls (CUDA events), median over ranks; a "
              "collective's timed calls back to back / their number, mean over ranks (nccl-tests), the best of "
              "5 runs and of the ways the calls can run (statistic)",
    "statistic": "how time_s was taken, in words",
    "tflops": "a GEMM's flops / time_s / 1e12",
    "tflops_min_rank": "the slowest rank's TFLOP/s (its median time)",
    "tflops_max_rank": "the fastest rank's TFLOP/s",
    "algbw_GBps": "a collective's bytes / time_s / 1e9 (nccl-tests' algbw)",
    "busbw_GBps": "algbw_GBps · bus_factor (nccl-tests' busbw)",
    "bus_factor": "nccl-tests' factor: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n",
    "world_size": "ranks the collectives ran over (n); each rank ran the GEMMs on its own device",
    "iters": "timed calls",
    "warmup": "untimed calls before them",
    "device_name": "rank 0's device (torch.cuda.get_device_name, or the CPU)",
    "backend": "torch.distributed backend: nccl (GPU) or gloo (CPU)",
    "torch": "torch's version",
    "nccl": "NCCL's version (none without CUDA)",
    "created": "when the measurement started (UTC, ISO 8601)",
}
BENCH_CEILINGS = _t(BENCH, "ceilings", "measurement: a GEMM shape and precision, or a collective, size and dtype",
                    RUN, "the attainable ceilings measured in the same job after the workload (experiment "
                    "`ceilings:`, `hpcprof bench ceilings`): " + "; ".join(f"{k}: {v}" for k, v in CEILINGS_COLUMNS.items()),
                    "nccl-tests' algbw and busbw (doc/PERFORMANCE.md, src/common.cu); cuBLAS through torch.matmul")
#: the phase name of a `command`'s steps in the per-iteration timing rows (hpcprof.analysis.steps)
STEP_PHASE = "step"

#: the tool-neutral tables (each profiler tool's: its ToolCatalog)
TABLES: tuple[TableSpec, ...] = (
    ECHO_SLOWDOWN,
    WORKLOAD_SEQPAR, SEQPAR_PHASES, SEQPAR_ITERATIONS, SEQPAR_RANKS, SEQPAR_LOOP, SEQPAR_CHECK,
    WORKLOAD_DDP, DDP_PHASES, DDP_STEPS, DDP_RANKS, FILES_MANIFEST, FORENSICS_RANKS,
    FORENSICS_COLLECTIVES, STEPS_TIMES, STEPS_PERTURBATION, STEPS_MEMORY, STEPS_MEMORY_SITES, STEPS_MEMORY_KINDS,
    STEPS_MEMORY_GROWTH, BENCH_CEILINGS)


#: each workload kind's timing tables: (phase statistics, per-iteration rows, the per-iteration phase)
WORKLOAD_TIMINGS: dict[str, tuple[TableSpec, TableSpec, str]] = {
    "seqpar": (SEQPAR_PHASES, SEQPAR_ITERATIONS, "iteration"), "ddp": (DDP_PHASES, DDP_STEPS, "step")}


# -- metrics -----------------------------------------------------------------------------------------

#: what a `{part}` of a metric name matches
#: (a category: hpcprof.analysis.categories' or a site's or experiment's dotted words, never `total` or `*.share`)
PARTS = {"phase": r".+", "category": r"(?!total$)[A-Za-z][A-Za-z0-9_]*(?:\.(?!share$)[A-Za-z0-9_]+)*",
         "cause": r"[a-z]+"}


@dataclass(frozen=True)
class MetricSpec:
    """One headline metric (or, `headline` False, one figure of the report)."""

    name: str           # dotted; a `{part}` (PARTS) is named by the data
    unit: str
    window: str         # a key of WINDOWS
    formula: str
    tables: tuple[TableSpec, ...]      # the tool-neutral ones; a tool's: its Feed (metric_tables)
    reference: str = ""     # where the tools' Feeds give none
    headline: bool = True
    identifier: bool = False    # names something (a rank): no mean, spread or ratio of it

    def value(self, value: float, **parts: str) -> tuple[str, float, str]:
        """The metric as a headline triple (name, value, unit)."""
        return self.name.format(**parts), value, self.unit

    def match(self, name: str) -> dict[str, str] | None:
        """The parts of `name` when it is this metric (`{}` for a name without parts), else None."""
        found = _pattern(self.name).fullmatch(name)
        return found.groupdict() if found else None

    @property
    def column(self) -> str:
        """The metric's column in a comparison (`iteration.mean [ms]`)."""
        return column(self.name, self.unit)


def _pattern(name: str) -> re.Pattern[str]:
    pieces = re.split(r"\{(\w+)\}", name)
    return re.compile("".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>{PARTS[p]})" for i, p in enumerate(pieces)))


def column(name: str, unit: str) -> str:
    """A metric's column in a comparison frame: `name [unit]`."""
    return f"{name} [{unit}]"


def parse_column(text: str) -> tuple[str, str] | None:
    """(name, unit) of a comparison's metric column, None for any other column."""
    found = re.fullmatch(r"(.+) \[([^\]]*)\]", text)
    return (found[1], found[2]) if found else None


_TIMING = (*(t for timing in WORKLOAD_TIMINGS.values() for t in timing[1:2]), STEPS_TIMES)
_PHASES = tuple(timing[0] for timing in WORKLOAD_TIMINGS.values())
_RATE = "; the whole-iteration phase is iteration.mean"
ITERATION_MEAN = MetricSpec("iteration.mean", "ms", COUNTED,
                            "mean over ranks of each rank's mean iteration time", _TIMING)
ITERATION_MEDIAN = MetricSpec("iteration.median", "ms", COUNTED,
                              "median of every counted iteration time of every rank (a capture without "
                              "marks: of its steps found past the warm-up, each its GPU span)", _TIMING)
ITERATION_SPREAD = MetricSpec("iteration.spread", "ms", COUNTED,
                              "the slowest rank's mean iteration time minus the fastest rank's", _TIMING)
ITERATION_SPREAD_PCT = MetricSpec("iteration.spread_pct", "%", COUNTED,
                                  "100 · iteration.spread / the median of the ranks' mean iteration times", _TIMING)
SLOWEST_RANK = MetricSpec("slowest_rank", "rank", COUNTED,
                          "the rank with the largest mean iteration time (runs of 2 ranks or more)", _TIMING,
                          identifier=True)
SLOWEST_RANK_EXCESS_PCT = MetricSpec("slowest_rank.excess_pct", "%", COUNTED,
                                     "100 · (the slowest rank's mean / the median of the ranks' means − 1)", _TIMING)
PHASE_TIME = MetricSpec("phase.{phase}.time", "ms", COUNTED, "the phase's mean time (mean_ms)" + _RATE, _PHASES)
PHASE_TFLOPS = MetricSpec("phase.{phase}.tflops", "TFLOP/s", COUNTED,
                          "the matmul's FLOPs on a rank (seqpar: 2·S·H·H/p) / its mean time", _PHASES)
PHASE_BUSBW = MetricSpec("phase.{phase}.busbw", "GB/s", COUNTED,
                         "the collective's bus bandwidth: bytes (seqpar: S·H elements) / its mean time · (p − 1) / p",
                         _PHASES, "nccl-tests' busBw")
WINDOW_DURATION = MetricSpec("window.duration", "ms", MEASURED,
                             "mean over ranks of the window's GPU length (first GPU start to last GPU end)",
                             ())
WINDOW_ITERATIONS = MetricSpec("window.iterations", "count", MEASURED,
                               "mean over ranks of the iterations in the window (a `command` without a profiler "
                               "window, `tool: none`: of the step hook's steps in its window)",
                               (STEPS_TIMES,))
WINDOW_DETECTED = MetricSpec("window.detected", "", MEASURED,
                             "1 where the window's steps were found in the kernels (the profile carries no marks: "
                             "`detected:optimizer` or `detected:sequence`, hpcprof.analysis.detect_steps), else 0",
                             ())
WINDOW_STEP_CV = MetricSpec("window.step_cv", "%", EACH_ITERATION,
                            "coefficient of variation of the steps' GPU time (100 · std / mean), per rank, the "
                            "largest over ranks (ranks with two steps or more)", ())
_CATEGORIES = ("kernels by name (hpcprof.analysis.categories, after the site's and experiment's "
               "`kernel_categories`): `nccl.<Collective>`, `nccl.other`, `attention`, `conv`, `gemm`, `optimizer`, "
               "`memset`, `copy` (on the device), `memcpy` (host↔device), `reduction`, `elementwise` (dtype casts included), `other`")


def _gpu_time(prefix: str, window: str) -> tuple[MetricSpec, MetricSpec, MetricSpec]:
    """(total, per category, share) of the GPU kernel time over `window` (the tools' kernel tables)."""
    return (MetricSpec(f"{prefix}gpu.total", "ms", window, "Σ kernel durations / ranks (GPU time per rank)", ()),
            MetricSpec(prefix + "gpu.{category}", "ms", window,
                       f"Σ durations of the category's kernels / ranks; {_CATEGORIES}", ()),
            MetricSpec(prefix + "gpu.{category}.share", "%", window,
                       f"100 · {prefix}gpu.<category> / {prefix}gpu.total", ()))


GPU_TIME = _gpu_time("", MEASURED)
CAPTURE_GPU_TIME = _gpu_time("capture.", CAPTURE)
_OVERLAP = "100 · Σ |compute ∩ communication| / Σ |communication| over ranks and devices (merged intervals)"
_IDLE = "100 · Σ idle / Σ span over ranks and devices; span: first GPU operation to the last, idle: span − " \
        "the union of the GPU operations (torch: on HTA's whole-µs grid, each event's start rounded up and its " \
        "end down, as HTA reads Kineto's fractional µs)"
OVERLAP_PCT = MetricSpec("overlap_pct", "%", MEASURED, _OVERLAP, (),
                         "HTA `get_comm_comp_overlap`'s definition")
IDLE_PCT = MetricSpec("idle_pct", "%", MEASURED, _IDLE, (),
                      "HTA `get_temporal_breakdown`'s idle over kernel_time")
CAPTURE_OVERLAP_PCT = MetricSpec("capture.overlap_pct", "%", CAPTURE,
                                 f"nsys: {_OVERLAP}; torch: mean over ranks of HTA's comp_comm_overlap_pctg",
                                 (), OVERLAP_PCT.reference)
CAPTURE_IDLE_PCT = MetricSpec("capture.idle_pct", "%", CAPTURE,
                              f"{_IDLE} (torch: HTA's idle_time and kernel_time)",
                              (), IDLE_PCT.reference)
_SLOWDOWN = ("of the matched compute kernels' slowdown: (duration at world size N − at world size 1) / "
             "(overlap_ratio · duration at world size 1), 0 where the kernel does not overlap communication; "
             "kernels matched by name and occurrence (`analysis.slowdown_match: echo`: Echo's rule)")
SLOWDOWN_MEDIAN, SLOWDOWN_MEAN, SLOWDOWN_P90 = (
    MetricSpec(f"slowdown.{stat}", "", CAPTURE, f"{words} {_SLOWDOWN}", (ECHO_SLOWDOWN,), "Echo's analyse.py")
    for stat, words in (("median", "median"), ("mean", "mean"), ("p90", "90th percentile")))
#: profiler.overhead_pct above this is a warning in `compare` and the report
OVERHEAD_WARN_PCT = 10.0
PROFILER_OVERHEAD = MetricSpec("profiler.overhead_pct", "%", COUNTED,
                               "100 · (iteration.median of the run / iteration.median of the same experiment's run "
                               "under `profile.tool: none` − 1): the profiler's perturbation of each step (a "
                               f"`command`'s step hook times both); a warning above {OVERHEAD_WARN_PCT:g} %. Found "
                               "by `report` and `compare` among the runs of the experiment", (STEPS_TIMES,))
_SLOWED = "the rank the profiler slowed most (the largest slowdown_pct of steps_perturbation)"
PROFILER_SLOWDOWN = MetricSpec("profiler.slowdown_pct", "%", COUNTED,
                               f"{_SLOWED}: 100 · (its median window step / its median unprofiled step − 1), both "
                               "timed by the step hook (or seqpar's and ddp's timers), the unprofiled ones in the "
                               "same process or in the job's unprofiled reference run (profile.reference); a "
                               f"warning above {OVERHEAD_WARN_PCT:g} %", _TIMING)
PROFILER_SLOWDOWN_LOW, PROFILER_SLOWDOWN_HIGH = (
    MetricSpec(f"profiler.slowdown_pct.{end}", "%", COUNTED,
               f"the {words} end of the 95 % percentile bootstrap interval of profiler.slowdown_pct", _TIMING)
    for end, words in (("low", "lower"), ("high", "upper")))
PROFILER_UNPROFILED_STEP = MetricSpec("profiler.unprofiled_step", "ms", COUNTED,
                                      "median over ranks of each rank's median unprofiled step (steps_perturbation's "
                                      "unprofiled_ms): the step without the profiler", _TIMING)
IDLE_CAUSE = MetricSpec("idle.{cause}", "ms", MEASURED,
                        "each step's GPU idle that the host-side cause explains (gc, input, sync, collective, "
                        "compile, optimizer, launch, program, unattributed), ms per step, mean over ranks; the "
                        "causes with any time", ())
ITERATION_IDLE_PCT = MetricSpec("idle_pct", "%", EACH_ITERATION, f"{_IDLE}, per iteration",
                                (), IDLE_PCT.reference, headline=False)
TOP_KERNEL_TIME = MetricSpec("top_kernel.time", "ms", MEASURED,
                             "GPU time per rank (Σ over ranks / ranks) of the kernel with the most GPU time "
                             "(compare's `top kernel` row names it)", (), headline=False)

_MEMORY = "torch.cuda.max_memory_allocated / max_memory_reserved, per step"
_MEMORY_TABLES = (STEPS_MEMORY, SEQPAR_ITERATIONS, DDP_STEPS)
_OVER = " (a `command`: steps_memory, over the window's steps; seqpar, ddp: their counted iterations)"
MEMORY_PEAK_ALLOCATED = MetricSpec("memory.peak_allocated", "GiB", COUNTED,
                                   "the largest over ranks of the rank's peak allocated bytes / 2³⁰" + _OVER,
                                   _MEMORY_TABLES, _MEMORY)
MEMORY_PEAK_RESERVED = MetricSpec("memory.peak_reserved", "GiB", COUNTED,
                                  "the largest over ranks of the rank's peak reserved bytes / 2³⁰" + _OVER,
                                  _MEMORY_TABLES, _MEMORY)
MEMORY_FRAGMENTATION = MetricSpec("memory.fragmentation", "GiB", COUNTED,
                                  "the largest over ranks of reserved − allocated peak of the rank's step with its "
                                  "allocated peak / 2³⁰ (memory the allocator holds but no tensor uses)" + _OVER,
                                  _MEMORY_TABLES, _MEMORY)
MEMORY_HEADROOM = MetricSpec("memory.headroom", "GiB", COUNTED,
                             "the smallest over ranks of the device's capacity − the rank's peak reserved / 2³⁰" + _OVER,
                             _MEMORY_TABLES, "torch.cuda.get_device_properties().total_memory")

METRICS: tuple[MetricSpec, ...] = (
    ITERATION_MEAN, ITERATION_MEDIAN, ITERATION_SPREAD, ITERATION_SPREAD_PCT, SLOWEST_RANK, SLOWEST_RANK_EXCESS_PCT,
    PHASE_TIME, PHASE_TFLOPS, PHASE_BUSBW, WINDOW_DURATION, WINDOW_ITERATIONS, WINDOW_DETECTED, WINDOW_STEP_CV,
    *GPU_TIME, OVERLAP_PCT, IDLE_PCT, IDLE_CAUSE,
    *CAPTURE_GPU_TIME, CAPTURE_OVERLAP_PCT, CAPTURE_IDLE_PCT, SLOWDOWN_MEDIAN, SLOWDOWN_MEAN, SLOWDOWN_P90,
    PROFILER_OVERHEAD, PROFILER_SLOWDOWN, PROFILER_SLOWDOWN_LOW, PROFILER_SLOWDOWN_HIGH, PROFILER_UNPROFILED_STEP,
    MEMORY_PEAK_ALLOCATED, MEMORY_PEAK_RESERVED, MEMORY_FRAGMENTATION, MEMORY_HEADROOM,
    ITERATION_IDLE_PCT, TOP_KERNEL_TIME)


def declared(name: str) -> MetricSpec | None:
    """The headline metric `name` is, None when it is not declared."""
    return next((m for m in METRICS if m.headline and m.match(name) is not None), None)


def is_identifier(text: str) -> bool:
    """Whether the comparison column `text` (`slowest_rank [rank]`) holds an identifier, not a quantity."""
    name_unit = parse_column(text)
    metric = declared(name_unit[0]) if name_unit else None
    return metric is not None and metric.identifier


def find_column(columns: list[str], name: str) -> str | None:
    """The comparison column of the metric `name`, given with its unit (`iteration.mean [ms]`) or
    without (`iteration.mean`); None when there is none."""
    if name in columns:
        return name
    return next((c for c in columns if (name_unit := parse_column(c)) is not None and name_unit[0] == name), None)


# -- the tools' parts --------------------------------------------------------------------------------

class Feed(NamedTuple):
    """A tool's part in a tool-neutral metric: its tables the metric is computed from, and the
    reference its value follows there where the tools differ ("" where the metric's own holds)."""

    tables: tuple[TableSpec, ...]
    reference: str = ""


class ToolCatalog(NamedTuple):
    """A profiler tool's declarations (hpcprof/tools/<tool>/tables.py; its Profiler's `catalog`): its
    result tables, and its Feed into each tool-neutral metric."""

    tables: tuple[TableSpec, ...] = ()
    feeds: Mapping[MetricSpec, Feed] = {}


def every_table(tools: Mapping[str, ToolCatalog]) -> tuple[TableSpec, ...]:
    """Every result table: the `tools`' (by name, in their order), then the tool-neutral ones."""
    return (*(t for tool in tools.values() for t in tool.tables), *TABLES)


def table_window(name: str, tools: Mapping[str, ToolCatalog]) -> str:
    """The window (a key of WINDOWS) of the result table called `name`; the run's for a table not declared."""
    return next((t.window for t in every_table(tools) if t.name == name), RUN)


def metric_tables(metric: MetricSpec, tools: Mapping[str, ToolCatalog]) -> tuple[TableSpec, ...]:
    """The tables `metric` is computed from: the `tools`' (their Feeds, in their order), then its own."""
    return (*(t for tool in tools.values() if metric in tool.feeds for t in tool.feeds[metric].tables),
            *metric.tables)


def metric_reference(metric: MetricSpec, tools: Mapping[str, ToolCatalog]) -> str:
    """The reference `metric` follows: the tools' where their Feeds name one (`tool: reference; ...`
    for several), else its own."""
    named = [(name, tool.feeds[metric].reference) for name, tool in tools.items()
             if metric in tool.feeds and tool.feeds[metric].reference]
    if not named:
        return metric.reference
    return named[0][1] if len(named) == 1 else "; ".join(f"{name}: {reference}" for name, reference in named)


# -- the reference page ------------------------------------------------------------------------------

def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def metrics_page(tools: Mapping[str, ToolCatalog]) -> str:
    """docs/reference/metrics.md: the windows, every result table and every metric, from the
    declarations here and the `tools`' (hpcprof.profilers.catalogs)."""
    lines = ["# Result tables and metrics", "",
             "<!-- generated from hpcprof/core/catalog.py by hpcprof.core.catalog.metrics_page(); do not edit -->", "",
             "`hpcprof collect` writes each run's result tables to `results/<table>.parquet` and its headline "
             "metrics to `results/headline.json` (and the store); `report` and `compare` show them. "
             "A `{part}` in a metric's name is named by the data (a workload phase, a kernel category).", "",
             "## Windows", "", "| window | what it covers |", "| --- | --- |"]
    lines += [f"| {name} | {_cell(text)} |" for name, text in WINDOWS.items()]
    lines += ["", "## Headline metrics", "", "| metric | unit | window | formula | from | reference |",
              "| --- | --- | --- | --- | --- | --- |"]
    rows = [m for m in METRICS if m.headline]
    lines += [f"| `{m.name}` | {m.unit or '(ratio)'} | {m.window} | {_cell(m.formula)} | "
              f"{', '.join(f'`{t.name}`' for t in metric_tables(m, tools))} | {_cell(metric_reference(m, tools))} |"
              for m in rows]
    lines += ["", "## Report figures", "", "| figure | unit | window | formula | from | reference |",
              "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| `{m.name}` | {m.unit} | {m.window} | {_cell(m.formula)} | "
              f"{', '.join(f'`{t.name}`' for t in metric_tables(m, tools))} | {_cell(metric_reference(m, tools))} |"
              for m in METRICS if not m.headline]
    lines += ["", "## Result tables", "",
              "Per-rank tables have a `rank` column; tables over the measured window a `window` column naming it. "
              "A `command` workload's own JSON files in `results/` become `workload_<file>` (scalar fields) and "
              "`workload_<file>.<key>` (each list of records) as well.", "",
              "| table | one row per | window | holds | reference |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| `{t.name}` | {_cell(t.rows)} | {t.window} | {_cell(t.about)} | {_cell(t.reference)} |"
              for t in every_table(tools)]
    return "\n".join(lines) + "\n"
