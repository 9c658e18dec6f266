"""Where the time of a sweep over world size went: per point, against the smallest world of its group,
the step time, the parallel efficiency (weak, strong, or both where the experiment does not state
which) and the time lost per step, split into the wait for late ranks (the straggler's cost,
hpcprof.analysis.stragglers, with the line of the program where it spends its step beyond the
others, from the stack samples), each collective's exposed transfer (hpcprof.analysis.collective_wait)
and the rest (imbalance, idle, host work, slower kernels: Echo's median per-kernel slowdown against
world size 1 where the run's exports give it).

The step (`step ms (median)`, `time_ms`) is the program's, not the profiler's, where the run measured
it: a group's points are put on one basis (on_one_basis), the same for every point, as `step timed`
says:
- `unprofiled` (the step without the profiler): where every point of the group timed its own
  unprofiled steps (`profiler.unprofiled_step`, the steps outside torch.profiler's or nsys's window,
  or the job's unprofiled reference run) or ran under `profile.tool: none`: that step, whether it is
  below the profiled step or not (one basis for every point). The profiler's time a step
  (`profiler ms`: the profiled median step less it) is left out of the step and so of the lost time,
  as the diagnosis of each point leaves it out (hpcprof.report.limits);
- `profiled`: where a point of the group did not, each point's `iteration.median`, the profiler's
  slowdown in it; the sentences say which point lacks the unprofiled step.
Either is a median over the counted steps of every rank (warm-up, and the steps torch.profiler warms
up, records or writes its trace in, left out), the mean over the point's repetitions: the steady state,
which one slow step (a profiler's start-up in a timed loop) does not move.

Weak scaling (the batch per rank fixed): ideal step time = the reference's, efficiency =
T_ref / T. Strong (the global batch fixed): ideal = T_ref · N_ref / N, efficiency = T_ref · N_ref /
(T · N). Lost per step = T − ideal (the weak ideal where the mode is not stated); below 0 the point
is super-linear (faster than its ideal), and says so. The split comes from each point's first run's
critical-path events (`<tool>_critical_path_events`, two or more ranks), per step (the steps with
collectives on two or more ranks), as the profiler saw them (the lateness and transfer it may have
added are not taken out: where they exceed the unprofiled lost time, `gained_ms` holds the excess):
- late ranks (`late_ms`): the straggler's median delay of a step where one is above the noise floor,
  else 0;
- exposed transfer (`exposed_ms`): per collective, the time after the last rank arrived that no
  other GPU work of the rank overlapped (collective_wait's `exposed_ns`, a mean over ranks, × its
  instances a step): the transfer that lengthens the step; `overlapped_ms`: the rest of the
  transfer, hidden under compute (DDP's all-reduce under backward), no part of the lost time. CPU
  ranks (gloo) record no GPU work beside their collectives: all their transfer counts as exposed;
- other (`other_ms`) = lost − late − exposed where that is ≥ 0: imbalance, idle, host work, slower
  kernels; else 0, and `gained_ms` = late + exposed − lost: the ranks' own work ran that much faster a
  step than at the reference (or the point is super-linear).
So late + exposed + other − gained = lost, every part ≥ 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hpcprof.analysis.collective_wait import transfer_wait
from hpcprof.analysis.critical_path import EVENTS_TABLE
from hpcprof.analysis.stragglers import doing, per_step, straggler
from hpcprof.core import catalog as c
from hpcprof.run.results import read_table

if TYPE_CHECKING:
    import pandas as pd

    from hpcprof.report.runs import RunInfo

#: how a workload kind scales where the experiment says `analysis.scaling: auto`
KIND_SCALING = {"seqpar": "strong", "ddp": "weak"}
NOT_STATED = "strong/weak not stated"


def mode_of(info: RunInfo) -> str:
    """weak, strong, or NOT_STATED: the experiment's `analysis.scaling`, else its workload kind's."""
    said = info.record.experiment.analysis.scaling
    return said if said != "auto" else KIND_SCALING.get(info.kind, NOT_STATED)


#: the bases of a group's step (module docstring)
UNPROFILED, PROFILED = "unprofiled", "profiled"


def program_step(info: RunInfo, median_ms: float, unprofiled_ms: float | None) -> float:
    """The point's step without a profiler (ms): its unprofiled step where measured, its median step
    where no profiler ran (`profile.tool: none` without memory history), else NaN."""
    if unprofiled_ms:
        return unprofiled_ms
    return math.nan if info.record.experiment.profile.observed else median_ms


def on_one_basis(group: pd.DataFrame) -> pd.DataFrame:
    """A group's rows (profiled_ms, program_ms per point) with `time_ms`, `timed` (UNPROFILED where
    every point has its program's step, else PROFILED) and `profiler_ms` (profiled − program step,
    on the UNPROFILED basis)."""
    if group["program_ms"].notna().all():
        return group.assign(time_ms=group["program_ms"], timed=UNPROFILED,
                            profiler_ms=group["profiled_ms"] - group["program_ms"])
    return group.assign(time_ms=group["profiled_ms"], timed=PROFILED, profiler_ms=math.nan)


def lost_split(info: RunInfo) -> dict[str, Any]:
    """split_of the run's critical-path events (and, where it has a straggler, its `lines` table)."""
    events = read_table(info.run.path, c.table_name(info.tool, EVENTS_TABLE))
    if events is None or events.empty:
        return {}
    return split_of(events, lambda: read_table(info.run.path, c.table_name(info.tool, "lines")))


def split_of(events: pd.DataFrame, lines: Callable[[], pd.DataFrame | None] = lambda: None) -> dict[str, Any]:
    """A run's straggler (rank, sentence, cost per step in ms, where it spends its step from `lines`)
    and each collective's exposed and overlapped transfer per step (ms), from its critical-path
    events; {} where they have no step with collectives on two ranks."""
    from hpcprof.analysis.clocks import aligned

    events, _ = aligned(events)
    steps = per_step(events)
    if steps.empty:
        return {}
    found = straggler(events, steps)
    table = lines() if found else None
    where = doing(table, found.rank, found.floor_ns) if found and table is not None and not table.empty else ""
    waits = transfer_wait(events)
    each = {str(r.collective): (float(r.exposed_ns) * int(r.instances) / len(steps) / 1e6,
                                float(r.transfer_ns - r.exposed_ns) * int(r.instances) / len(steps) / 1e6)
            for r in waits[waits["scope"] == "all"].itertuples()}
    return {"late_rank": found.rank if found else None, "late_ms": found.median_late_ns / 1e6 if found else 0.0,
            "straggler": found.sentence() + (f"; {where}" if where else "") if found else
            f"no rank late above the noise floor ({float(steps['floor_ns'].iloc[0]) / 1e6:.3g} ms a step)",
            "transfer": each}


def with_lost_time(df: pd.DataFrame, splits: list[dict[str, Any]]) -> pd.DataFrame:
    """sweep.scaling's rows (group, point, world_size, time_ms, reference, mode, kernel_slowdown) with
    the step's ideal, the efficiencies, the lost time and its split (module docstring); `splits`: each
    row's run's split_of."""
    import pandas as pd

    out = df.reset_index(drop=True)
    ref = pd.DataFrame(index=out.index, columns=["world_size", "time_ms"], dtype=float)
    for _, idx in out.groupby("group", sort=False).groups.items():
        ref.loc[idx] = out.loc[out.loc[idx, "world_size"].idxmin(), ["world_size", "time_ms"]].to_numpy(float)
    out["efficiency_weak_pct"] = 100.0 * ref["time_ms"] / out["time_ms"]
    out["efficiency_strong_pct"] = 100.0 * ref["time_ms"] * ref["world_size"] / (out["time_ms"] * out["world_size"])
    strong = out["mode"] == "strong"
    ideal = ref["time_ms"].where(~strong, ref["time_ms"] * ref["world_size"] / out["world_size"])
    out["lost_ms"] = out["time_ms"] - ideal
    out["late_rank"] = [s.get("late_rank") for s in splits]
    out["late_ms"] = [s.get("late_ms", 0.0) for s in splits]
    out["exposed_ms"] = [sum(e for e, _ in s.get("transfer", {}).values()) for s in splits]
    out["overlapped_ms"] = [sum(o for _, o in s.get("transfer", {}).values()) for s in splits]
    out["transfer_by_collective"] = ["; ".join(f"{k} {e:.3g} ms exposed, {o:.3g} ms overlapped"
                                               for k, (e, o) in s.get("transfer", {}).items()) for s in splits]
    out["other_ms"] = (out["lost_ms"] - out["late_ms"] - out["exposed_ms"]).clip(lower=0.0)
    out["gained_ms"] = (out["late_ms"] + out["exposed_ms"] - out["lost_ms"]).clip(lower=0.0)
    out["straggler"] = [s.get("straggler", "") for s in splits]
    return out


#: the columns of the scaling table as the terminal and the HTML show them, and their headings
SHOWN = {"point": "point", "world_size": "ranks", "mode": "scaling", "time_ms": "step ms (median)",
         "timed": "step timed", "profiler_ms": "profiler ms", "efficiency_weak_pct": "efficiency if weak %",
         "efficiency_strong_pct": "efficiency if strong %",
         "lost_ms": "lost ms/step", "late_ms": "late ranks ms", "late_rank": "late rank",
         "exposed_ms": "exposed transfer ms", "other_ms": "other ms", "gained_ms": "gained ms",
         "overlapped_ms": "overlapped transfer ms"}


def shown(df: pd.DataFrame) -> pd.DataFrame:
    """The scaling table for reading (SHOWN), times to 3 significant digits."""
    out = df[list(SHOWN)].rename(columns=SHOWN)
    for col in out.columns:
        if out[col].dtype.kind == "f":
            out[col] = out[col].map(lambda v: f"{v:.3g}" if v == v else "")
    out["late rank"] = [f"{int(r)}" if r is not None and r == r else "" for r in df["late_rank"]]
    return out


def sentences(df: pd.DataFrame) -> list[str]:
    """Per point above its group's smallest world: the speed-up against its ideal, the efficiency, the
    step, the lost time and where it went."""
    out = []
    unmeasured = {group: "any point" if g["program_ms"].isna().all() else
                  ", ".join(g.loc[g["program_ms"].isna(), "point"]) for group, g in df.groupby("group", sort=False)}
    for _, row in df.iterrows():
        if row["point"] == row["reference"]:
            continue
        step = (f"median step {row['time_ms']:.3g} ms (counted steps, no profiler ran)"
                if row["tool"] == "none" and row["timed"] == UNPROFILED else
                f"median step {row['time_ms']:.3g} ms without the profiler (counted steps; profiled "
                f"{row['profiled_ms']:.3g} ms: the profiler's {row['profiler_ms']:.3g} ms a step left out)"
                if row["timed"] == UNPROFILED else
                f"median step {row['time_ms']:.3g} ms (counted steps, profiled: the profiler's slowdown in it, "
                f"no unprofiled step at {unmeasured[row['group']]})")
        eff = (f"{row['efficiency_weak_pct']:.0f} % if weak, {row['efficiency_strong_pct']:.0f} % if strong "
               f"({NOT_STATED})" if row["mode"] == NOT_STATED else
               f"{row['efficiency_pct']:.0f} % ({row['mode']} scaling)")
        against = " (against the weak ideal)" if row["mode"] == NOT_STATED else ""
        parts = (f"{row['late_ms']:.3g} ms waiting for late ranks, {row['exposed_ms']:.3g} ms exposed collective "
                 f"transfer ({row['transfer_by_collective'] or 'none'})")
        faster = (f"the ranks' own work ran {row['gained_ms']:.3g} ms a step faster than at {row['reference']}"
                  + (" (or the profiler added that much to the lateness and transfer it measured)"
                     if row["timed"] == UNPROFILED else ""))
        if row["lost_ms"] < 0:
            split = f"super-linear: {-row['lost_ms']:.3g} ms a step faster than its ideal{against}, with {parts}: " \
                    f"{faster}"
        elif row["gained_ms"] > 0:
            split = f"lost {row['lost_ms']:.3g} ms a step{against}, less than its {parts}: {faster}, nothing else lost"
        else:
            split = f"lost {row['lost_ms']:.3g} ms a step{against}: {parts}, {row['other_ms']:.3g} ms other"
        slower = row.get("kernel_slowdown", float("nan"))
        kernels = (f" Its compute kernels last {100 * slower:+.0f} % against one GPU (Echo's median per-kernel "
                   "slowdown, the whole capture)." if slower == slower else "")
        out.append(f"{row['group']}: {row['world_size']} ranks against {row['reference']}: speed-up "
                   f"{row['speedup']:.2f}x (ideal {row['ideal']:.2f}x), parallel efficiency {eff}; {step}, "
                   f"{split}. {row['straggler']}.".replace("..", ".")
                   + kernels)
    return out
