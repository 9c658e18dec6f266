"""trace_speed.py's speed goal on a many-core machine: how many decode helpers per trace file (load.MAX_HELPERS)
buy how much speed for how much memory, against HTA 0.5.0 on the same traces in the same run.

`hpcprof trace`'s load + five analyses (benchmarks/trace_speed.py's driver) of the 2 x 72 MB case with
MAX_HELPERS set to each of --helpers (0: each file decoded in its own process only), HTA once; each
hpcprof setting alternated --repeat times, the fastest counting, memory the peak PSS of the process
tree (sampled every 20 ms) of its first run. Helpers only start where the cores allow (load.map_traces:
the cores left once each file has its own), so on a machine of few cores every row is the same.

    python benchmarks/trace_helpers.py [--helpers 0,2,3,4] [--repeat 3] [--hta-python PY]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import trace_speed  # noqa: E402  (its drivers, fixtures and sampling)

GOAL_SPEED, GOAL_MEMORY = 20.0, 0.20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--helpers", default="0,2,3,4", help="MAX_HELPERS values, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--target-mb", type=float, default=72)
    parser.add_argument("--hta-python", default="/tmp/hta-venv/bin/python")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "hpcprof-trace-speed")
    args = parser.parse_args()
    traces = trace_speed.scaled(trace_speed.FIXTURES / "h200_ddp_gpt2", args.target_mb, args.workdir)
    hta = trace_speed.run(args.hta_python, trace_speed.HTA_DRIVER, traces, args.workdir / "helpers_hta.json", 1)
    hta_s, hta_kb = hta["load_s"] + hta["analyses_s"], hta["tree_kb"]
    settings = [int(h) for h in args.helpers.split(",")]
    runs: dict[int, list[dict]] = {h: [] for h in settings}
    for _ in range(args.repeat):
        for helpers in settings:
            driver = f"import hpcprof.tools.torch.analysis.load as _load; _load.MAX_HELPERS = {helpers}\n" + \
                trace_speed.HPCPROF_DRIVER
            runs[helpers].append(trace_speed.run(sys.executable, driver, traces,
                                                 args.workdir / f"helpers_{helpers}.json", 1))
    print(f"# trace_helpers: {os.cpu_count()} cores; {', '.join(p.name for p in sorted(traces.glob('*.json.gz')))} "
          f"({trace_speed.json_mb(traces)}); HTA 0.5.0 {hta_s:.2f} s, {hta_kb / 1024:.0f} MiB (all processes)")
    print(f"{'MAX_HELPERS':>11} {'load s':>7} {'total s':>8} {'x HTA':>6} {'all processes MiB':>18} {'of HTA':>7}  goals")
    for helpers in settings:
        best = min(runs[helpers], key=lambda r: r["load_s"] + r["analyses_s"])
        total, memory = best["load_s"] + best["analyses_s"], runs[helpers][0]["tree_kb"] / hta_kb
        speed = hta_s / total
        verdict = (f"speed {'met' if speed >= GOAL_SPEED else 'missed'}, "
                   f"memory {'met' if memory <= GOAL_MEMORY else 'missed'}")
        print(f"{helpers:>11} {best['load_s']:7.2f} {total:8.2f} {speed:6.1f} {runs[helpers][0]['tree_kb'] / 1024:18.0f} "
              f"{memory:7.2f}  {verdict}")


if __name__ == "__main__":
    main()
