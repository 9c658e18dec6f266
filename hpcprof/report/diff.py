"""Two profiles compared over their measured windows (`hpcprof diff A B`): per iteration time,
kernel category, kernel and NCCL collective, the time per iteration in A (the baseline) and B,
the change and whether it is beyond the noise of the iterations, as report/verdict.py decides for runs.

Each row's samples are its per-iteration values: per iteration, the GPU time of the row's
operations launched in it (hpcprof.analysis.diff.profiles) summed on each rank, then averaged over the ranks
that have that iteration (per rank); for the `iteration` row, the iteration's GPU span averaged
over ranks. Welch's t-test (report/stats.py) of A's samples against B's at ALPHA: faster (B
takes less time), slower, no significant change, or untested (fewer than 2 iterations on a side).
Noise is never a finding: a change that is not significant reads `no significant change`.

Columns of diff_table (one row per section and name):
- section: `iteration` (the iteration time), `category`, `kernel` (the top N by |change_ms|), `collective`;
- name: the category, kernel name (whole; A's spelling of a kernel both have, which nsys and a
  Kineto trace demangle differently: analysis.diff.profiles.kernel_key) or collective; `iteration
  time` for the iteration row;
- a_ms, b_ms: mean time per iteration in A and B (ms, per rank);
- change_ms: b_ms - a_ms;
- change_pct: 100 × change_ms / a_ms (empty where a_ms is 0: a name only B has);
- p_value: Welch's two-sided p over the iterations (empty when untested);
- verdict: faster / slower / no significant change / untested;
- a_count, b_count: operations per iteration (per rank; empty for the iteration row);
- a_iterations, b_iterations: iterations in the window (distinct iteration numbers over the ranks);
- a_window, b_window: the windows' names (nsys/window.py, trace/window.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from hpcprof.report.stats import ALPHA, p_text, welch

if TYPE_CHECKING:
    import pandas as pd

    from hpcprof.analysis.diff.profiles import Profile

ITERATION_ROW = "iteration time"
DIFF_COLUMNS = ["section", "name", "a_ms", "b_ms", "change_ms", "change_pct", "p_value", "verdict", "a_count",
                "b_count", "a_iterations", "b_iterations", "a_window", "b_window"]
#: kernels shown by default (those that changed most)
TOP_KERNELS = 10
#: significant changes the headline names
HEADLINE_CHANGES = 3


def kernel_names(*profiles: Profile) -> dict[str, str]:
    """Each kernel name of the profiles -> the name it is shown under: the first profile's spelling
    of the same kernel (analysis.diff.profiles.kernel_key: nsys and Kineto demangle differently)."""
    from hpcprof.analysis.diff.profiles import kernel_key

    shown: dict[str, str] = {}
    named: dict[str, str] = {}
    for profile in profiles:
        samples = profile.samples
        for name in samples.loc[samples["section"] == "kernel", "name"].unique().tolist():
            named[name] = shown.setdefault(kernel_key(name), name)
    return named


def per_iteration(profile: Profile, kernels: dict[str, str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame,
                                                                                   pd.Series]:
    """(ms, count, iteration_ms) of a profile: per iteration (rows) and (section, name) (columns) the
    time (ms) and operations per rank, averaged over the ranks that have that iteration (kernels
    under their names in `kernels`, those of one kernel summed); and the iteration's GPU span (ms)
    averaged over ranks."""
    import pandas as pd

    index = pd.MultiIndex.from_frame(profile.iterations[["rank", "iteration"]])
    samples = profile.samples
    if kernels:
        samples = samples.assign(name=samples["name"].where(samples["section"] != "kernel",
                                                            samples["name"].map(kernels).fillna(samples["name"])))
    wide = samples.pivot_table(index=["rank", "iteration"], columns=["section", "name"],
                                       values=["ns", "instances"], aggfunc="sum", fill_value=0)
    wide = wide.reindex(index, fill_value=0)
    by_iteration = wide.groupby(level="iteration").mean()
    span = profile.iterations.groupby("iteration")["gpu_ns"].mean() / 1e6
    return by_iteration["ns"] / 1e6, by_iteration["instances"], span


def compare(a: list[float], b: list[float]) -> tuple[float, str]:
    """(two-sided p, verdict) of B's per-iteration values against A's."""
    if len(a) < 2 or len(b) < 2:
        return math.nan, "untested"
    _, _, p = welch(a, b)
    if p >= ALPHA:
        return p, "no significant change"
    return p, "slower" if sum(b) / len(b) > sum(a) / len(a) else "faster"


def _row(section: str, name: str, a: list[float], b: list[float], a_count: float, b_count: float) -> dict:
    a_ms, b_ms = sum(a) / len(a) if a else math.nan, sum(b) / len(b) if b else math.nan
    p, verdict = compare(a, b)
    return {"section": section, "name": name, "a_ms": a_ms, "b_ms": b_ms, "change_ms": b_ms - a_ms,
            "change_pct": 100.0 * (b_ms / a_ms - 1.0) if a_ms else math.nan, "p_value": p, "verdict": verdict,
            "a_count": a_count, "b_count": b_count}


def diff_table(a: Profile, b: Profile, top: int = TOP_KERNELS) -> pd.DataFrame:
    """The DIFF_COLUMNS rows of B against A: the iteration time, then every category and collective
    and the `top` kernels, each section most changed (|change_ms|) first."""
    import pandas as pd

    kernels = kernel_names(a, b)
    a_ms, a_count, a_span = per_iteration(a, kernels)
    b_ms, b_count, b_span = per_iteration(b, kernels)
    rows = [_row("iteration", ITERATION_ROW, a_span.tolist(), b_span.tolist(), math.nan, math.nan)]
    for section in ("category", "collective", "kernel"):
        names = sorted({n for ms in (a_ms, b_ms) if section in ms.columns.get_level_values(0)
                        for n in ms[section].columns})
        got = []
        for name in names:
            sides = [(ms[(section, name)].tolist() if (section, name) in ms.columns else [0.0] * len(ms),
                      float(count[(section, name)].mean()) if (section, name) in count.columns else 0.0)
                     for ms, count in ((a_ms, a_count), (b_ms, b_count))]
            got.append(_row(section, name, sides[0][0], sides[1][0], sides[0][1], sides[1][1]))
        got.sort(key=lambda r: -abs(r["change_ms"]))
        rows += got[:top] if section == "kernel" else got
    out = pd.DataFrame(rows, columns=DIFF_COLUMNS[:10])
    out["a_iterations"], out["b_iterations"] = len(a_span), len(b_span)
    out["a_window"], out["b_window"] = a.window, b.window
    return out[DIFF_COLUMNS]


def headline(table: pd.DataFrame) -> str:
    """One line: the iteration time of A and B, its change and verdict, and the HEADLINE_CHANGES
    largest significant changes of the categories (time per iteration)."""
    it = table[table["section"] == "iteration"].iloc[0]
    p = "" if math.isnan(it["p_value"]) else f", {p_text(it['p_value'], named=True)}"
    text = (f"iteration time {it['a_ms']:.3f} ms (A) -> {it['b_ms']:.3f} ms (B), {it['change_pct']:+.1f} %: "
            f"{it['verdict']}{p}")
    significant = table[(table["section"] == "category") & table["verdict"].isin(["faster", "slower"])]
    largest = significant.reindex(significant["change_ms"].abs().sort_values(ascending=False).index)
    changes = [f"{r['name']} {r['change_ms']:+.3f} ms ({r['verdict']})"
               for r in largest.head(HEADLINE_CHANGES).to_dict("records")]
    if it["verdict"] == "untested":
        return text + f" (fewer than 2 iterations: {it['a_iterations']} in A, {it['b_iterations']} in B)"
    return text + ("; largest significant changes: " + ", ".join(changes) if changes
                   else "; no significant change of any category")
