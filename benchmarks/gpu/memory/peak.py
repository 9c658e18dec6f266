"""A program run in this process, then its own peak memory printed: a built-in workload
(`torchrun ... peak.py seqpar|ddp FLAGS...`) or a script, unchanged (`torchrun ... peak.py train.py
ARGS...`, run as __main__ with its own argv). A workload's timer resets the allocator's peaks at each
iteration (hpcprof.workloads.timing.PhaseTimer); each reset here first keeps the peak so far, so the
printed torch.cuda.max_memory_allocated / max_memory_reserved are over the whole run, and each
interval's own peak (from one reset to the next, the last one to the end) is printed too. For a script,
the allocated peak so far is also kept at the end of each optimizer step (a post-hook on every
optimizer's step), without a reset: where in the run the whole-run peak was reached. One line per
rank, `peak {json}`: the program, the rank, those two, the intervals' peaks, the steps, the first step whose end saw the
whole-run peak (0: after the last step), the device's capacity."""

from __future__ import annotations

import json
import os
import runpy
import sys

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

_kept = {"allocated": 0, "reserved": 0}
_reset = torch.cuda.reset_peak_memory_stats
_at_step_end: list[int] = []
_intervals: list[int] = []


def _step_end(*_: object) -> None:
    _at_step_end.append(max(_kept["allocated"], torch.cuda.max_memory_allocated()))


def _keep_then_reset(device: torch.device | str | int | None = None) -> None:
    _intervals.append(torch.cuda.max_memory_allocated(device))
    _kept["allocated"] = max(_kept["allocated"], _intervals[-1])
    _kept["reserved"] = max(_kept["reserved"], torch.cuda.max_memory_reserved(device))
    _reset(device)


def run(program: str, args: list[str]) -> int:
    """Run the built-in workload or the script `program` with `args`; its exit code."""
    if program.endswith(".py"):
        sys.argv = [program, *args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(program)))   # as `python3 program` would
        register_optimizer_step_post_hook(_step_end)
        try:
            runpy.run_path(program, run_name="__main__")
        except SystemExit as stop:
            return stop.code if isinstance(stop.code, int) else 0
        return 0
    from hpcprof.workloads import ddp, seqpar

    return int({"seqpar": seqpar, "ddp": ddp}[program].main(tuple(args)) or 0)


def main() -> int:
    torch.cuda.reset_peak_memory_stats = _keep_then_reset
    program = sys.argv[1]
    code = run(program, sys.argv[2:])
    device = torch.cuda.current_device()
    _keep_then_reset(device)
    peak_step = next((i + 1 for i, seen in enumerate(_at_step_end) if seen == _kept["allocated"]), 0)
    print("peak " + json.dumps({"workload": os.path.basename(program), "rank": int(os.environ.get("RANK", "0")),
                                "max_memory_allocated": _kept["allocated"], "max_memory_reserved": _kept["reserved"],
                                "intervals": _intervals, "steps": len(_at_step_end), "peak_by_step": peak_step,
                                "capacity": torch.cuda.mem_get_info(device)[1]}), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
