"""Stragglers per step: which rank the others wait for, by how much it delays a step, and whether it
is always the same.

From the critical path's events of every rank (hpcprof.analysis.critical_path: each collective
instance matched across ranks, its iterations the steps: ProfilerStep#N of torch traces, the step
hook's or the workload's NVTX ranges of nsys exports). In one instance every rank's collective
ends at about the same time, so a rank that arrived late has a shorter one: rank r's *lateness* in
it is the median duration of the *other* ranks' collectives minus its own, its arrival after the
others' median arrival (a rank on time: about 0; one L late: about L, for 2 ranks as for many;
durations, not starts, so clocks need not agree).

A step's *delay* by rank r is its largest lateness over the step's instances: how much later than
the others it reached the step's collectives, which the step's end cannot beat. Not the sum: once
the others have waited for r in one collective, they wait again in every later one of the step
for the same late work (DDP: their next buckets' all-reduces are queued at once, since their
backward ran ahead while they waited, and each waits for r's backward to produce its bucket), so a
sum counts one delay once per bucket. Where a rank is late a little before each of several
collectives that each hold the others back (FSDP's all-gathers gate the next block's compute),
the step is delayed by up to the sum of those latenesses, and the delay here is a lower bound. Kept
beside it: the step's *wait* for r, the sum over the instances of r's positive lateness (how long
a typical other rank sat in collectives for r in the step, as the transfer/wait split counts it).

Noise is never a finding: a delay counts only above the floor, max(FLOOR_NS, FLOOR_SHARE of the
median step length); below that the ranks arrived together as far as timing noise can tell. The
run's straggler is the rank of the highest median delay over the steps, where that median is above
the floor: its cost per step is that median (robust to a step disturbed by something else),
`steps_late` the steps in which its delay was above the floor, `always` whether it was the latest
rank of every step that had one above the floor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

#: the absolute noise floor of a step's straggler delay (ns), and its floor as a share of the step
FLOOR_NS, FLOOR_SHARE = 100_000.0, 0.05
STEP_COLUMNS = ["iteration", "step_ns", "late_rank", "late_ns", "wait_ns", "floor_ns", "finding"]


@dataclass(frozen=True)
class Straggler:
    """The run's straggler: its rank, in how many steps its delay was above the floor (of all steps
    with collectives on two or more ranks), its median delay of a step (ns), the median over the
    steps of the others' wait for it (ns), whether it was the latest rank of every step with one
    above the floor, and the floor (ns)."""

    rank: int
    steps_late: int
    steps: int
    median_late_ns: float
    median_wait_ns: float
    always: bool
    floor_ns: float

    def sentence(self) -> str:
        """One finding, e.g. "rank 3 is late in 6 of 6 steps: it delays a step by 30.2 ms (median; ...)"."""
        which = "always the latest rank" if self.always else "in some steps another rank was later"
        return (f"rank {self.rank} is late in {self.steps_late} of {self.steps} steps: it delays a step by "
                f"{self.median_late_ns / 1e6:.3g} ms (median; {which}; noise floor {self.floor_ns / 1e6:.3g} ms); "
                f"the others wait {self.median_wait_ns / 1e6:.3g} ms a step for it, summed over the step's collectives")


def lateness(events: pd.DataFrame) -> pd.DataFrame:
    """Per iteration and rank, over the iteration's collective instances seen on two or more ranks:
    its delay of the step (`late_ns`, the largest lateness) and the others' wait for it (`wait_ns`,
    its positive latenesses summed); module docstring."""
    import pandas as pd

    coll = events[events["kind"] == "collective"]
    keys = ["iteration", "channel", "seq"]
    frame = pd.DataFrame({k: coll[k].to_numpy() for k in keys} | {
        "rank": coll["rank"].to_numpy(np.int64), "dur": (coll["end"] - coll["start"]).to_numpy(float)})
    late = np.full(len(frame), np.nan)
    for _, g in frame.groupby(keys, sort=False):
        if len(g) < 2:
            continue
        durs = g["dur"].to_numpy()
        for i, at in enumerate(g.index):
            late[frame.index.get_loc(at)] = float(np.median(np.delete(durs, i))) - durs[i]
    frame["late_ns"] = late
    frame = frame[frame["late_ns"].notna()]
    frame["wait_ns"] = frame["late_ns"].clip(lower=0.0)
    return frame.groupby(["iteration", "rank"], as_index=False).agg(late_ns=("late_ns", "max"),
                                                                    wait_ns=("wait_ns", "sum"))


def per_step(events: pd.DataFrame) -> pd.DataFrame:
    """One row per iteration with collectives on two or more ranks: its length (`step_ns`, the
    median over ranks of its span on each rank's clock), its latest rank, that rank's delay of the
    step and the others' wait for it, the noise floor and whether the delay is above it (STEP_COLUMNS)."""
    import pandas as pd

    late = lateness(events)
    if late.empty:
        return pd.DataFrame({c: pd.Series(dtype=float) for c in STEP_COLUMNS})
    span = events.groupby(["iteration", "rank"])["end"].max() - events.groupby(["iteration", "rank"])["start"].min()
    step_ns = span.groupby(level="iteration").median()
    top = late.sort_values(["iteration", "late_ns", "rank"], ascending=[True, False, True]).drop_duplicates("iteration")
    floor = max(FLOOR_NS, FLOOR_SHARE * float(step_ns.median()))
    out = pd.DataFrame({"iteration": top["iteration"].to_numpy(np.int64),
                        "step_ns": step_ns.reindex(top["iteration"]).to_numpy(float),
                        "late_rank": top["rank"].to_numpy(np.int64), "late_ns": top["late_ns"].to_numpy(float).round(1),
                        "wait_ns": top["wait_ns"].to_numpy(float).round(1), "floor_ns": floor})
    out["finding"] = out["late_ns"] > out["floor_ns"]
    return out


def straggler(events: pd.DataFrame, steps: pd.DataFrame) -> Straggler | None:
    """The run's straggler (module docstring) from the events and their per_step rows; None where no
    rank's median delay is above the floor."""
    if steps.empty:
        return None
    floor = float(steps["floor_ns"].iloc[0])
    late = lateness(events)
    typical = late.groupby("rank")["late_ns"].median().sort_index()
    rank = int(typical.idxmax())
    if typical[rank] <= floor:
        return None
    mine = late[late["rank"] == rank]
    found = steps[steps["finding"]]
    return Straggler(rank, int((mine["late_ns"] > floor).sum()), len(steps), float(typical[rank]),
                     float(mine["wait_ns"].median()), bool((found["late_rank"] == rank).all()), floor)


def doing(lines: pd.DataFrame, rank: int, floor_ns: float) -> str:
    """Where the late `rank` spends its step beyond the other ranks: the line of the program (a
    `<tool>_lines` table: rank, at, ms_per_step, from the stack samples) whose time per step exceeds
    the other ranks' median there (0 where a rank has none) the most; '' where no other rank has
    samples or no excess is above the noise floor."""
    from hpcprof.analysis.idle import short

    per = lines.pivot_table(index="at", columns="rank", values="ms_per_step", aggfunc="sum", fill_value=0.0)
    if rank not in per.columns or len(per.columns) < 2:
        return ""
    excess = (per[rank] - per.drop(columns=rank).median(axis=1)).sort_values(ascending=False, kind="stable")
    if excess.empty or excess.iloc[0] * 1e6 <= floor_ns:
        return ""
    return f"rank {rank} spends {excess.iloc[0]:.3g} ms a step more than the others at {short(str(excess.index[0]))}"
