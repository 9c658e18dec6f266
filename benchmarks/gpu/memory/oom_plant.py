"""A real CUDA out-of-memory on one rank, for memory.sh: `python oom_plant.py TIMEOUT_S`. Each
rank (env:// rendezvous, its GPU by LOCAL_RANK) records PyTorch's memory history (Python stacks,
as a cheap history armed by forensics would), runs a small matmul and all-reduces it every step;
rank 1 also keeps a 2 GiB activation every step (the planted leak), until CUDA runs out."""

from __future__ import annotations

import datetime
import os
import sys

import torch
import torch.distributed as dist


def keep_activation(kept: list[torch.Tensor], device: torch.device) -> None:
    kept.append(torch.empty(1 << 29, device=device))  # the planted leak: 2 GiB (float32) kept every step


def main() -> None:
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    torch.cuda.memory._record_memory_history(max_entries=10000, stacks="python")
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=float(sys.argv[1])), device_id=device)
    rank = dist.get_rank()
    weight = torch.randn(4096, 4096, device=device)
    kept: list[torch.Tensor] = []
    for step in range(1000):
        out = weight @ torch.randn(4096, 4096, device=device)
        if rank == 1:
            keep_activation(kept, device)
        dist.all_reduce(out)
        torch.cuda.synchronize()
        print(f"rank {rank} step {step} allocated {torch.cuda.memory_allocated() / 2**30:.1f} GiB", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
