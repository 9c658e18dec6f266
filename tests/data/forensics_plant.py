"""A Gloo program with one planted fault, for the forensics tests (tests/test_forensics.py):
`python forensics_plant.py FAULT WORLD TIMEOUT_S [HOLD_S]`. Each rank loads a batch and
all-reduces it, six steps, then saves a checkpoint and meets the others at a barrier. FAULT is
`none`, `hang` (rank 2 skips the all-reduce of step 3: the others wait for it in their last one
while rank 2 saves its checkpoint for HOLD_S seconds), `mismatch` (rank 2 all-reduces 2 elements
at step 3, the others 4: all time out; with more on rank 2 Gloo aborts the rank it sends to), `exception` (rank 1 raises at step 3), `segv` / `kill` (rank 1 dies of
SIGSEGV / SIGKILL at step 3). TIMEOUT_S is the process group's timeout; the rendezvous is a file
in the run's tmp/."""

from __future__ import annotations

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def load_batch(step: int) -> torch.Tensor:
    return torch.full((4,), float(step))


def save_checkpoint(seconds: float) -> None:
    time.sleep(seconds)


def main() -> None:
    fault, world, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    hold = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    rank = int(os.environ["HPCPROF_RANK"])
    dist.init_process_group("gloo", init_method=f"file://{os.environ['HPCPROF_RUN_DIR']}/tmp/rendezvous",
                            rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout))
    for step in range(6):
        batch = load_batch(step)
        if rank == 1 and step == 3 and fault == "exception":
            raise ValueError(f"planted: bad batch at step {step}")
        if rank == 1 and step == 3 and fault in ("segv", "kill"):
            os.kill(os.getpid(), signal.SIGSEGV if fault == "segv" else signal.SIGKILL)
        if rank == 2 and step == 3 and fault == "mismatch":
            batch = torch.ones(2)
        if rank == 2 and step == 3 and fault == "hang":
            continue  # the planted bug
        dist.all_reduce(batch)
    save_checkpoint(hold if fault == "hang" else 0)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
