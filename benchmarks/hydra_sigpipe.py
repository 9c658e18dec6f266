"""A local job's exit status under MPICH's Hydra mpiexec, with and without SIGPIPE ignored.

Renders a local job (the shipped `local` site: the mpich wheel's Hydra mpiexec) of --ranks ranks
whose rank 1 exits 3, then runs its job.sh --jobs times as rendered (mpiexec started with SIGPIPE
ignored: hpcprof.render.launchers.SIGPIPE_IGNORED) and as rendered before (the two `trap` lines
taken out), alternated, while --busy processes keep the cores busy (the race shows under load).
Every run should exit 3; prints the exit statuses of each form and met/missed (goal: all 3).

    python benchmarks/hydra_sigpipe.py [--jobs 500] [--ranks 4] [--busy 2]
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = "exit $(( HPCPROF_RANK == 1 ? 3 : 0 ))"


def render(work: Path, ranks: int) -> Path:
    """job.sh of a local run of `ranks` ranks running WORKLOAD (rendered by `hpcprof render`)."""
    exp = work / "exp.yaml"
    exp.write_text(f"name: sigpipe\nworkload: {{kind: command, argv: [bash, -c, '{WORKLOAD}']}}\n"
                   f"resources: {{nodes: 1, ranks_per_node: {ranks}}}\n")
    subprocess.run([sys.executable, "-m", "hpcprof", "render", str(exp), "--site", "local", "-o", str(work / "job")],
                   check=True, capture_output=True)
    return work / "job" / "job.sh"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500, help="runs of each form")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1, help="busy-loop processes meanwhile")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rendered = render(work, args.ranks)
        text = rendered.read_text()
        if "trap '' PIPE" not in text:
            sys.exit("the rendered job starts its launcher with SIGPIPE's default: nothing to compare")
        before = work / "job" / "job_before.sh"
        before.write_text("".join(line for line in text.splitlines(keepends=True)
                                  if not line.startswith(("trap '' PIPE", "trap - PIPE"))))
        forms = {"as rendered (SIGPIPE ignored)": rendered, "before (SIGPIPE default)": before}
        counts: dict[str, collections.Counter[int]] = {name: collections.Counter() for name in forms}
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
        start = time.monotonic()
        try:
            for _ in range(args.jobs):
                for name, script in forms.items():
                    done = subprocess.run(["bash", str(script)], cwd=work, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
                    counts[name][done.returncode] += 1
                    (work / "job" / "DONE").unlink(missing_ok=True)
        finally:
            for proc in busy:
                proc.kill()
                proc.wait()
    print(f"# hydra_sigpipe: {args.jobs} jobs of each form, {args.ranks} ranks (rank 1 exits 3), {args.busy} busy "
          f"processes, {os.cpu_count()} CPUs, {time.monotonic() - start:.0f} s")
    for name, counted in counts.items():
        statuses = ", ".join(f"exit {code}: {n}" for code, n in sorted(counted.items()))
        print(f"{name:32s} {statuses}")
    wrong = sum(n for code, n in counts["as rendered (SIGPIPE ignored)"].items() if code != 3)
    print(f"{'met' if wrong == 0 else 'missed'}: every job as rendered exits 3 ({wrong} of {args.jobs} did not)")


if __name__ == "__main__":
    main()
