"""`hpcprof collect` at scale: N rank files of one run, 1 vs 2 worker processes, and mpi4py.futures.

Each rank file is a real nsys export (the H200 seqpar fixtures, rank0/rank1 alternately; hard
links, so 4,096 ranks cost no disk). A run directory is made once by a real local submit, then
copied per N with its store. Every measurement is a fresh child process (the CLI's own code path,
`collect_runs`; hpcprof's byte code compiled once before, as an installed package has it), which
reports its wall time and peak RSS (itself, and its largest worker).
Printed per N: time per rank file (wall, and CPU of the collecting process and its workers: on a
shared machine the wall time measures the others too), the phases of collecting the run (wall:
inputs, map, concat, join and cross-rank (together), summary, ..., and outside them the worker pool's start: the
imports before the fork, and its stop), speed-up of 2 workers over 1, peak RSS,
store and results size. With --repeat R each mode runs R times, interleaved, and the fastest
run is shown (speed-up: the fastest of each against the fastest with 1 worker), with every run's wall time.
Then the nsys cross-rank commands (`hpcprof nsys nccl|overlap` over all N rank files, one child
process each): wall time and peak RSS. Last, each goal as met or missed, with its numbers.

    python benchmarks/collect_scale.py [--sizes 64,256,1024,4096] [--serial-max 1024] [--repeat 1]
                                       [--workers-list 1,2] [--mpi-n 256] [--mpi-workers 2[,4,...]]
                                       [--cross-sizes 256,1024,4096] [--cross-commands nccl,overlap]
                                       [--out FILE]

Goals: <= 15 ms CPU per rank file (4,096 ranks in <= 60 s on 2 idle cores); >= 1.8x with 2 workers; parallel efficiency (speed-up / workers) >= 0.7 at the most
workers when that is more than 2 (16 on the GPU machine, benchmarks/gpu/collect_cores.sh; with
what bounds it: the CPU per file with all workers busy, beside the machine's own slowdown of a CPU-bound loop run
by as many processes at once, and the serial phases);
main-process peak RSS flat in N (within 15 %); 4,096 ranks collected; the cross-rank commands at
4,096 ranks with peak RSS flat in N (within 15 %).
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("HPCPROF_FIXTURES", next((p / "shared" / "fixtures" for p in REPO.parents
                                                      if (p / "shared" / "fixtures").is_dir()), REPO.parent)))
#: children import hpcprof from this tree, whatever the interpreter has installed, with its byte code written once and
#: reused, as an installed package has it (an environment with PYTHONDONTWRITEBYTECODE compiled every module at every start)
CHILD_ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
             "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
EXPERIMENT = 'name: scale\nworkload:\n  kind: command\n  argv: ["true"]\nresources:\n  nodes: 1\n  ranks_per_node: 1\n'


def one(workdir: Path, workers: int) -> None:
    """Child: collect every run of `workdir`; print a JSON line of measurements."""
    from hpcprof.campaign import jobstate
    from hpcprof.campaign.store import Store, database_url
    from hpcprof.collect import collect_runs
    from hpcprof.collect import runs as runs_module
    from hpcprof.run.rundir import all_runs

    def cpu() -> float:                  # this process and its ended workers, user + system
        return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage,
                                                        (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))

    pool: dict[str, float] = {}       # the worker pool's start (imports before the fork) and stop, outside the phases
    make_executor = runs_module.make_executor

    def timed_executor(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        executor, how = make_executor(*args, **kwargs)
        pool["start"] = time.perf_counter() - began
        shutdown = executor.shutdown

        def timed_shutdown(*args: Any, **kwargs: Any) -> None:
            began = time.perf_counter()
            shutdown(*args, **kwargs)
            pool["stop"] = time.perf_counter() - began

        executor.shutdown = timed_shutdown  # type: ignore[method-assign]
        return executor, how

    runs_module.make_executor = timed_executor
    seconds: dict[str, float] = {}      # the run's phases (Collected.seconds), for the goal's bound
    collect_run = runs_module.collect_run

    def phased_collect_run(*args: Any, **kwargs: Any) -> Any:
        result = collect_run(*args, **kwargs)
        seconds.update(result.seconds)
        return result

    runs_module.collect_run = phased_collect_run
    store = Store(database_url(workdir))
    runs = all_runs(workdir)
    start, cpu_start = time.perf_counter(), cpu()
    own = resource.getrusage(resource.RUSAGE_SELF)          # the collecting process's own CPU, apart
    lines: list[str] = []
    status = collect_runs(runs, store, lambda run: jobstate.refresh(run, store), log=lines.append, workers=workers)
    wall = time.perf_counter() - start
    phases = [line.rpartition(" in ")[2] + f"; pool start {pool.get('start', 0):.2f}, stop {pool.get('stop', 0):.2f}"
              for line in lines if line.startswith("collected ")]
    own_end = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"wall_s": wall, "cpu_s": cpu() - cpu_start,
                      "cpu_main_s": own_end.ru_utime + own_end.ru_stime - own.ru_utime - own.ru_stime,
                      "status": status, "phases": phases,
                      "seconds": {**seconds, "pool start": pool.get("start", 0.0), "pool stop": pool.get("stop", 0.0)},
                      "rss_main_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "rss_worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))


def cli(args: list[str]) -> None:
    """Child: run `hpcprof ARGS`; print a JSON line with its exit status and peak RSS."""
    from hpcprof.cli import main as hpcprof_main

    try:
        hpcprof_main.main(args, standalone_mode=False)
        status = 0
    except SystemExit as exc:
        status = int(exc.code or 0)
    except Exception as exc:  # a failing command is a missed goal, reported in the table
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        status = 1
    print(json.dumps({"status": status, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def cross_rank(n: int, scratch: Path, commands: list[str]) -> list[dict]:
    """`hpcprof nsys COMMAND` over N rank files: wall time, peak RSS, exit status."""
    files = scratch / f"cross{n}"
    files.mkdir()
    sources = [FIXTURES / "nsys/h200_seqpar_bf16" / f"rank{r}.sqlite" for r in (0, 1)]
    for rank in range(n):
        os.link(sources[rank % 2], files / f"rank{rank}.sqlite")
    paths = [str(files / f"rank{rank}.sqlite") for rank in range(n)]
    out = []
    for command in commands:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--cli", "nsys", command, "--format", "csv",
                               "-o", str(scratch / f"{command}{n}.csv"), *paths],
                              capture_output=True, text=True, cwd=REPO, env=CHILD_ENV)
        wall = time.perf_counter() - start
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        rows = sum(1 for _ in open(scratch / f"{command}{n}.csv")) - 1 if result["status"] == 0 else 0
        out.append({"n": n, "command": command, "wall_s": wall, "rows": rows, **result})
    shutil.rmtree(files)
    return out


def flat(values: dict[int, float]) -> tuple[bool, str]:
    """Whether the largest value is within 15 % of the smallest, and the figures."""
    ratio = max(values.values()) / min(values.values())
    return ratio <= 1.15, ", ".join(f"{v:.0f} MB at {n}" for n, v in sorted(values.items())) + f" (x{ratio:.2f})"


def loop_cpu_s(_: int = 0) -> float:
    """CPU seconds of a fixed pure-Python loop (the interpreter's work, next to no memory traffic)."""
    start, total = time.process_time(), 0
    for i in range(3_000_000):
        total += i * i % 7
    return time.process_time() - start


def machine_ceiling(workers: int) -> tuple[float, float]:
    """The machine's own bound on parallel efficiency: the CPU seconds of loop_cpu_s alone (best of 3
    before and 3 after) and with `workers` processes running it at once (median of 3 each): where
    cores are hardware threads sharing a core, or slow down together, the same work takes more CPU
    time. (A lent virtual machine's speed also moves by itself, up to 2x between runs.)"""
    import multiprocessing
    import statistics
    from concurrent.futures import ProcessPoolExecutor

    before = min(loop_cpu_s() for _ in range(3))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        busy = statistics.median(pool.map(loop_cpu_s, range(3 * workers)))
    return min(before, *(loop_cpu_s() for _ in range(3))), busy


def efficiency_bound(many: dict, one: dict, machine: tuple[float, float] | None) -> str:
    """What bounds the efficiency of `many` workers against `one`: the CPU per file with every worker
    busy against one alone (the efficiency a collect with no serial part would reach) beside the
    machine's own (machine_ceiling), the serial phases of `many`'s run (outside the map and what runs
    during it), the CPU the collecting process itself used (on a core the workers would use), and
    the wall time 0.7 needs."""
    ceiling = one["cpu_s"] / many["cpu_s"]
    own = (f" (a CPU-bound loop on this machine: {1000 * machine[0]:.0f} ms alone, {1000 * machine[1]:.0f} with "
           f"{many['workers']} at once: {machine[0] / machine[1]:.2f})") if machine else ""
    serial = {phase: s for phase, s in many["seconds"].items() if phase != "map" and "(during" not in phase}
    need = one["wall_s"] / (0.7 * many["workers"])
    return (f"bound: CPU per file {1000 * one['cpu_s'] / one['n']:.1f} ms with 1 worker, "
            f"{1000 * many['cpu_s'] / many['n']:.1f} with {many['workers']} (all busy): {ceiling:.2f} with no serial part{own}; "
            f"serial {sum(serial.values()):.2f} s ({', '.join(f'{p} {s:.2f}' for p, s in serial.items() if s >= 0.005)}), "
            f"map {many['seconds'].get('map', 0.0):.2f} s, the collecting process's own CPU {many.get('cpu_main_s', 0.0):.2f} s; "
            f"0.7 needs <= {need:.2f} s in all")


def goals(collected: list[dict], crossed: list[dict], machine: tuple[float, float] | None = None) -> list[str]:
    """One line per goal: met or missed, with the numbers (`machine`: machine_ceiling at the most workers)."""
    lines = ["# goals"]
    cpu = [(r["n"], 1000 * r["cpu_s"] / r["n"]) for r in collected if not r["mpi"]]
    if cpu:
        n, ms = max(cpu)
        lines.append(f"{'met' if ms <= 15 else 'missed'}: <= 15 ms CPU per rank file: {ms:.1f} ms at N={n} "
                     f"(on 2 idle cores: {n} ranks in ~{ms * n / 2000:.0f} s)")
    speed = [(r["n"], r["speedup"]) for r in collected if r.get("speedup") and r["workers"] == 2 and not r["mpi"]]
    if speed:
        n, best = max(speed)
        lines.append(f"{'met' if best >= 1.8 else 'missed'}: speed-up with 2 workers >= 1.8x: {best:.2f}x at N={n}")
    most = max((r for r in collected if r.get("speedup") and not r["mpi"]), key=lambda r: (r["workers"], r["n"]),
               default=None)
    if most is not None and most["workers"] > 2:
        eff = most["speedup"] / most["workers"]
        lines.append(f"{'met' if eff >= 0.7 else 'missed'}: parallel efficiency >= 0.7 at {most['workers']} workers: "
                     f"{eff:.2f} ({most['speedup']:.2f}x at N={most['n']})")
        lines.append("  " + efficiency_bound(most, [r for r in collected if r["n"] == most["n"]
                                                    and r["workers"] == 1 and not r["mpi"]][0], machine))
    if collected:
        rss = {r["n"]: r["rss_main_mb"] for r in collected if r["workers"] == 2 and not r["mpi"]}
        if len(rss) > 1:
            ok, text = flat(rss)
            lines.append(f"{'met' if ok else 'missed'}: main-process peak RSS flat in N (2 workers): {text}")
        big = [r for r in collected if r["n"] >= 4096]
        if big:
            done = any(r["status"] == 0 for r in big)
            lines.append(f"{'met' if done else 'missed'}: 4,096 ranks collected: {big[0]['wall_s']:.0f} s")
    for command in sorted({r["command"] for r in crossed}):
        rows = [r for r in crossed if r["command"] == command]
        ok, text = flat({r["n"]: r["rss_mb"] for r in rows})
        at4096 = [r for r in rows if r["n"] >= 4096 and r["status"] == 0]
        lines.append(f"{'met' if ok and at4096 else 'missed'}: nsys {command} at 4,096 ranks, memory flat: "
                     + (f"{at4096[0]['wall_s']:.0f} s; " if at4096 else "not done at 4,096; ") + text)
    return lines


def template(base: Path) -> Path:
    """A finished local run (real submit) and its store. Its state does not matter (where the local
    site's MPICH-style `mpiexec -ppn` is Open MPI's, as on the GPU machine, it ends FAILED): collect
    takes every ended run."""
    (base / "exp.yaml").write_text(EXPERIMENT)
    subprocess.run([sys.executable, "-m", "hpcprof", "submit", "exp.yaml", "--site", "local", "--wait"],
                   cwd=base, check=False, capture_output=True, env=CHILD_ENV)
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
    config = json.loads((run / "config.json").read_text())
    config["world_size"] = n                        # a world of n ranks (collect checks the rank set)
    (run / "config.json").write_text(json.dumps(config))
    return dest


def measure(tmpl: Path, n: int, workers: int, mpi: bool, scratch: Path) -> dict:
    work = workdir_for(tmpl, n, scratch / f"n{n}-w{workers}{'-mpi' if mpi else ''}")
    cmd = [sys.executable, __file__, "--one", str(work), "--workers", str(workers)]
    if mpi:
        mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or "mpiexec"
        cmd = [mpiexec, "-n", str(workers + 1), sys.executable, "-m", "mpi4py.futures", __file__,
               "--one", str(work), "--workers", "1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO, env=CHILD_ENV).stdout
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
    parser.add_argument("--cli", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="64,256,1024,4096", help="N collected ('' for none)")
    parser.add_argument("--serial-max", type=int, default=1024, help="largest N also measured with 1 worker")
    parser.add_argument("--workers-list", default="1,2", help="worker processes measured (1: up to --serial-max)")
    parser.add_argument("--mpi-n", type=int, default=256, help="N measured with mpi4py.futures")
    parser.add_argument("--mpi-workers", default="2", help="MPI workers, one measurement each (mpiexec -n this + 1)")
    parser.add_argument("--cross-sizes", default="256,1024,4096", help="N for the cross-rank commands ('' for none)")
    parser.add_argument("--cross-commands", default="nccl,overlap", help="cross-rank nsys commands measured")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each mode, interleaved (the fastest is shown)")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    if args.one:
        return one(args.one, args.workers)
    if args.cli:
        return cli(args.cli)
    load = os.getloadavg()
    lines = [f"# collect_scale: {os.cpu_count()} CPUs (shared with other work; load average {load[0]:.1f} at the "
             f"start), nsys exports of {(FIXTURES / 'nsys/h200_seqpar_bf16/rank0.sqlite').stat().st_size / 1e3:.0f} kB per rank",
             f"{'N':>5} {'mode':>12} {'wall s':>8} {'ms/file':>8} {'CPU ms/file':>11} {'speed-up':>8} {'eff.':>5} {'RSS main MB':>11} "
             f"{'RSS worker MB':>13} {'store MB':>8} {'results MB':>10} {'parts MB':>8}"]
    print("\n".join(lines), flush=True)
    collected: list[dict] = []
    crossed: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="collect-scale-") as tmp:
        scratch = Path(tmp)
        (scratch / "tmpl-base").mkdir()
        tmpl = template(scratch / "tmpl-base")
        subprocess.run([sys.executable, "-c", "from hpcprof.collect.runs import _worker_modules as m; import importlib; "
                        "[importlib.import_module(n) for n in m()]"], check=True, cwd=REPO, env=CHILD_ENV)  # byte code
        for n in [int(s) for s in args.sizes.split(",") if s]:
            counts = [int(w) for w in args.workers_list.split(",") if w]
            modes = [(w, False) for w in counts if w > 1 or n <= args.serial_max]
            modes += [(int(w), True) for w in args.mpi_workers.split(",") if w] if n == args.mpi_n else []
            tried: dict[tuple[int, bool], list[dict]] = {mode: [] for mode in modes}
            for _ in range(args.repeat):            # interleaved: every mode sees the same machine
                for workers, mpi in modes:
                    tried[(workers, mpi)].append(measure(tmpl, n, workers, mpi, scratch))
            serial = min((r["wall_s"] for r in tried.get((1, False), [])), default=None)
            for (workers, mpi), rs in tried.items():
                r = min(rs, key=lambda run: run["wall_s"])          # the fastest of --repeat
                r["speedup"] = serial / r["wall_s"] if serial and workers > 1 and not mpi else None
                speed = f"{serial / r['wall_s']:.2f}x" if serial and workers > 1 else "-"
                eff = f"{serial / r['wall_s'] / workers:.2f}" if serial and workers > 1 else "-"
                mode = f"{workers} mpi4py" if mpi else f"{workers} worker{'s' if workers > 1 else ''}"
                line = (f"{n:>5} {mode:>12} {r['wall_s']:>8.1f} {1000 * r['wall_s'] / n:>8.1f} "
                        f"{1000 * r['cpu_s'] / n:>11.1f} {speed:>8} {eff:>5} "
                        f"{r['rss_main_mb']:>11.0f} {r['rss_worker_mb']:>13.0f} {r['store_mb']:>8.2f} "
                        f"{r['results_mb']:>10.2f} {r['parts_mb']:>8.1f}" + ("" if r["status"] == 0 else " (skipped files!)"))
                collected.append(r)
                lines += [line, f"{'':>5} {'':>12} phases (wall s): {'; '.join(r['phases'])}"]
                if len(rs) > 1:
                    walls = ", ".join(f"{run['wall_s']:.1f}" for run in rs)
                    lines[-1] += f"\n{'':>5} {'':>12} wall s of each run: {walls}"
                print("\n".join(lines[-2:]), flush=True)
        cross_sizes = [int(s) for s in args.cross_sizes.split(",") if s]
        if cross_sizes:
            lines.append(f"# nsys cross-rank commands over N rank files\n{'N':>5} {'command':>8} {'wall s':>8} "
                         f"{'ms/file':>8} {'RSS MB':>7} {'rows':>6} {'exit':>4}")
            print("\n".join(lines[-1:]), flush=True)
        for n in cross_sizes:
            for r in cross_rank(n, scratch, args.cross_commands.split(",")):
                crossed.append(r)
                lines.append(f"{n:>5} {r['command']:>8} {r['wall_s']:>8.1f} {1000 * r['wall_s'] / n:>8.1f} "
                             f"{r['rss_mb']:>7.0f} {r['rows']:>6} {r['status']:>4}")
                print(lines[-1], flush=True)
    most = max((r["workers"] for r in collected if r.get("speedup") and not r["mpi"]), default=0)
    machine = machine_ceiling(most) if most > 2 else None
    verdicts = goals(collected, crossed, machine)
    lines += verdicts
    print("\n".join(verdicts), flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
