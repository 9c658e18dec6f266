"""A user's training script as hpcprof finds it: nothing of hpcprof in it. DDP over gloo from
env:// (`init_process_group("gloo")`, no rank, size or address given), an optimizer step per
iteration (`plain`), one per 3 micro-batches (`accumulate`), or no optimizer at all (`infer`).
It prints its own count of optimizer steps and the rendezvous variables it found."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

mode, iterations = sys.argv[1], int(sys.argv[2])
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randn(32, 64)
steps = 0
for _ in range(iterations):
    if mode == "infer":
        with torch.no_grad():
            model(data).sum()
        continue
    for _ in range(3 if mode == "accumulate" else 1):
        model(data).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    steps += 1
seen = {name: os.environ.get(name) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                 "MASTER_ADDR", "MASTER_PORT")}
print("trainer: " + json.dumps({"rank": dist.get_rank(), "world": dist.get_world_size(), "optimizer_steps": steps,
                                "env": seen}))
dist.destroy_process_group()
