"""A small DDP trainer whose all-reduce sizes are known: each rank writes DDP's own bucket sizes
(`_get_ddp_logging_data()["bucket_sizes"]`, bytes) to OUT/buckets.json; run per rank under nsys to
get NCCL's NVTX ranges with their payloads (message size) for the busbw analyses' hand check."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn


def main(out: str) -> None:
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(4)]).cuda()
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local], bucket_cap_mb=25)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(512, 2048, device="cuda")
    for step in range(12):
        torch.cuda.nvtx.range_push(f"step{step}")
        optimizer.zero_grad(set_to_none=True)
        ddp(x).pow(2).mean().backward()
        optimizer.step()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    if dist.get_rank() == 0:
        data = ddp._get_ddp_logging_data()
        with open(os.path.join(out, "buckets.json"), "w") as f:
            json.dump({"bucket_sizes": data.get("bucket_sizes"), "world_size": dist.get_world_size(),
                       "steps": 12, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                       "torch": torch.__version__}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
