"""Whether a profile's clocks can be believed: one rule for every tool (nsys exports, Kineto traces).

* Each rank's times (`clock_problem`): finite, never negative (nsys counts ns from its session's
  start, Kineto µs from its clock's zero: a time before it is a damaged clock, or before 1970),
  inside int64 ns; an operation never ends before it starts (beyond `slack`: Kineto's µs rounding
  moves a sub-µs event's end up to 1 µs before its start, as HTA keeps it); and each kind of GPU
  operation (kernels, copies, sets) on the rank's CPU clock: none starts more than EARLY_NS before
  the call that launched it, and some starts within CLOCK_OFF_NS of it. A GPU clock 10 s off its
  CPU clock otherwise turns a busy GPU into 99.5 % idle. A rank whose times fail is named with the
  reason and left out, as a damaged file is.
* Between ranks (`aligned`): the kernels of one collective end together on every rank (within
  µs), so their ends give each rank's clock against the others'. An offset over SKEW_NS (a rank's
  clock set an hour off, nsys sessions started far apart) is taken off that rank's times, and
  said in one line; below it, times stay on each rank's own clock (the critical path compares
  durations, which no offset changes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

#: every GPU operation of a kind starting at least this long after its launch: the GPU clock is off
CLOCK_OFF_NS = 1_000_000_000
#: every GPU operation of a kind starting at least this long before its launch: the GPU clock is off
#: (as for CLOCK_OFF_NS: an offset that skews a window's idle time, not a millisecond of clock-sync
#: jitter)
EARLY_NS = CLOCK_OFF_NS
#: a kind of GPU operation is judged against the CPU clock from this many launched operations on
MIN_LAUNCHED = 4
#: past this (ns, about the year 2116 since 1970) a time is out of range
MAX_NS = 2**62
#: ranks whose clocks differ by more than this are aligned (and said so) for cross-rank analyses
SKEW_NS = 1_000_000_000


def span(ns: float) -> str:
    """A length of time for a person: `3600.0 s`, `12.5 ms`, `800 ns`."""
    ns = abs(float(ns))
    if ns >= 1e9:
        return f"{ns / 1e9:,.1f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e3:.1f} µs" if ns >= 1e3 else f"{ns:.0f} ns"


def clock_problem(start: np.ndarray, end: np.ndarray, unit_ns: float, slack_ns: float = 0.0,
                  launch: np.ndarray | None = None, kind: np.ndarray | None = None,
                  what: str = "GPU operations") -> str | None:
    """Why the times of one rank's `what` (start, end in units of `unit_ns` ns; `launch`: the start
    of the CPU call that launched each, NaN where unknown; `kind`: each one's kind of operation)
    cannot be believed (module docstring), or None when they can."""
    start, end = np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
    if not len(start):
        return None
    count = f"of {len(start):,} {what}"
    broken = ~(np.isfinite(start) & np.isfinite(end))
    if broken.any():
        return f"{int(broken.sum()):,} {count} have times that are not numbers: the clock is damaged"
    low = min(float(start.min()), float(end.min()))
    if low < 0:
        negative = int(((start < 0) | (end < 0)).sum())
        return (f"{negative:,} {count} have negative timestamps (from -{span(-low * unit_ns)}, before the clock's "
                "zero or 1970): the clock is damaged")
    high = max(float(start.max()), float(end.max())) * unit_ns
    if high >= MAX_NS:
        return f"{int(((start * unit_ns >= MAX_NS) | (end * unit_ns >= MAX_NS)).sum()):,} {count} have timestamps " \
               f"out of range ({high:.3g} ns): the clock is damaged"
    backwards = (end - start) * unit_ns < -slack_ns
    if backwards.any():
        worst = float(((start - end) * unit_ns).max())
        return f"{int(backwards.sum()):,} {count} end before they start (by up to {span(worst)}): the clock is damaged"
    if launch is None or kind is None:
        return None
    launch = np.asarray(launch, dtype=np.float64)
    known = np.isfinite(launch)
    lag = (start[known] - launch[known]) * unit_ns
    kinds = np.asarray(kind, dtype=object)[known]
    for name in sorted({str(k) for k in kinds.tolist()}):
        mine = lag[kinds == name]
        if len(mine) < MIN_LAUNCHED:
            continue
        if float(mine.min()) >= CLOCK_OFF_NS:
            return (f"its {name} clock is {span(mine.min())} ahead of its CPU clock (each of its {len(mine):,} "
                    f"launched {name} operations starts that long or longer after the call that launched it)")
        if float(mine.max()) <= -EARLY_NS:
            return (f"its {name} clock is {span(mine.max())} behind its CPU clock (each of its {len(mine):,} "
                    f"launched {name} operations starts that long or longer before the call that launched it)")
    return None


def clock_suspects(group: np.ndarray, groups: int, start: np.ndarray, end: np.ndarray, launch: np.ndarray,
                   kind: np.ndarray) -> np.ndarray:
    """Whether clock_problem (times in ns, no slack) can find a problem in each of `groups` groups of
    GPU operations (`group`: each one's, 0 .. groups - 1; `launch`, `kind` as clock_problem takes
    them): its tests made for all groups at once, as counts per group (a pass per rank cost a batch of
    small exports more in numpy's calls than in their work), so that it is called only for these,
    for its words; it finds none in the others (test_clocks)."""
    import pandas as pd

    start, end, launch = (np.asarray(a, dtype=np.float64) for a in (start, end, launch))
    with np.errstate(invalid="ignore"):
        broken = ~(np.isfinite(start) & np.isfinite(end)) | (np.minimum(start, end) < 0) \
            | (np.maximum(start, end) >= MAX_NS) | (end - start < 0)
    kinds, names = pd.factorize(np.asarray(kind, dtype=object))          # -1: no kind (None, NaN)
    launched = np.isfinite(launch) & (kinds >= 0)
    cell = (group * len(names) + kinds)[launched]                         # (group, kind)
    lag, cells = (start - launch)[launched], groups * len(names)
    count = np.bincount(cell, minlength=cells)
    soon = np.bincount(cell[lag < CLOCK_OFF_NS], minlength=cells)        # none: every one starts that late
    late = np.bincount(cell[lag > -EARLY_NS], minlength=cells)           # none: every one starts that early
    off = ((count >= MIN_LAUNCHED) & ((soon == 0) | (late == 0))).reshape(groups, len(names)).any(axis=1)
    return (np.bincount(group[broken], minlength=groups) > 0) | off


def rank_offsets(events: pd.DataFrame) -> dict[int, int]:
    """Each rank's clock against the lowest rank's (ns to take off its times), from the ends of the
    collectives that several ranks share in a critical-path events table (critical_path.EVENT_COLUMNS:
    a collective is one (iteration, channel, seq) on every rank): per collective, each rank's end
    against the median end; per rank, the median of those; ranks sharing no collective: 0."""
    coll = events[events["kind"] == "collective"]
    if coll.empty or coll["rank"].nunique() < 2:
        return {}
    key = coll.groupby(["iteration", "channel", "seq"], sort=False).ngroup().to_numpy()
    end = coll["end"].to_numpy(np.float64)
    rank = coll["rank"].to_numpy(np.int64)
    shared = np.bincount(key)[key] > 1
    if not shared.any():
        return {}
    middle = np.zeros(int(key.max()) + 1)
    for group in np.unique(key[shared]).tolist():          # a few hundred collectives
        middle[group] = np.median(end[key == group])
    off = {int(r): float(np.median((end - middle[key])[shared & (rank == r)])) for r in np.unique(rank[shared]).tolist()}
    base = off[min(off)]
    return {r: int(round(v - base)) for r, v in off.items()}


def aligned(events: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The events with each rank whose clock is over SKEW_NS off the lowest rank's moved onto its
    clock, and the line that says so (None: every clock within SKEW_NS, the events as they are)."""
    every = rank_offsets(events)
    offsets = {r: off for r, off in every.items() if abs(off) > SKEW_NS}
    if not offsets:
        return events, None
    base = min(every)
    shift = events["rank"].map(offsets).fillna(0).astype(np.int64)
    moved = events.assign(start=events["start"] - shift, end=events["end"] - shift)
    said = ", ".join(f"rank {r}'s clock is {span(off)} {'ahead of' if off > 0 else 'behind'} rank {base}'s"
                     for r, off in sorted(offsets.items()))
    return moved, (f"clocks: {said} (from the ends of the collectives they share, which end together): "
                   f"{'its' if len(offsets) == 1 else 'their'} times are moved onto rank {base}'s clock")


def host_skew(rank: np.ndarray, step: np.ndarray, end: np.ndarray, what: str) -> str | None:
    """The line naming each rank whose host clock is over SKEW_NS off the lowest rank's, from the
    wall-clock ends (`end`, ns) of the steps (`step`) each rank shares with it (`what`: where they
    come from), or None. A step ends together on every rank of synchronous training (its collectives
    hold them together), so a steady offset at each shared step is the clocks'; an offset that
    grows or shrinks over the steps by more than half of itself (ranks that do not step together)
    is no clock's and not named."""
    rank, step, end = (np.asarray(a) for a in (rank, step, end))
    if len(rank) == 0:
        return None
    base = int(rank.min())
    mine = rank == base
    ends = dict(zip(step[mine].tolist(), end[mine].astype(np.float64).tolist(), strict=True))
    said = []
    for other in np.unique(rank[~mine]).tolist():
        theirs = rank == other
        off = np.array([e - ends[s] for s, e in zip(step[theirs].tolist(), end[theirs].astype(np.float64).tolist(),
                                                     strict=True) if s in ends])
        if not len(off):
            continue
        middle = float(np.median(off))
        if abs(middle) > SKEW_NS and float(off.max() - off.min()) <= abs(middle) / 2:
            said.append(f"rank {other}'s clock is {span(middle)} {'ahead of' if middle > 0 else 'behind'} "
                        f"rank {base}'s")
    if not said:
        return None
    return (f"clocks: {', '.join(said)} (from the ends of the {what} they share, which end together): wall-clock "
            "times of different ranks are not comparable; durations, each on its rank's own clock, are")
