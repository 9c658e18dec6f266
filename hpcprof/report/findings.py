"""The report's findings in words: one sentence per finding, each with its number, from the frames
of hpcprof.report.sweep (where the time goes, what changed and whether it is significant,
scaling, the slowest rank, % of peak, noise, the critical path)."""

from __future__ import annotations

import pandas as pd

from hpcprof.catalog import ITERATION_IDLE_PCT, ITERATION_MEAN, SLOWEST_RANK, SLOWEST_RANK_EXCESS_PCT
from hpcprof.report.sweep import Point
from hpcprof.report.terminal import format_value


def pct(value: float) -> str:
    return f"{format_value(float(value))} %"


def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def shares(parts: pd.DataFrame, name: str, top: int = 4) -> str:
    """`a 48 %, b 47 %, ...`: the `top` largest parts' shares of their sum."""
    total = parts["ms"].sum()
    if not total:
        return ""
    largest = parts.nlargest(top, "ms")
    return ", ".join(f"{row[name]} {pct(100.0 * row['ms'] / total)}" for _, row in largest.iterrows())


def where_time_goes(points: list[Point], phases: pd.DataFrame, gpu: pd.DataFrame, window: str) -> list[str]:
    """Per point: the iteration time with its confidence interval, the phases' and GPU kernel
    categories' shares."""
    out = []
    for p in points:
        time = p.metric(ITERATION_MEAN)
        parts = []
        if time is not None:
            ci = p.row.get(f"{ITERATION_MEAN.column} ci95")
            ci_text = f" (95 % CI ± {format_value(float(ci))} ms over {int(p.row['n'])} repetitions)" \
                if ci is not None and pd.notna(ci) else ""
            parts.append(f"an iteration takes {format_value(time)} ms{ci_text}")
        phase_text = shares(phases[phases["point"] == p.label], "phase") if not phases.empty else ""
        if phase_text:
            parts.append(f"phases: {phase_text}")
        gpu_text = shares(gpu[gpu["point"] == p.label], "category") if not gpu.empty else ""
        if gpu_text:
            parts.append(f"GPU time {window}: {gpu_text}")
        if parts:
            out.append(f"{p.label}: " + "; ".join(parts) + ".")
    return out


def changes(points: list[Point]) -> list[str]:
    """Per point against the baseline: the iteration time's change, the verdict and its test."""
    base = next((p for p in points if p.row.get("verdict") == "baseline"), None)
    if base is None or base.metric(ITERATION_MEAN) is None:
        return []
    out = []
    for p in points:
        if p is base or p.row.get("verdict") in (None, "untested") or p.metric(ITERATION_MEAN) is None:
            continue
        out.append(f"{p.label} against {base.label} (baseline): iteration time {format_value(p.metric(ITERATION_MEAN))}"
                   f" ms against {format_value(base.metric(ITERATION_MEAN))} ms, {p.row['change_pct']:+.1f} %: "
                   f"{p.row['verdict']} ({p.row['test']}, {p_text(float(p.row['p_value']))}, 5 % level).")
    return out


def scaling_sentences(df: pd.DataFrame) -> list[str]:
    """Per group and world size above the smallest: speed-up against the ideal and efficiency."""
    out = []
    for _, row in df.iterrows():
        if row["point"] == row["reference"]:
            continue
        out.append(f"{row['group']}: {row['world_size']} ranks against {row['reference']}: speed-up "
                   f"{row['speedup']:.2f}x (ideal {row['ideal']:.2f}x), parallel efficiency "
                   f"{pct(row['efficiency_pct'])} ({row['mode']} scaling).")
    return out


def slowest_rank(points: list[Point], stragglers: pd.DataFrame) -> list[str]:
    """The point whose slowest rank lags most (means over counted iterations), and per iteration
    which rank was slowest most often and by how much."""
    out = []
    lagging = [(p, v) for p in points if (v := p.metric(SLOWEST_RANK_EXCESS_PCT)) is not None]
    if lagging:
        p, excess = max(lagging, key=lambda pv: pv[1])
        out.append(f"The slowest rank lags most in {p.label}: rank {int(p.metric(SLOWEST_RANK) or 0)}, "
                   f"{pct(excess)} above the median rank's mean iteration time.")
    if not stragglers.empty:
        worst = stragglers.loc[stragglers["excess_ms"].idxmax()]
        at_point = stragglers[stragglers["point"] == worst["point"]]
        counts = at_point["slowest_rank"].value_counts()
        out.append(f"Per iteration, in {worst['point']} rank {int(counts.index[0])} was the slowest in "
                   f"{int(counts.iloc[0])} of {len(at_point)} iterations; the slowest rank's excess over the median "
                   f"rank is {format_value(float(at_point['excess_ms'].median()))} ms at the median and "
                   f"{format_value(float(worst['excess_ms']))} ms ({pct(worst['excess_pct'])}) at most "
                   f"(iteration {int(worst['iteration'])}, run {worst['run']}).")
    return out


def peak_sentences(peaks: pd.DataFrame) -> list[str]:
    """Per point: its best matmul and bus bandwidth against the hardware's peak."""
    out = []
    for point, g in peaks.groupby("point", sort=False):
        parts = []
        for what in ("tflops", "busbw"):
            rows = g[g["what"] == what]
            if rows.empty:
                continue
            best = rows.loc[rows["value"].idxmax()]
            text = f"{best['phase']} {format_value(best['value'])} {best['unit']}"
            if pd.notna(best["pct"]):
                text += f" = {pct(best['pct'])} of the {best['reference']} ({format_value(best['peak'])} {best['unit']})"
            else:
                text += f" (no peak known for {best['reference']}: set peaks: in the site file)"
            parts.append(text)
        out.append(f"{point}: " + "; ".join(parts) + ".")
    return out


def noise(points: list[Point]) -> list[str]:
    """How wide the repetitions' confidence intervals are, relative to the mean."""
    ci95 = f"{ITERATION_MEAN.column} ci95"
    widths = [(p, 100.0 * float(p.row[ci95]) / mean) for p in points
              if (mean := p.metric(ITERATION_MEAN)) and pd.notna(p.row.get(ci95, float("nan")))]
    if not widths:
        return []
    p, widest = max(widths, key=lambda pw: pw[1])
    return [(f"Noise: the 95 % confidence interval of the iteration time is at most ± {pct(widest)} of the mean "
             f"({p.label}, {int(p.row['n'])} repetitions).")]


def idle_sentence(idle: pd.DataFrame) -> list[str]:
    if idle.empty:
        return []
    med = idle.groupby("point", sort=False)[ITERATION_IDLE_PCT.name].median()
    return ["GPU idle per measured iteration (median over iterations): "
            + ", ".join(f"{point} {pct(v)}" for point, v in med.items()) + "."]


def critical_sentence(critical: pd.DataFrame) -> list[str]:
    """The critical-path row that held the others longest, in the critical-path module's words."""
    if critical.empty:
        return []
    try:
        from hpcprof.analysis.nsys.critical_path import critical_path_sentence  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return []
    row = critical.loc[critical["held_ns"].idxmax()]
    return [f"Critical path ({row['point']}): {critical_path_sentence(row)}"]
