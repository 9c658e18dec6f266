"""Planted programs for the idle attribution (hpcprof.analysis.idle): each makes the device wait for
one host-side cause per step, and measures that cause itself (perf_counter around the planted code).

    python benchmarks/gpu/idle_planted.py CAUSE [--steps N] [--ms MS] [--out FILE]

CAUSE: `input` (a Dataset whose __getitem__ works MS ms a batch, num_workers=0), `sync` (a
loss.item() each step followed by MS ms of host work), `launch` (thousands of tiny kernels a step)
`control` (compute-bound: large matmuls, data already on the device). Runs on CUDA when there
is one, else on the CPU. Under hpcprof the optimizer step hook marks the steps and opens the
profiler's window. `--out` writes the program's own measurement (JSON): per step, the ms its
planted cause took, and the line of the planted code (the line marked `# planted: CAUSE`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch


def host_work(ms: float) -> None:
    """Python work on the host for `ms` ms (decoding, logging, bookkeeping)."""
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


class SlowDataset(torch.utils.data.Dataset):
    """Items that take `ms` ms each to make, as a decoding dataset does."""

    def __init__(self, length: int, dim: int, ms: float) -> None:
        self.length, self.dim, self.ms = length, dim, ms

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        host_work(self.ms)  # planted: input
        return torch.full((self.dim,), float(index % 7))


def run(cause: str, steps: int, ms: float, tiny: int) -> dict[str, object]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dim = (4096 if device.type == "cuda" else 1024) if cause == "control" else 256
    model = torch.nn.Linear(dim, dim).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    batch = 8
    data = torch.randn(batch, dim, device=device)
    loader = iter(torch.utils.data.DataLoader(SlowDataset(batch * steps, dim, ms / batch), batch_size=batch))
    small = torch.ones(256, device=device)
    own: list[float] = []
    kernels = 0
    for _ in range(steps):
        x = data
        if cause == "input":
            t0 = time.perf_counter()
            x = next(loader).to(device)
            own.append(time.perf_counter() - t0)
        if cause == "launch":
            t0 = time.perf_counter()
            with torch.no_grad():
                for _ in range(tiny):
                    small = small * 0.999 + 0.001  # planted: launch
            own.append(time.perf_counter() - t0)
            kernels = 2 * tiny
        if cause == "control":
            with torch.no_grad():
                y = x.repeat(64, 1)
                for _ in range(8):
                    y = torch.tanh(y @ model.weight)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if cause == "sync":
            t0 = time.perf_counter()
            loss.item()  # planted: sync
            t1 = time.perf_counter()
            host_work(ms)
            own.append(time.perf_counter() - t1)
    if device.type == "cuda":
        torch.cuda.synchronize()
    measured = own[5:] or [0.0]
    source = Path(__file__).read_text().splitlines()
    line = next((i + 1 for i, text in enumerate(source) if text.rstrip().endswith(f"# planted: {cause}")), None)
    return {"cause": cause if cause != "control" else None, "device": device.type,
            "ms_per_step": 1000 * statistics.median(measured), "kernels_per_step": kernels,
            "line": f"{Path(__file__).name}:{line}" if line else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cause", choices=["input", "sync", "launch", "control"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--ms", type=float, default=20.0, help="ms of planted host work per step")
    parser.add_argument("--tiny", type=int, default=1500, help="launch: tiny ops per step (two kernels each)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = run(args.cause, args.steps, args.ms, args.tiny)
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
