"""The device memory of a rank's steps, for the step hook (_hpcprof_steps: `hpcprof collect`
reads it with hpcprof.analysis.steps): the caching allocator's peak allocated and reserved bytes
of each step (torch.cuda.max_memory_allocated / max_memory_reserved, reset at each step's end by
reset_peak_memory_stats, so each step's peak is its own), and the device's capacity once. Only
where the program initialised CUDA; counters the allocator keeps anyway: no synchronisation.
With `profile.memory` (HPCPROF_MEMORY_HISTORY: its entries), PyTorch's memory history (Python
stacks) from the end of step skip to the end of the window's last step, then its snapshot in
$HPCPROF_RUN_DIR/memory/rank{R}.pickle (`hpcprof collect` and `hpcprof memory` read it).
Standard library only; torch is used only once the program imported it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: whether this process records the memory history (history())
_recording: list[bool] = []


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


def history(step: int, skip: int, last: int, entries: int, rank: str) -> None:
    """Start the memory history at the end of step `skip`; at the end of step `last`, dump its
    snapshot and stop it (where CUDA is in use)."""
    torch = _cuda()
    if torch is None or not entries:
        return
    if step == skip and not _recording:
        torch.cuda.memory._record_memory_history(max_entries=entries, stacks="python")
        _recording.append(True)
    elif step == last and _recording:
        directory = os.path.join(os.environ["HPCPROF_RUN_DIR"], "memory")
        os.makedirs(directory, exist_ok=True)
        dump_snapshot(os.path.join(directory, f"rank{rank}.pickle"))
        torch.cuda.memory._record_memory_history(enabled=None)
        _recording.clear()
