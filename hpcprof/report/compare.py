"""Compare runs (hpcprof.report.runs selects and loads them): one row per run of swept parameters
and headline metrics, repetitions folded into mean, spread and 95 % confidence interval, ratios
and a verdict against a baseline run (hpcprof.report.verdict)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from hpcprof import profilers
from hpcprof.analysis.detect_steps import PREFIX as DETECTED
from hpcprof.analysis.detect_steps import describe, step_cv
from hpcprof.config import REPEAT
from hpcprof.core.catalog import CAPTURE_WINDOW, TOP_KERNEL_TIME, column, is_identifier, parse_column
from hpcprof.core.errors import UserError
from hpcprof.report.runs import RunInfo, load, select_runs
from hpcprof.report.stats import ci_halfwidth
from hpcprof.run.results import read_table
from hpcprof.run.rundir import find_run

#: the comparison's column of each run's kernel with the most GPU time
TOP_KERNEL = "top kernel"
#: the comparison's column saying what each run's measured window is
WINDOW = "window"


def measured_window(info: RunInfo) -> str:
    """What the run's measured window is, in words ('' without a window table): the name its
    profile's window table gives it (`nvtx:timed`, `ProfilerStep`) and its iterations, or the whole
    capture where no iteration range was found in it."""
    profiler = profilers.find(info.tool)
    name = profiler.table("window") if profiler is not None else None
    table = read_table(info.run.path, name) if name else None
    if table is None or table.empty:
        return ""
    labels = "+".join(sorted(set(table["window"].astype(str))))
    if labels == CAPTURE_WINDOW:
        return "the whole capture, no iteration range in it"
    low, high = int(table["iterations"].min()), int(table["iterations"].max())
    count = str(low) if low == high else f"{low}-{high}"
    if labels.startswith(DETECTED):   # the profile carries no marks: how the steps were found, and how alike
        iterations = profiler.table("iterations") if profiler is not None else None
        steps = read_table(info.run.path, iterations) if iterations else None
        return describe(labels, high, step_cv(steps)).replace(f" {high} steps", f" {count} steps", 1)
    return f"{labels}, {count} iteration{'' if high == 1 else 's'}"


def comparison(infos: list[RunInfo]) -> pd.DataFrame:
    """One row per run: run, swept parameters, world size, state, headline metrics, the top kernel's
    GPU time per rank (as every other row) and its name."""
    keys: list[str] = []
    for info in infos:
        keys += [k for k in info.params if k not in keys]
    rows = []
    for info in infos:
        row: dict[str, Any] = {"run": info.run.run_id, **{k: info.params.get(k) for k in keys},
                               "world_size": info.record.world_size, "state": info.state,
                               WINDOW: measured_window(info)}
        row.update({column(name, unit): value for name, value, unit in info.metrics})
        if info.top:
            name, time_ms, _ = info.top[0]
            row[TOP_KERNEL_TIME.column] = time_ms
            row[TOP_KERNEL] = name
        rows.append(row)
    df = pd.DataFrame(rows)
    if WINDOW in df and not df[WINDOW].astype(bool).any():     # no run has a measured window (no profile)
        df = df.drop(columns=WINDOW)
    if TOP_KERNEL in df:   # the name last, after the metrics
        df = df[[c for c in df.columns if c != TOP_KERNEL] + [TOP_KERNEL]]
    return df


def param_columns(df: pd.DataFrame) -> list[str]:
    """The swept-parameter columns of a comparison frame (repetition number excluded)."""
    stop = list(df.columns).index("state")
    return [c for c in df.columns[1:stop] if c not in (REPEAT, "world_size")]


def point_labels(df: pd.DataFrame, params: list[str], sep: str = ", ") -> pd.Series:
    """Each row's parameter values joined as text (empty for a missing value)."""
    def label(v: Any) -> str:
        if v is None or (isinstance(v, float) and pd.isna(v)):
            return ""
        return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)

    text = df[params].apply(lambda col: col.map(label))
    return text.agg(sep.join, axis=1) if params else pd.Series("", index=df.index)


def metric_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if parse_column(c) and pd.api.types.is_numeric_dtype(df[c])]


def fold_repetitions(df: pd.DataFrame) -> pd.DataFrame:
    """One row per sweep point: the mean of each metric over its repetitions, its standard
    deviation (`<metric> sd`), the half-width of its 95 % confidence interval (`<metric> ci95`:
    Student t with n - 1 degrees of freedom), and `n`, the point's repetitions."""
    if REPEAT not in df:
        return df
    params = param_columns(df)
    metrics = metric_columns(df)
    keyed = df.assign(_key=point_labels(df, params, "|"))
    rows = []
    for _, group in keyed.groupby("_key", sort=False):
        first = group.iloc[0]
        row: dict[str, Any] = {"run": ",".join(group["run"]), **{p: first[p] for p in params},
                               "world_size": first["world_size"],
                               "state": "/".join(sorted(set(group["state"]))), "n": len(group)}
        if WINDOW in group:
            row[WINDOW] = "; ".join(w for w in group[WINDOW].unique() if w)
        for col in metrics:
            if is_identifier(col):  # a rank id: the most frequent one, no spread
                row[col] = group[col].mode().min() if group[col].notna().any() else float("nan")
                continue
            values = [float(v) for v in group[col].dropna()]
            row[col] = group[col].mean()
            row[f"{col} sd"] = group[col].std(ddof=1) if len(values) > 1 else float("nan")
            row[f"{col} ci95"] = ci_halfwidth(values)
        if TOP_KERNEL in group:
            row[TOP_KERNEL] = " / ".join(group[TOP_KERNEL].dropna().astype(str).unique())
        rows.append(row)
    return pd.DataFrame(rows)


def baseline_row(df: pd.DataFrame, baseline: str) -> int:
    """The index of the row (sweep point) whose runs include run `baseline`."""
    match = df.index[df["run"].str.split(",").map(lambda ids: baseline in ids)]
    if len(match) == 0:
        raise UserError(f"--baseline {baseline}: not among the compared runs ({', '.join(df['run'])}); "
                        "add it to the selection or name one of them")
    return int(match[0])


def with_baseline(df: pd.DataFrame, base_index: int) -> pd.DataFrame:
    """Add `<metric> /base` ratio columns (value / the baseline row's value); identifiers (a rank
    id) get none."""
    base = df.loc[base_index]
    out = df.copy()
    for col in metric_columns(df):
        if is_identifier(col) or not pd.notna(base[col]) or base[col] == 0:
            continue
        out[f"{col} /base"] = df[col] / base[col]
    return out


def separate_baseline(df: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """When every selected run is a repetition of the baseline run's point (`compare RUN1 RUN2
    --baseline RUN1`), a `baseline` parameter column (the run id on its row, empty on the others), so
    the baseline run is its own row and the other repetitions fold into one row judged against it.
    Across sweep points the baseline stays the whole point, its repetitions folded."""
    if REPEAT not in df or baseline not in set(df["run"]):
        return df
    labels = point_labels(df, param_columns(df), "|")
    base_label = labels[df["run"] == baseline].iloc[0]
    if len(df) < 2 or not (labels == base_label).all():
        return df
    out = df.copy()
    out.insert(list(out.columns).index("state"), "baseline", (out["run"] == baseline).map({True: baseline, False: ""}))
    return out


def judged(infos: list[RunInfo], baseline: str) -> pd.DataFrame:
    """The folded comparison of `infos` with baseline ratios and verdicts against run `baseline`."""
    from hpcprof.report.verdict import ITERATION, add_verdicts, iteration_samples

    per_run_df = separate_baseline(comparison(infos), baseline)
    df = fold_repetitions(per_run_df)
    base_index = baseline_row(df, baseline)
    per_run = dict(zip(per_run_df["run"], per_run_df[ITERATION], strict=False)) if ITERATION in per_run_df else {}
    samples = {i.run.run_id: iteration_samples(i.run.path, i.kind, i.tool) for i in infos if i.metrics}
    return add_verdicts(with_baseline(df, base_index), base_index, samples, per_run)


def compare_frame(refs: tuple[str, ...], workdir: Path, baseline: str | None = None) -> pd.DataFrame:
    """The comparison of the selected runs (folded repetitions with confidence intervals; with a
    baseline, ratios to it and verdicts); `attrs["notes"]`: the profilers' perturbation of the steps."""
    runs = select_runs(refs, workdir)
    infos = load(runs)
    if baseline is None:
        df = fold_repetitions(comparison(infos))
    else:
        base_run = find_run(baseline, workdir)
        if base_run not in runs:
            raise UserError(f"--baseline {baseline}: not in the selection; add it to the runs compared")
        df = judged(infos, base_run.run_id)
    df.attrs["notes"] = overhead_notes(infos)
    return df


def overhead_notes(infos: list[RunInfo]) -> list[str]:
    """One line per profiled run with a baseline: the profiler's perturbation of its steps
    (hpcprof.report.overhead), `warning: ` first above the threshold."""
    return [f"{'warning: ' if i.overhead.warning else ''}{i.run.run_id}: {i.overhead.sentence()}"
            for i in infos if i.overhead is not None]
