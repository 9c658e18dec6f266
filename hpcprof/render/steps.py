"""The rendered side of the optimizer step hook (`profile.window.auto`, hpcprof/inject/_hpcprof_steps.py):
the variables the rank wrapper exports for it, the profiler options it needs, and the unprofiled
reference run (`profile.reference`): a `command`'s the hook ends after its window."""

from __future__ import annotations

from typing import Any

from hpcprof import profilers
from hpcprof.config.experiment import Point
from hpcprof.config.profile import ProfileConfig
from hpcprof.core.errors import UserError

#: `profile.memory`: the memory history's entries (PyTorch's ring buffer: the window's last allocations and frees)
MEMORY_HISTORY_ENTRIES = 100_000


def capture_options(profile: ProfileConfig) -> Any:
    """The tool's capture hook (hpcprof.profilers.Profiler.capture) on its options: None where it
    records from the start, else the options it starts with when the hook opens and closes its range
    (nsys `capture_range: cudaProfilerApi`, ncu `profile_from_start: false`)."""
    hook = profilers.get(profile.tool).capture
    return hook(profile.options) if hook else None


def steps_env(point: Point) -> dict[str, str]:
    """What the rank wrapper exports for the hook (empty: no hook): on, the window (steps skipped,
    steps measured), whether the hook opens it (not `opened_by_program`) and whether that means the
    cudaProfilerApi range, the stack sampler's interval; with `profile.memory`, the memory history's entries."""
    exp = point.experiment
    window = exp.profile.window
    if not window.hooked(exp.workload.kind):
        return {}
    drive = not window.opened_by_program
    return {"HPCPROF_STEPS": "1", "HPCPROF_STEPS_SKIP": str(window.skip_steps),
            "HPCPROF_STEPS_COUNT": str(window.steps), "HPCPROF_STEPS_DRIVE": "1" if drive else "0",
            "HPCPROF_SAMPLE_MS": f"{window.stack_sample_ms:g}",
            **({"HPCPROF_STEPS_CAPTURE": "1"} if drive and capture_options(exp.profile) is not None else {}),
            **({"HPCPROF_MEMORY_HISTORY": str(MEMORY_HISTORY_ENTRIES)} if exp.profile.memory else {})}


#: the rank wrapper's first argument that runs the workload as the unprofiled reference (templates/rank_wrapper.sh.j2)
REFERENCE = "--hpcprof-reference"


def reference_argv(point: Point, rank_argv: list[str], runs_containers: bool) -> list[str]:
    """The rank wrapper's arguments of the unprofiled reference run ([] for none): REFERENCE, then
    the workload's own. UserError where `profile.reference: true` cannot be: a `command` without
    the step hook (`window.auto: false`), which would end it, or a scheduler that runs the
    containers (Kubernetes)."""
    exp = point.experiment
    profile, kind = exp.profile, exp.workload.kind
    if profile.reference and kind == "command" and not profile.window.hooked(kind):
        raise UserError("profile.reference: a `command`'s reference run is ended by the step hook, which needs "
                        "profile.window.auto: true; set it, or drop profile.reference and compare with a run "
                        "under profile.tool: none")
    if not profile.references(kind):
        return []
    if runs_containers:
        if profile.reference:
            raise UserError("profile.reference: not supported where the scheduler runs the containers (Kubernetes); "
                            "set it to false and compare with a run under profile.tool: none")
        return []
    return [REFERENCE, *rank_argv]


def reference_steps(point: Point) -> int:
    """The optimizer steps after which the step hook ends a `command`'s reference run; 0 for seqpar
    and ddp, whose reference runs its whole loop."""
    window = point.experiment.profile.window
    return window.skip_steps + window.steps if point.experiment.workload.kind == "command" else 0


def tool_options(profile: ProfileConfig, workload: str) -> Any:
    """The options the profiler starts with: the experiment's, except where the hook opens the tool's
    capture range: then those of its capture hook (nsys: `capture_range_end: stop` where none is given)."""
    window = profile.window
    captured = capture_options(profile) if window.hooked(workload) and not window.opened_by_program else None
    return profile.options if captured is None else captured
