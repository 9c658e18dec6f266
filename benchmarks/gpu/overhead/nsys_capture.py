"""Does nsys slow the steps outside its capture range? One process of the nanoGPT-style trainer
(minigpt.py) runs blocks of steps: before the capture, inside it (torch.cuda.profiler.start/stop
around the block: nsys --capture-range=cudaProfilerApi), after it. Run it under nsys and without
(the control: start/stop then record nothing), alternated; each step ends in
torch.cuda.synchronize(). Prints per block the median step and its ratio to the before-block.

    [nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop ...] \
        python3 nsys_capture.py [--block-steps 30] [--width 384] [--layers 6] [--label L]
"""

from __future__ import annotations

import argparse
import statistics

import torch
from torch_activities import MODEL, timed_step


def main() -> None:
    parser = argparse.ArgumentParser()
    for name, default in (("block_steps", 30), *MODEL):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    step = timed_step(args)
    for _ in range(10):
        step()
    before = [step() for _ in range(args.block_steps)]
    torch.cuda.profiler.start()
    inside = [step() for _ in range(args.block_steps)]
    torch.cuda.profiler.stop()
    after = [step() for _ in range(args.block_steps)]
    base = statistics.median(before[2:])
    for name, values in (("before", before), ("inside", inside), ("after", after)):
        med = statistics.median(values[2:])
        print(f"{args.label:14s} {name:7s} median {1e3 * med:7.2f} ms  ratio {med / base:.3f}")


if __name__ == "__main__":
    main()
