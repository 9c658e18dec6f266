"""Steps found in a trace that carries no marks (no hpcprof, NVTX iteration or ProfilerStep ranges):
the iterations read from one rank's kernels in launch order, or the reason none are claimed.

* `optimizer` (a training loop): the optimizer's kernels (category `optimizer`: foreach/fused
  Adam, AdamW, SGD and what runs with them) come in one burst per step; a step runs from the
  kernel after one burst to the end of the next (or over its last kernels, as many as a typical
  step holds, where more ran between: an evaluation, the set-up before the first step).
* `sequence` (a loop without optimizer kernels: inference, a benchmark): the kernel names repeat
  with a period P, found from the names whose occurrences are P kernels apart (at least REGULAR
  of their spacings) and checked on the whole sequence (at least PERIODIC of the kernels equal the
  kernel P later). A step starts at each occurrence of the first name, once per period, from where
  a whole period first repeats (the loop's first iteration, past the set-up); it ends at the next
  occurrence, or P kernels later where that is farther by more than a tenth of P (kernels
  between iterations: a barrier, the teardown).

The first steps found are the program's warm-up (compilation, autotuning, the communicators' set-up,
the allocator's growth), which the start-up hook leaves out of its window: as many as its default
`profile.window.skip_steps` are left out here too, fewer where that would leave under MIN_STEPS; the
steps kept are numbered from the capture's first step found (0), so the first kept one's number is
the count left out.

A step is kept when its kernels (names and counts) are at least SIMILAR to those of the typical
step (the one of median length); at least MIN_STEPS must be kept. Refused: too few kernels, no
repeating sequence, fewer than MIN_STEPS steps alike (by kernels, and by GPU span: within SPAN_FACTOR
of the median step's; a program that hung mid-step has a last "step" that is the wait), and
backward kernels without optimizer
kernels (a training loop whose optimizer runs no kernel hpcprof knows: its repeating unit may be a
layer, not a step). A single pass of a deep model without backward repeats its layers, which
`sequence` cannot tell from steps: mark such programs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hpcprof.analysis.categories import Categories
from hpcprof.analysis.ranges import range_reduce
from hpcprof.config.profile import WindowConfig

if TYPE_CHECKING:
    import pandas as pd

    from hpcprof.analysis.collector import Log, ReadTable
    from hpcprof.run.results import Metric

MIN_STEPS = 3
#: the warm-up steps left out: the start-up hook's default (profile.window.skip_steps)
WARMUP_STEPS = WindowConfig().skip_steps
#: a step whose GPU span is more than this many times the median step's is not alike (the wait of a hang)
SPAN_FACTOR = 2.0
#: optimizer kernels more than this many kernels apart (or half the widest spacing, if less, but more
#: than 4) belong to two bursts (two steps)
BURST_GAP = 16
#: a kept step shares at least this fraction of its kernels (by name and count) with the typical step
SIMILAR = 0.9
#: without an optimizer, at least this fraction of the kernels equals the kernel one period later
PERIODIC = 0.5
#: a name is a period candidate when at least this fraction of its spacings are its most common one
REGULAR = 0.8
#: kernels of a backward pass (autograd's, cuDNN's, the attention kernels' backward)
BACKWARD = re.compile(r"(?i)backward|_bwd|bwd_|_bw_|grad_input|grad_weight|GammaBeta|wgrad|dgrad|cutlassB")
#: how each method is said (the window's label is `detected:<method>`)
METHODS = {"optimizer": "optimizer kernel period", "sequence": "kernel sequence period"}
PREFIX = "detected:"


@dataclass(frozen=True)
class Steps:
    """The steps found past the warm-up: step i holds kernels starts[i] .. stops[i] - 1 of the
    sequence, and is the capture's step `first` + i (the first `first` found were the warm-up)."""

    method: str
    starts: np.ndarray
    stops: np.ndarray
    first: int = 0

    @property
    def label(self) -> str:
        """The window's name: `detected:optimizer` or `detected:sequence`."""
        return PREFIX + self.method


def find_steps(names: np.ndarray, categories: Categories) -> Steps | str:
    """The steps of one rank's kernels (`names` in launch order), or why none are claimed."""
    import pandas as pd

    if len(names) < 2 * MIN_STEPS:
        return f"{len(names)} kernels: too few to see a period"
    codes, uniques = pd.factorize(np.asarray(names, dtype=object), use_na_sentinel=False)
    uniques = np.asarray(uniques, dtype=object)
    optimizer = (categories.of(uniques) == "optimizer")[codes]
    if optimizer.any():
        found = _optimizer_steps(codes, optimizer)
    elif any(BACKWARD.search(str(u)) for u in uniques.tolist()):
        return "backward kernels but no optimizer kernels: a repeating unit may be a layer, not a step"
    else:
        found = _sequence_steps(codes)
    if isinstance(found, str):
        return found
    skip = min(WARMUP_STEPS, len(found.starts) - MIN_STEPS)
    return Steps(found.method, found.starts[skip:], found.stops[skip:], skip)


def _optimizer_steps(codes: np.ndarray, optimizer: np.ndarray) -> Steps | str:
    """Steps that end with a burst of optimizer kernels: each stretch from the end of one burst (the
    capture's start, for the first) to the end of the next, or its last kernels, as many as a
    typical step holds, where the stretch holds more (an evaluation, the set-up before the step)."""
    at = np.flatnonzero(optimizer)
    gaps = np.diff(at)
    apart = gaps > max(4, min(BURST_GAP, gaps.max(initial=0) / 2))      # short steps: bursts fewer apart
    ends = np.append(at[np.flatnonzero(apart)], at[-1]) + 1
    if len(ends) < 2:
        return "one optimizer step in the capture: no period to see"
    typical = int(np.median(np.diff(ends)))
    stops = ends.astype(np.int64)
    whole = np.append(0, stops[:-1])
    tail = np.maximum(stops - typical, whole)
    alike_whole, alike_tail = _alike(codes, whole, stops), _alike(codes, tail, stops)
    keep = alike_whole | alike_tail
    starts = np.where(alike_whole, whole, tail)[keep]
    stops = stops[keep]
    if len(starts) < MIN_STEPS:
        return f"{len(starts)} optimizer steps alike: fewer than {MIN_STEPS}"
    return Steps("optimizer", starts, stops)


def _sequence_steps(codes: np.ndarray) -> Steps | str:
    """Steps of a repeating kernel sequence (no optimizer kernels)."""
    n = len(codes)
    period, anchors = _period(codes)
    if period is None:
        return "no repeating kernel sequence"
    same = codes[:-period] == codes[period:]
    if same.mean() < PERIODIC:
        return f"no repeating kernel sequence (at best {100 * same.mean():.0f} % of the kernels repeat)"
    repeated = np.concatenate(([0], np.cumsum(same)))
    whole = np.flatnonzero(repeated[period:] - repeated[:-period] == period)
    begin = int(whole[0]) if len(whole) else 0                 # where a whole period first repeats
    at_anchor = np.flatnonzero(np.isin(codes, anchors) & (np.arange(n) >= begin))
    if not len(at_anchor):
        return "no repeating kernel sequence"
    anchor = codes[at_anchor[0]]
    starts = np.flatnonzero((codes == anchor) & (np.arange(n) >= begin))
    following = np.append(starts[1:], n + period)
    stops = np.where(np.abs(following - starts - period) <= period // 10, following, starts + period)
    inside = stops <= n
    starts, stops = starts[inside], stops[inside]
    kept = _alike(codes, starts, stops)
    starts, stops = starts[kept], stops[kept]
    if len(starts) < MIN_STEPS:
        return f"{len(starts)} repeats of the kernel sequence alike: fewer than {MIN_STEPS}"
    return Steps("sequence", starts.astype(np.int64), stops.astype(np.int64))


def _period(codes: np.ndarray) -> tuple[int | None, np.ndarray]:
    """The sequence's period (the shortest candidate repeating nearly as well as the best) and the
    names that come once per period; (None, []) without a candidate."""
    n = len(codes)
    order = np.argsort(codes, kind="stable")
    code = codes[order]
    same = code[1:] == code[:-1]
    spacing, owner = np.diff(order)[same], code[1:][same]
    if not len(spacing):
        return None, np.empty(0, dtype=np.int64)
    pairs, count = np.unique(owner.astype(np.int64) * (n + 1) + spacing, return_counts=True)
    pair_code, pair_spacing = pairs // (n + 1), pairs % (n + 1)
    spacings = np.bincount(owner, minlength=int(codes.max()) + 1)
    best = np.lexsort((-count, pair_code))                   # per name: its most common spacing first
    first = best[np.flatnonzero(np.r_[True, pair_code[best][1:] != pair_code[best][:-1]])]
    regular = (count[first] >= REGULAR * spacings[pair_code[first]]) & (spacings[pair_code[first]] >= MIN_STEPS - 1)
    candidates = np.unique(pair_spacing[first][regular])
    if not len(candidates):
        return None, np.empty(0, dtype=np.int64)
    repeat = np.array([np.mean(codes[:-p] == codes[p:]) if p < n else 0.0 for p in candidates.tolist()])
    period = int(candidates[np.flatnonzero(repeat >= repeat.max() - 0.05)[0]])
    return period, pair_code[first][regular & (pair_spacing[first] == period)]


def _alike(codes: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Whether each step [start, stop) holds at least SIMILAR of the typical step's kernels (by
    name and count, over the longer of the two); the typical step is the one of median length."""
    length = stops - starts
    if not len(length):
        return np.zeros(0, dtype=bool)
    typical = int(np.argsort(length, kind="stable")[(len(length) - 1) // 2])
    width = int(codes.max()) + 1
    reference = np.bincount(codes[starts[typical]:stops[typical]], minlength=width)
    shared = np.array([np.minimum(np.bincount(codes[a:b], minlength=width), reference).sum()
                       for a, b in zip(starts.tolist(), stops.tolist(), strict=True)])
    return shared >= SIMILAR * np.maximum(length, length[typical])


def project(steps: Steps, kernel_launch: np.ndarray, launch: np.ndarray, start: np.ndarray,
            end: np.ndarray) -> dict[str, np.ndarray]:
    """Each step on the host and on the GPU, as an NVTX range or a ProfilerStep is projected:
    cpu_start, cpu_end (from the launch of its first kernel to that of the next step's first kernel,
    or just past its own last kernel's where no step follows at once) and start, end (first start,
    last end of the GPU operations launched in that interval). `kernel_launch`: the launch times of
    the sequence's kernels; `launch`, `start`, `end`: of every GPU operation of the process (NaN
    launch: unknown, never inside a step)."""
    cpu_start = kernel_launch[steps.starts]
    follows = np.isin(steps.stops, steps.starts)
    last = kernel_launch[steps.stops - 1]
    past = np.nextafter(last, np.inf) if np.issubdtype(last.dtype, np.floating) else last + 1
    cpu_end = np.where(follows, kernel_launch[np.where(follows, steps.stops, 0)], past)
    by_launch = np.argsort(launch, kind="stable")
    times = launch[by_launch]
    lo, hi = np.searchsorted(times, cpu_start, "left"), np.searchsorted(times, cpu_end, "left")
    return {"start": range_reduce(start[by_launch], lo, hi, np.minimum, 0),
            "end": range_reduce(end[by_launch], lo, hi, np.maximum, 0), "cpu_start": cpu_start, "cpu_end": cpu_end}


def uneven(start: np.ndarray, end: np.ndarray) -> str | None:
    """Why projected steps (their GPU start and end) are not a loop of alike steps: fewer than
    MIN_STEPS of them span at most SPAN_FACTOR times the median step's span; None when they are."""
    span = (end - start).astype(np.float64)
    alike = int((span <= SPAN_FACTOR * float(np.median(span))).sum()) if len(span) else 0
    return (f"{alike} steps within {SPAN_FACTOR:g}x the median step's GPU span: fewer than {MIN_STEPS}"
            if alike < MIN_STEPS else None)


def describe(label: str, iterations: int, cv_pct: float | None = None, warmup: int = 0) -> str:
    """How a window was found, in words: `detected: optimizer kernel period, 12 steps after 5 of
    warm-up, CV 3.1 %`, `ProfilerStep marks, 3 steps`, `NVTX ranges (timed), 100 iterations`,
    `capture (no marks; no clear period)`."""
    if label.startswith(PREFIX):
        method = METHODS.get(label[len(PREFIX):], label[len(PREFIX):])
        cv = f", CV {cv_pct:.1f} %" if cv_pct is not None else ""
        left_out = f" after {warmup} of warm-up" if warmup else ""
        return f"detected: {method}, {iterations} steps{left_out}{cv}"
    if label == "ProfilerStep":
        return f"ProfilerStep marks, {iterations} steps"
    if label.startswith("nvtx:"):
        return f"NVTX ranges ({label[len('nvtx:'):]}), {iterations} iterations"
    return "capture (no marks; no clear period)"


def step_cv(iterations: pd.DataFrame | None) -> float | None:
    """The coefficient of variation (%) of the steps' GPU time, per rank, the largest over ranks;
    None with fewer than two steps on every rank."""
    if iterations is None or iterations.empty:
        return None
    per = iterations.groupby("rank")["gpu_ns"].agg(["mean", "std", "size"])
    per = per[(per["size"] > 1) & (per["mean"] > 0)]
    return float((100.0 * per["std"] / per["mean"]).max()) if len(per) else None


def window_source_metrics(window: pd.DataFrame | None, iterations: pd.DataFrame | None) -> list[Metric]:
    """`window.detected` (1: the steps were found in the kernels, the trace carrying no marks; 0:
    marks, or the whole capture) and `window.step_cv` (%, step_cv), from a `<tool>_window` and
    `<tool>_iterations` table."""
    if window is None or window.empty:
        return []
    out: list[Metric] = [("window.detected", float(window["window"].astype(str).str.startswith(PREFIX).any()), "")]
    cv = step_cv(iterations)
    return out + ([("window.step_cv", cv, "%")] if cv is not None else [])


def window_note(read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    """collect's line saying how the run's window was found (a reducer: it makes no table), e.g.
    `window: detected: optimizer kernel period, 12 steps, CV 3.1 % (ranks 0-1)`."""
    window = read("window")
    if window is None or window.empty:
        return {}
    iterations = read("iterations")
    for label, ranks in window.groupby(window["window"].astype(str))["rank"]:
        counts = sorted({int(n) for n in window.loc[ranks.index, "iterations"]})
        mine = iterations[iterations["rank"].isin(ranks)] if iterations is not None else None
        detected = str(label).startswith(PREFIX)
        warmup = int(mine["iteration"].min()) if detected and mine is not None and len(mine) else 0
        text = describe(str(label), counts[0], step_cv(mine) if detected else None, warmup)
        if len(counts) > 1:
            text = text.replace(f" {counts[0]} ", f" {counts[0]}-{counts[-1]} ", 1)
        log(f"window: {text} (ranks {_ranks(sorted(int(r) for r in ranks))})")
    return {}


def _ranks(ranks: list[int]) -> str:
    """`0-3` for consecutive ranks, else `0, 2, 5`."""
    return f"{ranks[0]}-{ranks[-1]}" if len(ranks) > 1 and ranks[-1] - ranks[0] == len(ranks) - 1 \
        else ", ".join(map(str, ranks))
