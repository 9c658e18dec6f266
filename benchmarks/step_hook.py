"""The optimizer step hook's own cost per step (hpcprof/inject/_hpcprof_steps.py), on this machine's
CPU: the same loop of optimizer steps with the hook armed (as the rank wrapper arms it: the run's
inject/ directory first on PYTHONPATH, HPCPROF_STEPS=1) and without, each in a fresh Python, the
two interleaved --repeat times. The loop's step is an SGD step on one small tensor (a few µs), so
that the hook's share of it is visible; what the hook adds per step (its clock reads, the lead and
nesting checks, one append of a line to the rank's steps file) is the difference of the medians,
reported as its share of a 20 ms training step (the goal: under 1 %). On a CPU build of torch there
is no NVTX: the two NVTX calls a step costs on a GPU (torch.cuda.nvtx range_end, range_start) are
not in this figure.

    python benchmarks/step_hook.py [--steps 10000] [--repeat 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INJECT = REPO / "hpcprof" / "inject"
STEP_MS = 20.0
GOAL_PCT = 1.0
LOOP = """
import sys, time, torch
torch.set_num_threads(1)
p = torch.nn.Parameter(torch.zeros(16))
p.grad = torch.ones(16)
opt = torch.optim.SGD([p], lr=1e-3)
for _ in range(200):
    opt.step()
steps = int(sys.argv[1])
wall, cpu = time.perf_counter_ns(), time.process_time_ns()
for _ in range(steps):
    opt.step()
print((time.perf_counter_ns() - wall) / steps, (time.process_time_ns() - cpu) / steps)
"""


def one(steps: int, hooked: bool, run_dir: Path) -> tuple[float, float]:
    """ns per step of one child (wall, CPU)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCPROF_")} | {"OMP_NUM_THREADS": "1"}
    if hooked:
        for old in (run_dir / "steps").glob("*"):
            old.unlink()
        env |= {"PYTHONPATH": str(INJECT), "HPCPROF_RUN_DIR": str(run_dir), "HPCPROF_RANK": "0",
                "HPCPROF_STEPS": "1", "HPCPROF_STEPS_SKIP": "5", "HPCPROF_STEPS_COUNT": "10"}
    out = subprocess.run([sys.executable, "-c", LOOP, str(steps)], env=env, capture_output=True, text=True, check=True)
    if hooked and len((run_dir / "steps" / "rank0.jsonl").read_text().splitlines()) != steps + 201:
        raise SystemExit("the hook did not record every step")
    wall, cpu = map(float, out.stdout.split())
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    samples: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            for hooked in (False, True):
                samples[hooked].append(one(args.steps, hooked, Path(tmp)))
    lines = [f"optimizer step hook, {args.steps:,} SGD steps per child, {args.repeat} children each, interleaved; "
             f"Python {sys.version.split()[0]}, torch {torch_version()}, {os.cpu_count()} CPUs"]
    for index, what in ((0, "wall"), (1, "CPU")):
        plain = statistics.median(s[index] for s in samples[False])
        hooked = statistics.median(s[index] for s in samples[True])
        cost = hooked - plain
        share = 100 * cost / (STEP_MS * 1e6)
        lines.append(f"{what:4}: {plain / 1e3:8.2f} us/step without the hook, {hooked / 1e3:8.2f} us/step with it "
                     f"(ratio {hooked / plain:.2f}): the hook costs {cost / 1e3:.2f} us a step = {share:.4f} % of a "
                     f"{STEP_MS:g} ms step ({'within' if share < GOAL_PCT else 'OVER'} the {GOAL_PCT:g} % goal)")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)


def torch_version() -> str:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


if __name__ == "__main__":
    main()
