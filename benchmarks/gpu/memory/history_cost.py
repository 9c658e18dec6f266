"""The step time of a training loop with PyTorch's memory history off or on, for memory.sh:
`python history_cost.py MODE` (off | python: Python stacks | all: Python and C++ stacks),
max_entries 100,000 as hpcprof's option records. One GPU; a 4-layer transformer encoder (d 1024,
batch 16 x 512, bfloat16 autocast), 10 warm-up steps, then 40 timed steps (CUDA events around
each, synchronized); prints the median and the mean step in ms."""

from __future__ import annotations

import statistics
import sys

import torch


def main() -> None:
    mode = sys.argv[1]
    layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 4).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    data = torch.randn(16, 512, 1024, device="cuda")
    if mode != "off":
        torch.cuda.memory._record_memory_history(max_entries=100_000, stacks=mode)
    times = []
    for step in range(50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", torch.bfloat16):
            loss = model(data).float().square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        end.record()
        end.synchronize()
        if step >= 10:
            times.append(start.elapsed_time(end))
    print(f"history {mode}: median {statistics.median(times):.3f} ms mean {statistics.fmean(times):.3f} ms "
          f"over {len(times)} steps")


if __name__ == "__main__":
    main()
