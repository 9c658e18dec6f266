"""The report's analysis of a sweep (or of one run): sweep points with their repetitions and
verdicts, where the time goes per point, scaling, % of hardware peak, per-iteration stragglers,
jitter and the critical path. Each function returns a DataFrame that html.py draws and
findings.py puts in words; a function returns an empty frame when its source is absent."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from hpcprof import profilers
from hpcprof.analysis.summary import counted, idle_pct
from hpcprof.core import catalog as c
from hpcprof.report.compare import WINDOW, judged, param_columns
from hpcprof.report.peaks import Peaks, device_peaks, matmul_precision
from hpcprof.report.runs import RunInfo
from hpcprof.report.stats import ALPHA, mean_above_zero
from hpcprof.report.terminal import format_value
from hpcprof.run.results import list_tables, read_table

#: sweep parameters that set the number of ranks (scaling is drawn against the world size)
WORLD_PARAMS = ("resources.ranks_per_node", "resources.nodes", "workload.args.world_size")


@dataclass
class Point:
    """One sweep point: its label, folded comparison row (means, ci95, verdict) and its runs."""

    label: str
    row: pd.Series
    infos: list[RunInfo]

    @property
    def first(self) -> RunInfo:
        return self.infos[0]

    def repetitions(self) -> list[tuple[int, RunInfo]]:
        """(repetition number, counted from 1 as every figure labels it, run) of each run of the point."""
        return list(enumerate(self.infos, start=1))

    def metric(self, metric: c.MetricSpec) -> float | None:
        """The point's mean of `metric` (None when absent)."""
        value = self.row.get(metric.column)
        return float(value) if value is not None and pd.notna(value) else None


def sweep_points(infos: list[RunInfo], baseline: str | None) -> list[Point]:
    """The collected runs folded into sweep points, judged against run `baseline` (default: the
    first collected run)."""
    collected = [i for i in infos if i.metrics]
    if not collected:
        return []
    df = judged(collected, baseline or collected[0].run.run_id)
    by_id = {i.run.run_id: i for i in collected}
    return [Point(point_label(df.loc[i], param_columns(df)), df.loc[i],
                  [by_id[r] for r in str(df.at[i, "run"]).split(",")]) for i in df.index]


def point_label(row: pd.Series, params: list[str]) -> str:
    """`precision=float32, ranks_per_node=2`: the point's swept values by the last part of their
    names; the first run's id when it has none."""
    def text(value: Any) -> str:
        return str(int(value)) if isinstance(value, float) and value.is_integer() else format_value(value)

    parts = [f"{p.rpartition('.')[2]}={text(row[p])}" for p in params
             if row[p] is not None and not (isinstance(row[p], float) and pd.isna(row[p]))]
    return ", ".join(parts) or str(row["run"]).split(",")[0]


def phase_breakdown(points: list[Point]) -> pd.DataFrame:
    """Mean time per workload phase and point (point, phase, ms): seqpar's allgather, matmuls,
    reduce_scatter; ddp's forward, backward, optimizer."""
    rows = [{"point": p.label, "phase": parts["phase"], "ms": value}
            for p in points for parts, value in metric_values(p, c.PHASE_TIME)]
    return pd.DataFrame(rows, columns=["point", "phase", "ms"])


def gpu_breakdown(points: list[Point]) -> pd.DataFrame:
    """GPU time per kernel category and point, mean over ranks (point, category, ms)."""
    rows = [{"point": p.label, "category": parts["category"], "ms": value}
            for p in points for parts, value in metric_values(p, c.GPU_TIME[1])]
    return pd.DataFrame(rows, columns=["point", "category", "ms"])


def metric_values(point: Point, metric: c.MetricSpec) -> list[tuple[dict[str, str], float]]:
    """(the name's parts, the point's mean) of each metric of `point` that is `metric` (one per
    phase or kernel category where its name has a part), in column order."""
    out = []
    for col in point.row.index:
        name_unit = c.parse_column(str(col))
        parts = metric.match(name_unit[0]) if name_unit and name_unit[1] == metric.unit else None
        if parts is not None and pd.notna(point.row[col]):
            out.append((parts, float(point.row[col])))
    return out


def window_note(points: list[Point]) -> str:
    """Which window the GPU metrics cover: the measured window, as each point's runs name it
    (compare.measured_window), else the whole capture."""
    named = list(dict.fromkeys(str(w) for p in points if (w := p.row.get(WINDOW))))
    if not named:
        return f"{c.CAPTURE}, start-up included"
    return f"{c.MEASURED}: {'; '.join(named)}"


def scaling(points: list[Point]) -> pd.DataFrame:
    """Speed-up and parallel efficiency against the smallest world size of each group of points
    that differ only in the number of ranks, T each point's step without the profiler where every
    point of the group measured it, else its median step (scaling.on_one_basis): strong
    scaling (speed-up = T_min / T) or weak
    (throughput speed-up = (N / N_min) * T_min / T), as scaling.mode_of says (a mode not stated: the
    strong speed-up, both efficiencies); ideal speed-up N / N_min; and the time lost per step with
    where it went (scaling.with_lost_time). Empty when the world size does not vary."""
    from hpcprof.report.scaling import lost_split, mode_of, on_one_basis, program_step, with_lost_time

    rows, infos = [], []
    for p in points:
        time = p.metric(c.ITERATION_MEDIAN)        # the steady step (report.scaling's docstring)
        if time is None or not time:
            continue
        group = ", ".join(f"{k.rpartition('.')[2]}={v}" for k, v in p.first.params.items()
                          if k not in WORLD_PARAMS and k != "repeat")
        rows.append({"group": group or "all", "point": p.label, "world_size": p.first.record.world_size,
                     "nodes": p.first.record.experiment.resources.nodes,
                     "tool": p.first.tool, "profiled_ms": time,
                     "program_ms": program_step(p.first, time, p.metric(c.PROFILER_UNPROFILED_STEP)),
                     "mode": mode_of(p.first),
                     "kernel_slowdown": next((v for n, v, _ in p.first.metrics if n == c.SLOWDOWN_MEDIAN.name),
                                             math.nan)})
        infos.append(p.first)
    df = pd.DataFrame(rows)
    if df.empty or df["world_size"].nunique() < 2:
        return pd.DataFrame()
    out = []
    for _, g in df.groupby("group", sort=False):
        if g["world_size"].nunique() < 2:
            continue
        g = on_one_basis(g)
        ref = g.loc[g["world_size"].idxmin()]
        ideal = g["world_size"] / ref["world_size"]
        time_ratio = ref["time_ms"] / g["time_ms"]
        speedup = ideal * time_ratio if ref["mode"] == "weak" else time_ratio
        out.append(g.assign(ideal=ideal, speedup=speedup, efficiency_pct=100.0 * speedup / ideal,
                            reference=ref["point"]))
    if not out:
        return pd.DataFrame()
    kept = pd.concat(out)
    return with_lost_time(kept.reset_index(drop=True), [lost_split(infos[i]) for i in kept.index])


def scaling_view(infos: list[RunInfo]) -> tuple[pd.DataFrame, list[str]]:
    """The scaling table of the runs' sweep points (scaling(), report.scaling.shown) and its
    sentences; an empty table where the world size does not vary."""
    from hpcprof.report.scaling import sentences, shown

    df = scaling(sweep_points(infos, None))
    return (shown(df), sentences(df)) if not df.empty else (df, [])


def tool_table(info: RunInfo, role: str) -> pd.DataFrame | None:
    """The run's result table of `role` (a field of profilers.Tables: iterations, critical_path, ...)
    for its profile tool, None when absent."""
    profiler = profilers.find(info.tool)
    name = profiler.table(role) if profiler is not None else None
    return read_table(info.run.path, name) if name else None


def run_device(info: RunInfo) -> str:
    """The GPU (or CPU) name rank 0 reported in the workload's results ('' when unknown)."""
    for name in list_tables(info.run.path):
        if name.startswith(c.table_name(c.WORKLOAD, "")) and name.endswith(".ranks"):
            ranks = read_table(info.run.path, name)
            if ranks is not None and "device_name" in ranks and not ranks.empty:
                return str(ranks["device_name"].iloc[0])
    return ""


def run_peaks(info: RunInfo) -> Peaks | None:
    return device_peaks(run_device(info), info.record.site)


def peak_shares(points: list[Point]) -> pd.DataFrame:
    """Each point's rates against its hardware's peak: matmul TFLOP/s against the precision's
    dense peak, collective bus bandwidth against NVLink (one node) or the network (several)
    (point, phase, what, value, unit, peak, pct, reference, source)."""
    rows = []
    for p in points:
        peaks = run_peaks(p.first)
        precision = matmul_precision(p.first.record.experiment.workload.args)
        nodes = p.first.record.experiment.resources.nodes
        for col in p.row.index:
            name_unit = c.parse_column(str(col))
            if name_unit is None or not pd.notna(p.row[col]):
                continue
            phase, rate = rate_of(name_unit[0])
            if rate is c.PHASE_TFLOPS:
                peak = peaks.tflops.get(precision) if peaks else None
                reference = f"{peaks.gpu} {precision} dense peak" if peaks else f"device {run_device(p.first)!r}"
            elif rate is c.PHASE_BUSBW and p.first.record.world_size > 1:   # one rank: no traffic
                peak = (peaks.nvlink_GBps if nodes == 1 else peaks.network_GBps) if peaks else None
                link = "NVLink" if nodes == 1 else "network"
                reference = f"{peaks.gpu} {link} per direction" if peaks else f"device {run_device(p.first)!r}"
            else:
                continue
            value = float(p.row[col])
            rows.append({"point": p.label, "phase": phase, "what": rate.name.rpartition(".")[2], "value": value,
                         "unit": rate.unit, "peak": peak, "pct": 100.0 * value / peak if peak else None,
                         "reference": reference, "source": peaks.source if peaks else ""})
    return pd.DataFrame(rows, columns=["point", "phase", "what", "value", "unit", "peak", "pct", "reference",
                                       "source"])


def rate_of(name: str) -> tuple[str, c.MetricSpec | None]:
    """(phase, PHASE_TFLOPS or PHASE_BUSBW) of a phase's rate metric, ("", None) for any other metric."""
    for metric in (c.PHASE_TFLOPS, c.PHASE_BUSBW):
        if (parts := metric.match(name)) is not None:
            return parts["phase"], metric
    return "", None


def rank_iterations(info: RunInfo) -> pd.DataFrame:
    """Per rank and iteration: time_ms and whether the iteration is counted, from the workload's
    timing rows, else from the profile's per-iteration table (rank, iteration, time_ms, counted)."""
    if info.kind in c.WORKLOAD_TIMINGS:
        _, rows_table, iteration = c.WORKLOAD_TIMINGS[info.kind]
        rows = read_table(info.run.path, rows_table.name)
        if rows is not None and not rows.empty:
            rows = rows[rows["phase"] == iteration]
            kept = counted(rows).index
            return pd.DataFrame({"rank": rows["rank"].astype(int), "iteration": rows["iteration"].astype(int),
                                 "time_ms": rows["time_ms"].astype(float), "counted": rows.index.isin(kept)})
    table = tool_table(info, "iterations")
    if table is not None and not table.empty:
        return pd.DataFrame({"rank": table["rank"].astype(int), "iteration": table["iteration"].astype(int),
                             "time_ms": (table["end_ns"] - table["start_ns"]) / 1e6, "counted": True})
    return pd.DataFrame(columns=["rank", "iteration", "time_ms", "counted"])


def per_iteration(points: list[Point]) -> pd.DataFrame:
    """Iteration time (mean over ranks) per iteration of every run (point, run, repetition,
    iteration, time_ms, counted): warm-up and jitter."""
    parts = []
    for p in points:
        for rep, info in p.repetitions():
            rows = rank_iterations(info)
            if rows.empty:
                continue
            mean = rows.groupby("iteration", as_index=False).agg(time_ms=("time_ms", "mean"), counted=("counted", "all"))
            parts.append(mean.assign(point=p.label, run=info.run.run_id, repetition=rep))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def stragglers(points: list[Point]) -> pd.DataFrame:
    """Per counted iteration of every multi-rank run: the slowest rank and its excess over the
    median rank (point, run, repetition, iteration, slowest_rank, excess_ms, excess_pct)."""
    parts = []
    for p in points:
        for rep, info in p.repetitions():
            rows = rank_iterations(info)
            rows = rows[rows["counted"].astype(bool)]
            if rows.empty or rows["rank"].nunique() < 2:
                continue
            by_iter = rows.groupby("iteration")["time_ms"]
            slowest = rows.loc[by_iter.idxmax(), ["iteration", "rank", "time_ms"]].set_index("iteration")
            median = by_iter.median()
            excess = slowest["time_ms"] - median
            parts.append(pd.DataFrame({"point": p.label, "run": info.run.run_id, "repetition": rep,
                                       "iteration": slowest.index, "slowest_rank": slowest["rank"].to_numpy(),
                                       "excess_ms": excess.to_numpy(),
                                       "excess_pct": (100.0 * excess / median).to_numpy()}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=STRAGGLER_COLUMNS)


#: stragglers()' columns
STRAGGLER_COLUMNS = ["point", "run", "repetition", "iteration", "slowest_rank", "excess_ms", "excess_pct"]


def point_ci95(point: Point) -> float:
    """The half-width of the 95 % confidence interval of the point's iteration time over its
    repetitions (ms; NaN for one run)."""
    ci95 = point.row.get(f"{c.ITERATION_MEAN.column} ci95")
    return float(ci95) if ci95 is not None and pd.notna(ci95) else math.nan


def persistent_stragglers(points: list[Point]) -> pd.DataFrame:
    """Per multi-rank point: the rank whose iteration time exceeds the iteration's median rank most
    on average over the counted iterations of all its runs (excess_ms; excess_pct of the point's
    iteration time), the one-sided p of a t-test of that excess over the iterations (p: the
    per-iteration spread), the half-width of the repetitions' 95 % confidence interval of the
    iteration time (ci95_ms, NaN with one run) and whether the excess is above both (point, rank,
    iterations, excess_ms, excess_pct, p, ci95_ms, above_noise). p is Bonferroni-corrected for
    the choice of the largest of the ranks' excesses."""
    rows = []
    for p in points:
        parts = []
        for _, info in p.repetitions():
            timed = rank_iterations(info)
            timed = timed[timed["counted"].astype(bool)]
            if timed["rank"].nunique() > 1:
                key = timed["iteration"].astype(str) + "@" + info.run.run_id
                parts.append(timed.assign(excess=timed["time_ms"] - timed.groupby(key)["time_ms"].transform("median")))
        if not parts:
            continue
        excess = pd.concat(parts, ignore_index=True).groupby("rank")["excess"]
        rank = int(excess.mean().idxmax())
        values = [float(v) for v in excess.get_group(rank)]
        if len(values) < 2:
            continue
        mean = sum(values) / len(values)
        p_value = min(1.0, mean_above_zero(values) * excess.ngroups)     # Bonferroni: the largest of the ranks'
        ci95 = point_ci95(p)
        time = p.metric(c.ITERATION_MEAN)
        rows.append({"point": p.label, "rank": rank, "iterations": len(values), "excess_ms": mean,
                     "excess_pct": 100.0 * mean / time if time else math.nan, "p": p_value, "ci95_ms": ci95,
                     "above_noise": bool(p_value < ALPHA and (math.isnan(ci95) or mean > ci95))})
    return pd.DataFrame(rows, columns=["point", "rank", "iterations", "excess_ms", "excess_pct", "p", "ci95_ms",
                                       "above_noise"])


def straggler_outliers(points: list[Point], strag: pd.DataFrame) -> pd.DataFrame:
    """The iterations of `strag` (stragglers()) whose slowest rank's excess is above the noise of its
    point: beyond the far-out fence of the point's per-iteration excesses (Q3 + 3 · IQR) and beyond
    the repetitions' 95 % confidence interval of the iteration time (where there are repetitions);
    `strag`'s columns and the threshold (threshold_ms), most excess first."""
    if strag.empty:
        return strag.assign(threshold_ms=pd.Series(dtype=float))
    parts = []
    for p in points:
        mine = strag[strag["point"] == p.label]
        if len(mine) < 4:
            continue
        q1, q3 = mine["excess_ms"].quantile([0.25, 0.75])
        ci95 = point_ci95(p)
        threshold = max(float(q3 + 3.0 * (q3 - q1)), 0.0 if math.isnan(ci95) else ci95)
        parts.append(mine[mine["excess_ms"] > threshold].assign(threshold_ms=threshold))
    out = pd.concat(parts) if parts else strag.iloc[:0].assign(threshold_ms=pd.Series(dtype=float))
    return out.sort_values("excess_ms", ascending=False)


def gpu_idle_per_iteration(points: list[Point]) -> pd.DataFrame:
    """GPU idle % of each iteration (idle over the iteration's span, summed over ranks) from the
    profile's per-iteration table (point, run, repetition, iteration, idle_pct); empty when absent."""
    parts = []
    for p in points:
        for rep, info in p.repetitions():
            table = tool_table(info, "iterations")
            if table is None or table.empty or "idle_ns" not in table:
                continue
            span = table["end_ns"] - table["start_ns"]
            rows = table.groupby("iteration").indices           # iteration -> its rows (every rank's)
            parts.append(pd.DataFrame({"point": p.label, "run": info.run.run_id, "repetition": rep,
                                       "iteration": list(rows),
                                       c.ITERATION_IDLE_PCT.name: [idle_pct(table["idle_ns"].iloc[at], span.iloc[at])
                                                                   for at in rows.values()]}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def critical_path(points: list[Point]) -> pd.DataFrame:
    """The critical-path rows of every run (the table's columns plus point and run); empty when
    no run has the table."""
    parts = []
    for p in points:
        for info in p.infos:
            table = tool_table(info, "critical_path")
            if table is not None and not table.empty:
                parts.append(table.assign(point=p.label, run=info.run.run_id))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def critical_summary(critical: pd.DataFrame) -> pd.DataFrame:
    """The critical path over the iterations of each point (critical_path()): per point, who held
    whom (the critical rank, what held it, the collective the others waited in), in how many of the
    point's iterations, the others' wait at the median and at worst, and where the worst was; most
    frequent first (point, critical_rank, held_by, collective, iterations, of, median_wait_ms,
    worst_wait_ms, worst_iteration, worst_run, iteration_ms: the median iteration on the critical path)."""
    columns = ["point", "critical_rank", "held_by", "collective", "iterations", "of", "median_wait_ms",
               "worst_wait_ms", "worst_iteration", "worst_run", "iteration_ms"]
    if critical.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for point, at_point in critical.groupby("point", sort=False):
        for (rank, held_by, collective), g in at_point.groupby(["critical_rank", "held_by", "collective"]):
            worst = g.loc[g["held_ns"].idxmax()]
            rows.append({"point": point, "critical_rank": int(rank), "held_by": held_by, "collective": collective,
                         "iterations": len(g), "of": len(at_point), "median_wait_ms": g["held_ns"].median() / 1e6,
                         "worst_wait_ms": worst["held_ns"] / 1e6, "worst_iteration": int(worst["iteration"]),
                         "worst_run": worst["run"], "iteration_ms": at_point["iteration_ns"].median() / 1e6})
    out = pd.DataFrame(rows, columns=columns)
    order = {point: i for i, point in enumerate(dict.fromkeys(critical["point"]))}
    return out.assign(_at=out["point"].map(order)).sort_values(["_at", "iterations", "worst_wait_ms"],
                                                             ascending=[True, False, False]).drop(columns="_at")


def repetitions(points: list[Point]) -> pd.DataFrame:
    """Each run's mean iteration time with its point and repetition number (point, run, repetition,
    time_ms)."""
    rows: list[dict[str, Any]] = []
    for p in points:
        for rep, info in p.repetitions():
            value = next((v for n, v, _ in info.metrics if n == c.ITERATION_MEAN.name), None)
            if value is not None:
                rows.append({"point": p.label, "run": info.run.run_id, "repetition": rep, "time_ms": value})
    return pd.DataFrame(rows, columns=["point", "run", "repetition", "time_ms"])
