"""`hpcprof status` of 1,000 runs in <= 2 s with ONE scheduler query per poll, on the
real one-node Slurm (`TORQUE=1 CPUS=4 bash ../shared/tools/slurm-local.sh install && ... start`, root).

A 1,000-point sweep is submitted as one `--array` of `sleep 600` jobs (4 run, 996 pend), so every run
needs the scheduler. `status` is timed three times: (1) all 1,000 in flight; (2) after `scancel` of the
array, all ended without DONE (the scheduler decides, and status stores the final states); (3) again,
the final states recorded (no query at all). Each sacct/squeue/scontrol/qstat call is counted through
a PATH shim that logs it and execs the real client. Usage: python benchmarks/status_scale.py [N]

`--ended N` (no Slurm needed): the per-run cost alone. N runs of a slurm-local sweep are written
by hpcprof's own plan/write and recorded as submitted array tasks, and each run directory gets what
its job script writes when it ends (the status lines, then DONE), so no scheduler is asked; `status`
is timed on its first look (states stored) and again once recorded (json and table).
"""

from __future__ import annotations

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
QUERIES = ("sacct", "squeue", "scontrol", "qstat")
GOAL_S = 2.0


def shim(directory: Path) -> dict[str, str]:
    """An environment whose scheduler query clients log each call to $QUERY_LOG (set for status only),
    then run the real one."""
    directory.mkdir()
    for name in QUERIES:
        real = shutil.which(name)
        if real is None:
            continue
        script = directory / name
        script.write_text(f'#!/bin/sh\n[ -n "$QUERY_LOG" ] && echo "{name} $*" >> "$QUERY_LOG"\nexec "{real}" "$@"\n')
        script.chmod(0o755)
    env = {**os.environ, "PATH": f"{directory}:{os.environ['PATH']}", "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: byte code cached after the first run
    return env


def hpcprof(env: dict[str, str], cwd: Path, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*prefix, sys.executable, "-m", "hpcprof", *args, "--workdir", str(cwd / "runs")], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        sys.exit(f"hpcprof {' '.join(args)} failed (rc {proc.returncode}): {proc.stderr.strip()[-800:]}")
    return proc


def timed_status(env: dict[str, str], cwd: Path, log: Path, fmt: str = "json") -> tuple[float, float, list[str], str]:
    """Wall and CPU time (its own and its clients') of one `hpcprof status`, the query calls it made,
    and the states it showed (json) or the number of lines (table), with the user-space instructions
    where `perf` counts them (the measure other work on a shared machine does not change)."""
    log.write_text("")
    counted = cwd / "instructions.txt"
    perf = shutil.which("perf")
    # perf puts its own directories (/usr/bin for /usr/bin/perf) before PATH: the command gets the shim's PATH back
    prefix = (perf, "stat", "-x,", "-e", "instructions:u", "-o", str(counted), "--", "env", f"PATH={env['PATH']}") \
        if perf else ()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = hpcprof({**env, "QUERY_LOG": str(log)}, cwd, "status", "--format", fmt, prefix=prefix)  # jobs' calls not logged
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    count = counted.read_text().strip().splitlines()[-1].split(",")[0] if perf and counted.is_file() else ""
    shown = f"{int(count) / 1e9:.2f} G instructions  " if count.isdigit() else ""
    if fmt != "json":
        return elapsed, cpu, log.read_text().splitlines(), f"{shown}{len(proc.stdout.splitlines())} table lines"
    counts: dict[str, int] = {}
    for row in json.loads(proc.stdout):
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    return elapsed, cpu, log.read_text().splitlines(), f"{shown}states {counts}"


def write_ended_runs(cwd: Path, points: int) -> None:
    """`points` runs of a slurm-local sweep as `submit --array` leaves them (hpcprof's plan and write,
    the store's jobs), each ended as its job script ends one: status lines, then DONE."""
    sys.path.insert(0, str(REPO))
    from hpcprof.campaign import submit as campaign
    from hpcprof.campaign.store import Store, database_url
    from hpcprof.config.site import find_site

    workdir = cwd / "runs"
    planned = campaign.plan(cwd / "scale.yaml", find_site("slurm-local"), [], workdir, None, points)
    workdir.mkdir()
    store = Store(database_url(workdir))
    runs = campaign.write(planned, store)
    start = int(time.time())
    for index, run in enumerate(runs):
        job_id = f"4242_{index}"
        run.record_submission("slurm", job_id)
        store.add_job(run.run_id, job_id, "slurm")
        (run.path / "status").write_text(f"start={start}\nhost=localhost\njob_id={job_id}\nnodes=1\n"
                                         f"exit_code=0\nend={start + 1}\n")
        (run.path / "DONE").touch()


def main_ended(points: int) -> None:
    cwd = Path(tempfile.mkdtemp(prefix="status-ended-"))
    log = cwd / "queries.log"
    env = shim(cwd / "shim")
    write_sweep(cwd, points, "'true'")
    start = time.perf_counter()
    write_ended_runs(cwd, points)
    print(f"wrote {points} ended runs in {time.perf_counter() - start:.1f} s")
    cases = [("ended, first look", timed_status(env, cwd, log)),
             ("ended, recorded", timed_status(env, cwd, log)),
             ("recorded, table", timed_status(env, cwd, log, "table"))]
    report(points, cases, "no scheduler: every run ended (DONE)")
    shutil.rmtree(cwd, ignore_errors=True)


def write_sweep(cwd: Path, points: int, command: str) -> None:
    values = ", ".join(f'"{i}"' for i in range(points))
    (cwd / "scale.yaml").write_text(
        f"name: scale\nworkload: {{kind: command, argv: [{command}]}}\n"
        f'resources: {{nodes: 1, ranks_per_node: 1, walltime: "00:20:00"}}\nsweep: {{env.POINT: [{values}]}}\n')


def report(points: int, cases: list[tuple[str, tuple[float, float, list[str], str]]], where: str) -> None:
    """Each case's wall and CPU time, queries and met/missed, and the goal's verdict."""
    print(f"{where}; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; python "
          f"{sys.version.split()[0]}; goal: status of {points} runs <= {GOAL_S} s with <= 1 scheduler query per poll")
    print("  (wall: elapsed; cpu: user+sys of hpcprof and the clients it ran; met: wall and queries)")
    met_all = True
    for name, (elapsed, cpu, calls, shown) in cases:
        met = elapsed <= GOAL_S and len(calls) <= 1
        met_all &= met
        queries = "; ".join(calls) if calls else "none"
        print(f"  {name:<18} wall {elapsed:5.2f} s ({elapsed / GOAL_S:.2f}x goal)  cpu {cpu:5.2f} s  {len(calls)} query "
              f"({queries})  {shown}  {'met' if met else 'MISSED'}")
    print(f"goal 5: {'met' if met_all else 'MISSED'}")


def main(points: int) -> None:
    if shutil.which("sbatch") is None:
        sys.exit("no Slurm here: run `TORQUE=1 CPUS=4 bash ../shared/tools/slurm-local.sh install && ... start` as root")
    cwd = Path(tempfile.mkdtemp(prefix="status-scale-"))
    log = cwd / "queries.log"
    env = shim(cwd / "shim")
    write_sweep(cwd, points, "sleep, '600'")
    start = time.perf_counter()
    out = hpcprof(env, cwd, "submit", "scale.yaml", "--site", "slurm-local", "--array", "--max-points", str(points))
    print(f"submitted {points} runs as one array in {time.perf_counter() - start:.1f} s")
    array = sorted({line.split(" as ")[1].split("_")[0] for line in out.stderr.splitlines() if " as " in line})
    try:
        cases = [("in flight", timed_status(env, cwd, log))]
    finally:
        subprocess.run(["scancel", *array], check=False)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until the controller has ended every task
        live = subprocess.run(["squeue", "-h", "-r", "-j", ",".join(array)], capture_output=True, text=True,
                              check=False).stdout.strip()
        if not live:
            break
        time.sleep(1)
    cases.append(("ended, first look", timed_status(env, cwd, log)))
    cases.append(("ended, recorded", timed_status(env, cwd, log)))
    cases.append(("recorded, table", timed_status(env, cwd, log, "table")))
    version = subprocess.run(["sinfo", "--version"], capture_output=True, text=True, check=False).stdout.strip()
    report(points, cases, version)
    shutil.rmtree(cwd, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--ended"]:
        main_ended(int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
