"""A Kineto (torch.profiler) trace as the idle attribution's timeline (hpcprof.analysis.idle): the
window is the trace's `ProfilerStep#N` spans but the last (possibly cut, as HTA drops it); the
device's busy time is its kernels, memcpys and memsets (on a trace without them, the CPU ops'
outside the input spans); the host's intervals are the main thread's (the thread of the steps)
ops, annotations and runtime calls. The stack sampler's samples are put on the trace's clock with
its baseTimeNanoseconds (Kineto: epoch ns = baseTimeNanoseconds + ts x 1000)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from hpcprof.analysis import idle as I
from hpcprof.tools.torch.analysis.load import Gatherer, RankTrace, gather
from hpcprof.tools.torch.analysis.schema import Head, IdleEvent

GPU_CATS = frozenset({"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"})
HOST_CATS = frozenset({"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"})
LAUNCHES = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync",
                      "cudaMemsetAsync", "cudaGraphLaunch"})


class Span(NamedTuple):
    """One complete event ("X") the timeline reads: a step, a host op or a device op."""

    cat: Any
    name: str
    ts: float
    dur: float
    tid: Any


def _spans(events: Sequence[IdleEvent]) -> list[Span]:
    """The steps, host ops and device ops of one batch (IdleEvents.part)."""
    return [Span(e.cat, e.name, e.ts, e.dur, e.tid) for e in events
            if e.ph == "X" and e.ts is not None and e.dur is not None and e.dur == e.dur and isinstance(e.name, str)
            and (e.cat in HOST_CATS or e.cat in GPU_CATS or e.name.startswith("ProfilerStep#"))]


class IdleEvents(Gatherer):
    """The events the idle attribution's timeline is made of, gathered batch by batch (a Gatherer,
    beside the analyses' in collect's one decode), and the trace's baseTimeNanoseconds."""

    part = staticmethod(_spans)
    event = IdleEvent

    def reset(self) -> None:
        self.events: list[Span] = []
        self.base: Any = None

    def merge(self, part: list[Span]) -> None:
        self.events += part

    def head(self, head: Head) -> None:
        self.base = head.baseTimeNanoseconds

    def timeline(self, path: Path, rank: int, samples_dir: Path | None = None) -> I.Timeline:
        """The timeline of the events gathered from `path`, rank `rank`'s trace (samples_dir as timeline's)."""
        return _timeline(self.events, self.base, Path(path), rank, samples_dir)


def timeline(path: Path, rank: int | None = None, samples_dir: Path | None = None) -> I.Timeline:
    """The idle attribution's timeline of one rank's trace (a decode of its own: IdleEvents);
    `rank`: default the trace's (distributedInfo, else its file name, else 0); `samples_dir`: the
    folder of the stack sampler's rank<N>.jsonl (default: find_samples, the run's samples/ above
    the trace)."""
    events = IdleEvents()
    found = gather(path, events)
    return events.timeline(path, (found or 0) if rank is None else rank, samples_dir)


def _timeline(events: list[Span], base: Any, path: Path, rank: int, samples_dir: Path | None) -> I.Timeline:
    """The timeline of a trace's spans (file order) and baseTimeNanoseconds (IdleEvents.timeline)."""
    steps = sorted((e for e in events if e.name.startswith("ProfilerStep#")), key=lambda e: e.ts or 0.0)[:-1]
    main = steps[0].tid if steps else None
    host = [e for e in events if e.cat in HOST_CATS and e.tid == main]
    gpu = [e for e in events if e.cat in GPU_CATS]
    start = np.array([e.ts for e in host], dtype=np.float64)
    end = start + np.array([e.dur for e in host], dtype=np.float64)
    names = [e.name for e in host]
    cats = [e.cat for e in host]

    def spans(chosen: list[int]) -> I.Intervals:
        return I.intervals(start[chosen], end[chosen])

    loader = [i for i, n in enumerate(names) if n.startswith(I.INPUT_PREFIX)]
    order = np.argsort(start, kind="stable")
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    copies = []
    for i in loader:   # the batch's copy: the first op that starts after __next__ ends, if a copy
        later = order[position[i] + 1:]
        nxt = later[start[later] >= end[i]]
        if len(nxt) and names[nxt[0]] in I.COPY_OPS:
            copies.append(int(nxt[0]))
    inputs = spans(loader + copies)
    blocking = [i for i, n in enumerate(names) if n in I.SYNC_OPS]
    sync_ops = spans(blocking)
    ops = [i for i, c in enumerate(cats) if c != "user_annotation" or not names[i].startswith("ProfilerStep#")]
    host_map = {
        "input": inputs,
        "sync": I.intervals(np.concatenate([sync_ops[0], I.after(end[blocking], start[ops])[0]]),
                            np.concatenate([sync_ops[1], I.after(end[blocking], start[ops])[1]])),
        "collective": spans([i for i, n in enumerate(names) if I.COLLECTIVE_RE.search(n)]),
        "optimizer": spans([i for i, n in enumerate(names) if n.startswith(I.OPTIMIZER_PREFIXES)]),
        "launch": _issuing(start, end, cats, names),
    }
    if gpu:
        g0 = np.array([e.ts for e in gpu], dtype=np.float64)
        busy = I.intervals(g0, g0 + np.array([e.dur for e in gpu], dtype=np.float64))
    else:  # the CPU is the device: its ops, but for the input's
        cpu = [i for i, c in enumerate(cats) if c == "cpu_op"]
        busy = I.subtract(spans(cpu), inputs)
    window = (np.array([e.ts for e in steps], dtype=np.float64),
              np.array([(e.ts or 0.0) + (e.dur or 0.0) for e in steps], dtype=np.float64))
    t = I.Timeline(rank=rank, steps=window, busy=busy, host=host_map, sync_ops=sync_ops)
    t.evidence = _evidence(window, gpu, start, end, names, blocking, len(loader))
    if isinstance(base, int | float):
        found = samples_dir / f"rank{rank}.jsonl" if samples_dir else I.find_samples(path, rank)
        I.add_samples(t, found if found and found.is_file() else None, float(base))
    return t


def add_queue_length(t: I.Timeline, trace: RankTrace) -> None:
    """The launch evidence with HTA's queue length (get_queue_length_summary, over the whole trace)
    of the stream with the most launches: a median near 0 says the device drains its queue as fast
    as the host fills it."""
    from hpcprof.tools.torch.analysis.analyses import queue_length_summary

    summary = queue_length_summary([trace])
    if summary.empty or "launch" not in t.evidence:
        return
    busiest = summary.loc[summary["count"].idxmax()]
    t.evidence["launch"] += (f", queue length median {float(busiest['50%']):.3g} (HTA's, stream "
                             f"{int(busiest['stream'])}, whole trace)")


def _issuing(start: np.ndarray, end: np.ndarray, cats: list[str], names: list[str]) -> I.Intervals:
    """The host issuing work: its ops and runtime calls, joined across Python shorter than LAUNCH_GLUE_US."""
    chosen = [i for i, c in enumerate(cats) if c in ("cpu_op", "cuda_runtime", "cuda_driver")]
    s, e = I.intervals(start[chosen], end[chosen])
    if not len(s):
        return s, e
    keep = np.ones(len(s), dtype=bool)
    keep[1:] = s[1:] - e[:-1] > I.LAUNCH_GLUE_US
    first = np.flatnonzero(keep)
    return s[first], np.maximum.reduceat(e, first)


def _evidence(window: I.Intervals, gpu: list[Span], start: np.ndarray, end: np.ndarray, names: list[str],
              blocking: list[int], loader_calls: int) -> dict[str, str]:
    """What each cause's detail says: counts per step and the launch-bound comparison."""
    steps = max(len(window[0]), 1)
    lo, hi = (window[0].min(), window[1].max()) if len(window[0]) else (0.0, 0.0)
    kernels = [e for e in gpu if e.cat in ("kernel", "Kernel") and lo <= (e.ts or 0.0) < hi]
    launches = [end[i] - start[i] for i, n in enumerate(names) if n in LAUNCHES and lo <= start[i] < hi]
    evidence = {"input": f"{loader_calls / steps:.3g} DataLoader __next__ a step"}
    if blocking:
        counts = Counter(names[i] for i in blocking if lo <= start[i] < hi)
        evidence["sync"] = ", ".join(f"{n} x{c / steps:.3g}/step" for n, c in counts.most_common(3))
    if kernels:
        median_kernel = float(np.median([e.dur or 0.0 for e in kernels]))
        median_launch = float(np.median(launches)) if launches else float("nan")
        evidence["launch"] = (f"{len(kernels) / steps:.0f} kernels a step, median kernel {median_kernel:.1f} us "
                              f"against median launch {median_launch:.1f} us")
    else:
        ops = sum(1 for i, _ in enumerate(names) if lo <= start[i] < hi)
        evidence["launch"] = f"{ops / steps:.0f} host events a step (no device kernels in the trace)"
    return evidence
