"""The headline metrics of one collected run: what `compare`, `report` and the store show first.

`run_summary` reads the run's result tables (workload timings, nsys or Kineto analyses; `tables_of`:
each read once) and returns (metric, value, unit) triples; a metric is absent when its source table
is. `run_headline` adds the top kernels from the same reads: what collect records beside the tables
(hpcprof.results.write_headline).
Metric names are dotted: `iteration.mean`, `phase.matmul1.tflops`, `gpu.nccl.AllGather`, ...
(`gpu.<category>`: hpcprof/analysis/categories.py, with the run's own rules)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from hpcprof.analysis.categories import BUILTIN, Categories, categories_for
from hpcprof.analysis.steps import window_source_metrics
from hpcprof.results import Headline, Metric, TopKernel, read_table

#: a run's result tables by name (None: the run has no such table)
Tables = Callable[[str], "pd.DataFrame | None"]

#: per-iteration phase of each workload's timing rows
ITERATION_PHASE = {"seqpar": "iteration", "ddp": "step"}
#: workload timing tables: workload kind -> (phase stats, per-iteration rows)
WORKLOAD_TABLES = {"seqpar": ("workload_seqpar.phases", "workload_seqpar.iterations"),
                   "ddp": ("workload_ddp_steps.phases", "workload_ddp_steps.steps")}


def tables_of(run_dir: Path) -> Tables:
    """The result tables of the run in `run_dir`, each read at most once."""
    return functools.cache(functools.partial(read_table, run_dir))


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


def gpu_time_metrics(names: pd.Series, totals_ms: pd.Series, n_ranks: int, prefix: str = "",
                     categories: Categories = BUILTIN) -> list[Metric]:
    """GPU time per rank (mean over ranks) by kernel category (hpcprof/analysis/categories.py), and
    each category's share; `prefix` (`capture.`) names figures over the whole capture."""
    category = {name: categories(name) for name in names.unique()}   # a few names, on every rank's rows
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


def nsys_metrics(tables: Tables, categories: Categories = BUILTIN) -> list[Metric]:
    """GPU time by category, overlap and idle % over the measured window (nsys_kernels,
    nsys_overlap), the window itself, and the same over the whole capture as `capture.*`."""
    out: list[Metric] = window_metrics(tables("nsys_window"))
    out += window_source_metrics(tables("nsys_window"), tables("nsys_iterations"))
    kern = tables("nsys_kernels")
    if kern is not None and not kern.empty:
        out += gpu_time_metrics(kern["name"].astype(str), kern["total_ns"].astype(float) / 1e6, kern["rank"].nunique(),
                                categories=categories)
    ov = tables("nsys_overlap")                   # collected before windows: the whole capture's
    out += overlap_idle_metrics(ov, prefix="" if ov is None or "window" in ov else "capture.")
    kern = tables("nsys_cuda_gpu_kern_sum")
    if kern is not None and not kern.empty:
        out += gpu_time_metrics(kern["Name"].astype(str), kern["Total Time (ns)"].astype(float) / 1e6,
                                kern["rank"].nunique(), prefix="capture.", categories=categories)
    out += overlap_idle_metrics(tables("nsys_capture_overlap"), prefix="capture.")
    return out


def torch_metrics(tables: Tables, categories: Categories = BUILTIN) -> list[Metric]:
    """Over the measured window (torch_window: ProfilerSteps, else the steps found in the trace):
    idle and overlap %, the window itself, GPU time by category (torch_window_kernels); HTA's
    whole-trace idle and overlap % as `capture.*`."""
    out: list[Metric] = []
    window = tables("torch_window")
    out += window_metrics(window)
    out += window_source_metrics(window, tables("torch_iterations"))
    out += overlap_idle_metrics(window)
    kernels = tables("torch_window_kernels")
    if kernels is not None and not kernels.empty:
        out += gpu_time_metrics(kernels["name"].astype(str), kernels["total_ns"].astype(float) / 1e6,
                                kernels["rank"].nunique(), categories=categories)
    ov = tables("torch_overlap")
    if ov is not None and ov["comp_comm_overlap_pctg"].notna().any():
        out.append(("capture.overlap_pct", float(ov["comp_comm_overlap_pctg"].mean()), "%"))
    temporal = tables("torch_temporal")
    if temporal is not None and not temporal.empty:
        out.append(("capture.idle_pct", float(temporal["idle_time_pctg"].mean()), "%"))
    return out


def top_kernels(tables: Tables, tool: str, n: int = 3, categories: Categories = BUILTIN) -> list[TopKernel]:
    """The `n` kernels with the most GPU time over all ranks in the measured window (nsys_kernels,
    torch_window_kernels): (name, time in ms, category), most first."""
    df = tables({"nsys": "nsys_kernels", "torch": "torch_window_kernels"}[tool]) \
        if tool in ("nsys", "torch") else None
    if df is None or df.empty:
        return []
    top = (df["total_ns"].astype(float) / 1e6).groupby(df["name"].astype(str)).sum().nlargest(n)
    return [(str(kernel), float(time_ms), categories(str(kernel))) for kernel, time_ms in top.items()]


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
    tool = experiment["profile"]["tool"]
    if tool == "nsys":
        out += nsys_metrics(tables, categories_for(config))
        slowdown = tables("echo_slowdown")
        if slowdown is not None and slowdown["slowdown"].notna().any():
            values = slowdown["slowdown"].dropna()
            out += [("slowdown.median", float(values.median()), ""), ("slowdown.mean", float(values.mean()), ""),
                    ("slowdown.p90", float(values.quantile(0.9)), "")]
    elif tool == "torch":
        out += torch_metrics(tables, categories_for(config))
    return out


def run_headline(run_dir: Path, config: dict[str, Any]) -> Headline:
    """The headline metrics and the top kernels of the collected run in `run_dir`, each table read once."""
    tables = tables_of(run_dir)
    return Headline(run_summary(tables, config), top_kernels(tables, config["experiment"]["profile"]["tool"],
                                                           categories=categories_for(config)))
