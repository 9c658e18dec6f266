"""The table of profiler_overhead.sh: per workload and option set, the median step of each run
(a `command`: the step hook's window steps, every rank; seqpar/ddp: their own whole-iteration
phase's median), the mean over the set's runs, the slowdown against the unprofiled runs
(profile.tool: none) with the 95 % Welch interval of the difference of the means, and for a
`command` the slowdown hpcprof states in the run (hpcprof.analysis.steps.perturbation, the most
slowed rank; mean over runs): under torch.profiler from the process's own unprofiled steps, under
nsys from the job's unprofiled reference run where it had one (profile.reference; the script
leaves it out to save its start-up).

    python3 benchmarks/gpu/overhead/summarize.py WORKDIR
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from hpcprof.analysis.steps import steps_tables
from hpcprof.core import catalog as c
from hpcprof.report.stats import mean_sd, t_quantile

PHASE = {"seqpar.json": "iteration", "ddp_steps.json": "step"}


def step_ms(run: Path) -> tuple[float | None, float | None]:
    """(the run's median step in ms, the slowdown % hpcprof states from the run's own steps or None)."""
    tables, _ = steps_tables(run)
    if c.STEPS_TIMES.key in tables:
        steps = tables[c.STEPS_TIMES.key]
        window = steps[steps["in_window"] & steps["duration_ns"].notna()]
        stated = tables.get(c.STEPS_PERTURBATION.key)
        return (float(window["duration_ns"].astype(float).median()) / 1e6 if not window.empty else None,
                float(stated["slowdown_pct"].max()) if stated is not None and not stated.empty else None)
    for name, phase in PHASE.items():
        path = run / "results" / name
        if path.is_file():
            rows = [r for r in json.loads(path.read_text())["phases"] if r["phase"] == phase]
            return (float(rows[0]["median_ms"]) if rows else None), None
    return None, None


def main(workdir: Path) -> None:
    medians: dict[tuple[str, str], list[float]] = {}
    stated: dict[tuple[str, str], list[float]] = {}
    for run in sorted(workdir.glob("overhead-*--*/*/")):
        workload, _, option_set = run.parent.name.removeprefix("overhead-").partition("--")
        ms, own = step_ms(run)
        if ms is not None:
            medians.setdefault((workload, option_set), []).append(ms)
        if own is not None:
            stated.setdefault((workload, option_set), []).append(own)
    print(f"{'workload':<10}{'option set':<20}{'runs':>5}{'step ms':>10}{'unprof ms':>10}{'slowdown %':>11}"
          f"{'95 % CI':>18}{'stated %':>10}")
    for (workload, option_set), values in sorted(medians.items()):
        base = medians.get((workload, "none"), [])
        mean = statistics.fmean(values)
        cells = ["", "", ""]
        if base and option_set != "none":
            reference = statistics.fmean(base)
            cells[0] = f"{100 * (mean / reference - 1):+.1f}"
            if len(values) > 1 and len(base) > 1:
                (_, sd_a), (_, sd_b) = mean_sd(values), mean_sd(base)
                va, vb = sd_a ** 2 / len(values), sd_b ** 2 / len(base)
                df = (va + vb) ** 2 / (va ** 2 / (len(values) - 1) + vb ** 2 / (len(base) - 1)) if va + vb else math.inf
                half = (t_quantile(0.975, df) if math.isfinite(df) else 1.96) * math.sqrt(va + vb)
                cells[1] = f"[{100 * (mean - half) / reference - 100:+.1f}, {100 * (mean + half) / reference - 100:+.1f}]"
        if stated.get((workload, option_set)):
            cells[2] = f"{statistics.fmean(stated[(workload, option_set)]):+.1f}"
        reference_text = f"{statistics.fmean(base):.2f}" if base else ""
        print(f"{workload:<10}{option_set:<20}{len(values):>5}{mean:>10.2f}{reference_text:>10}{cells[0]:>11}"
              f"{cells[1]:>18}{cells[2]:>10}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
