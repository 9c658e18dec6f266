"""A built-in workload (seqpar or ddp) run in this process, then its own peak memory printed:
`torchrun ... peak.py WORKLOAD FLAGS...`. The workload's timer resets the allocator's peaks at each
iteration (hpcprof.workloads.timing.PhaseTimer); each reset here first keeps the peak so far, so
the printed torch.cuda.max_memory_allocated / max_memory_reserved are over the whole run. One JSON
line per rank: rank, those two, the device's capacity."""

from __future__ import annotations

import json
import os
import sys

import torch

_kept = {"allocated": 0, "reserved": 0}
_reset = torch.cuda.reset_peak_memory_stats


def _keep_then_reset(device: object = None) -> None:
    _kept["allocated"] = max(_kept["allocated"], torch.cuda.max_memory_allocated(device))
    _kept["reserved"] = max(_kept["reserved"], torch.cuda.max_memory_reserved(device))
    _reset(device)


def main() -> int:
    from hpcprof.workloads import ddp, seqpar

    torch.cuda.reset_peak_memory_stats = _keep_then_reset
    workload = {"seqpar": seqpar, "ddp": ddp}[sys.argv[1]]
    code = workload.main(tuple(sys.argv[2:]))
    device = torch.cuda.current_device()
    _keep_then_reset(device)
    print("peak " + json.dumps({"workload": sys.argv[1], "rank": int(os.environ.get("RANK", "0")),
                                "max_memory_allocated": _kept["allocated"], "max_memory_reserved": _kept["reserved"],
                                "capacity": torch.cuda.mem_get_info(device)[1]}), flush=True)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
