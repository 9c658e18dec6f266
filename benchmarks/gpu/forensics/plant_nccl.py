"""An NCCL program with one planted fault, for the GPU part of the forensics tests (forensics.sh):
`python plant_nccl.py FAULT TIMEOUT_S HOLD_S`. Each rank (env:// rendezvous, its GPU by
LOCAL_RANK) all-reduces a batch six times, then saves a checkpoint and meets the others at a
barrier. FAULT: `hang` (rank 1 skips the all-reduce of step 3 and saves its checkpoint for
HOLD_S seconds while rank 0 waits in its next all-reduce: NCCL's watchdog ends it after TIMEOUT_S),
`exception` (rank 1 raises at step 3)."""

from __future__ import annotations

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist


def load_batch(step: int, device: torch.device) -> torch.Tensor:
    return torch.full((1 << 20,), float(step), device=device)


def save_checkpoint(seconds: float) -> None:
    time.sleep(seconds)


def main() -> None:
    fault, timeout, hold = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=timeout), device_id=device)
    rank = dist.get_rank()
    for step in range(6):
        batch = load_batch(step, device)
        if rank == 1 and step == 3 and fault == "exception":
            raise ValueError(f"planted: bad batch at step {step}")
        if rank == 1 and step == 3 and fault == "hang":
            save_checkpoint(hold)   # the planted bug: this rank skips the all-reduce
            continue
        dist.all_reduce(batch)
        torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
