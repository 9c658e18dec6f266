"""Where the time of a sweep over world size went: per point, against the smallest world of its group,
the step time, the parallel efficiency (weak, strong, or both where the experiment does not state
which) and the time lost per step, split into the wait for late ranks (the straggler's cost,
hpcprof.analysis.stragglers, with the line of the program where it spends its step beyond the
others, from the stack samples), each collective's transfer after the last rank arrived
(hpcprof.analysis.collective_wait) and the rest (imbalance, idle, host work, slower kernels: Echo's
median per-kernel slowdown against world size 1 where the run's exports give it).

Weak scaling (the batch per rank fixed): ideal step time = the reference's, efficiency =
T_ref / T. Strong (the global batch fixed): ideal = T_ref · N_ref / N, efficiency = T_ref · N_ref /
(T · N). Lost per step = T − ideal (the weak ideal where the mode is not stated). The split comes
from each point's first run's critical-path events (`<tool>_critical_path_events`, two or more
ranks): late = the straggler's median delay of a step where one is above the noise floor, else 0;
transfer = each collective's mean transfer per instance × its instances per step; other = lost −
late − transfer (negative where the collectives' transfer overlaps compute, as DDP's all-reduce
overlaps backward).
"""

from __future__ import annotations

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


def lost_split(info: RunInfo) -> dict[str, Any]:
    """The run's straggler (rank, sentence, cost per step in ms) and each collective's transfer per
    step (ms) from its critical-path events; {} where it has none (one rank, no collectives)."""
    events = read_table(info.run.path, c.table_name(info.tool, EVENTS_TABLE))
    if events is None or events.empty:
        return {}
    from hpcprof.analysis.clocks import aligned

    events, _ = aligned(events)
    steps = per_step(events)
    if steps.empty:
        return {}
    found = straggler(events, steps)
    lines = read_table(info.run.path, c.table_name(info.tool, "lines")) if found else None
    where = doing(lines, found.rank, found.floor_ns) if found and lines is not None and not lines.empty else ""
    waits = transfer_wait(events)
    every = waits[waits["scope"] == "all"]
    transfer = {str(r.collective): float(r.transfer_ns) * int(r.instances) / len(steps) / 1e6
                for r in every.itertuples()}
    return {"late_rank": found.rank if found else None, "late_ms": found.median_late_ns / 1e6 if found else 0.0,
            "straggler": found.sentence() + (f"; {where}" if where else "") if found else
            f"no rank late above the noise floor ({float(steps['floor_ns'].iloc[0]) / 1e6:.3g} ms a step)",
            "transfer": transfer}


def with_lost_time(df: pd.DataFrame, infos: list[RunInfo]) -> pd.DataFrame:
    """sweep.scaling's rows (group, point, world_size, time_ms, reference, mode) with the step's
    ideal, the efficiencies, the lost time and its split (module docstring); `infos`: each row's run."""
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
    splits = [lost_split(info) for info in infos]
    out["late_rank"] = [s.get("late_rank") for s in splits]
    out["late_ms"] = [s.get("late_ms", 0.0) for s in splits]
    out["transfer_ms"] = [sum(s.get("transfer", {}).values()) for s in splits]
    out["transfer_by_collective"] = ["; ".join(f"{k} {v:.3g} ms" for k, v in s.get("transfer", {}).items())
                                     for s in splits]
    out["other_ms"] = out["lost_ms"] - out["late_ms"] - out["transfer_ms"]
    out["kernel_slowdown"] = [next((v for n, v, _ in info.metrics if n == c.SLOWDOWN_MEDIAN.name), float("nan"))
                              for info in infos]
    out["straggler"] = [s.get("straggler", "") for s in splits]
    return out


#: the columns of the scaling table as the terminal and the HTML show them, and their headings
SHOWN = {"point": "point", "world_size": "ranks", "mode": "scaling", "time_ms": "step ms",
         "efficiency_weak_pct": "efficiency if weak %", "efficiency_strong_pct": "efficiency if strong %",
         "lost_ms": "lost ms/step", "late_ms": "late ranks ms", "late_rank": "late rank",
         "transfer_ms": "transfer ms", "other_ms": "other ms"}


def shown(df: pd.DataFrame) -> pd.DataFrame:
    """The scaling table for reading (SHOWN), times to 3 significant digits."""
    out = df[list(SHOWN)].rename(columns=SHOWN)
    for col in out.columns:
        if out[col].dtype.kind == "f":
            out[col] = out[col].map(lambda v: f"{v:.3g}")
    out["late rank"] = [f"{int(r)}" if r is not None and r == r else "" for r in df["late_rank"]]
    return out


def sentences(df: pd.DataFrame) -> list[str]:
    """Per point above its group's smallest world: the speed-up against its ideal, the efficiency, the
    step, the lost time and where it went."""
    out = []
    for _, row in df.iterrows():
        if row["point"] == row["reference"]:
            continue
        eff = (f"{row['efficiency_weak_pct']:.0f} % if weak, {row['efficiency_strong_pct']:.0f} % if strong "
               f"({NOT_STATED})" if row["mode"] == NOT_STATED else
               f"{row['efficiency_pct']:.0f} % ({row['mode']} scaling)")
        against = " (against the weak ideal)" if row["mode"] == NOT_STATED else ""
        # a negative rest: the transfer counted in full overlapped the step's compute by at least that much
        rest = (f"{row['other_ms']:.3g} ms other" if row["other_ms"] >= 0 else
                f"of which at least {-row['other_ms']:.3g} ms overlapped compute, nothing else lost")
        split = (f"lost {row['lost_ms']:.3g} ms a step{against}: {row['late_ms']:.3g} ms waiting for late ranks, "
                 f"{row['transfer_ms']:.3g} ms collective transfer ({row['transfer_by_collective'] or 'none'}), "
                 f"{rest}")
        slower = row.get("kernel_slowdown", float("nan"))
        kernels = (f" Its compute kernels last {100 * slower:+.0f} % against one GPU (Echo's median per-kernel "
                   "slowdown, the whole capture)." if slower == slower else "")
        out.append(f"{row['group']}: {row['world_size']} ranks against {row['reference']}: speed-up "
                   f"{row['speedup']:.2f}x (ideal {row['ideal']:.2f}x), parallel efficiency {eff}; step "
                   f"{row['time_ms']:.3g} ms, {split}. {row['straggler']}.".replace("..", ".") + kernels)
    return out
