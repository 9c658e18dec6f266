"""The verdict of each collected run of profiler_overhead.sh's verdict stage (`verdict-WORKLOAD--SET`
runs), as measured and re-based: the report's diagnosis (hpcprof.report.limits) of the run, the
step and the limiter as measured under the profiler (the largest part before re-basing) and without
it (the unprofiled step the run measured itself: torch.profiler's own unprofiled steps, nsys's
unprofiled reference run), the profiler's stated slowdown, and the report's sentence.

    python3 benchmarks/gpu/overhead/verdicts.py WORKDIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from hpcprof.report import limits, sweep
from hpcprof.report.runs import load, select_runs


def main(workdir: Path) -> None:
    print(f"{'workload':<10}{'set':<7}{'step ms':>9}{'unprof ms':>10}{'stated %':>9}  "
          f"{'limited by, as measured':<34}limited by, without the profiler")
    sentences = []
    for experiment in sorted(workdir.glob("verdict-*--*/")):
        workload, _, option_set = experiment.name.removeprefix("verdict-").partition("--")
        infos = [i for i in load(select_runs((str(sorted(experiment.glob('*/'))[-1]),), workdir), require_collected=False) if i.metrics]
        if not infos:
            print(f"{workload:<10}{option_set:<7}  not collected")
            continue
        found = limits.diagnoses(sweep.sweep_points(infos[-1:], None))
        if not found:
            print(f"{workload:<10}{option_set:<7}  no diagnosis (no step time or GPU categories)")
            continue
        d = found[0]
        seen = [p for p in d.parts if p.observed]
        measured = max(seen, key=lambda p: p.measured_ms if p.measured_ms is not None else p.ms)
        measured_ms = measured.measured_ms if measured.measured_ms is not None else measured.ms
        step = d.measured_step_ms if d.measured_step_ms is not None else d.step_ms
        rebased = (f"{d.limiter.name} {d.limiter.ms:.1f} ms" if d.limiter and d.measured_step_ms is not None
                   else "not re-based (no unprofiled step)")
        stated = (f"{100 * (d.measured_step_ms / d.step_ms - 1):.1f}" if d.measured_step_ms is not None else "-")
        unprof = f"{d.step_ms:.2f}" if d.measured_step_ms is not None else "-"
        print(f"{workload:<10}{option_set:<7}{step:>9.2f}{unprof:>10}{stated:>9}  "
              f"{measured.name + f' {measured_ms:.1f} ms':<34}{rebased}")
        sentences.append(limits.sentence(d))
    print()
    print("\n".join(sentences))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
