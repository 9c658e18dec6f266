"""The optimizer steps the step hook recorded (hpcprof/inject/_hpcprof_steps.py writes
`<run>/steps/rank<N>.jsonl`): one table row per rank and step, and the rows of the window as the
per-iteration timing of a `command` run (iteration.* metrics, hpcprof.analysis.summary); where
CUDA was in use, each step's peak allocated and reserved bytes and the device's capacity
(hpcprof/inject/_hpcprof_memory.py), and per rank their peaks over the window (steps_memory)."""

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

COLUMNS = ["rank", "step", "end_ns", "duration_ns", "in_window", "tool", "pid", "allocated_peak", "reserved_peak",
           "capacity"]
MEMORY_COLUMNS = ["rank", "steps", "peak_allocated", "peak_reserved", "fragmentation", "capacity", "headroom"]


def read_rank(path: Path) -> list[dict[str, Any]]:
    """One rank's steps: its header's rank, tool and pid with each step; a step in the window when
    skip < step <= skip + steps (the header's). A line that does not parse (a write cut short) is
    left out; a file without its header has no steps. ValueError: the header is not one."""
    rows: list[dict[str, Any]] = []
    with io.TextIOWrapper(open_regular(path), encoding="utf-8", errors="replace") as fh:   # no FIFO waited on
        head = json.loads(fh.readline() or "null")
        if not isinstance(head, dict) or not {"rank", "skip", "steps"} <= head.keys():
            raise ValueError(f"{path.name}: no step hook header on its first line")
        first, last = int(head["skip"]) + 1, int(head["skip"]) + int(head["steps"])
        capacity = head.get("capacity") if isinstance(head.get("capacity"), int) else None
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
                         "tool": str(head.get("tool", "")), "pid": int(head.get("pid", 0)),
                         "allocated_peak": allocated, "reserved_peak": reserved, "capacity": capacity})
    return rows


def steps_tables(run_dir: Path) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """({catalog.STEPS_TIMES.key: every rank's steps} or {} where no rank stepped, lines about files
    that could not be read)."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for path in sorted((run_dir / "steps").glob("rank*.jsonl")):
        try:
            rows += read_rank(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: skipped ({exc})")
    if not rows:
        return {}, problems
    df = pd.DataFrame(rows, columns=COLUMNS).astype(
        {"duration_ns": "Int64", "allocated_peak": "Int64", "reserved_peak": "Int64", "capacity": "Int64"})
    df = df.sort_values(["rank", "step"], kind="stable", ignore_index=True)
    memory = memory_table(df[df["in_window"].astype(bool)])
    return {c.STEPS_TIMES.key: df, **({c.STEPS_MEMORY.key: memory} if not memory.empty else {})}, problems


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
