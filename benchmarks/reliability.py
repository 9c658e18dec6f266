"""Try hpcprof on bad input, damaged files and job faults, and count what happened.

    python benchmarks/reliability.py [--slurm] [--fixtures DIR] [--group NAME ...]

Every case runs the real `hpcprof` command line in a subprocess (real local runs under MPICH,
real damaged exports, with --slurm also the local one-node Slurm), then is classed as:
  handled     one-line error (exit 2, one `Error:` line) or recovered (the run or the good
              data came through, the state is right)
  lost data   a good result or a process that is not the job's was lost or rewritten
              (a killed stranger, a rewritten final state, a good file's result missing, a
              run directory the store does not know, a file created by a read-only command)
  traceback   a Python traceback reached the user
  accepted    bad input taken without a word (exit 0), or a result silently incomplete (a
              rank file not read and the run `complete`, exit 0)
  blocked     one damaged file stopped the work on the others (a healthy run not shown, a
              healthy site not listed, a collect that keeps failing on its own damaged cache)
  left behind a file left by a failed, refused or interrupted command (a temporary, a 0-byte or
              half-written output, a store, workdir or lock file of a read-only command)
  other       none of the above (e.g. a wrong state, a wrong exit code, a 1 MB error line)
Groups (--group, repeatable; default all): input, damaged, jobs, faults (files
touched, silently incomplete results, damage isolation, leftovers), hostile (links
out of the run directory, outputs over inputs and special files, formulas,
hangs and orphans, markup and escapes; counted per class too), silent, hook (hostile programs under
the start-up hook: benchmarks/reliability_hook.py), data (forensics records and steps files as
data: benchmarks/reliability_data.py), slurm (with --slurm).
Prints one line per case that is not handled, then the counts (goal: all but handled 0).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from reliability_common import (
    ACCEPTED,
    BLOCKED,
    HANDLED,
    LEFT,
    LOST,
    OTHER,
    REPO,
    TRACEBACK,
    cli,
    one_line,
    run_dirs,
    status,
    write_exp,
)

FIXTURES = Path(os.environ.get("HPCPROF_FIXTURES", REPO.parent / "shared" / "fixtures"))
BASE = 'name: t\nworkload:\n  kind: command\n  argv: ["true"]\n'


# ---- bad input: one line, exit 2, nothing written ---------------------------------------------

BAD_EXPERIMENTS = {
    "duplicate key": BASE + "name: u\n",
    "deep YAML": "x: " + "[" * 500 + "]" * 500 + "\n" + BASE,
    "nodes: true": BASE + "resources:\n  nodes: true\n",
    "nodes as text": BASE + "resources:\n  nodes: '2'\n",
    "nodes 10^20": BASE + "resources:\n  nodes: 100000000000000000000\n",
    "nodes -1": BASE + "resources:\n  nodes: -1\n",
    "walltime 00:00:00": BASE + "resources:\n  walltime: '00:00:00'\n",
    "walltime 00:99:99": BASE + "resources:\n  walltime: '00:99:99'\n",
    "walltime d:h:m:s": BASE + "resources:\n  walltime: '1:00:00:00'\n",
    "walltime as int": BASE + "resources:\n  walltime: 30\n",
    "argv ['']": 'name: t\nworkload:\n  kind: command\n  argv: [""]\n',
    "argv NUL": 'name: t\nworkload:\n  kind: command\n  argv: ["a\\0b"]\n',
    "env NUL": BASE + 'env:\n  X: "a\\0b"\n',
    "env BASH_ENV": BASE + "env:\n  BASH_ENV: /tmp/x\n",
    "ranks with spaces": BASE + "profile:\n  tool: nsys\n  ranks: '0, 1'\n",
    "ranks 10^12": BASE + "profile:\n  tool: nsys\n  ranks: [1000000000000]\n",
    "sweep 40000 points": BASE + "sweep:\n  env.A: [" + ",".join(map(str, range(200))) + "]\n  env.B: ["
    + ",".join(map(str, range(200))) + "]\n",
    "unknown key": BASE + "resource:\n  nodes: 2\n",
    "name traversal": BASE.replace("name: t", "name: ../../x"),
    "not a mapping": "- a\n- b\n",
    "YAML syntax": BASE + "resources: [\n",
    "template expression": BASE.replace("name: t", "name: '{{ 7*7 }}'"),
    "filesystems smuggling": BASE + 'resources:\n  filesystems: "home,walltime=72:00:00"\n',
    "account smuggling": BASE + 'resources:\n  account: "proj,select=400:ngpus=4"\n',
    "queue smuggling": BASE + 'resources:\n  queue: "debug,walltime=72:00:00"\n',
    "walltime over site max": BASE + "resources:\n  walltime: '99:00:00'\n",
    "nodes over site max": BASE + "resources:\n  nodes: 100000\n",
}


def bad_input_cases(tmp: Path, fixtures: Path) -> list[tuple[str, Callable[[], str]]]:
    cases: list[tuple[str, Callable[[], str]]] = []

    def experiment_case(text: str | bytes, site: str = "polaris") -> Callable[[], str]:
        def run() -> str:
            work = Path(tempfile.mkdtemp(dir=tmp))
            path = work / "e.yaml"
            path.write_bytes(text if isinstance(text, bytes) else text.encode())
            procs = [cli(cmd, str(path), "--site", site, "--workdir", "w", cwd=work) for cmd in ("render", "submit")]
            results = [one_line(p) for p in procs]
            if TRACEBACK in results:
                return TRACEBACK
            if any(p.returncode == 0 for p in procs):
                return ACCEPTED
            if (work / "w").exists() and run_dirs(work / "w"):
                return LOST  # a run directory left behind by a refused submit
            return next((r for r in results if r != HANDLED), HANDLED)
        return run

    for name, text in BAD_EXPERIMENTS.items():
        cases.append((f"experiment: {name}", experiment_case(text)))
    cases.append(("experiment: not UTF-8", experiment_case(BASE.encode() + b"env:\n  X: \"\xff\"\n")))
    cases.append(("experiment: NUL byte in file", experiment_case(BASE.encode() + b"#\x00\n")))
    for name, extra in {"site not UTF-8": b"name: \xe9\nscheduler: local\n",
                        "site duplicate key": b"name: a\nname: b\nscheduler: local\n",
                        "site pbs_select smuggling": b"name: s\nscheduler: pbs\nlauncher: {kind: mpiexec, flavor: pals}\n"
                                                     b"pbs_select: 'system=x,walltime=99:00:00'\n",
                        "site bool cores": b"name: s\nscheduler: local\nlauncher: {kind: torchrun}\nnode: {cores: true}\n"}.items():
        def site_case(extra: bytes = extra) -> str:
            work = Path(tempfile.mkdtemp(dir=tmp))
            (work / "s.yaml").write_bytes(extra)
            write_exp(work / "e.yaml", ["true"])
            return one_line(cli("render", "e.yaml", "--site-file", "s.yaml", cwd=work))
        cases.append((name, site_case))

    good = write_exp(tmp / "good.yaml", ["true"])
    sqlite = fixtures / "nsys" / "nsysai_h100_2gpu_1s.sqlite"
    trace = next((fixtures / "hta").rglob("*.json"))
    blocker = tmp / "blocker"
    blocker.write_text("x")
    options = {
        "--threshold-ms nan": ["nsys", "gaps", "--threshold-ms", "nan", str(sqlite)],
        "--threshold-ms -1": ["nsys", "gaps", "--threshold-ms", "-1", str(sqlite)],
        "--duration-ratio 5": ["trace", "kernels", "--duration-ratio", "5", str(trace)],
        "--num-kernels -1": ["trace", "kernels", "--num-kernels", "-1", str(trace)],
        "--rows -3": ["report", "--rows", "-3"],
        "--ranks 0-2000000000": ["trace", "temporal", "--ranks", "0-2000000000", str(trace)],
        "--ranks 5-1": ["trace", "temporal", "--ranks", "5-1", str(trace)],
        "--set of a swept key": ["render", str(write_exp(tmp / "sw.yaml", ["true"], "sweep:\n  env.A: [a, b]\n")),
                                 "--set", "env.A=c"],
        "--max-points 1 with 2 points": ["render", str(tmp / "sw.yaml"), "--max-points", "1"],
        "--set bad key": ["render", str(good), "--set", "a b=1"],
        "unwritable -o": ["render", str(good), "-o", str(blocker / "out")],
        "over-long -o": ["render", str(good), "-o", str(tmp / ("x" * 300))],
        "over-long --workdir": ["submit", str(good), "--workdir", str(tmp / ("y" * 300))],
        "nsys stats: no kernels": ["nsys", "stats", "-r", "cuda_gpu_kern_sum", str(no_kernels(tmp, sqlite))],
        "nsys stats: not SQLite": ["nsys", "stats", "-r", "cuda_gpu_kern_sum", str(good)],
        "ncu: all n/a": ["ncu", "metrics", str(ncu_na(tmp, fixtures))],
        "bench seqpar -s 10^11": ["bench", "seqpar", "-s", "100000000000", "-d", "8", "--device", "cpu"],
        "seqpar -s not divisible": ["bench", "seqpar", "-s", "-5"],
    }
    for name, argv in options.items():
        cases.append((f"option: {name}", lambda argv=argv: one_line(cli(*argv, cwd=tmp))))
    return cases


def no_kernels(tmp: Path, sqlite: Path) -> Path:
    path = tmp / "nokernels.sqlite"
    shutil.copyfile(sqlite, path)
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    return path


def ncu_na(tmp: Path, fixtures: Path) -> Path:
    import csv

    source = next((fixtures / "ncu").rglob("*_details.csv"))
    rows = list(csv.reader(source.open()))
    column = rows[0].index("Metric Value")
    path = tmp / "na_details.csv"
    with path.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(
            [rows[0]] + [r[:column] + ["n/a"] + r[column + 1:] for r in rows[1:]])
    return path


# ---- damaged exports: the bad file named, the good file's results kept ----------------------

def damaged_cases(tmp: Path, fixtures: Path) -> list[tuple[str, Callable[[], str]]]:
    cases: list[tuple[str, Callable[[], str]]] = []
    for percent in (10, 30, 50, 70, 90):
        directory = tmp / f"damaged{percent}"
        directory.mkdir()
        shutil.copyfile(fixtures / "nsys" / "nsysai_h100_2gpu_1s.sqlite", directory / "rank0.sqlite")
        shutil.copyfile(fixtures / "nsys" / "nsysai_h100_2gpu_1s.sqlite", directory / "rank1.sqlite")
        with (directory / "rank1.sqlite").open("r+b") as fh:
            fh.seek((directory / "rank1.sqlite").stat().st_size * percent // 100)
            fh.write(random.Random(percent).randbytes(65536))
        for analysis in ("nccl", "overlap", "gaps", "phases"):
            def run(directory: Path = directory, analysis: str = analysis) -> str:
                both = cli("nsys", analysis, "--format", "json", "rank0.sqlite", "rank1.sqlite", cwd=directory)
                if "Traceback" in both.stderr:
                    return TRACEBACK
                alone = json.loads(cli("nsys", analysis, "--format", "json", "rank0.sqlite", cwd=directory).stdout)
                try:
                    rows = json.loads(both.stdout)
                except ValueError:
                    return LOST
                if [r for r in rows if r.get("rank", 0) == 0] != [r for r in alone if r.get("rank", 0) == 0]:
                    return LOST
                # damage outside what this analysis reads is not an error; damage inside it is one line
                return HANDLED if both.returncode in (0, 2) else OTHER
            cases.append((f"damaged export at {percent}%: nsys {analysis}", run))
    return cases


# ---- job faults on real local runs ------------------------------------------------------------

def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def point_job_pid_at(run: Path, pid: int) -> None:
    """Make the run's recorded job process `pid` (as after PID reuse), keeping the rest of what
    was recorded (job.pid is JSON with start time and session; older hpcprof wrote the PID alone)."""
    ident = json.loads((run / "job.pid").read_text())
    new = {**ident, "pid": pid, "sid": pid} if isinstance(ident, dict) else pid
    (run / "job.pid").write_text(json.dumps(new))
    submission = json.loads((run / "submission.json").read_text())
    (run / "submission.json").write_text(json.dumps({**submission, "job_id": f"local-{pid}"}))


def job_cases(tmp: Path) -> list[tuple[str, Callable[[], str]]]:
    def fresh() -> Path:
        return Path(tempfile.mkdtemp(dir=tmp))

    def pid_reuse() -> str:
        work = fresh()
        cli("submit", str(write_exp(work / "e.yaml", ["true"])), "--wait", cwd=work)
        [run] = run_dirs(work / "hpcprof-runs")
        stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
        try:
            point_job_pid_at(run, stranger.pid)
            (run / "DONE").unlink()
            result = cli("cancel", run.name, cwd=work)
            time.sleep(0.3)
            if not alive(stranger.pid):
                return LOST
            return TRACEBACK if "Traceback" in result.stderr else HANDLED
        finally:
            stranger.kill()
            stranger.wait()

    def pid_one() -> str:
        work = fresh()
        cli("submit", str(write_exp(work / "e.yaml", ["true"])), "--wait", cwd=work)
        [run] = run_dirs(work / "hpcprof-runs")
        point_job_pid_at(run, 1)
        (run / "DONE").unlink()
        return HANDLED if status(work, run)["state"] != "RUNNING" else OTHER

    def cancel_failed() -> str:
        work = fresh()
        cli("submit", str(write_exp(work / "e.yaml", ["bash", "-c", "exit 3"])), "--wait", cwd=work)
        [run] = run_dirs(work / "hpcprof-runs")
        before = status(work, run)
        cli("cancel", run.name, cwd=work)
        return HANDLED if status(work, run) == before and before["state"] == "FAILED" else LOST

    def walltime() -> str:
        work = fresh()
        cli("submit", str(write_exp(work / "e.yaml", ["sleep", "60"], "  walltime: '00:00:02'\n")), "--wait", cwd=work)
        [run] = run_dirs(work / "hpcprof-runs")
        return HANDLED if status(work, run)["state"] == "TIMEOUT" else OTHER

    def wait_then(action: str) -> Callable[[], str]:
        def run() -> str:
            work = fresh()
            exp = write_exp(work / "e.yaml", ["bash", "-c", "for i in $(seq 600); do echo tick; sleep 0.1; done"])
            waiter = subprocess.Popen([sys.executable, "-m", "hpcprof", "submit", str(exp), "--wait"], cwd=work,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 60
            while not (run_dirs(work / "hpcprof-runs") and (run_dirs(work / "hpcprof-runs")[0] / "logs" / "job.out")
                       .exists() and "tick" in (run_dirs(work / "hpcprof-runs")[0] / "logs" / "job.out").read_text()):
                if time.monotonic() > deadline:
                    waiter.kill()
                    return OTHER
                time.sleep(0.1)
            [rd] = run_dirs(work / "hpcprof-runs")
            if action == "ctrl-c":
                waiter.send_signal(signal.SIGINT)
            else:
                cli("cancel", rd.name, cwd=work)
            _, err = waiter.communicate(timeout=60)
            if "Traceback" in err:
                return TRACEBACK
            row = status(work, rd)
            if row.get("exit_code") == 141:
                return LOST
            return HANDLED if row["state"] == "CANCELLED" else OTHER
        return run

    def concurrent_submits() -> str:
        work = fresh()
        exp = write_exp(work / "e.yaml", ["true"])
        procs = [subprocess.Popen([sys.executable, "-m", "hpcprof", "submit", str(exp)], cwd=work,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(6)]
        errs = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        if any("Traceback" in e for _, e in errs):
            return TRACEBACK
        return HANDLED if all(rc == 0 for rc, _ in errs) and len(run_dirs(work / "hpcprof-runs")) == 6 else OTHER

    def failed_submit() -> str:
        work = fresh()
        (work / "w").mkdir()
        with sqlite3.connect(work / "w" / "hpcprof.db") as conn:
            conn.execute("CREATE TABLE sweeps (sweep_id TEXT PRIMARY KEY CHECK (0), experiment TEXT, site TEXT, "
                         "spec JSON, created_at FLOAT)")
        cli("submit", str(write_exp(work / "e.yaml", ["true"], "sweep:\n  env.A: [x, y]\n")), "--workdir", "w", cwd=work)
        return HANDLED if not run_dirs(work / "w") else LOST

    def read_only(args: list[str]) -> Callable[[], str]:
        def run() -> str:
            work = fresh()
            result = cli(*args, cwd=work)
            if any(work.iterdir()):
                return LOST
            return one_line(result)
        return run

    def patterns() -> str:
        work = fresh()
        cli("submit", str(write_exp(work / "e.yaml", ["true"])), "--wait", cwd=work)
        results = [one_line(cli(cmd, "*", cwd=work)) for cmd in ("status", "report", "cancel")]
        return next((r for r in results if r != HANDLED), HANDLED)

    def damaged_submission() -> str:
        work = fresh()
        exp = write_exp(work / "e.yaml", ["true"])
        cli("submit", str(exp), "--wait", cwd=work)
        cli("submit", str(exp), "--wait", cwd=work)
        first, second = run_dirs(work / "hpcprof-runs")
        (first / "submission.json").write_bytes(b"\x00garbage")
        result = cli("status", "--format", "json", cwd=work)
        if "Traceback" in result.stderr:
            return TRACEBACK
        rows = {r["run"]: r["state"] for r in json.loads(result.stdout or "[]")}
        return HANDLED if rows.get(second.name) == "COMPLETED" else LOST

    return [("cancel after PID reuse", pid_reuse), ("recorded PID 1", pid_one),
            ("cancel a FAILED run", cancel_failed), ("walltime kill", walltime),
            ("cancel a submit --wait run", wait_then("cancel")), ("Ctrl-C in submit --wait", wait_then("ctrl-c")),
            ("6 concurrent submits, fresh workdir", concurrent_submits), ("store refuses the sweep", failed_submit),
            ("status, missing --workdir", read_only(["status", "--workdir", "nope"])),
            ("report, missing --workdir", read_only(["report", "--workdir", "nope"])),
            ("cancel bad id, missing --workdir", read_only(["cancel", "x", "--workdir", "nope"])),
            ("status, empty --workdir", read_only(["status", "--workdir", ""])),
            ("run id '*'", patterns), ("damaged submission.json", damaged_submission)]


def slurm_cases(tmp: Path) -> list[tuple[str, Callable[[], str]]]:
    def queued() -> set[str]:
        return set(subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split())

    def smuggle(extra: str) -> Callable[[], str]:
        def run() -> str:
            work = Path(tempfile.mkdtemp(dir=tmp))
            before = queued()
            result = cli("submit", str(write_exp(work / "e.yaml", ["true"], extra)), "--site", "slurm-local", cwd=work)
            return one_line(result) if queued() == before else LOST
        return run

    def final() -> str:
        work = Path(tempfile.mkdtemp(dir=tmp))
        cli("submit", str(write_exp(work / "e.yaml", ["bash", "-c", "exit 5"], "  walltime: '00:02:00'\n")),
            "--site", "slurm-local", "--wait", cwd=work)
        [run] = run_dirs(work / "hpcprof-runs")
        before = status(work, run)
        cli("cancel", run.name, cwd=work)
        return HANDLED if before["state"] == "FAILED" and status(work, run) == before else LOST

    return [("slurm: account a,b", smuggle('  account: "a,b"\n')),
            ("slurm: partition with =", smuggle('  partition: "debug=1"\n')),
            ("slurm: cancel a FAILED job", final)]


GROUPS = ("input", "damaged", "jobs", "faults", "hostile", "silent", "hook", "data", "slurm")


def main() -> None:
    from reliability_data import data_cases
    from reliability_faults import fault_cases
    from reliability_hook import hook_cases
    from reliability_hostile import hostile_cases
    from reliability_silent import silent_cases

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slurm", action="store_true", help="also the cases on the local one-node Slurm")
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    parser.add_argument("--group", action="append", choices=GROUPS, help="only these groups of cases")
    parser.add_argument("--only", default="", help="only the cases whose label holds this text")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1: timings as measured alone)")
    args = parser.parse_args()
    groups = set(args.group or GROUPS)
    counts: Counter[str] = Counter()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hpcprof-reliability-") as name:
        tmp = Path(name)
        makers = {"input": bad_input_cases, "damaged": damaged_cases, "jobs": lambda t, f: job_cases(t),
                  "faults": fault_cases, "hostile": hostile_cases, "silent": silent_cases, "hook": hook_cases,
                  "data": data_cases, "slurm": lambda t, f: slurm_cases(t) if args.slurm else []}
        cases = [case for group in GROUPS if group in groups for case in makers[group](tmp, args.fixtures)
                 if args.only in case[0]]
        def attempt(case: Callable[[], str]) -> tuple[str, float]:
            start = time.monotonic()
            try:
                outcome = case()
            except Exception as exc:  # noqa: BLE001 - a harness failure is counted, not hidden
                outcome = f"{OTHER} (harness: {type(exc).__name__}: {exc})"
            return outcome, time.monotonic() - start

        took: dict[str, float] = {}
        per_class: dict[str, Counter[str]] = {}
        with ThreadPoolExecutor(args.jobs) as pool:  # each case runs its own processes
            for (label, _), (outcome, seconds) in zip(cases, pool.map(attempt, [case for _, case in cases]), strict=True):
                took[label] = seconds
                counts[outcome.split(" (")[0]] += 1
                if label.startswith("class "):
                    per_class.setdefault(label.split(":")[0], Counter())[outcome.split(" (")[0]] += 1
                if outcome != HANDLED:
                    print(f"  {outcome}: {label}", flush=True)
    for name, outcomes in sorted(per_class.items()):
        print(f"  {name}: {outcomes[HANDLED]} of {sum(outcomes.values())} handled"
              + "".join(f", {n} {o}" for o, n in sorted(outcomes.items()) if o != HANDLED))
    slowest = sorted(took, key=took.__getitem__, reverse=True)[:3]
    print(f"cases tried: {sum(counts.values())}")
    print(f"handled (one-line error / recovered): {counts[HANDLED]}")
    print(f"lost data: {counts[LOST]}")
    print(f"tracebacks: {counts[TRACEBACK]}")
    print(f"accepted in silence: {counts[ACCEPTED]}")
    print(f"blocked: {counts[BLOCKED]}")
    print(f"left behind: {counts[LEFT]}")
    print(f"other: {counts[OTHER]}")
    print(f"({time.monotonic() - started:.0f} s{', with Slurm' if args.slurm else ''}, {args.jobs} at a time; slowest: "
          f"{', '.join(f'{label} {took[label]:.0f} s' for label in slowest)})")


if __name__ == "__main__":
    main()
