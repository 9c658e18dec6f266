"""How `hpcprof nsys stats` scales with the rowid parts its large tables are read in (Export.cpus:
one part per CPU the process may use, at least db.MIN_PARTS, none under db.SPLIT_ROWS rows; 2 parts
whatever the CPUs before 2026-11-27), on the four export shapes of nsys_stats_speed.py's goal 2: the default
report set with -o (without hpcprof's cache), one process per run, with the CPUs an export reads on
set to each of --parts ("all": left to the process's CPUs, what a user gets) while the reports
still run on every CPU, alternated with the shape's floor (nsys_stats_speed.py's: one process
importing what hpcprof imports and scanning the needed columns once, count() in SQLite). The CSV
files each variant wrote (its last run's) are compared with the first variant's: a part count must
not change a byte.

Made for many-core hosts (a GPU node), where two parts leave most CPUs idle while the largest
table is read; on this repository's 2-CPU CI host every variant reads in 2 parts.

    python benchmarks/read_parts.py [--parts 2,4,8,all] [--repeat 5] [--work DIR] [--shapes S,...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nsys_shapes import SHAPES, make  # noqa: E402
from nsys_stats_speed import (  # noqa: E402  (it puts tests/ on the path, for the fixtures)
    DEFAULT_NEEDS,
    NSYS_ENV,
    REPO,
    alternate,
    child_modules,
    cpu_speeds,
    cpu_spread,
    load,
    materialize,
    median_cpu,
    median_wall,
    reads_code,
    same_files,
    scans,
)

from hpcprof.tools.nsys.stats.stats import DEFAULT_REPORTS  # noqa: E402


def stats_with_parts(parts: str, export: Path, out: Path) -> list[str]:
    """`hpcprof nsys stats --format csv -o OUT EXPORT` in a child whose exports read on `parts`
    CPUs (db.usable_cpus replaced before hpcprof's code runs; "all": as it is)."""
    code = "import sys\nimport hpcprof.tools.nsys.stats.db as db\n"
    if parts != "all":
        code += f"db.usable_cpus = lambda: {int(parts)}\n"
    code += (f"sys.argv = ['hpcprof', 'nsys', 'stats', '--format', 'csv', '-o', {str(out)!r}, {str(export)!r}]\n"
             "from hpcprof.__main__ import main\nmain()\n")
    return [sys.executable, "-c", code]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="2,4,8,all",
                        help="CPUs an export reads on, to compare (the first is the base; all: the process's)")
    parser.add_argument("--repeat", type=int, default=5, help="alternated rounds (after one not counted)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/nsys_stats_speed"), help="where shapes are built")
    parser.add_argument("--shapes", default="", help="comma-separated shapes (default: all four)")
    args = parser.parse_args()
    parts = args.parts.split(",")
    materialize(REPO / ".fixtures")
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "HPCPROF_NSYS_CACHE": "off", "PYTHONPATH": path, **NSYS_ENV}
    print(f"# read_parts: {os.cpu_count()} CPUs ({len(os.sched_getaffinity(0))} usable), load average {load()}, "
          f"CPU spread {cpu_spread(cpu_speeds())}; {sys.executable}; median of {args.repeat} alternated runs")
    print(f"  {'shape':16s} {'rows':>10s} {'floor s':>7s} " + " ".join(f"{f'cpus={p} s':>10s} {'/floor':>6s}"
                                                                      for p in parts) + "  same CSV")
    for shape in [s for s in args.shapes.split(",") if s] or SHAPES:
        export, counts = make(shape, args.work / "shapes")
        out = args.work / "parts" / shape.replace("/", "-")
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        imports = "import " + ", ".join(child_modules(export, out))
        commands = {"floor": [sys.executable, "-c", reads_code(export, scans(export, DEFAULT_NEEDS), imports)]}
        commands |= {p: stats_with_parts(p, export, out / f"p{p}") for p in parts}
        runs = alternate(commands, args.repeat, out, env)
        floor = median_wall(runs["floor"])
        same = ("yes" if all(same_files(out, out, f"p{parts[0]}_", f"p{p}_") == (True, len(DEFAULT_REPORTS))
                             for p in parts[1:]) else "NO") if len(parts) > 1 else "n/a"
        cells = " ".join(f"{median_wall(runs[p]):10.2f} {median_wall(runs[p]) / floor:5.2f}x" for p in parts)
        cpu = " ".join(f"{median_cpu(runs[p]):.2f}" for p in parts)
        peak = " ".join(f"{max(r[1] for r in runs[p])}" for p in parts)
        print(f"  {shape:16s} {sum(counts.values()):10,d} {floor:7.2f} {cells}  {same:8s}"
              f"   (CPU s: floor {median_cpu(runs['floor']):.2f}, cpus= {cpu}; peak MiB: {peak}; load {load()})")


if __name__ == "__main__":
    main()
