"""The rendered side of the optimizer step hook (`profile.window.auto`, hpcprof/inject/_hpcprof_steps.py):
the variables the rank wrapper exports for it, and the profiler options it needs."""

from __future__ import annotations

from typing import Any

import msgspec

from hpcprof.config.experiment import Point
from hpcprof.config.profile import ProfileConfig
from hpcprof.profilers.ncu import NcuOptions
from hpcprof.profilers.nsys import NsysOptions

#: `profile.memory`: the memory history's entries (PyTorch's ring buffer: the window's last allocations and frees)
MEMORY_HISTORY_ENTRIES = 100_000


def opens_capture(options: Any) -> bool:
    """Whether the tool records only between cudaProfilerStart and Stop (nsys `capture_range:
    cudaProfilerApi`, ncu `profile_from_start: false`): the hook then opens and closes that range."""
    return (isinstance(options, NsysOptions) and options.capture_range == "cudaProfilerApi") or \
        (isinstance(options, NcuOptions) and not options.profile_from_start)


def steps_env(point: Point) -> dict[str, str]:
    """What the rank wrapper exports for the hook (empty: no hook): on, the window (steps skipped,
    steps measured), whether the hook opens it (not `opened_by_program`) and whether that means the
    cudaProfilerApi range; with `profile.memory`, the memory history's entries."""
    exp = point.experiment
    window = exp.profile.window
    if not window.hooked(exp.workload.kind):
        return {}
    drive = not window.opened_by_program
    return {"HPCPROF_STEPS": "1", "HPCPROF_STEPS_SKIP": str(window.skip_steps),
            "HPCPROF_STEPS_COUNT": str(window.steps), "HPCPROF_STEPS_DRIVE": "1" if drive else "0",
            **({"HPCPROF_STEPS_CAPTURE": "1"} if drive and opens_capture(exp.profile.options) else {}),
            **({"HPCPROF_MEMORY_HISTORY": str(MEMORY_HISTORY_ENTRIES)} if exp.profile.memory else {})}


def tool_options(profile: ProfileConfig, workload: str) -> Any:
    """The options the profiler starts with: the experiment's, except that where the hook opens
    nsys's capture range and no `capture_range_end` is given, `stop` (nsys's own default,
    stop-shutdown, would end the program when the window closes)."""
    options = profile.options
    window = profile.window
    if isinstance(options, NsysOptions) and options.capture_range_end is None and opens_capture(options) \
            and window.hooked(workload) and not window.opened_by_program:
        return msgspec.structs.replace(options, capture_range_end="stop")
    return options
