"""What the unprofiled reference run (profile.reference) adds to a seqpar or ddp job, on this
machine's CPU: the wall time of the command the job's reference line runs, 2 ranks under the
mpiexec beside this Python, with the rank wrapper's HPCPROF_STEPS_REFERENCE=1 (its results go to
results/reference/), --repeat times each, in a fresh run directory. seqpar runs
examples/seqpar_cpu.yaml's arguments, ddp the Echo input examples/echo_gpt2 (its tiny preset, 100
batches an epoch, 1 warm-up + 2 epochs). Prints each workload's wall seconds (median, all) and its
timed loop's share (seqpar's `loop`, ddp's sum of its step times on rank 0).

    python benchmarks/reference_cost.py [--repeat 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def argv(kind: str) -> list[str]:
    """The ranks' command of the workload, as render builds it (hpcprof.workloads.args.launch_argv)."""
    from hpcprof.core.models import validate
    from hpcprof.workloads.args import DdpArgs, SeqparArgs, launch_argv

    if kind == "seqpar":
        args = yaml.safe_load((REPO / "examples" / "seqpar_cpu.yaml").read_text())["workload"]["args"]
        return launch_argv(validate(SeqparArgs, args, "seqpar"), sys.executable)
    return launch_argv(validate(DdpArgs, {"echo_input": str(REPO / "examples" / "echo_gpt2"), "device": "cpu"}, "ddp"),
                       sys.executable)


def one(kind: str) -> tuple[float, float]:
    """(wall seconds of one reference run, seconds of its timed loop)."""
    with tempfile.TemporaryDirectory() as run:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCPROF_", "PMI_", "OMPI_", "SLURM_"))}
        env.update({"HPCPROF_RUN_DIR": run, "HPCPROF_STEPS_REFERENCE": "1", "HPCPROF_PROFILE_TOOL": "none",
                    "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
        start = time.perf_counter()
        subprocess.run([str(Path(sys.executable).parent / "mpiexec"), "-n", "2", *argv(kind)], env=env, cwd=run,
                       check=True, capture_output=True, timeout=900)
        wall = time.perf_counter() - start
        name = "seqpar.json" if kind == "seqpar" else "ddp_steps.json"
        assert not (Path(run) / "results" / name).exists()
        data = json.loads((Path(run) / "results" / "reference" / name).read_text())
    if kind == "seqpar":
        return wall, max(row["wall_s"] for row in data["loop"])
    return wall, sum(r["time_ms"] for r in data["steps"] if r["rank"] == 0 and r["phase"] == "step") / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    opts = parser.parse_args()
    lines = [f"the reference run of a 2-rank job, {opts.repeat} runs each, Python {sys.version.split()[0]}, "
             f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} at the start: the machine is shared), "
             f"{time.strftime('%Y-%m-%d', time.gmtime())}; command: python benchmarks/reference_cost.py --repeat {opts.repeat}"]
    for kind in ("seqpar", "ddp"):
        runs = [one(kind) for _ in range(opts.repeat)]
        walls = [round(w, 2) for w, _ in runs]
        loops = [round(loop, 2) for _, loop in runs]
        lines.append(f"{kind}: {statistics.median(walls):.2f} s a reference run (all: {walls}), of which the timed "
                     f"loop {statistics.median(loops):.2f} s (all: {loops}); the rest is start-up (Python, torch, "
                     f"the process group){', warm-up and the check' if kind == 'seqpar' else ''}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if opts.out:
        opts.out.write_text(text)


if __name__ == "__main__":
    main()
