"""The headline metrics of one collected run: what `compare`, `report` and the store show first.

`run_summary` reads the run's result tables (workload timings, nsys or Kineto analyses; `tables_of`:
each read once) and returns (metric, value, unit) triples; a metric is absent when its source table
is. `run_headline` adds the top kernels from the same reads: what collect records beside the tables
(hpcprof.results.write_headline).
Metric names are dotted: `iteration.mean`, `phase.matmul1.tflops`, `gpu.nccl.AllGather`, ...
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from hpcprof import profilers
from hpcprof.lazy import load_target
from hpcprof.results import Headline, Metric, TopKernel, read_table

#: a run's result tables by name (None: the run has no such table)
Tables = Callable[[str], "pd.DataFrame | None"]

#: GEMM kernels by name (cuBLAS/cuBLASLt incl. Hopper's nvjet, CUTLASS, the sm80/sm90 xmma and gemm families)
GEMM = re.compile(r"gemm|cutlass|cublas|nvjet|xmma|matmul|wgmma|_hmma|_imma", re.IGNORECASE)
NCCL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z0-9]+?)(?:_|\(|$)")
#: per-iteration phase of each workload's timing rows
ITERATION_PHASE = {"seqpar": "iteration", "ddp": "step"}
#: workload timing tables: workload kind -> (phase stats, per-iteration rows)
WORKLOAD_TABLES = {"seqpar": ("workload_seqpar.phases", "workload_seqpar.iterations"),
                   "ddp": ("workload_ddp_steps.phases", "workload_ddp_steps.steps")}


def tables_of(run_dir: Path) -> Tables:
    """The result tables of the run in `run_dir`, each read at most once."""
    return functools.cache(functools.partial(read_table, run_dir))


def kernel_category(name: str) -> str:
    """`gemm`, `nccl.<Collective>` or `other` for a GPU kernel name."""
    match = NCCL.match(name)
    if match:
        return f"nccl.{match.group(1)}"
    if name.startswith("nccl"):
        return "nccl.other"
    return "gemm" if GEMM.search(name) else "other"


def counted(rows: pd.DataFrame) -> pd.DataFrame:
    """Timing rows without warm-up epochs and the profiled window step (when the rows say which)."""
    if "counted" in rows and "window" in rows:
        return rows[rows["counted"].astype(bool) & ~rows["window"].astype(bool)]
    return rows


def iteration_metrics(rows: pd.DataFrame, phase: str) -> list[Metric]:
    """Iteration time mean/median/spread over ranks and the slowest rank, from per-iteration rows
    {rank, iteration, phase, time_ms} (counted iterations only)."""
    rows = counted(rows[rows["phase"] == phase])
    if rows.empty:
        return []
    per_rank = rows.groupby("rank")["time_ms"].mean()
    middle = float(per_rank.median())
    out = [("iteration.mean", float(per_rank.mean()), "ms"),
           ("iteration.median", float(rows["time_ms"].median()), "ms"),
           ("iteration.spread", float(per_rank.max() - per_rank.min()), "ms"),
           ("iteration.spread_pct", 100.0 * float(per_rank.max() - per_rank.min()) / middle if middle else 0.0, "%")]
    if len(per_rank) > 1:
        out += [("slowest_rank", float(per_rank.idxmax()), "rank"),
                ("slowest_rank.excess_pct", 100.0 * (float(per_rank.max()) / middle - 1.0) if middle else 0.0, "%")]
    return out


def phase_metrics(phases: pd.DataFrame, iteration: str) -> list[Metric]:
    """Per-phase mean time, and TFLOP/s and bus bandwidth where the workload derived them (the
    whole-iteration phase is `iteration.mean` already)."""
    out: list[Metric] = []
    for row in phases.to_dict("records"):
        name = row["phase"]
        if name == iteration:
            continue
        out.append((f"phase.{name}.time", float(row["mean_ms"]), "ms"))
        if pd.notna(row.get("tflops")):
            out.append((f"phase.{name}.tflops", float(row["tflops"]), "TFLOP/s"))
        if pd.notna(row.get("busbw_GBps")):
            out.append((f"phase.{name}.busbw", float(row["busbw_GBps"]), "GB/s"))
    return out


def gpu_time_metrics(names: pd.Series, totals_ms: pd.Series, n_ranks: int, prefix: str = "") -> list[Metric]:
    """GPU time per rank (mean over ranks) by category, and each category's share; `prefix`
    (`capture.`) names figures over the whole capture."""
    category = {name: kernel_category(name) for name in names.unique()}   # a few names, on every rank's rows
    by_cat = totals_ms.groupby(names.map(category)).sum() / max(n_ranks, 1)
    total = float(by_cat.sum())
    out: list[Metric] = [(f"{prefix}gpu.total", total, "ms")]
    for cat, value in sorted(by_cat.items()):
        out.append((f"{prefix}gpu.{cat}", float(value), "ms"))
        out.append((f"{prefix}gpu.{cat}.share", 100.0 * float(value) / total if total else 0.0, "%"))
    return out


def overlap_idle_metrics(ov: pd.DataFrame | None, prefix: str = "") -> list[Metric]:
    """overlap % (compute during communication over communication) and idle % (idle over the span),
    summed over ranks and devices, from an nsys overlap table."""
    if ov is None or ov.empty:
        return []
    out: list[Metric] = []
    comm, span = float(ov["comm_ns"].sum()), float(ov["span_ns"].sum())
    if comm:
        out.append((f"{prefix}overlap_pct", 100.0 * float(ov["overlap_ns"].sum()) / comm, "%"))
    if span:
        out.append((f"{prefix}idle_pct", 100.0 * float(ov["idle_ns"].sum()) / span, "%"))
    return out


def window_metrics(window: pd.DataFrame | None) -> list[Metric]:
    """The measured window's length (ms, mean over ranks) and iterations (mean count over ranks)
    from a `<tool>_window` table {rank, duration_ns, iterations}."""
    if window is None or window.empty:
        return []
    return [("window.duration", float(window["duration_ns"].mean()) / 1e6, "ms"),
            ("window.iterations", float(window["iterations"].mean()), "count")]


def nsys_metrics(tables: Tables) -> list[Metric]:
    """GPU time by category, overlap and idle % over the measured window (nsys_kernels,
    nsys_overlap), the window itself, and the same over the whole capture as `capture.*`."""
    out: list[Metric] = window_metrics(tables("nsys_window"))
    kern = tables("nsys_kernels")
    if kern is not None and not kern.empty:
        out += gpu_time_metrics(kern["name"].astype(str), kern["total_ns"].astype(float) / 1e6, kern["rank"].nunique())
    ov = tables("nsys_overlap")                   # collected before windows: the whole capture's
    out += overlap_idle_metrics(ov, prefix="" if ov is None or "window" in ov else "capture.")
    kern = tables("nsys_cuda_gpu_kern_sum")
    if kern is not None and not kern.empty:
        out += gpu_time_metrics(kern["Name"].astype(str), kern["Total Time (ns)"].astype(float) / 1e6,
                                kern["rank"].nunique(), prefix="capture.")
    out += overlap_idle_metrics(tables("nsys_capture_overlap"), prefix="capture.")
    return out


def torch_metrics(tables: Tables) -> list[Metric]:
    """Over the ProfilerStep window (torch_window): idle and overlap %, the window itself; GPU time
    by category from HTA's kernel breakdown (the traced steps); HTA's whole-trace idle and overlap
    % as `capture.*`."""
    out: list[Metric] = []
    window = tables("torch_window")
    out += window_metrics(window)
    out += overlap_idle_metrics(window)
    kernels = tables("torch_kernels")
    if kernels is not None and not kernels.empty:
        names = kernels["name"].astype(str).where(kernels["name"] != "others",
                                                  kernels["kernel_type"].map({"COMMUNICATION": "nccl"}).fillna(""))
        out += gpu_time_metrics(names, kernels["sum (us)"].astype(float) / 1e3, kernels["rank"].nunique())
    ov = tables("torch_overlap")
    if ov is not None and ov["comp_comm_overlap_pctg"].notna().any():
        out.append(("capture.overlap_pct", float(ov["comp_comm_overlap_pctg"].mean()), "%"))
    temporal = tables("torch_temporal")
    if temporal is not None and not temporal.empty:
        out.append(("capture.idle_pct", float(temporal["idle_time_pctg"].mean()), "%"))
    return out


def slowdown_metrics(tables: Tables) -> list[Metric]:
    """Echo's slowdown of the run's kernels against its world-size-1 baseline (echo_slowdown)."""
    slowdown = tables("echo_slowdown")
    if slowdown is None or not slowdown["slowdown"].notna().any():
        return []
    values = slowdown["slowdown"].dropna()
    return [("slowdown.median", float(values.median()), ""), ("slowdown.mean", float(values.mean()), ""),
            ("slowdown.p90", float(values.quantile(0.9)), "")]


def top_kernels(tables: Tables, tool: str, n: int = 3) -> list[TopKernel]:
    """The `n` kernels with the most GPU time over all ranks in the measured window (nsys) or the
    traced steps (torch): the tool's kernels table (profilers.Tables.kernels, its KernelTime
    columns): (name, time in ms, category), most first."""
    profiler = profilers.find(tool)
    spec = profiler.kernel_time if profiler is not None else None
    table = profiler.table("kernels") if profiler is not None and spec is not None else None
    df = tables(table) if table is not None else None
    if spec is None or df is None or df.empty:
        return []
    df = df[df[spec.name] != "others"]
    top = (df[spec.time].astype(float) / spec.per_ms).groupby(df[spec.name].astype(str)).sum().nlargest(n)
    return [(str(kernel), float(time_ms), kernel_category(str(kernel))) for kernel, time_ms in top.items()]


def run_summary(tables: Tables, config: dict[str, Any]) -> list[Metric]:
    """The headline metrics of a collected run from its `tables` (config: its config.json)."""
    experiment = config["experiment"]
    kind = experiment["workload"]["kind"]
    out: list[Metric] = []
    if kind in WORKLOAD_TABLES:
        phases_name, rows_name = WORKLOAD_TABLES[kind]
        rows = tables(rows_name)
        if rows is not None and not rows.empty:
            out += iteration_metrics(rows, ITERATION_PHASE[kind])
        phases = tables(phases_name)
        if phases is not None and not phases.empty:
            out += phase_metrics(phases, ITERATION_PHASE[kind])
    profiler = profilers.find(experiment["profile"]["tool"])
    for target in profiler.metrics if profiler is not None else ():
        out += load_target(target)(tables)
    return out


def run_headline(run_dir: Path, config: dict[str, Any]) -> Headline:
    """The headline metrics and the top kernels of the collected run in `run_dir`, each table read once."""
    tables = tables_of(run_dir)
    return Headline(run_summary(tables, config), top_kernels(tables, config["experiment"]["profile"]["tool"]))
