"""The report's findings in words: one sentence per finding, each with its number, from the frames
of hpcprof.report.sweep (where the time goes, what changed and whether it is significant,
scaling, stragglers above noise, % of peak, noise, the critical path over the iterations)."""

from __future__ import annotations

import pandas as pd

from hpcprof.analysis.critical_path import IDLE
from hpcprof.core.catalog import ITERATION_IDLE_PCT, ITERATION_MEAN
from hpcprof.report.stats import p_text
from hpcprof.report.sweep import Point, window_note
from hpcprof.report.terminal import format_value


def pct(value: float) -> str:
    return f"{format_value(float(value))} %"


def shares(parts: pd.DataFrame, name: str, top: int = 4) -> str:
    """`a 48 %, b 47 %, ...`: the `top` largest parts' shares of their sum."""
    total = parts["ms"].sum()
    if not total:
        return ""
    largest = parts.nlargest(top, "ms")
    return ", ".join(f"{row[name]} {pct(100.0 * row['ms'] / total)}" for _, row in largest.iterrows())


def where_time_goes(points: list[Point], phases: pd.DataFrame, gpu: pd.DataFrame) -> list[str]:
    """Per point: the iteration time with its confidence interval, the phases' and GPU kernel
    categories' shares (over the point's window)."""
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
            parts.append(f"GPU time ({window_note([p])}): {gpu_text}")
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
                   f"{p.row['verdict']} ({p.row['test']}, {p_text(float(p.row['p_value']), named=True)}, 5 % level).")
    return out


def scaling_sentences(df: pd.DataFrame) -> list[str]:
    """Per group and world size above the smallest: the efficiency and where the lost time went
    (report.scaling.sentences)."""
    from hpcprof.report.scaling import sentences

    return sentences(df)


def wait_text(ms: float) -> str:
    """A short time: `15 µs`, `0.183 ms`."""
    return f"{ms * 1e3:.3g} µs" if ms < 0.1 else f"{format_value(ms)} ms"


def stragglers(persistent: pd.DataFrame, outliers: pd.DataFrame, strag: pd.DataFrame) -> list[str]:
    """Stragglers named only above noise (sweep.persistent_stragglers, sweep.straggler_outliers): a
    rank slower than the median rank on average beyond the per-iteration spread and the repetitions'
    confidence interval, else that there is none; the iterations in which a rank lagged beyond the
    noise, with the worst."""
    out = []
    named = persistent[persistent["above_noise"]]
    for _, row in named.iterrows():
        ci = f"; the repetitions' 95 % CI is ± {wait_text(row['ci95_ms'])}" if pd.notna(row["ci95_ms"]) else ""
        out.append(f"Straggler ({row['point']}): rank {int(row['rank'])} is slower than the median rank by "
                   f"{wait_text(row['excess_ms'])} ({pct(row['excess_pct'])} of the iteration) on average over "
                   f"{int(row['iterations'])} iterations ({p_text(row['p'], named=True)}{ci}).")
    if named.empty and persistent["excess_pct"].notna().any():   # (a point's excess is NaN: no median time)
        worst = persistent.loc[persistent["excess_pct"].idxmax()]
        ci = " and the repetitions' 95 % confidence interval" if persistent["ci95_ms"].notna().any() else ""
        out.append(f"No straggler above noise: no rank is slower than the median rank beyond the per-iteration "
                   f"spread{ci} (the largest mean excess: {pct(worst['excess_pct'])} in {worst['point']}, "
                   f"{p_text(worst['p'], named=True)}).")
    ci_points = set(persistent.loc[persistent["ci95_ms"].notna(), "point"])
    for point in dict.fromkeys(strag["point"]):
        g = outliers[outliers["point"] == point]
        if g.empty:
            continue
        worst = g.iloc[0]
        ci = " and the repetitions' 95 % CI" if point in ci_points else ""
        out.append(f"Straggler iterations ({point}): in {len(g)} of {int((strag['point'] == point).sum())} iterations "
                   f"a rank lagged the median rank by more than the noise ({wait_text(worst['threshold_ms'])}: the "
                   f"far-out fence of the per-iteration excess{ci}); the worst: rank "
                   f"{int(worst['slowest_rank'])}, {wait_text(worst['excess_ms'])} ({pct(worst['excess_pct'])}) in "
                   f"iteration {int(worst['iteration'])} of run {worst['run']}.")
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


def held_words(row: pd.Series) -> str:
    """`rank 0's matmul2 held the ReduceScatter` (a row of sweep.critical_summary)."""
    if row["held_by"] == IDLE:
        return f"rank {int(row['critical_rank'])} held the {row['collective']} (its GPU idle: its host was late)"
    return f"rank {int(row['critical_rank'])}'s {row['held_by']} held the {row['collective']}"


def critical_sentences(summary: pd.DataFrame) -> list[str]:
    """Per point, the critical path over its iterations (sweep.critical_summary): who held whom most
    often, in how many iterations, the others' median and worst wait, and the longest wait of all
    where another held it."""
    out = []
    for point, g in summary.groupby("point", sort=False):
        top, worst = g.iloc[0], g.loc[g["worst_wait_ms"].idxmax()]
        text = (f"Critical path ({point}): {held_words(top)} in {int(top['iterations'])} of {int(top['of'])} "
                f"iterations; the others waited {wait_text(top['median_wait_ms'])} at the median "
                f"({pct(100.0 * top['median_wait_ms'] / top['iteration_ms'])} of the iteration) and "
                f"{wait_text(top['worst_wait_ms'])} at worst")
        if worst["worst_wait_ms"] > top["worst_wait_ms"]:
            text += (f"; the longest wait: {held_words(worst)} for {wait_text(worst['worst_wait_ms'])} "
                     f"(iteration {int(worst['worst_iteration'])} of run {worst['worst_run']})")
        out.append(text + ".")
    return out
