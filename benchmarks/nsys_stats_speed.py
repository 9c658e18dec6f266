"""hpcprof nsys stats vs the reference `nsys stats` (2022.4) on a large export.

Builds a large export by repeating a real fixture's activity in time (copies shifted
by the capture span, correlation ids shifted so launches still pair with kernels),
writes it under /tmp, then runs the six summary reports (nsys 2022.4 names, which both
tools know) with each tool in a child process, checks that the CSV files are
byte-identical, and prints wall time, the ratio and each child's peak RSS; also hpcprof's
start-up (interpreter, CLI and the columnar engine's imports) and the time of its reports
in one process (without interpreter start-up and imports).
The "floor" is one raw SQLite scan of the columns the reports need (`count()` over
them, SQLite alone), and for comparison the same values moved into numpy row by row
through Python's sqlite3 module (hpcprof reads through ADBC/Arrow instead).
Runs are interleaved and the best of --repeat is reported: the machine may be shared.

With --engines it compares hpcprof's two engines instead, on a small per-rank export as it is
(no copies, no reference nsys needed): the whole `hpcprof nsys stats` command writing the
summary reports as CSV with --engine python and with --engine columnar, and `python -c pass`,
interleaved, best and median of --repeat, outputs checked identical; and, in a child process per
engine, its imports and its reports (with their CSV text) timed apart.

    python benchmarks/nsys_stats_speed.py [--source FIXTURE.sqlite] [--copies N]
    python benchmarks/nsys_stats_speed.py --engines [--source FIXTURE.sqlite] [--repeat N]
"""

from __future__ import annotations

import argparse
import filecmp
import io
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import chain
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from fixture_files import materialize  # noqa: E402  (the repository's fixtures, unpacked)

DEFAULT_SOURCE = materialize(REPO / ".fixtures") / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite"
NSYS_2022 = "/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys"
OLD_NAMES = ["gpukernsum", "cudaapisum", "gpumemtimesum", "gpumemsizesum", "nvtxsum", "osrtsum"]  # nsys 2022.4
NEW_NAMES = ["cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "nvtx_sum", "osrt_sum"]
REPORTS = OLD_NAMES
# tables whose rows are repeated; the columns each report reads (for the floor)
ACTIVITY = {
    "CUPTI_ACTIVITY_KIND_KERNEL": "start, end, demangledName, gridX, gridY, gridZ, blockX, blockY, blockZ",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "start, end, nameId",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "start, end, bytes, copyKind",
    "CUPTI_ACTIVITY_KIND_MEMSET": "start, end, bytes",
    "NVTX_EVENTS": "start, end, eventType, globalTid, domainId, textId, text",
    "OSRT_API": "start, end, nameId, eventClass",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": None,
}


def build(source: Path, copies: int, out: Path) -> dict[str, int]:
    """Copy `source` to `out` and append `copies - 1` time-shifted repetitions of its activity."""
    shutil.copy(source, out)
    out.chmod(0o644)
    con = sqlite3.connect(out)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    present = [t for t in ACTIVITY if t in tables]
    bounds = [con.execute(f"SELECT min(start), max(coalesce(end, start)) FROM {t}").fetchone() for t in present]
    lo = min(b[0] for b in bounds if b[0] is not None)
    hi = max(b[1] for b in bounds if b[1] is not None)
    span = hi - lo + 1000
    corr = max(con.execute(f"SELECT max(correlationId) FROM {t}").fetchone()[0] or 0
               for t in present if "correlationId" in _columns(con, t)) + 1
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    con.execute(f"CREATE TEMP TABLE k AS WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s "
                f"WHERE i < {copies - 1}) SELECT i FROM s")
    counts = {}
    for table in present:
        cols = _columns(con, table)
        shifted = []
        for c in cols:
            if c in ("start", "end"):
                shifted.append(f"o.{c} + k.i * {span}")
            elif c == "correlationId":
                shifted.append(f"o.{c} + k.i * {corr}")
            else:
                shifted.append(f"o.{c}")
        con.execute(f"CREATE TEMP TABLE o AS SELECT * FROM main.{table}")
        con.execute(f"INSERT INTO main.{table} ({', '.join(cols)}) SELECT {', '.join(shifted)} FROM o, k")
        con.execute("DROP TABLE o")
        counts[table] = con.execute(f"SELECT count(*) FROM main.{table}").fetchone()[0]
        con.commit()
    con.close()
    return counts


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


def measure(cmd: list[str], cwd: Path) -> tuple[float, int, str]:
    """Run `cmd`; (wall seconds, peak RSS in MiB of that child from wait4, its stdout).

    Every step runs in a child: a forked child starts with its parent's resident set, so
    the parent stays small and holds no data."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out = proc.stdout.read() if proc.stdout else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[0]} failed ({os.waitstatus_to_exitcode(status)})")
    return wall, usage.ru_maxrss // 1024, out


def reports_in_process(db: Path) -> float:
    """Seconds hpcprof spends on the reports and their CSV text once imported (what the CLI does)."""
    from hpcprof.analysis.nsys.db import Export
    from hpcprof.analysis.nsys.stats import run_reports
    from hpcprof.analysis.nsys.table import write_csv

    t0 = time.perf_counter()
    with Export(db) as export:
        for df in run_reports(export, REPORTS):
            if not isinstance(df, Exception):
                write_csv(df, io.StringIO())
    return time.perf_counter() - t0


def floor(db: Path) -> tuple[float, float]:
    """(SQLite-only scan, scan + transfer into numpy) seconds over the reports' columns."""
    import numpy as np  # here: the engines' children time their own imports

    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    scans = [(t, c) for t, c in ACTIVITY.items() if c and t in tables]
    t0 = time.perf_counter()
    for table, cols in scans:
        con.execute(f"SELECT {', '.join(f'count({c})' for c in cols.split(', '))} FROM {table}").fetchall()
    sqlite_only = time.perf_counter() - t0
    t0 = time.perf_counter()
    for table, cols in scans:
        ints = [c for c in cols.split(", ") if c != "text"]
        np.fromiter(chain.from_iterable(con.execute(
            f"SELECT {', '.join(f'coalesce({c}, -1)' for c in ints)} FROM {table}")), dtype=np.int64)
        if "text" in cols:
            seen: dict[object, int] = {}
            np.fromiter((seen.setdefault(v, len(seen)) for (v,) in con.execute(f"SELECT text FROM {table}")),
                        dtype=np.int64)
    transfer = time.perf_counter() - t0
    con.close()
    return sqlite_only, transfer


ENGINE_REPORTS = NEW_NAMES + ["cuda_gpu_kern_gb_sum"]


def engine_in_process(engine: str, db: Path) -> str:
    """Seconds one engine spends importing itself, then on the reports and their CSV text."""
    t0 = time.perf_counter()
    from hpcprof.analysis.nsys import stats
    from hpcprof.analysis.nsys.table import write_csv

    if engine == "columnar":
        import hpcprof.analysis.nsys.reports  # noqa: F401  (the columnar engine's imports)
        from hpcprof.analysis.nsys.db import Export
    t1 = time.perf_counter()
    if engine == "columnar":
        with Export(db) as export:
            tables = stats.run_reports(export, ENGINE_REPORTS, frames=False)
    else:
        tables = stats.run_python_reports(db, ENGINE_REPORTS)
    for table in tables:
        if not isinstance(table, Exception):
            write_csv(table, io.StringIO())
    return f"{t1 - t0} {time.perf_counter() - t1}"


def engines(source: Path, repeat: int) -> None:
    """Wall time of `hpcprof nsys stats` (summary reports, CSV) with each engine on `source`."""
    names = ",".join(ENGINE_REPORTS)
    base = [sys.executable, "-m", "hpcprof", "nsys", "stats", str(source), "-r", names, "--format", "csv"]
    cmds = {"python -c pass": [sys.executable, "-c", "pass"],
            "--engine python": base + ["--engine", "python"], "--engine columnar": base + ["--engine", "columnar"]}
    me = [sys.executable, str(Path(__file__).resolve())]
    split = {e: me + ["--child-engine", e, str(source)] for e in ("python", "columnar")}
    runs: dict[str, list[tuple[float, int, str]]] = {k: [] for k in [*cmds, *split]}
    for _ in range(repeat):                          # interleaved: the machine is shared
        for key, cmd in [*cmds.items(), *split.items()]:
            runs[key].append(measure(cmd, REPO))
    same = runs["--engine python"][0][2] == runs["--engine columnar"][0][2] != ""
    print(f"input: {source} ({source.stat().st_size / 1000:.0f} kB); reports: {names} (--format csv)")
    print(f"{'command':18s} {'best s':>7s} {'median s':>9s}   runs (s)")
    for key in cmds:
        walls = [w for w, _, _ in runs[key]]
        print(f"{key:18s} {min(walls):7.3f} {statistics.median(walls):9.3f}   " + " ".join(f"{w:.3f}" for w in walls))
    best = {k: min(w for w, _, _ in v) for k, v in runs.items()}
    median = {k: statistics.median(w for w, _, _ in v) for k, v in runs.items()}
    print(f"columnar / python: {best['--engine columnar'] / best['--engine python']:.1f}x (best), "
          f"{median['--engine columnar'] / median['--engine python']:.1f}x (median)")
    print(f"outputs identical: {'yes' if same else 'NO'}")
    print("in process (median s):")
    for engine in split:
        imports, reports = (statistics.median(float(out.split()[i]) for _, _, out in runs[engine]) for i in (0, 1))
        print(f"  {engine:9s} imports {imports:.3f}  reports and CSV {reports:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="fixture export to repeat")
    parser.add_argument("--copies", type=int, default=15_000, help="repetitions of its activity")
    parser.add_argument("--nsys", default=NSYS_2022, help="reference nsys (2022.4 from Debian non-free)")
    parser.add_argument("--names", choices=["old", "new"], default="old",
                        help="report names and layouts: nsys 2022.4's (old) or today's (new, for nsys 2023+)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool (best is reported)")
    parser.add_argument("--keep", action="store_true", help="keep the built export and outputs")
    parser.add_argument("--engines", action="store_true",
                        help="compare hpcprof's engines (python, columnar) on --source as it is")
    parser.add_argument("--child-build", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--child-reports", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-floor", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-engine", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    global REPORTS
    REPORTS = NEW_NAMES if args.names == "new" else OLD_NAMES
    if args.child_build:
        source, copies, out = args.child_build
        print(json.dumps(build(Path(source), int(copies), Path(out))))
        return
    if args.child_reports:
        print(reports_in_process(args.child_reports))
        return
    if args.child_floor:
        print(*floor(args.child_floor))
        return
    if args.child_engine:
        print(engine_in_process(args.child_engine[0], Path(args.child_engine[1])))
        return
    if args.engines:
        engines(args.source.resolve(), args.repeat)
        return
    if not Path(args.nsys).exists():
        raise SystemExit(f"reference nsys not found at {args.nsys}; apt-get install nsight-systems-target "
                         "(Debian non-free, see shared/fixtures/SOURCES.md)")
    version = " ".join(subprocess.run([args.nsys, "--version"], capture_output=True, text=True).stdout.split()[-1:])
    work = Path(tempfile.mkdtemp(prefix="nsys_stats_speed_", dir="/tmp"))
    db = work / "big.sqlite"
    args.source = args.source.resolve()             # the children run in the scratch folder
    me = [sys.executable, str(Path(__file__).resolve())]
    built, _, out = measure(me + ["--child-build", str(args.source), str(args.copies), str(db)], work)
    counts = json.loads(out)
    print(f"input: {args.source.name} x {args.copies} -> {db} ({db.stat().st_size / 2**20:.0f} MiB, "
          f"built in {built:.1f} s)")
    for table, n in counts.items():
        print(f"  {table:40s} {n:>12,d} rows")
    print(f"reports: {','.join(REPORTS)}  (--format csv)")

    hp_cmd = [sys.executable, "-m", "hpcprof", "nsys", "stats", str(db), "-r", ",".join(REPORTS), "--format", "csv",
              "--output", str(work / "hpcprof")]
    ns_cmd = [args.nsys, "stats", "--report", ",".join(REPORTS), "--format", "csv", "--output", str(work / "nsys"),
              "--force-overwrite", "true", str(db)]
    # interpreter + the CLI + the columnar engine's imports (what a large export pays before reading)
    help_cmd = [sys.executable, "-c", "import hpcprof.cli, hpcprof.analysis.nsys.cli, hpcprof.analysis.nsys.reports"]
    runs: dict[str, list[tuple[float, int, str]]] = {"hpcprof": [], "nsys": [], "inproc": [], "floor": [],
                                                     "startup": []}
    for _ in range(args.repeat):                     # interleaved, best of N: the machine is shared
        runs["startup"].append(measure(help_cmd, work))
        runs["hpcprof"].append(measure(hp_cmd, work))
        runs["nsys"].append(measure(ns_cmd, work))
        runs["inproc"].append(measure(me + ["--names", args.names, "--child-reports", str(db)], work))
        runs["floor"].append(measure(me + ["--child-floor", str(db)], work))
    (hp_wall, hp_rss), (ns_wall, ns_rss) = (
        (min(w for w, _, _ in runs[k]), max(r for _, r, _ in runs[k])) for k in ("hpcprof", "nsys"))
    reports_s = min(float(out) for _, _, out in runs["inproc"])
    startup_s = min(w for w, _, _ in runs["startup"])
    sqlite_only = min(float(out.split()[0]) for _, _, out in runs["floor"])
    transfer = min(float(out.split()[1]) for _, _, out in runs["floor"])
    same = []
    for report in REPORTS:
        ours, ref = work / f"hpcprof_{report}.csv", work / f"nsys_{report}.csv"
        if not ours.exists() and (not ref.exists() or ref.stat().st_size == 0):   # nsys leaves an empty file
            print(f"  {report:15s} skipped by both (no such data in the export)")
            continue
        same.append(ref.exists() and ours.exists() and filecmp.cmp(ours, ref, shallow=False))
        print(f"  {report:15s} identical: {'yes' if same[-1] else 'NO'}")
    print(f"best of {args.repeat} runs each, wall time of the whole command:")
    print(f"nsys stats        : {ns_wall:7.2f} s   peak RSS {ns_rss:6d} MiB   ({version})")
    print(f"hpcprof nsys stats: {hp_wall:7.2f} s   peak RSS {hp_rss:6d} MiB")
    print(f"hpcprof start-up (interpreter, CLI and the columnar engine's imports): {startup_s:.2f} s")
    print(f"hpcprof reports, in process (no start-up or imports): {reports_s:.2f} s")
    print(f"speed-up          : {ns_wall / hp_wall:7.2f} x   (reports alone: {ns_wall / reports_s:.2f} x)")
    print(f"floor: one SQLite scan of the needed columns {sqlite_only:.2f} s (hpcprof's reports at "
          f"{reports_s / sqlite_only:.1f} x it); the same scan moved into numpy row by row through "
          f"Python's sqlite3 {transfer:.2f} s")
    print(f"all outputs identical: {'yes' if all(same) else 'NO'}")
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
