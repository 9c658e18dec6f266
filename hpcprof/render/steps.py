"""The rendered side of the optimizer step hook (`profile.window.auto`, hpcprof/inject/_hpcprof_steps.py):
the variables the rank wrapper exports for it, the profiler options it needs, and the unprofiled
reference run it ends after its window (`profile.reference`)."""

from __future__ import annotations

from typing import Any

import msgspec

from hpcprof.config.experiment import Point
from hpcprof.config.profile import ProfileConfig
from hpcprof.errors import UserError
from hpcprof.tools.ncu.profiler import NcuOptions
from hpcprof.tools.nsys.profiler import NsysOptions

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


#: the rank wrapper's first argument that runs the command as the unprofiled reference (templates/rank_wrapper.sh.j2)
REFERENCE = "--hpcprof-reference"


def reference_argv(point: Point, rank_argv: list[str], runs_containers: bool) -> list[str]:
    """The rank wrapper's arguments of the unprofiled reference run ([] for none): REFERENCE, then
    the workload's own. UserError where `profile.reference: true` cannot be: no step hook (seqpar,
    ddp, `window.auto: false`), or a scheduler that runs the containers (Kubernetes)."""
    exp = point.experiment
    profile = exp.profile
    if profile.reference and not profile.window.hooked(exp.workload.kind):
        raise UserError("profile.reference: the reference run is ended by the step hook, which runs on a `command` "
                        "with profile.window.auto: true; drop profile.reference (seqpar and ddp: compare with a run "
                        "under profile.tool: none)")
    if not profile.references(exp.workload.kind):
        return []
    if runs_containers:
        if profile.reference:
            raise UserError("profile.reference: not supported where the scheduler runs the containers (Kubernetes); "
                            "set it to false and compare with a run under profile.tool: none")
        return []
    return [REFERENCE, *rank_argv]


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
