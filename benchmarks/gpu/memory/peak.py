"""A built-in workload (seqpar or ddp) run in this process, then its own peak memory printed:
`torchrun ... peak.py WORKLOAD FLAGS...`. Prints one JSON line per rank: rank,
torch.cuda.max_memory_allocated and max_memory_reserved over the whole run, the device's capacity."""

from __future__ import annotations

import json
import os
import sys

import torch


def main() -> int:
    from hpcprof.workloads import ddp, seqpar

    workload = {"seqpar": seqpar, "ddp": ddp}[sys.argv[1]]
    code = workload.main(tuple(sys.argv[2:]))
    device = torch.cuda.current_device()
    print("peak " + json.dumps({"workload": sys.argv[1], "rank": int(os.environ.get("RANK", "0")),
                                "max_memory_allocated": torch.cuda.max_memory_allocated(device),
                                "max_memory_reserved": torch.cuda.max_memory_reserved(device),
                                "capacity": torch.cuda.mem_get_info(device)[1]}), flush=True)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
