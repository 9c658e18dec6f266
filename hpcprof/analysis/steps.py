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
unprofiled reference run of the same command (profile.reference: `<run>/steps/reference/`). The
same comparison holds for seqpar's and ddp's own timed loops (`loop_perturbation`): their counted
iterations against those of the reference run's results (`<run>/results/reference/`)."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from hpcprof.core import catalog as c
from hpcprof.core.safe_paths import open_regular

if TYPE_CHECKING:
    import pandas as pd

    from hpcprof.run.record import RunRecord

COLUMNS = ["rank", "step", "end_ns", "duration_ns", "in_window", "unprofiled", "tool", "pid", "allocated_peak",
           "reserved_peak", "capacity"]
MEMORY_COLUMNS = ["rank", "steps", "peak_allocated", "peak_reserved", "fragmentation", "capacity", "headroom"]
PERTURBATION_COLUMNS = ["rank", "profiled_ms", "unprofiled_ms", "slowdown_pct", "low_pct", "high_pct",
                        "profiled_steps", "unprofiled_steps", "baseline"]
#: where a rank's unprofiled steps come from (steps_perturbation's `baseline`)
SAME_PROCESS, REFERENCE_RUN = "same process", "reference run"
#: the fewest steps on either side of a rank's perturbation, and the bootstrap's resamples and seed
MIN_STEPS, RESAMPLES, SEED = 3, 2000, 0
#: the longest line read (a step's line is about 60 bytes, the header about 150): a longer one is skipped, not read
MAX_LINE = 4096
#: the most bytes read at once
CHUNK = 1 << 20
#: the largest step number, step count or skip accepted
MAX_STEP = 10 ** 9
MAX_NS = (1 << 63) - 1
#: the largest byte count accepted (a device's memory)
MAX_BYTES = 1 << 62


def _lines(fh: BinaryIO, size: int) -> Iterator[bytes | None]:
    """The lines of the first `size` bytes of `fh`, read CHUNK at a time: each without its newline,
    None for a line longer than MAX_LINE (never held whole), the last one only where it ends in a newline
    (_CutShort at the end of a file that ends inside a line)."""
    left, held, skipping = size, b"", False
    while left > 0:
        chunk = fh.read(min(CHUNK, left))
        if not chunk:
            break
        left -= len(chunk)
        *whole, rest = chunk.split(b"\n")
        for part in whole:
            if skipping:
                skipping = False
                yield None
            else:
                line, held = held + part, b""
                yield None if len(line) > MAX_LINE else line
        if skipping or len(held) + len(rest) > MAX_LINE:
            held, skipping = b"", True
        else:
            held += rest
    if skipping or held:
        raise _CutShort()


class _CutShort(Exception):
    """The file ends inside a line."""


def _int(value: Any, low: int, high: int) -> int | str:
    """`value` if it is an int (not a bool) in low..high, else why it is not one."""
    if isinstance(value, bool) or value is None:
        return "missing" if value is None else "not a number"
    if isinstance(value, float):
        return "NaN or infinite" if not math.isfinite(value) else "fractional" if value != int(value) else "not an integer"
    if not isinstance(value, int):
        return "text" if isinstance(value, str) else "not a number"
    return value if low <= value <= high else "negative" if value < low and value < 0 else "out of range"


def _step(line: bytes) -> tuple[int, int, int | None, tuple[int, int] | None] | str:
    """(step, end_ns, duration ns, (allocated, reserved) peak bytes or None where not recorded) of a
    step's line, else why it is dropped."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return "not JSON"
    if not isinstance(data, dict):
        return "not a step"
    number = _int(data.get("step"), 1, MAX_STEP)
    if isinstance(number, str):
        return f"step number {number}"
    end = _int(data.get("end_ns"), 0, MAX_NS)
    if isinstance(end, str):
        return f"end time {end}"
    mem = data.get("mem")
    memory = (mem[0], mem[1]) if isinstance(mem, list) and len(mem) == 2 and all(
        isinstance(_int(v, 0, MAX_BYTES), int) for v in mem) else None
    if mem is not None and memory is None:
        return "memory not two byte counts"
    if data.get("ns") is None:
        return (number, end, None, memory) if number == 1 else "no duration after step 1"
    ns = _int(data["ns"], 0, MAX_NS)
    return f"duration {ns}" if isinstance(ns, str) else (number, end, ns, memory)


def _header(line: bytes | None, path: Path, rank: int | None) -> dict[str, Any]:
    """A steps file's header, checked: its rank the file's, its window and pid integers."""
    try:
        head = json.loads(line or b"null")
    except (ValueError, RecursionError):
        head = None
    if not isinstance(head, dict) or not {"rank", "skip", "steps"} <= head.keys():
        raise ValueError(f"{path.name}: no step hook header on its first line")
    for key, high in (("rank", 1 << 31), ("skip", MAX_STEP), ("steps", MAX_STEP), ("pid", 1 << 31)):
        if key in head and isinstance(_int(head[key], 0, high), str):
            raise ValueError(f"{path.name}: its header's {key} is {_int(head[key], 0, high)}")
    if rank is not None and head["rank"] != rank:
        raise ValueError(f"{path.name}: its header names rank {head['rank']}: another rank's file")
    if not isinstance(head.get("tool", ""), str) or len(head.get("tool", "")) > 64:
        raise ValueError(f"{path.name}: its header's tool is not a tool's name")
    return head


def read_rank(path: Path, rank: int | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """One rank's steps and one line saying what was left out and why (None: nothing). Each step
    with its header's rank, tool and pid; in the window when skip < step <= skip + steps (the
    header's). A line is dropped when it is not a step's (not JSON, a step number, end time or
    duration that is missing, text, fractional, NaN, infinite, negative or out of range, a step
    number seen before) or is longer than MAX_LINE; the file is read up to its size when opened
    (lines written since are left, and said). ValueError: no header, or another rank's (`rank`)."""
    rows: list[dict[str, Any]] = []
    dropped: Counter[str] = Counter()
    grew = 0
    with open_regular(path) as fh:   # no FIFO waited on
        size = os.fstat(fh.fileno()).st_size
        lines = _lines(fh, size)
        try:
            head = _header(next(lines, None), path, rank)
            first, last = int(head["skip"]) + 1, int(head["skip"]) + int(head["steps"])
            capacity = head.get("capacity") if isinstance(_int(head.get("capacity"), 0, MAX_BYTES), int) else None
            profiled = head.get("profiled")
            touched = (profiled[0], profiled[1]) if isinstance(profiled, list) and len(profiled) == 2 and all(
                isinstance(_int(v, 0, MAX_STEP), int) for v in profiled) else None
            seen: set[int] = set()
            for line in lines:
                step = f"longer than {MAX_LINE:,} bytes" if line is None else _step(line)
                if isinstance(step, tuple) and step[0] in seen:
                    step = "a step number seen before"
                if isinstance(step, str):
                    dropped[step] += 1
                    continue
                number, end, ns, memory = step
                seen.add(number)
                rows.append({"rank": int(head["rank"]), "step": number, "end_ns": end, "duration_ns": ns,
                             "in_window": first <= number <= last,
                             "unprofiled": touched is not None and number > 1 and not touched[0] <= number <= touched[1],
                             "tool": str(head.get("tool", "")), "pid": int(head.get("pid", 0)),
                             "allocated_peak": memory[0] if memory else None,
                             "reserved_peak": memory[1] if memory else None, "capacity": capacity})
        except _CutShort:
            dropped["cut short at the end of the file"] += 1
        grew = os.fstat(fh.fileno()).st_size - size
    if not dropped and grew <= 0:
        return rows, None
    said = [f"{n:,} line{'s' if n > 1 else ''}: {why}" for why, n in dropped.most_common()]
    if grew > 0:
        said.append(f"{grew:,} bytes written while it was read not read (read up to its {size:,} bytes at the start)")
    return rows, f"{path}: {len(rows):,} steps read; left out: " + "; ".join(said)


def steps_tables(run_dir: Path, world: int = 0) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """({catalog.STEPS_TIMES.key: every rank's steps, with the memory and perturbation tables where
    they have rows} or {} where no rank stepped, one line per file not read or with lines left out).
    The reference run's steps (`steps/reference/`) are the perturbation's baseline only."""
    problems: list[str] = []
    df, reference = (_read_ranks(directory, world, problems)
                     for directory in (run_dir / "steps", run_dir / "steps" / c.REFERENCE_DIR))
    if df is None:
        return {}, problems
    from hpcprof.analysis.clocks import host_skew

    if (skew := host_skew(df["rank"], df["step"], df["end_ns"], "steps")) is not None:
        problems.append(skew)
    tables = {c.STEPS_TIMES.key: df}
    if not (memory := memory_table(df[df["in_window"].astype(bool)])).empty:
        tables[c.STEPS_MEMORY.key] = memory
    if not (found := perturbation(df, reference)).empty:
        tables[c.STEPS_PERTURBATION.key] = found
    return tables, problems


def _read_ranks(directory: Path, world: int, problems: list[str]) -> pd.DataFrame | None:
    """The steps of every rank file in `directory`, by rank and step (None: no step). Only
    `rank<R>.jsonl` files are read (R in ASCII digits, no leading zero, inside the world of `world`
    ranks where it is known): another file (a stray copy) is named and left; a file not read, or
    with lines left out, is a line in `problems`."""
    import pandas as pd

    from hpcprof.run.rank_sets import check_rank_set
    from hpcprof.run.ranks import rank_in_name

    named = {path: rank_in_name(path.name, "rank", ".jsonl") for path in sorted(directory.glob("rank*"))}
    numbered = [(str(path), rank) for path, rank in named.items() if rank is not None]
    from_one = bool(world and numbered and check_rank_set(numbered, world).from_one)
    if from_one:
        outside = [path.name for path, rank in named.items() if rank is not None and rank >= world]
        problems.append(f"{directory}: the steps files are numbered from 1 (rank1-rank{world}) for a world of "
                        f"{world} ranks, which count from 0 as MPI's do: {', '.join(outside)} not read (outside "
                        "the world), rank 0 has no file")
    rows: list[dict[str, Any]] = []
    for path, rank in named.items():
        if rank is None or (world and rank >= world):
            if from_one and rank is not None:
                continue
            why = f"rank {rank} is outside the world of {world} ranks" if rank is not None else \
                "not a rank's file (rank<R>.jsonl: R in ASCII digits, no leading zero)"
            problems.append(f"{path}: not read ({why})")
            continue
        try:
            found, line = read_rank(path, rank)
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: skipped ({exc})")
            continue
        rows += found
        if line is not None:
            problems.append(line)
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


def loop_steps(rows: pd.DataFrame, phase: str) -> pd.DataFrame:
    """A workload's own timed loop as steps for `perturbation`: its per-iteration rows {rank,
    time_ms, phase, counted, window[, profiled]} (seqpar's iterations, ddp's steps) of `phase`. Where
    torch.profiler recorded in some iterations only (seqpar's `profiled`), those are in the window
    and the iterations it did not touch (not `window`) unprofiled; else the window is the iterations
    the workload counts (counted, not `window`: those of iteration.*) and none is unprofiled."""
    import pandas as pd

    loop = rows[rows["phase"] == phase]
    touched = loop["window"].astype(bool) if "window" in loop else pd.Series(False, index=loop.index)
    counted = loop["counted"].astype(bool) if "counted" in loop else pd.Series(True, index=loop.index)
    recorded = loop["profiled"].astype(bool) if "profiled" in loop else pd.Series(False, index=loop.index)
    some = bool(recorded.any())
    return pd.DataFrame({"rank": loop["rank"], "duration_ns": loop["time_ms"].astype(float) * 1e6,
                         "in_window": recorded if some else counted & ~touched,
                         "unprofiled": ~touched if some else pd.Series(False, index=loop.index)})


def loop_perturbation(rows: pd.DataFrame, phase: str, reference: pd.DataFrame | None = None) -> pd.DataFrame:
    """`perturbation` of a workload's own timed loop (`loop_steps` of its rows): against the
    iterations the profiler did not touch in the same process, else against the counted iterations
    of the job's unprofiled reference run (`reference`: its rows, results/reference/)."""
    return perturbation(loop_steps(rows, phase), None if reference is None else loop_steps(reference, phase))


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
        seen = max((row["step"] for row in read_rank(path, rank)[0]), default=0)
    except (OSError, ValueError):
        seen = 0
    return (f": the step hook saw {seen or 'no'} optimizer step{'' if seen == 1 else 's'}, the window opens "
            f"after step {window.skip_steps} (profile.window.skip_steps)")
