"""The headline metrics of one collected run: what `compare`, `report` and the store show first.

`run_summary` reads the run's result tables (workload timings, nsys or Kineto analyses; `tables_of`:
each read once) and returns (metric, value, unit) triples; a metric is absent when its source table
is. `run_headline` adds the top kernels from the same reads: what collect records beside the tables
(hpcprof.results.write_headline). The tables and metrics are declared in hpcprof.catalog (name,
unit, window, formula); `idle_pct` and `overlap_pct` are computed by the one function each here.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from hpcprof import catalog as c
from hpcprof import profilers
from hpcprof.lazy import load_target
from hpcprof.results import Headline, Metric, TopKernel, read_table

if TYPE_CHECKING:
    from hpcprof.record import RunRecord

#: a run's result tables by name (None: the run has no such table)
Tables = Callable[[str], "pd.DataFrame | None"]

#: GEMM kernels by name (cuBLAS/cuBLASLt incl. Hopper's nvjet, CUTLASS, the sm80/sm90 xmma and gemm families)
GEMM = re.compile(r"gemm|cutlass|cublas|nvjet|xmma|matmul|wgmma|_hmma|_imma", re.IGNORECASE)
NCCL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z0-9]+?)(?:_|\(|$)")


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
    out = [c.ITERATION_MEAN.value(float(per_rank.mean())),
           c.ITERATION_MEDIAN.value(float(rows["time_ms"].median())),
           c.ITERATION_SPREAD.value(float(per_rank.max() - per_rank.min())),
           c.ITERATION_SPREAD_PCT.value(100.0 * float(per_rank.max() - per_rank.min()) / middle if middle else 0.0)]
    if len(per_rank) > 1:
        out += [c.SLOWEST_RANK.value(float(per_rank.idxmax())),
                c.SLOWEST_RANK_EXCESS_PCT.value(100.0 * (float(per_rank.max()) / middle - 1.0) if middle else 0.0)]
    return out


def phase_metrics(phases: pd.DataFrame, iteration: str) -> list[Metric]:
    """Per-phase mean time, and TFLOP/s and bus bandwidth where the workload derived them (the
    whole-iteration phase is `iteration.mean` already)."""
    out: list[Metric] = []
    for row in phases.to_dict("records"):
        name = row["phase"]
        if name == iteration:
            continue
        out.append(c.PHASE_TIME.value(float(row["mean_ms"]), phase=name))
        if pd.notna(row.get("tflops")):
            out.append(c.PHASE_TFLOPS.value(float(row["tflops"]), phase=name))
        if pd.notna(row.get("busbw_GBps")):
            out.append(c.PHASE_BUSBW.value(float(row["busbw_GBps"]), phase=name))
    return out


def gpu_time_metrics(names: pd.Series, totals_ms: pd.Series, n_ranks: int,
                     metrics: tuple[c.MetricSpec, c.MetricSpec, c.MetricSpec] = c.GPU_TIME) -> list[Metric]:
    """GPU time per rank (mean over ranks) by category, and each category's share: `metrics` (total,
    per category, share) name them (catalog.GPU_TIME over the window, CAPTURE_GPU_TIME)."""
    total_metric, category_metric, share_metric = metrics
    category = {name: kernel_category(name) for name in names.unique()}   # a few names, on every rank's rows
    by_cat = totals_ms.groupby(names.map(category)).sum() / max(n_ranks, 1)
    total = float(by_cat.sum())
    out: list[Metric] = [total_metric.value(total)]
    for cat, value in sorted(by_cat.items()):
        out.append(category_metric.value(float(value), category=cat))
        out.append(share_metric.value(100.0 * float(value) / total if total else 0.0, category=cat))
    return out


def idle_pct(idle: pd.Series, span: pd.Series) -> float:
    """catalog.IDLE_PCT's formula, the one every idle % uses: 100 · Σ idle / Σ span over the rows
    given (ranks, devices; one iteration's rows for the report's per-iteration figure); NaN where
    nothing spans."""
    total = float(span.sum())
    return 100.0 * float(idle.sum()) / total if total else math.nan


def overlap_pct(overlap: pd.Series, comm: pd.Series) -> float:
    """catalog.OVERLAP_PCT's formula: 100 · Σ (compute ∩ communication) / Σ communication over the
    rows given; NaN without communication."""
    total = float(comm.sum())
    return 100.0 * float(overlap.sum()) / total if total else math.nan


def overlap_idle_metrics(ov: pd.DataFrame | None, overlap: c.MetricSpec = c.OVERLAP_PCT,
                         idle: c.MetricSpec = c.IDLE_PCT) -> list[Metric]:
    """`overlap` and `idle` % over the rows (ranks and devices) of a table with the overlap columns
    (comm_ns, overlap_ns, idle_ns, span_ns: an nsys overlap table, torch_window)."""
    if ov is None or ov.empty:
        return []
    pairs = ((overlap, overlap_pct(ov["overlap_ns"], ov["comm_ns"])), (idle, idle_pct(ov["idle_ns"], ov["span_ns"])))
    return [metric.value(value) for metric, value in pairs if not math.isnan(value)]


def window_metrics(window: pd.DataFrame | None) -> list[Metric]:
    """The measured window's length (ms, mean over ranks) and iterations (mean count over ranks)
    from a `<tool>_window` table {rank, duration_ns, iterations}; no iteration count where a rank's
    window holds no iteration (a window that is the whole capture: its `window` column says so)."""
    if window is None or window.empty:
        return []
    out = [c.WINDOW_DURATION.value(float(window["duration_ns"].mean()) / 1e6)]
    if (window["iterations"] > 0).all():
        out.append(c.WINDOW_ITERATIONS.value(float(window["iterations"].mean())))
    return out


def nsys_metrics(tables: Tables) -> list[Metric]:
    """GPU time by category, overlap and idle % over the measured window (nsys_kernels,
    nsys_overlap), the window itself, and the same over the whole capture as `capture.*`."""
    out: list[Metric] = window_metrics(tables(c.NSYS_WINDOW.name))
    kern = tables(c.NSYS_KERNELS.name)
    if kern is not None and not kern.empty:
        out += gpu_time_metrics(kern["name"].astype(str), kern["total_ns"].astype(float) / 1e6, kern["rank"].nunique())
    ov = tables(c.NSYS_OVERLAP.name)             # collected before windows: the whole capture's
    out += overlap_idle_metrics(ov) if ov is None or "window" in ov else \
        overlap_idle_metrics(ov, c.CAPTURE_OVERLAP_PCT, c.CAPTURE_IDLE_PCT)
    kern = tables(c.NSYS_CUDA_GPU_KERN_SUM.name)
    if kern is not None and not kern.empty:
        out += gpu_time_metrics(kern["Name"].astype(str), kern["Total Time (ns)"].astype(float) / 1e6,
                                kern["rank"].nunique(), c.CAPTURE_GPU_TIME)
    out += overlap_idle_metrics(tables(c.NSYS_CAPTURE_OVERLAP.name), c.CAPTURE_OVERLAP_PCT, c.CAPTURE_IDLE_PCT)
    return out


def torch_metrics(tables: Tables) -> list[Metric]:
    """Over the ProfilerStep window (torch_window): idle and overlap %, the window itself; GPU time
    by category from HTA's kernel breakdown (the traced steps); over the whole trace as `capture.*`:
    HTA's overlap % (mean over ranks) and idle % (idle_pct of HTA's idle and kernel time)."""
    out: list[Metric] = []
    window = tables(c.TORCH_WINDOW.name)
    out += window_metrics(window)
    out += overlap_idle_metrics(window)
    kernels = tables(c.TORCH_KERNELS.name)
    if kernels is not None and not kernels.empty:
        names = kernels["name"].astype(str).where(kernels["name"] != "others",
                                                  kernels["kernel_type"].map({"COMMUNICATION": "nccl"}).fillna(""))
        out += gpu_time_metrics(names, kernels["sum (us)"].astype(float) / 1e3, kernels["rank"].nunique())
    ov = tables(c.TORCH_OVERLAP.name)
    if ov is not None and ov["comp_comm_overlap_pctg"].notna().any():
        out.append(c.CAPTURE_OVERLAP_PCT.value(float(ov["comp_comm_overlap_pctg"].mean())))
    temporal = tables(c.TORCH_TEMPORAL.name)
    if temporal is not None and not temporal.empty:
        value = idle_pct(temporal["idle_time(us)"], temporal["kernel_time(us)"])
        if not math.isnan(value):
            out.append(c.CAPTURE_IDLE_PCT.value(value))
    return out


def slowdown_metrics(tables: Tables) -> list[Metric]:
    """Echo's slowdown of the run's kernels against its world-size-1 baseline (echo_slowdown)."""
    slowdown = tables(c.ECHO_SLOWDOWN.name)
    if slowdown is None or not slowdown["slowdown"].notna().any():
        return []
    values = slowdown["slowdown"].dropna()
    return [c.SLOWDOWN_MEDIAN.value(float(values.median())), c.SLOWDOWN_MEAN.value(float(values.mean())),
            c.SLOWDOWN_P90.value(float(values.quantile(0.9)))]


def top_kernels(tables: Tables, tool: str, n: int = 3) -> list[TopKernel]:
    """The `n` kernels with the most GPU time in the measured window (nsys) or the traced steps
    (torch), per rank as every GPU time metric (Σ over the ranks / the ranks of the table): the
    tool's kernels table (profilers.Tables.kernels, its KernelTime columns): (name, time in ms per
    rank, category), most first."""
    profiler = profilers.find(tool)
    spec = profiler.kernel_time if profiler is not None else None
    table = profiler.table("kernels") if profiler is not None and spec is not None else None
    df = tables(table) if table is not None else None
    if spec is None or df is None or df.empty:
        return []
    df = df[df[spec.name] != "others"]
    ranks = max(df["rank"].nunique(), 1) if "rank" in df else 1
    top = (df[spec.time].astype(float) / spec.per_ms).groupby(df[spec.name].astype(str)).sum().nlargest(n) / ranks
    return [(str(kernel), float(time_ms), kernel_category(str(kernel))) for kernel, time_ms in top.items()]


def run_summary(tables: Tables, record: RunRecord) -> list[Metric]:
    """The headline metrics of a collected run from its `tables` (record: its run record)."""
    out: list[Metric] = []
    if record.kind in c.WORKLOAD_TIMINGS:
        phases_table, rows_table, iteration = c.WORKLOAD_TIMINGS[record.kind]
        rows = tables(rows_table.name)
        if rows is not None and not rows.empty:
            out += iteration_metrics(rows, iteration)
        phases = tables(phases_table.name)
        if phases is not None and not phases.empty:
            out += phase_metrics(phases, iteration)
    profiler = profilers.find(record.tool)
    for target in profiler.metrics if profiler is not None else ():
        out += load_target(target)(tables)
    return out


def run_headline(run_dir: Path, record: RunRecord) -> Headline:
    """The headline metrics and the top kernels of the collected run in `run_dir`, each table read once."""
    tables = tables_of(run_dir)
    return Headline(run_summary(tables, record), top_kernels(tables, record.tool))
