"""Start-up of hpcprof commands against `python -c pass` (and `nsys stats` when nsys is on PATH).

Each command is run --repeat times, interleaved (the machine may be shared), after one untimed run
that leaves hpcprof's byte code cached (as an installed package has it: this environment sets
PYTHONDONTWRITEBYTECODE, under which every run compiled hpcprof's modules again); the best wall time
and the best CPU time (user+sys, less disturbed by other work on a shared machine) are reported
with their ratios to `python -c pass`, and, where `perf` can count them, the user-space instructions
of one run (independent of other work on the machine: the measure to compare before/after here). Goals: every command that lists or renders (`sites`,
`render`, `status` and `report` in the terminal, of a collected 2-rank seqpar run) under 0.3 s and at most 10x `python -c pass`; `nsys stats` on a per-rank export no slower than `nsys stats` itself (the nsys on
PATH: one and six summary reports as CSV, the names of its generation). What bounds each command
that lists or renders is printed beside it: the import of the libraries it uses (with one msgspec
model validated, for those that validate a config), timed the same way (`x libs`: the command over it).

    python benchmarks/startup.py [--repeat 5] [--out FILE] [--site-file SITE.yaml]
"""

from __future__ import annotations

import argparse
import lzma
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from fixture_files import STORED  # noqa: E402  (the real fixtures kept in the repository)

GOAL_S = 0.3
GOAL_RATIO = 10.0
LISTS_OR_RENDERS = ("hpcprof sites", "hpcprof render", "hpcprof status", "hpcprof report")
MODEL = "import msgspec\nclass Model(msgspec.Struct):\n    x: int\nmsgspec.convert({'x': 1}, Model)\n"
#: command -> the libraries it cannot start without (its floor; `status`: of runs whose end the store holds)
LIBRARIES = {"hpcprof sites": "import click, yaml, rich.console, rich.table\n" + MODEL,
             "hpcprof render": "import click, yaml, jinja2\n" + MODEL,
             "hpcprof status": "import click, rich.table",
             "hpcprof report": "import click, rich.console, rich.table"}
OLD_SIX = ["gpukernsum", "cudaapisum", "gpumemtimesum", "gpumemsizesum", "nvtxsum", "osrtsum"]     # nsys 2022.4
NEW_SIX = ["cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "nvtx_sum",
           "osrt_sum"]


#: the children's environment: hpcprof from this checkout, byte code written and reused
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU (user+sys) seconds of one run of `cmd` (a fresh child each time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=ENV, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def instructions(cmd: list[str], cwd: Path) -> int | None:
    """User-space instructions of one run of `cmd` (`perf stat`), None where perf cannot count."""
    perf = shutil.which("perf")
    if perf is None:
        return None
    done = subprocess.run([perf, "stat", "-x,", "-e", "instructions:u", *cmd], cwd=cwd, env=ENV,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    count = done.stderr.strip().splitlines()[-1].split(",")[0] if done.stderr.strip() else ""
    return int(count) if count.isdigit() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--site-file", type=Path, help="site of the local 2-rank run that `status` and `report` "
                        "read (default: the shipped `local`, MPICH's mpiexec; e.g. one with launcher.flavor "
                        "openmpi where Open MPI's is the one on PATH)")
    args = parser.parse_args()
    py = [sys.executable]
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hpcprof-startup-") as tmp:
        work = Path(tmp)
        stored = STORED / "nsys/h200_seqpar_bf16/rank0.sqlite"
        if stored.exists():
            shutil.copy(stored, work / "rank0.sqlite")
        else:
            with lzma.open(stored.with_name(stored.name + ".xz")) as src, open(work / "rank0.sqlite", "wb") as out:
                shutil.copyfileobj(src, out)
        commands = {
            "python -c pass": py + ["-c", "pass"],
            "hpcprof --help": py + ["-m", "hpcprof", "--help"],
            "hpcprof sites": py + ["-m", "hpcprof", "sites"],
            "hpcprof render": py + ["-m", "hpcprof", "render", str(REPO / "examples/seqpar_polaris.yaml"),
                                    "--site", "polaris", "--set", "resources.account=bench", "--force", "-o", str(work / "job")],
        }
        # `status` and `report` of a real finished and collected run in a real store (the README's main
        # job: seqpar on 2 local ranks, its headline metrics in the report)
        site = ["--site-file", str(args.site_file.absolute())] if args.site_file else ["--site", "local"]
        runs = ["--workdir", str(work / "runs")]
        made = subprocess.run(py + ["-m", "hpcprof", "submit", str(REPO / "examples/seqpar_cpu.yaml"), *site,
                                    "--wait", *runs], cwd=work, env=ENV, capture_output=True, text=True)
        if made.returncode == 0:
            made = subprocess.run(py + ["-m", "hpcprof", "collect", *runs], cwd=work, env=ENV, capture_output=True,
                                  text=True)
        if made.returncode == 0:
            commands["hpcprof status"] = py + ["-m", "hpcprof", "status", *runs]
            commands["hpcprof report"] = py + ["-m", "hpcprof", "report", *runs]
        else:
            logs = sorted((work / "runs").glob("*/*/logs/rank*.log"))
            said = [line for line in (logs[0].read_text(errors="replace") if logs else made.stderr).splitlines()
                    if line.strip()]
            notes.append(f"(no `status` or `report` timing: the local run failed here: {said[-2:]}; "
                         f"{logs[0] if logs else 'no rank log'})")
        commands.update({f"libraries of {name}": py + ["-c", code] for name, code in LIBRARIES.items()
                         if name in commands})
        nsys = shutil.which("nsys")
        version = subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout.split()[-1] if nsys else ""
        six = OLD_SIX if version.startswith("2022") else NEW_SIX
        for label, reports in (("1 report", six[0]), ("6 reports", ",".join(six))):
            commands[f"hpcprof nsys stats, {label}"] = py + ["-m", "hpcprof", "nsys", "stats", "-r", reports,
                                                              "--format", "csv", "rank0.sqlite"]
            if nsys:
                commands[f"nsys stats, {label}"] = [nsys, "stats", "-r", reports, "-f", "csv", "rank0.sqlite"]
        if nsys:
            notes.append(f"nsys: {nsys} ({version}); exports: h200_seqpar_bf16/rank0.sqlite (432 KB)")
        load = os.getloadavg()[0]
        for cmd in commands.values():  # untimed: byte code written
            timed(cmd, work)
        counted = {name: instructions(cmd, work) for name, cmd in commands.items()}
        best: dict[str, float] = {}
        best_cpu: dict[str, float] = {}
        for _ in range(args.repeat):
            for name, cmd in commands.items():
                wall, cpu = timed(cmd, work)
                best[name] = min(best.get(name, float("inf")), wall)
                best_cpu[name] = min(best_cpu.get(name, float("inf")), cpu)
    base, base_cpu = best["python -c pass"], best_cpu["python -c pass"]
    lines = [f"# startup: best of {args.repeat}, {os.cpu_count()} CPUs (shared with other work; load average "
             f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end); python {sys.version.split()[0]}",
             f"{'command':<30} {'wall s':>7} {'x pass':>7} {'cpu s':>7} {'x pass':>7} {'< 0.3 s':>13} "
             f"{'<= 10x (wall, cpu)':>19} {'x libs':>7} {'instr. M':>9} {'x pass':>7}"]
    for name, wall in best.items():
        goal = ratio = over = ""
        cpu = best_cpu[name]
        if f"libraries of {name}" in best:
            over = f"{wall / best[f'libraries of {name}']:.2f}"
        if name in LISTS_OR_RENDERS:
            goal = "met" if wall < GOAL_S else f"missed ({wall / GOAL_S:.1f}x)"
            ratio = ", ".join("met" if r <= GOAL_RATIO else "missed" for r in (wall / base, cpu / base_cpu))
        reference = name.removeprefix("hpcprof ")
        if name.startswith("hpcprof nsys stats") and reference in best:
            goal = f"{wall / best[reference]:.2f}x nsys"
        count, base_count = counted[name], counted["python -c pass"]
        shown = f"{count / 1e6:>9.0f} {count / base_count:>7.1f}" if count and base_count else f"{'':>17}"
        lines.append(f"{name:<30} {wall:>7.3f} {wall / base:>7.1f} {cpu:>7.3f} {cpu / base_cpu:>7.1f} {goal:>13} "
                     f"{ratio:>19} {over:>7} {shown}")
    if not any(name.startswith("nsys stats") for name in best):
        lines.append("(nsys not on PATH: no `nsys stats` comparison on this machine)")
    lines += notes
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
