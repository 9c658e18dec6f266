"""A plain gloo trainer with thousands of small operations a step (a launch-bound loop on CPU):
DDP from env:// over a stack of tiny Linear+Tanh layers, SGD; nothing of hpcprof in it. Each step
sleeps DELAY_MS more after its optimizer step (a program made slower by a known amount).

    python small_ops_train.py STEPS LAYERS DELAY_MS
"""

import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

steps, layers, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1e3
torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(*[m for _ in range(layers) for m in (torch.nn.Linear(8, 8), torch.nn.Tanh())])
net = DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
data = torch.randn(4, 8)
for _ in range(steps):
    net(data).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    time.sleep(delay)
dist.destroy_process_group()
