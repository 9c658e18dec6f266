"""The device memory of a rank's steps, for the step hook (_hpcprof_steps: `hpcprof collect`
reads it with hpcprof.analysis.steps): the caching allocator's peak allocated and reserved bytes
of each step (torch.cuda.max_memory_allocated / max_memory_reserved, reset at each step's end by
reset_peak_memory_stats, so each step's peak is its own), and the device's capacity once. Only
where the program initialised CUDA; counters the allocator keeps anyway: no synchronisation.
Standard library only; torch is used only once the program imported it.
"""

from __future__ import annotations

import sys
from typing import Any


def _cuda() -> Any:
    """torch, where the program imported it and initialised CUDA; else None."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and torch.cuda.is_initialized() else None


def header() -> dict[str, int]:
    """{"capacity": the device's total memory in bytes} where CUDA is in use, else {}."""
    torch = _cuda()
    if torch is None:
        return {}
    return {"capacity": int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)}


def step_peaks() -> str:
    """`,"mem":[allocated peak,reserved peak]` of the step that just ended (the peaks then reset),
    "" where CUDA is not in use."""
    torch = _cuda()
    if torch is None:
        return ""
    device = torch.cuda.current_device()
    allocated, reserved = torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)
    torch.cuda.reset_peak_memory_stats(device)
    return f',"mem":[{allocated},{reserved}]'


def dump_snapshot(path: str) -> None:
    """PyTorch's memory snapshot (torch.cuda.memory._dump_snapshot: the allocator's segments and
    blocks, with the stacks and history where the memory history is recorded) to `path`, where
    CUDA is in use."""
    torch = _cuda()
    if torch is not None:
        torch.cuda.memory._dump_snapshot(path)
