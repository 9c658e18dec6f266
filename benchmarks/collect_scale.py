"""`hpcprof collect` at scale: N rank files of one run, 1 vs 2 worker processes, and mpi4py.futures.

Each rank file is a real nsys export (the H200 seqpar fixtures, rank0/rank1 alternately; hard
links, so 4,096 ranks cost no disk). A run directory is made once by a real local submit, then
copied per N with its store. Every measurement is a fresh child process (the CLI's own code path,
`collect_runs`), which reports its wall time and peak RSS (itself, and its largest worker).
Printed per N: time per rank file, speed-up of 2 workers over 1, peak RSS, store and results size.

    python benchmarks/collect_scale.py [--sizes 64,256,1024,4096] [--serial-max 1024] [--out FILE]

Goals: >= 1.8x with 2 workers; peak RSS independent of N; 4,096 ranks collected.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("HPCPROF_FIXTURES", REPO.parent / "shared" / "fixtures"))
EXPERIMENT = 'name: scale\nworkload:\n  kind: command\n  argv: ["true"]\nresources:\n  nodes: 1\n  ranks_per_node: 1\n'


def one(workdir: Path, workers: int) -> None:
    """Child: collect every run of `workdir`; print a JSON line of measurements."""
    from hpcprof import campaign
    from hpcprof.collect import collect_runs
    from hpcprof.rundir import all_runs
    from hpcprof.store import Store, database_url

    store = Store(database_url(workdir))
    runs = all_runs(workdir)
    start = time.perf_counter()
    status = collect_runs(runs, store, lambda run: campaign.refresh(run, store), log=lambda line: None,
                          workers=workers)
    wall = time.perf_counter() - start
    print(json.dumps({"wall_s": wall, "status": status,
                      "rss_main_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "rss_worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))


def template(base: Path) -> Path:
    """A finished local run (real submit) and its store."""
    (base / "exp.yaml").write_text(EXPERIMENT)
    subprocess.run([sys.executable, "-m", "hpcprof", "submit", "exp.yaml", "--site", "local", "--wait"],
                   cwd=base, check=True, capture_output=True)
    [run] = (base / "hpcprof-runs" / "scale").iterdir()
    config = json.loads((run / "config.json").read_text())
    config["experiment"]["profile"]["tool"] = "nsys"
    (run / "config.json").write_text(json.dumps(config))
    return base / "hpcprof-runs"


def workdir_for(tmpl: Path, n: int, dest: Path) -> Path:
    shutil.copytree(tmpl, dest)
    [run] = (dest / "scale").iterdir()
    nsys = run / "profiles" / "nsys"
    nsys.mkdir(parents=True, exist_ok=True)
    sources = [FIXTURES / "nsys/h200_seqpar_bf16" / f"rank{r}.sqlite" for r in (0, 1)]
    for rank in range(n):
        os.link(sources[rank % 2], nsys / f"rank{rank}.sqlite")
    return dest


def measure(tmpl: Path, n: int, workers: int, mpi: bool, scratch: Path) -> dict:
    work = workdir_for(tmpl, n, scratch / f"n{n}-w{workers}{'-mpi' if mpi else ''}")
    cmd = [sys.executable, __file__, "--one", str(work), "--workers", str(workers)]
    if mpi:
        mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or "mpiexec"
        cmd = [mpiexec, "-n", str(workers + 1), sys.executable, "-m", "mpi4py.futures", __file__,
               "--one", str(work), "--workers", "1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO).stdout
    result = json.loads(out.strip().splitlines()[-1])
    [run] = (work / "scale").iterdir()
    result["store_mb"] = sum(p.stat().st_size for p in work.glob("hpcprof.db*")) / 1e6
    result["results_mb"] = sum(p.stat().st_size for p in (run / "results").glob("*.parquet")) / 1e6
    result["parts_mb"] = sum(p.stat().st_size for p in (run / "derived").rglob("*") if p.is_file()) / 1e6
    result.update(n=n, workers=workers, mpi=mpi)
    shutil.rmtree(work)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="64,256,1024,4096")
    parser.add_argument("--serial-max", type=int, default=1024, help="largest N also measured with 1 worker")
    parser.add_argument("--mpi-n", type=int, default=256, help="N measured with mpi4py.futures (2 workers)")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    if args.one:
        return one(args.one, args.workers)
    lines = [f"# collect_scale: {os.cpu_count()} CPUs (shared with other work), nsys exports of "
             f"{(FIXTURES / 'nsys/h200_seqpar_bf16/rank0.sqlite').stat().st_size / 1e3:.0f} kB per rank",
             f"{'N':>5} {'mode':>12} {'wall s':>8} {'ms/file':>8} {'speed-up':>8} {'RSS main MB':>11} "
             f"{'RSS worker MB':>13} {'store MB':>8} {'results MB':>10} {'parts MB':>8}"]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory(prefix="collect-scale-") as tmp:
        scratch = Path(tmp)
        (scratch / "tmpl-base").mkdir()
        tmpl = template(scratch / "tmpl-base")
        for n in [int(s) for s in args.sizes.split(",")]:
            modes = ([(1, False)] if n <= args.serial_max else []) + [(2, False)] + ([(2, True)] if n == args.mpi_n else [])
            serial = None
            for workers, mpi in modes:
                r = measure(tmpl, n, workers, mpi, scratch)
                if workers == 1:
                    serial = r["wall_s"]
                speed = f"{serial / r['wall_s']:.2f}x" if serial and workers > 1 else "-"
                mode = f"{workers} mpi4py" if mpi else f"{workers} worker{'s' if workers > 1 else ''}"
                line = (f"{n:>5} {mode:>12} {r['wall_s']:>8.1f} {1000 * r['wall_s'] / n:>8.1f} {speed:>8} "
                        f"{r['rss_main_mb']:>11.0f} {r['rss_worker_mb']:>13.0f} {r['store_mb']:>8.2f} "
                        f"{r['results_mb']:>10.2f} {r['parts_mb']:>8.1f}" + ("" if r["status"] == 0 else " (skipped files!)"))
                lines.append(line)
                print(line, flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
