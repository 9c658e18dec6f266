"""What torch.profiler's cost is made of, on one process of the nanoGPT-style trainer (minigpt.py):
blocks of steps unobserved and under torch.profiler with CPU and CUDA activities (hpcprof's
default), CUDA alone, CPU alone, alternated in rounds so that the machine's drift falls on every
mode alike. Each step ends in torch.cuda.synchronize(); a block's first 2 steps (the profiler's
start) are left out. Prints per mode the median step and its ratio to the unobserved median.

    python3 torch_activities.py [--rounds 4] [--block-steps 12] [--width 384] [--layers 6]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from minigpt import GPT
from torch.profiler import ProfilerActivity, profile

MODES = {"none": None, "cpu+cuda": [ProfilerActivity.CPU, ProfilerActivity.CUDA],
         "cuda": [ProfilerActivity.CUDA], "cpu": [ProfilerActivity.CPU]}


#: the model and batch of minigpt.py's defaults, as command-line options of both probes
MODEL = (("layers", 6), ("width", 384), ("batch", 16), ("block", 256), ("vocab", 50304))


def timed_step(args: argparse.Namespace) -> Callable[[], float]:
    """minigpt.py's GPT and training step (one head per 64 of width) as a function that runs one step,
    waits for the GPU and returns its seconds."""
    torch.manual_seed(0)
    model = GPT(args.vocab, args.block, args.layers, args.width, args.width // 64).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)

    def step() -> float:
        start = time.perf_counter()
        idx = torch.randint(args.vocab, (args.batch, args.block + 1), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    return step


def main() -> None:
    parser = argparse.ArgumentParser()
    for name, default in (("rounds", 4), ("block_steps", 12), *MODEL):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    args = parser.parse_args()
    step = timed_step(args)
    for _ in range(10):
        step()
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode, activities in MODES.items():
            if activities is None:
                block = [step() for _ in range(args.block_steps)]
            else:
                with profile(activities=activities):
                    block = [step() for _ in range(args.block_steps)]
            times[mode] += block[2:]
    base = statistics.median(times["none"])
    print(f"width {args.width} layers {args.layers}: {args.rounds} rounds x {args.block_steps - 2} steps a mode")
    for mode, values in times.items():
        med = statistics.median(values)
        print(f"  {mode:9s} median {1e3 * med:7.2f} ms  ratio {med / base:.3f}  "
              f"(min {1e3 * min(values):.2f}, max {1e3 * max(values):.2f} ms)")


if __name__ == "__main__":
    main()
