"""The stack sampler's cost per step (hpcprof/inject/_hpcprof_sampler.py), on this machine's CPU:
the same loop of training-like steps with the step hook armed (as the rank wrapper arms it), the
sampler on (HPCPROF_SAMPLE_MS=5, the default) and off (0), each in a fresh Python, the two
interleaved --repeat times. A step is a fixed amount of work, about half pure Python (where the
sampler must take the GIL from the main thread: its worst case) and half torch ops (a matmul
loop), then an SGD step. The figures are the differences of the medians of the window's step
lengths (the step hook's own steps file) and of the process's CPU time per step (the sampler
thread's included), as shares of the step; the goal is under 5 %.

    python benchmarks/sampler_overhead.py [--steps 40] [--repeat 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INJECT = REPO / "hpcprof" / "inject"
#: a step's pure-Python additions and 128x128 matmuls (about 10 ms each on this machine's CPU)
PYTHON_N, TORCH_N = 200_000, 300
GOAL_PCT = 5.0
LOOP = """
import sys, time, torch
torch.set_num_threads(1)
w = torch.nn.Parameter(torch.randn(128, 128))
opt = torch.optim.SGD([w], lr=1e-6)
x = torch.randn(128, 128)
steps, python_n, torch_n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
cpu = time.process_time_ns()
for _ in range(steps):
    total = 0
    for i in range(python_n):
        total += i
    for _ in range(torch_n):
        y = x @ w
    w.grad = y
    opt.step()
print((time.process_time_ns() - cpu) / steps)
"""


def one(steps: int, sample_ms: str, run_dir: Path) -> tuple[float, float]:
    """(median wall ns of the window's steps, CPU ns per step) of one child."""
    for old in (run_dir / "steps").glob("*"):
        old.unlink()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCPROF_")} | {
        "OMP_NUM_THREADS": "1", "PYTHONPATH": str(INJECT), "HPCPROF_RUN_DIR": str(run_dir), "HPCPROF_RANK": "0",
        "HPCPROF_STEPS": "1", "HPCPROF_STEPS_SKIP": "5", "HPCPROF_STEPS_COUNT": str(steps - 10),
        "HPCPROF_SAMPLE_MS": sample_ms}
    out = subprocess.run([sys.executable, "-c", LOOP, str(steps), str(PYTHON_N), str(TORCH_N)], env=env,
                         check=True, capture_output=True, text=True)
    rows = [json.loads(line) for line in (run_dir / "steps" / "rank0.jsonl").read_text().splitlines()[1:]]
    return statistics.median(r["ns"] for r in rows[6:steps - 5]), float(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, float]]] = {"0": [], "5": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            for sample_ms in ("0", "5"):
                runs[sample_ms].append(one(args.steps, sample_ms, Path(tmp)))
    text = (f"stack sampler, {args.steps} steps per child ({PYTHON_N:,} Python additions and {TORCH_N} 128x128 "
            f"matmuls a step), {args.repeat} children each, interleaved; Python {sys.version.split()[0]}, "
            f"{os.cpu_count()} CPUs\n")
    for index, what in ((0, "wall"), (1, "CPU ")):
        off = statistics.median(r[index] for r in runs["0"])
        on = statistics.median(r[index] for r in runs["5"])
        share = 100 * (on - off) / off
        text += (f"{what}: {off / 1e6:.3f} ms/step with the sampler off, {on / 1e6:.3f} ms/step sampling every 5 ms: "
                 f"{share:+.2f} % ({'within' if share < GOAL_PCT else 'OVER'} the {GOAL_PCT:g} % goal); children "
                 f"off {[round(r[index] / 1e6, 2) for r in runs['0']]}, on {[round(r[index] / 1e6, 2) for r in runs['5']]}\n")
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
