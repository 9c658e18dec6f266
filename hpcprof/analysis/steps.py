"""The optimizer steps the step hook recorded (hpcprof/inject/_hpcprof_steps.py writes
`<run>/steps/rank<N>.jsonl`): one table row per rank and step, the rows of the window as the
per-iteration timing of a `command` run (iteration.* metrics, hpcprof.analysis.summary), the
profiler's perturbation of each rank's steps (`perturbation`), and, where CUDA was in use, each
step's peak allocated and reserved bytes and the device's capacity
(hpcprof/inject/_hpcprof_memory.py), with per rank their peaks over the window (steps_memory).

The perturbation compares, per rank, the window's steps (profiled) with the same process's steps
the profiler did not touch: under the hook's torch.profiler, those before its warm-up step and
after the step that exported its trace (the header's `profiled` range; never the first step, whose
start is not seen). Under nsys and ncu every step is slowed (the injection lasts the process):
there is no unprofiled step in the process; the baseline is then the window's steps of the job's
unprofiled reference run of the same command (profile.reference: `<run>/steps/reference/`)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcprof import catalog as c
from hpcprof.safe_paths import open_regular

if TYPE_CHECKING:
    import pandas as pd

    from hpcprof.record import RunRecord

COLUMNS = ["rank", "step", "end_ns", "duration_ns", "in_window", "unprofiled", "tool", "pid", "allocated_peak",
           "reserved_peak", "capacity"]
MEMORY_COLUMNS = ["rank", "steps", "peak_allocated", "peak_reserved", "fragmentation", "capacity", "headroom"]
PERTURBATION_COLUMNS = ["rank", "profiled_ms", "unprofiled_ms", "slowdown_pct", "low_pct", "high_pct",
                        "profiled_steps", "unprofiled_steps", "baseline"]
#: where a rank's unprofiled steps come from (steps_perturbation's `baseline`)
SAME_PROCESS, REFERENCE_RUN = "same process", "reference run"
#: the fewest steps on either side of a rank's perturbation, and the bootstrap's resamples and seed
MIN_STEPS, RESAMPLES, SEED = 3, 2000, 0


def read_rank(path: Path) -> list[dict[str, Any]]:
    """One rank's steps: its header's rank, tool and pid with each step; a step in the window when
    skip < step <= skip + steps (the header's); unprofiled when the header names the steps the
    profiler touched (`profiled`: [first, last]) and the step, not the first, is outside them. A line that does not parse (a write cut short) is
    left out; a file without its header has no steps. ValueError: the header is not one."""
    rows: list[dict[str, Any]] = []
    with io.TextIOWrapper(open_regular(path), encoding="utf-8", errors="replace") as fh:   # no FIFO waited on
        head = json.loads(fh.readline() or "null")
        if not isinstance(head, dict) or not {"rank", "skip", "steps"} <= head.keys():
            raise ValueError(f"{path.name}: no step hook header on its first line")
        first, last = int(head["skip"]) + 1, int(head["skip"]) + int(head["steps"])
        capacity = head.get("capacity") if isinstance(head.get("capacity"), int) else None
        profiled = head.get("profiled")
        touched = (int(profiled[0]), int(profiled[1])) if isinstance(profiled, list) and len(profiled) == 2 else None
        for line in fh:
            try:
                step = json.loads(line)
                number = int(step["step"])
                memory = step.get("mem")
                allocated, reserved = (int(memory[0]), int(memory[1])) if memory is not None else (None, None)
            except (ValueError, KeyError, TypeError, IndexError):
                continue
            rows.append({"rank": int(head["rank"]), "step": number, "end_ns": int(step["end_ns"]),
                         "duration_ns": step["ns"], "in_window": first <= number <= last,
                         "unprofiled": touched is not None and number > 1 and not touched[0] <= number <= touched[1],
                         "tool": str(head.get("tool", "")), "pid": int(head.get("pid", 0)),
                         "allocated_peak": allocated, "reserved_peak": reserved, "capacity": capacity})
    return rows


def steps_tables(run_dir: Path) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """({catalog.STEPS_TIMES.key: every rank's steps} or {} where no rank stepped, lines about files
    that could not be read)."""

    problems: list[str] = []
    df, reference = (_read_ranks(directory, problems) for directory in (run_dir / "steps", run_dir / "steps" / "reference"))
    if df is None:
        return {}, problems
    tables = {c.STEPS_TIMES.key: df}
    if not (memory := memory_table(df[df["in_window"].astype(bool)])).empty:
        tables[c.STEPS_MEMORY.key] = memory
    if not (found := perturbation(df, reference)).empty:
        tables[c.STEPS_PERTURBATION.key] = found
    return tables, problems


def _read_ranks(directory: Path, problems: list[str]) -> pd.DataFrame | None:
    """The steps of every rank file in `directory`, by rank and step (None: no step); a file that
    cannot be read is a line in `problems`."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for path in sorted(directory.glob("rank*.jsonl")):
        try:
            rows += read_rank(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: skipped ({exc})")
    if not rows:
        return None
    df = pd.DataFrame(rows, columns=COLUMNS).astype(
        {"duration_ns": "Int64", "allocated_peak": "Int64", "reserved_peak": "Int64", "capacity": "Int64"})
    return df.sort_values(["rank", "step"], kind="stable", ignore_index=True)


def memory_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank over the `steps` (rows {rank, allocated_peak, reserved_peak, capacity}: the step
    hook's of the window, a workload's counted iterations) that recorded memory: the peaks, the
    fragmentation at the allocated peak (its step's reserved − allocated peak), capacity and
    headroom (bytes; MEMORY_COLUMNS)."""
    import pandas as pd

    window = steps[steps["allocated_peak"].notna()]
    rows = []
    for rank, own in window.groupby("rank", sort=True):
        at = own.loc[own["allocated_peak"].idxmax()]
        reserved = int(own["reserved_peak"].max())
        capacity = own["capacity"].dropna()
        size = int(capacity.iloc[0]) if not capacity.empty else None
        rows.append({"rank": rank, "steps": len(own), "peak_allocated": int(at["allocated_peak"]),
                     "peak_reserved": reserved, "fragmentation": int(at["reserved_peak"] - at["allocated_peak"]),
                     "capacity": size, "headroom": size - reserved if size is not None else None})
    return pd.DataFrame(rows, columns=MEMORY_COLUMNS).astype({"capacity": "Int64", "headroom": "Int64"})


def perturbation(steps: pd.DataFrame, reference: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per rank with MIN_STEPS profiled steps (the window's) and unprofiled steps or more: their
    medians (ms), the slowdown 100 · (profiled / unprofiled − 1) and its 95 % percentile bootstrap
    interval (each side resampled on its own, RESAMPLES times, seeded: the same steps give the same
    interval), and where the unprofiled steps come from: the same process, else the window's steps
    of the rank in the reference run (`reference`, its steps table). Empty where no rank has both."""
    import numpy as np
    import pandas as pd

    rows = []
    rng = np.random.default_rng(SEED)
    timed = steps[steps["duration_ns"].notna()]
    for rank, group in timed.groupby("rank", sort=True):
        unprofiled = group["unprofiled"].astype(bool)
        quiet = group.loc[unprofiled, "duration_ns"].to_numpy(dtype=float) / 1e6
        slowed = group.loc[group["in_window"].astype(bool) & ~unprofiled, "duration_ns"].to_numpy(dtype=float) / 1e6
        baseline = SAME_PROCESS
        if len(quiet) < MIN_STEPS and reference is not None:
            mine = reference[(reference["rank"] == rank) & reference["in_window"].astype(bool)
                             & reference["duration_ns"].notna()]
            quiet, baseline = mine["duration_ns"].to_numpy(dtype=float) / 1e6, REFERENCE_RUN
        if len(quiet) < MIN_STEPS or len(slowed) < MIN_STEPS:
            continue
        ratio = (np.median(rng.choice(slowed, (RESAMPLES, len(slowed))), axis=1)
                 / np.median(rng.choice(quiet, (RESAMPLES, len(quiet))), axis=1))
        low, high = np.percentile(100.0 * (ratio - 1.0), [2.5, 97.5])
        profiled_ms, unprofiled_ms = float(np.median(slowed)), float(np.median(quiet))
        rows.append([int(rank), profiled_ms, unprofiled_ms, 100.0 * (profiled_ms / unprofiled_ms - 1.0),
                     float(low), float(high), len(slowed), len(quiet), baseline])
    return pd.DataFrame(rows, columns=PERTURBATION_COLUMNS)


def iteration_rows(steps: pd.DataFrame) -> pd.DataFrame:
    """The window's steps as the per-iteration timing rows {rank, iteration, phase, time_ms}
    (phase `step`) that the iteration.* metrics read."""
    window = steps[steps["in_window"].astype(bool) & steps["duration_ns"].notna()]
    return window.assign(iteration=window["step"], phase=c.STEP_PHASE,
                         time_ms=window["duration_ns"].astype(float) / 1e6)[["rank", "iteration", "phase", "time_ms"]]


def window_not_reached(run_dir: Path, rank: int, record: RunRecord) -> str:
    """Why the step hook never opened a rank's capture range, for a profile that recorded nothing:
    the optimizer steps it saw against the window's first ("" where the hook did not run)."""
    window = record.experiment.profile.window
    if not window.hooked(record.kind) or window.opened_by_program:
        return ""
    path = run_dir / "steps" / f"rank{rank}.jsonl"
    try:
        seen = max((row["step"] for row in read_rank(path)), default=0)
    except (OSError, ValueError):
        seen = 0
    return (f": the step hook saw {seen or 'no'} optimizer step{'' if seen == 1 else 's'}, the window opens "
            f"after step {window.skip_steps} (profile.window.skip_steps)")
