"""The headline metrics of one collected run: what `compare`, `report` and the store show first.

`run_summary` reads the run's result tables (workload timings, nsys or Kineto analyses; `tables_of`:
each read once) and returns (metric, value, unit) triples; a metric is absent when its source table
is. `run_headline` adds the top kernels from the same reads: what collect records beside the tables
(hpcprof.run.results.write_headline). The metrics are declared in hpcprof.core.catalog (name, unit,
window, formula), a tool's tables in its package; a tool's own metrics are made by its Profiler's
`metrics` (hpcprof/tools/<tool>/analysis/headline.py) with the functions here; `idle_pct` and
`overlap_pct` are computed by the one function each here,
GPU time by kernel category with the run's categories (hpcprof.analysis.categories: its site's and
experiment's rules first).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pandas as pd

from hpcprof import profilers
from hpcprof.analysis.categories import BUILTIN, Categories, categories_for
from hpcprof.analysis.detect_steps import PREFIX as DETECTED
from hpcprof.core import catalog as c
from hpcprof.core.lazy import load_target
from hpcprof.run.results import Headline, Metric, TopKernel, read_table

if TYPE_CHECKING:
    from hpcprof.run.record import RunRecord


class Tables(Protocol):
    """A run's result tables by name (None: the run has no such table) and its kernel categories."""

    categories: Categories

    def __call__(self, name: str) -> pd.DataFrame | None: ...


class RunTables:
    """The result tables of the run in `run_dir`, each read at most once (Tables)."""

    def __init__(self, run_dir: Path, categories: Categories = BUILTIN) -> None:
        self.run_dir, self.categories = run_dir, categories
        self._read: dict[str, pd.DataFrame | None] = {}

    def __call__(self, name: str) -> pd.DataFrame | None:
        if name not in self._read:
            self._read[name] = read_table(self.run_dir, name)
        return self._read[name]


def tables_of(run_dir: Path, categories: Categories = BUILTIN) -> RunTables:
    """The result tables of the run in `run_dir` (each read at most once), with its kernel `categories`."""
    return RunTables(run_dir, categories)


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
                     metrics: tuple[c.MetricSpec, c.MetricSpec, c.MetricSpec] = c.GPU_TIME,
                     categories: Categories = BUILTIN) -> list[Metric]:
    """GPU time per rank (mean over ranks) by kernel category (`categories`), and each category's
    share: `metrics` (total, per category, share) name them (catalog.GPU_TIME over the window,
    CAPTURE_GPU_TIME)."""
    total_metric, category_metric, share_metric = metrics
    category = {name: categories(name) for name in names.unique()}   # a few names, on every rank's rows
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


def step_metrics(tables: Tables, profiler_window: bool) -> list[Metric]:
    """A `command`'s iteration metrics from the step hook's steps in the window (steps_times), and
    (`profiler_window` False: the run has no profiler window table, e.g. `tool: none`, or a torch
    trace of a CPU run) window.iterations from them."""
    from hpcprof.analysis.steps import iteration_rows

    steps = tables(c.STEPS_TIMES.name)
    if steps is None or steps.empty:
        return []
    rows = iteration_rows(steps)
    out = iteration_metrics(rows, c.STEP_PHASE) if not rows.empty else []
    if not profiler_window:
        window = steps[steps["in_window"].astype(bool)]
        out.append(c.WINDOW_ITERATIONS.value(float(window.groupby("rank").size().reindex(
            steps["rank"].unique(), fill_value=0).mean())))
    return out + perturbation_metrics(tables(c.STEPS_PERTURBATION.name))


def detected_step_metrics(window: pd.DataFrame | None, iterations: pd.DataFrame | None) -> list[Metric]:
    """iteration.* over the steps found in the kernels of a capture without marks (past the warm-up
    detect_steps leaves out), each step's GPU span (first kernel's start to last operation's end) as
    its time; none where the window was marked or is the whole capture."""
    if window is None or iterations is None or iterations.empty:
        return []
    found = iterations[iterations["window"].astype(str).str.startswith(DETECTED)]
    rows = pd.DataFrame({"rank": found["rank"], "iteration": found["iteration"], "phase": c.STEP_PHASE,
                         "time_ms": found["gpu_ns"].astype(float) / 1e6})
    return iteration_metrics(rows, c.STEP_PHASE) if not rows.empty else []


def idle_cause_metrics(causes: pd.DataFrame | None) -> list[Metric]:
    """idle.<cause>: each cause's idle ms per step, the mean over ranks (a rank without the cause's
    time at 0), from a `<tool>_idle_causes` table; the causes with any time."""
    if causes is None or causes.empty:
        return []
    per_rank = causes.pivot_table(index="rank", columns="cause", values="ms_per_step", aggfunc="sum", fill_value=0)
    return [c.IDLE_CAUSE.value(float(ms), cause=str(cause)) for cause, ms in per_rank.mean().items() if ms > 0]


def perturbation_metrics(ranks: pd.DataFrame | None) -> list[Metric]:
    """The profiler's slowdown of the most slowed rank with its interval, and the unprofiled step
    (median over ranks), from steps_perturbation."""
    if ranks is None or ranks.empty:
        return []
    worst = ranks.loc[ranks["slowdown_pct"].idxmax()]
    return [c.PROFILER_SLOWDOWN.value(float(worst["slowdown_pct"])),
            c.PROFILER_SLOWDOWN_LOW.value(float(worst["low_pct"])),
            c.PROFILER_SLOWDOWN_HIGH.value(float(worst["high_pct"])),
            c.PROFILER_UNPROFILED_STEP.value(float(ranks["unprofiled_ms"].median()))]


def memory_metrics(memory: pd.DataFrame | None) -> list[Metric]:
    """memory.* (GiB) from per-rank peaks (hpcprof.analysis.steps.memory_table's: the step hook's
    steps_memory, a workload's counted iterations)."""
    if memory is None or memory.empty:
        return []
    gib = float(1 << 30)
    out = [c.MEMORY_PEAK_ALLOCATED.value(float(memory["peak_allocated"].max()) / gib),
           c.MEMORY_PEAK_RESERVED.value(float(memory["peak_reserved"].max()) / gib),
           c.MEMORY_FRAGMENTATION.value(float(memory["fragmentation"].max()) / gib)]
    headroom = memory["headroom"].dropna()
    return out + ([c.MEMORY_HEADROOM.value(float(headroom.min()) / gib)] if not headroom.empty else [])


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
    return [(str(kernel), float(time_ms), tables.categories(str(kernel))) for kernel, time_ms in top.items()]


def run_summary(tables: Tables, record: RunRecord) -> list[Metric]:
    """The headline metrics of a collected run from its `tables` (record: its run record)."""
    out: list[Metric] = []
    if record.kind in c.WORKLOAD_TIMINGS:
        phases_table, rows_table, iteration = c.WORKLOAD_TIMINGS[record.kind]
        rows = tables(rows_table.name)
        if rows is not None and not rows.empty:
            out += iteration_metrics(rows, iteration)
            if "allocated_peak" in rows:    # the workload's own timer recorded memory (CUDA)
                from hpcprof.analysis.steps import memory_table

                out += memory_metrics(memory_table(counted(rows[rows["phase"] == iteration])))
        phases = tables(phases_table.name)
        if phases is not None and not phases.empty:
            out += phase_metrics(phases, iteration)
        out += perturbation_metrics(tables(c.STEPS_PERTURBATION.name))   # its loop's (collect.files)
    profiler = profilers.find(record.tool)
    if record.kind == "command":
        window = profiler.table("window") if profiler is not None else None
        out += step_metrics(tables, window is not None and tables(window) is not None)
    out += memory_metrics(tables(c.STEPS_MEMORY.name))
    for target in profiler.metrics if profiler is not None else ():
        out += load_target(target)(tables)
    return out


def run_headline(run_dir: Path, record: RunRecord) -> Headline:
    """The headline metrics and the top kernels of the collected run in `run_dir`, each table read once."""
    tables = tables_of(run_dir, categories_for(record))
    return Headline(run_summary(tables, record), top_kernels(tables, record.tool))
