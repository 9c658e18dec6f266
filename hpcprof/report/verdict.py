"""Verdicts that account for noise: is a sweep point faster or slower than the baseline, or is the
difference within the noise?

The test is Welch's unequal-variance t-test at the 5 % level, on the iteration time:
- over the repetitions' mean iteration times when both the point and the baseline have 3 or more
  repetitions (a run is the unit: run-to-run noise is in the test);
- otherwise over the per-iteration samples (each counted iteration's time, averaged over ranks,
  pooled over the point's repetitions). Iterations of one run share that run's conditions, so this
  test cannot see run-to-run noise: it is the best available with fewer than 3 repetitions.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from hpcprof import profilers
from hpcprof.analysis.summary import counted
from hpcprof.core.catalog import ITERATION_MEAN, STEPS_TIMES, WORKLOAD_TIMINGS
from hpcprof.report.stats import ALPHA, welch
from hpcprof.run.results import read_table

#: the compared metric: each run's mean iteration time
ITERATION = ITERATION_MEAN.column
MIN_REPETITIONS = 3
VERDICT_COLUMNS = ["change_pct", "p_value", "verdict", "test"]


def iteration_samples(run_dir: Path, kind: str, tool: str) -> list[float]:
    """The run's per-iteration times in ms (counted iterations, mean over ranks): from the
    workload's timing rows (a `command`'s: the step hook's window steps, what its iteration.mean
    is), else from the per-iteration table of its profile `tool` (by ranks: start_ns, end_ns); []
    when none exists."""
    if kind in WORKLOAD_TIMINGS:
        _, rows_table, iteration = WORKLOAD_TIMINGS[kind]
        rows = read_table(run_dir, rows_table.name)
        if rows is not None and not rows.empty:
            rows = counted(rows[rows["phase"] == iteration])
            return [float(v) for v in rows.groupby("iteration")["time_ms"].mean()]
    steps = read_table(run_dir, STEPS_TIMES.name)
    if steps is not None and not steps.empty:
        from hpcprof.analysis.steps import iteration_rows

        rows = iteration_rows(steps)
        if not rows.empty:
            return [float(v) for v in rows.groupby("iteration")["time_ms"].mean()]
    profiler = profilers.find(tool)
    name = profiler.table("iterations") if profiler is not None else None
    if name is not None:
        table = read_table(run_dir, name)
        if table is not None and not table.empty:
            ms = (table["end_ns"] - table["start_ns"]) / 1e6
            return [float(v) for v in ms.groupby(table["iteration"]).mean()]
    return []


def point_test(point: pd.Series, base: pd.Series, samples: dict[str, list[float]],
                per_run: dict[str, float]) -> tuple[float, str]:
    """(two-sided p, the test's description) for one point against the baseline point."""
    runs, base_runs = point["run"].split(","), base["run"].split(",")
    means = [per_run[r] for r in runs if r in per_run and not math.isnan(per_run[r])]
    base_means = [per_run[r] for r in base_runs if r in per_run and not math.isnan(per_run[r])]
    if len(means) >= MIN_REPETITIONS and len(base_means) >= MIN_REPETITIONS:
        _, _, p = welch(means, base_means)
        return p, f"Welch t-test over repetitions' means ({len(means)} vs {len(base_means)})"
    iters = [v for r in runs for v in samples.get(r, [])]
    base_iters = [v for r in base_runs for v in samples.get(r, [])]
    if len(iters) >= 2 and len(base_iters) >= 2:
        _, _, p = welch(iters, base_iters)
        return p, (f"Welch t-test over iterations ({len(iters)} vs {len(base_iters)}; "
                   f"fewer than {MIN_REPETITIONS} repetitions)")
    return math.nan, "untested: fewer than 2 iterations"


def add_verdicts(df: pd.DataFrame, base_index: int, samples: dict[str, list[float]],
                 per_run: dict[str, float]) -> pd.DataFrame:
    """Add `change_pct` (iteration time against the baseline point's, %), `p_value`, `verdict`
    (baseline / faster / slower / no significant change / untested) and `test` to the folded
    comparison `df`; the baseline is row `base_index`."""
    out = df.copy()
    for column in VERDICT_COLUMNS:
        out[column] = pd.Series([None] * len(df), index=df.index, dtype=object)
    if ITERATION not in df or not pd.notna(df.at[base_index, ITERATION]) or not df.at[base_index, ITERATION]:
        out["verdict"] = "untested"
        out["test"] = "untested: the runs have no iteration time"
        return out
    base = df.loc[base_index]
    for i in df.index:
        if i == base_index:
            out.loc[i, VERDICT_COLUMNS] = [0.0, math.nan, "baseline", "the baseline"]   # not tested: no p
            continue
        value = df.at[i, ITERATION]
        change = 100.0 * (value / base[ITERATION] - 1.0) if pd.notna(value) else math.nan
        p, test = point_test(df.loc[i], base, samples, per_run)
        if math.isnan(p):
            verdict = "untested"
        elif p < ALPHA:
            verdict = "slower" if change > 0 else "faster"
        else:
            verdict = "no significant change"
        out.loc[i, VERDICT_COLUMNS] = [change, p, verdict, test]
    out["change_pct"] = out["change_pct"].astype(float)
    out["p_value"] = out["p_value"].astype(float)
    return out


def slower_than(df: pd.DataFrame, pct: float) -> pd.DataFrame:
    """The rows significantly slower than the baseline by more than `pct` % of its iteration time."""
    return df[(df["verdict"] == "slower") & (df["change_pct"] > pct)]
