"""Time validating and rendering a 1,000-point sweep (goal: < 3 s), then writing it to disk.

    python benchmarks/render_sweep.py [--site polaris] [--points 1000] [--profile]

The experiment is a `command` workload profiled with nsys on Polaris, swept over a 10 x 10 x 10
cartesian product (nodes x walltime x argv), so every point is validated and rendered in full
by `hpcprof.campaign.submit.plan`, exactly as `hpcprof submit` does; then `write_run` writes each run
directory to a temporary workdir (removed afterwards).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import tempfile
import time
from pathlib import Path

import yaml

from hpcprof.campaign.submit import plan
from hpcprof.config.site import find_site
from hpcprof.render.job import write_run


def experiment(points: int) -> dict:
    """An experiment whose sweep has exactly `points` points: a cartesian product of nodes (10),
    walltime (10) and argv, where `points` allows, otherwise fewer keys."""
    nodes = 10 if points % 10 == 0 else 1
    walltimes = 10 if points % (10 * nodes) == 0 else 1
    argvs = points // (nodes * walltimes)
    sweep = {
        "resources.nodes": list(range(1, nodes + 1)),
        "resources.walltime": [f"00:{10 + i:02d}:00" for i in range(walltimes)],
        "workload.argv": [["python", "app.py", "--seq", str(1024 * (i + 1))] for i in range(argvs)],
    }
    return {
        "name": "render-sweep",
        "workload": {"kind": "command", "argv": ["python", "app.py"]},
        "resources": {"nodes": 1, "account": "datascience", "queue": "debug-scaling"},  # Polaris: 1-10 nodes, <= 1 h
        "profile": {"tool": "nsys", "ranks": "local:0+first-nodes:2", "nsys": {"stats": True}},
        "sweep": sweep,
    }


def main() -> None:
    """Plan (validate + render in memory), then write every run directory; print both times."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", default="polaris")
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of plan()")
    args = parser.parse_args()
    site = find_site(args.site)
    tmp = Path(tempfile.mkdtemp(prefix="hpcprof-render-sweep-"))
    try:
        exp = experiment(args.points)
        exp_file = tmp / "sweep.yaml"
        exp_file.write_text(yaml.safe_dump(exp))
        workdir = tmp / "runs"
        profiler = cProfile.Profile() if args.profile else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        planned = plan(exp_file, site, [], workdir)
        if profiler:
            profiler.disable()
        rendered = time.perf_counter()
        for run in planned.runs:
            run.run_dir.parent.mkdir(parents=True, exist_ok=True)
            write_run(run)
        written = time.perf_counter()
        n = len(planned.runs)
        print(f"site {site.name}: {n} points validated + rendered in {rendered - start:.2f} s "
              f"({(rendered - start) / n * 1e3:.2f} ms/point); written in {written - rendered:.2f} s; "
              f"total {written - start:.2f} s (goal < 3 s)")
        if profiler:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
