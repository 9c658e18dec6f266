"""Why the device waits: each step's idle time attributed to its host-side cause, with the line of
the user's program and the fix for that cause (`hpcprof trace idle --causes`, collect, the report).

A rank's window (its measured steps) is split into the time the device runs something and its idle
time. Every idle µs gets exactly one cause, the first of CAUSES whose host-side interval covers it:

- gc: a garbage collection (the stack sampler's gc.callbacks);
- input: the DataLoader's `__next__` (torch.profiler's `enumerate(DataLoader)#...__next__`: the
  dataset's `__getitem__`, collation) and the batch's copy to the device right after it;
- sync: an op that waits for the device (`aten::item`, `aten::_local_scalar_dense`, `aten::nonzero`,
  cudaStreamSynchronize, cudaDeviceSynchronize, a blocking cudaMemcpy, ...) and the host work after
  it until the next op or launch (the device drained at the sync, it waits for that work);
- collective: a CPU-side collective or barrier (c10d, gloo, record_param_comms);
- compile: the stack sampler saw torch._dynamo / torch._inductor running;
- optimizer: the optimizer's step and zero_grad (torch.profiler's `Optimizer.step#...`);
- launch: the host issuing ops (ops and launch calls, with the Python between them when under
  LAUNCH_GLUE_US): the device runs the kernels faster than the host issues them;
- program: the rest where the stack sampler saw the program's own Python;
- unattributed: the rest, without a sample to say what ran.

The parts add up to the idle time. Each cause gets the line its samples name most often (the
innermost frame of the user's program; for sync, the samples inside the blocking op). On a trace
without device events (a CPU run) the device is the CPU: its busy time is the ops' time outside the
input spans. Columns of `attribute`: rank, steps, step_ms, idle_ms (per step), cause, ms_per_step,
pct_of_idle, pct_of_step, at (file:line:function), via (its caller), detail, fix.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

CAUSES = ("gc", "input", "sync", "collective", "compile", "optimizer", "launch", "program", "unattributed")
#: a cause is named (the verdict, the report) when it costs at least this share of the step
NAMED_PCT_OF_STEP = 5.0
#: Python between two issued ops shorter than this counts as issuing them (launch)
LAUNCH_GLUE_US = 50.0
SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::equal",
                      "aten::masked_select", "aten::unique", "aten::_unique2", "aten::tolist",
                      "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                      "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH_v2"})
COLLECTIVE_RE = re.compile(r"^(c10d::|gloo:|nccl:)|record_param_comms|barrier", re.IGNORECASE)
INPUT_PREFIX = "enumerate(DataLoader)"
COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::pin_memory", "cudaMemcpyAsync"})
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
#: the sampler's `in` -> the cause of an idle µs no host interval explains
SAMPLE_CAUSES = {"input": "input", "collective": "collective", "compile": "compile", "optimizer": "optimizer"}

Intervals = tuple[np.ndarray, np.ndarray]


@dataclass
class Timeline:
    """One rank's window (µs on one clock): steps (start, end), the device's busy intervals, the
    host's intervals per cause, the blocking ops, the stack samples and evidence for the detail."""

    rank: int
    steps: Intervals
    busy: Intervals
    host: dict[str, Intervals]
    sync_ops: Intervals
    sample_t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sample_at: list[str] = field(default_factory=list)
    sample_in: list[str] = field(default_factory=list)
    evidence: dict[str, str] = field(default_factory=dict)


def intervals(starts: object, ends: object) -> Intervals:
    """Sorted disjoint union of [start, end) intervals (empty ones dropped)."""
    s, e = np.asarray(starts, dtype=np.float64).reshape(-1), np.asarray(ends, dtype=np.float64).reshape(-1)
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > np.maximum.accumulate(e)[:-1]
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first)


def _combine(a: Intervals, b: Intervals, keep: int) -> Intervals:
    """Segments covered by a (bit 1) and b (bit 2) as `keep` says: 3 = both, 1 = a only."""
    times = np.concatenate([a[0], a[1], b[0], b[1]])
    delta = np.concatenate([np.ones(len(a[0])), -np.ones(len(a[1])), 2 * np.ones(len(b[0])), -2 * np.ones(len(b[1]))])
    if not len(times):
        return np.zeros(0), np.zeros(0)
    order = np.lexsort((delta, times))
    times, state = times[order], np.cumsum(delta[order])
    chosen = np.flatnonzero((state[:-1] == keep) & (np.diff(times) > 0))
    return intervals(times[chosen], times[chosen + 1])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    return _combine(a, b, 3)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    return _combine(a, b, 1)


def length(a: Intervals) -> float:
    return float((a[1] - a[0]).sum())


def _inside(t: np.ndarray, a: Intervals) -> np.ndarray:
    """Whether each time lies in one of the disjoint intervals `a`."""
    if not len(a[0]):
        return np.zeros(len(t), dtype=bool)
    i = np.searchsorted(a[0], t, side="right") - 1
    return (i >= 0) & (t < a[1][np.maximum(i, 0)])


def after(ends: np.ndarray, starts: np.ndarray) -> Intervals:
    """[end, the first of `starts` after it) for each end: the host work after a blocking op."""
    ordered = np.sort(starts)
    i = np.searchsorted(ordered, ends, side="right")
    has = i < len(ordered)
    return intervals(ends[has], ordered[i[has]])


def _parts(t: Timeline) -> dict[str, Intervals]:
    """Each cause's idle intervals: every idle µs of the window under exactly one cause."""
    window = intervals(*t.steps)
    rest = subtract(window, t.busy)
    parts: dict[str, Intervals] = {}
    for cause in CAUSES[:-2]:
        cover = t.host.get(cause, (np.zeros(0), np.zeros(0)))
        parts[cause] = intersect(rest, cover)
        rest = subtract(rest, cover)
    # what no host interval covers: the sampler's samples in each piece say what ran there
    program: list[tuple[float, float]] = []
    unattributed: list[tuple[float, float]] = []
    extra: dict[str, list[tuple[float, float]]] = {}
    for s, e in zip(*rest, strict=True):
        inside = np.flatnonzero((t.sample_t >= s) & (t.sample_t < e))
        if not len(inside):
            unattributed.append((s, e))
            continue
        kinds = Counter(SAMPLE_CAUSES.get(t.sample_in[i], "program") for i in inside)
        cause = kinds.most_common(1)[0][0]
        (program if cause == "program" else extra.setdefault(cause, [])).append((s, e))
    for cause, pieces in extra.items():
        parts[cause] = intervals(np.concatenate([parts[cause][0], [p[0] for p in pieces]]),
                                 np.concatenate([parts[cause][1], [p[1] for p in pieces]]))
    parts["program"] = intervals([p[0] for p in program], [p[1] for p in program])
    parts["unattributed"] = intervals([p[0] for p in unattributed], [p[1] for p in unattributed])
    return parts


def _lines(t: Timeline, where: Intervals) -> tuple[str, str]:
    """(the innermost user frame its samples in `where` name most often, that frame's caller)."""
    chains = [t.sample_at[i] for i in np.flatnonzero(_inside(t.sample_t, where)) if t.sample_at[i]]
    if not chains:
        return "", ""
    at = Counter(c.split(";")[0] for c in chains).most_common(1)[0][0]
    callers = Counter(c.split(";")[1] for c in chains if c.split(";")[0] == at and ";" in c)
    return at, callers.most_common(1)[0][0] if callers else ""


def _cause_line(t: Timeline, cause: str, where: Intervals) -> tuple[str, str]:
    """A cause's line and caller: its samples' in `where` (its idle), for sync those inside the
    blocking ops first (the line that blocks, not the host work after it)."""
    at, via = _lines(t, t.sync_ops) if cause == "sync" and len(t.sync_ops[0]) else ("", "")
    return (at, via) if at else _lines(t, where)


@dataclass(frozen=True)
class Split:
    """One timeline's idle split under its causes (all CAUSES, in order): each cause's intervals and
    its line and caller; `attribute` and `typical_step` read the same split."""

    parts: dict[str, Intervals]
    lines: dict[str, tuple[str, str]]


def split(t: Timeline) -> Split:
    """The timeline's idle under its causes, with each cause's line (computed once per timeline)."""
    parts = _parts(t)
    return Split(parts, {cause: _cause_line(t, cause, where) for cause, where in parts.items()})


def _splits(timelines: list[Timeline], splits: list[Split] | None) -> list[Split]:
    """`splits` (one per timeline, from `split`), or the timelines split here."""
    if splits is None:
        return [split(t) for t in timelines]
    if len(splits) != len(timelines):
        raise ValueError(f"{len(splits)} splits for {len(timelines)} timelines")
    return splits


def fix(cause: str, ms: float, at: str, evidence: dict[str, str]) -> str:
    """The fix for a cause, its saving bounded by the idle it can remove (`ms` per step)."""
    where = f" at {short(at)}" if at else ""
    bound = f"saves up to {ms:.1f} ms/step"
    return {
        "gc": f"gc.freeze() after start-up or gc.disable() in the loop with gc.collect() between epochs: {bound}",
        "input": f"DataLoader(num_workers=N, pin_memory=True, prefetch_factor=2..4, persistent_workers=True) or move "
                 f"the work{where} out of the step: {bound}",
        "sync": f"move or remove the blocking call{where} (log every N steps, keep values on the device, "
                f"non_blocking copies): {bound}",
        "collective": f"overlap or remove the CPU-side collective/barrier{where}: {bound}",
        "compile": f"compile once before the measured steps (warm up, mark dynamic shapes): {bound}",
        "optimizer": f"a fused or foreach optimizer (fused=True), zero_grad(set_to_none=True): {bound}",
        "launch": f"CUDA graphs (torch.compile mode='reduce-overhead') or fusion (torch.compile): "
                  f"{evidence.get('launch', '')}; {bound}",
        "program": f"move the Python{where} out of the step or onto a thread: {bound}",
        "unattributed": "no host interval or sample explains it (turn the stack sampler on: profile.window.stack_sample_ms: 5)",
    }[cause]


def attribute(timelines: list[Timeline], splits: list[Split] | None = None) -> pd.DataFrame:
    """One row per rank and cause (all CAUSES, in order): its idle ms per step, its share of the idle
    and of the step, its line and caller, the evidence and the fix. ms_per_step over causes adds up
    to idle_ms. `splits`: the timelines' splits where the caller has them (`split`)."""
    import pandas as pd

    rows = []
    for t, cut in zip(timelines, _splits(timelines, splits), strict=True):
        steps = len(t.steps[0])
        if not steps:
            continue
        step_us = length(intervals(*t.steps))
        idle_us = sum(length(p) for p in cut.parts.values())
        for cause in CAUSES:
            us = length(cut.parts[cause])
            at, via = cut.lines[cause]
            ms = us / steps / 1000
            rows.append({"rank": t.rank, "steps": steps, "step_ms": step_us / steps / 1000,
                         "idle_ms": idle_us / steps / 1000, "cause": cause, "ms_per_step": ms,
                         "pct_of_idle": 100 * us / idle_us if idle_us else 0.0,
                         "pct_of_step": 100 * us / step_us if step_us else 0.0, "at": at, "via": via,
                         "detail": t.evidence.get(cause, ""), "fix": fix(cause, ms, at, t.evidence)})
    return pd.DataFrame(rows, columns=["rank", "steps", "step_ms", "idle_ms", "cause", "ms_per_step", "pct_of_idle",
                                       "pct_of_step", "at", "via", "detail", "fix"])


def named(frame: pd.DataFrame) -> pd.DataFrame:
    """The causes that limit: not unattributed, costing at least NAMED_PCT_OF_STEP % of the step;
    largest first."""
    chosen = frame[(frame["cause"] != "unattributed") & (frame["pct_of_step"] >= NAMED_PCT_OF_STEP)]
    return chosen.sort_values("ms_per_step", ascending=False, kind="stable")


def read_samples(path: Path) -> tuple[np.ndarray, list[str], list[str], np.ndarray]:
    """The stack sampler's file (hpcprof/inject/_hpcprof_sampler.py): sample times (epoch ns), their
    user frames, what each stack ran, and the garbage collections (start, end epoch ns; shape n x 2).
    A damaged line is skipped (a rank killed while writing leaves its last line cut)."""
    import json

    times: list[int] = []
    at: list[str] = []
    kinds: list[str] = []
    collections: list[list[int]] = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
            if "gc_ns" in row:
                collections.append([int(row["gc_ns"][0]), int(row["gc_ns"][1])])
            else:
                times.append(int(row["t_ns"]))
                at.append(str(row.get("at") or ""))
                kinds.append(str(row.get("in") or ""))
        except (ValueError, TypeError, KeyError, IndexError):
            continue
    return (np.array(times, dtype=np.int64), at, kinds,
            np.array(collections, dtype=np.int64).reshape(-1, 2))


def find_samples(trace: Path, rank: int) -> Path | None:
    """The stack samples of `rank` for a profile file: `samples/rank{R}.jsonl` in the run directory,
    looked for in the profile's folder and up to three folders above it."""
    for folder in [trace.parent, *trace.parents[1:4]]:
        candidate = folder / "samples" / f"rank{rank}.jsonl"
        if candidate.is_file():
            return candidate
    return None


def add_samples(t: Timeline, path: Path | None, offset_ns: float) -> None:
    """Put the sampler's samples and garbage collections on the timeline's clock: µs = (epoch ns -
    offset_ns) / 1000."""
    if path is None:
        return
    times, at, kinds, collections = read_samples(path)
    order = np.argsort(times, kind="stable")
    t.sample_t = (times[order] - offset_ns) / 1000
    t.sample_at = [at[i] for i in order]
    t.sample_in = [kinds[i] for i in order]
    t.host["gc"] = intervals((collections[:, 0] - offset_ns) / 1000, (collections[:, 1] - offset_ns) / 1000)


def typical_step(timelines: list[Timeline], splits: list[Split] | None = None) -> pd.DataFrame:
    """One step of each rank, the one of median length: the device's busy intervals and each idle
    gap under its cause (the same split as `attribute`), labelled with the cause's line, in ms from
    the step's start. Columns rank, kind (`device` or `idle`), range, start_ms, end_ms. `splits`:
    the timelines' splits where the caller has them (`split`)."""
    import pandas as pd

    rows = []
    for t, cut in zip(timelines, _splits(timelines, splits), strict=True):
        if not len(t.steps[0]):
            continue
        spans = t.steps[1] - t.steps[0]
        i = int(np.argsort(spans, kind="stable")[(len(spans) - 1) // 2])
        step = intervals([t.steps[0][i]], [t.steps[1][i]])
        origin = float(t.steps[0][i])
        parts = {"device busy": intersect(t.busy, step)}
        for cause, where in cut.parts.items():
            at, _ = cut.lines[cause]
            parts[f"idle: {cause}" + (f" at {short(at)}" if at else "")] = intersect(where, step)
        for label, (starts, ends) in parts.items():
            rows += [{"rank": t.rank, "kind": "device" if label == "device busy" else "idle", "range": label,
                      "start_ms": (s - origin) / 1000, "end_ms": (e - origin) / 1000}
                     for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    return pd.DataFrame(rows, columns=["rank", "kind", "range", "start_ms", "end_ms"])


def line_time(timelines: list[Timeline]) -> pd.DataFrame:
    """Per rank and line of the program (the innermost user frame the stack samples name), the time a
    step spends there over the window's steps, busy or idle: its samples in the steps times the
    samples' median spacing, per step. Columns rank, at, ms_per_step; none without samples."""
    import pandas as pd

    rows = []
    for t in timelines:
        steps = len(t.steps[0])
        if not steps or len(t.sample_t) < 2:
            continue
        spacing_us = float(np.median(np.diff(t.sample_t)))
        inside = np.flatnonzero(_inside(t.sample_t, intervals(*t.steps)))
        counts = Counter(t.sample_at[i].split(";")[0] for i in inside.tolist() if t.sample_at[i])
        rows += [{"rank": t.rank, "at": at, "ms_per_step": n * spacing_us / steps / 1000} for at, n in counts.items()]
    return pd.DataFrame(rows, columns=["rank", "at", "ms_per_step"])


def across_ranks(frame: pd.DataFrame) -> pd.DataFrame:
    """The named causes over ranks: per cause the mean ms per step and % of idle, and the line, detail
    and fix of the rank where it costs most; largest first (the report's verdict, compare)."""
    import pandas as pd

    chosen = frame[frame["cause"].isin(named(frame)["cause"])]
    if chosen.empty:
        return pd.DataFrame(columns=["cause", "ms_per_step", "pct_of_idle", "pct_of_step", "at", "via", "detail", "fix"])
    means = chosen.groupby("cause", sort=False)[["ms_per_step", "pct_of_idle", "pct_of_step"]].mean()
    worst = chosen.loc[chosen.groupby("cause", sort=False)["ms_per_step"].idxmax(), ["cause", "at", "via", "detail"]]
    out = means.reset_index().merge(worst, on="cause")
    out = out[out["pct_of_step"] >= NAMED_PCT_OF_STEP]
    out["fix"] = [fix(r.cause, r.ms_per_step, r.at, {r.cause: r.detail}) for r in out.itertuples()]
    return pd.DataFrame(out).sort_values("ms_per_step", ascending=False, kind="stable", ignore_index=True)


def short(at: str) -> str:
    """`data.py:41 in __getitem__` of a sampler frame `/path/to/data.py:41:__getitem__`."""
    path, _, rest = at.rpartition("/")[2].partition(":")
    line, _, function = rest.partition(":")
    return f"{path}:{line} in {function}" if function else at
