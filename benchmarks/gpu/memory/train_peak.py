"""A plain training loop whose own peak device memory is printed, for memory.sh: `python
train_peak.py STEPS`. One GPU; a 4-layer transformer encoder (d 1024, batch 16 x 512) with AdamW,
STEPS optimizer steps; prints torch.cuda.max_memory_allocated / max_memory_reserved over the run
(never reset by the program), for comparison with what hpcprof's step hook recorded (which resets
the peaks at each step: run it separately)."""

from __future__ import annotations

import sys

import torch


def main() -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 4).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    data = torch.randn(16, 512, 1024, device="cuda")
    for _ in range(int(sys.argv[1])):
        model(data).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    torch.cuda.synchronize()
    print(f"own peak: max_memory_allocated {torch.cuda.max_memory_allocated()} "
          f"max_memory_reserved {torch.cuda.max_memory_reserved()}", flush=True)


if __name__ == "__main__":
    main()
