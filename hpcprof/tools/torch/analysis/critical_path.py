"""The critical path across ranks from torch.profiler (Kineto) traces (see hpcprof.analysis.critical_path).

Per trace: the GPU operations (kernels, memcpys, memsets) with the start of their launching CUDA
call (same `correlation`), the `nccl*` kernels as collectives (channel: the process group,
`args["Process Group Name"]` with its `"Process Group Ranks"`, so that disjoint subgroups of the same
name are told apart, else the stream in order of first use; seq: the collective's sequence
number, `args["Seq"]`/`args["seq"]`, where the trace has one, else launch order in the iteration),
the iterations (the `ProfilerStep#N` annotations, numbered N) and the other CPU `user_annotation`
ranges inside them as phases (seqpar's `matmul2`, ddp's `backward`). CPU ranks' gloo collectives
(`gloo:all_reduce` ... annotations, no GPU event) are collectives too, on a host stream: their
lead has no GPU work, so a rank that held one was late on its host. Times are converted to ns.
A trace is decoded once, streaming, against schema.Event (the fields of both): `CriticalPathEvents.add`
takes its batches beside load's TraceColumns (trace/collect.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hpcprof.analysis.busbw import collective_type
from hpcprof.analysis.clocks import clock_problem
from hpcprof.analysis.critical_path import (  # noqa: F401  (re-exported for collect and the report)
    EVENTS_TABLE,
    collect_tables,
    critical_path,
    critical_path_sentence,
    empty_events,
)
from hpcprof.analysis.critical_path import rank_events as events_of_rank
from hpcprof.analysis.nccl import collective_kind
from hpcprof.tools.torch.analysis.load import KINETO_SLACK_NS, Gatherer, TraceError, gather, map_traces
from hpcprof.tools.torch.analysis.schema import Event

STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")
#: gloo's collectives (CPU ranks): `gloo:all_reduce` ... annotations on its worker thread, whose time
#: includes the wait for the last rank as an NCCL kernel's does; taken as collectives on HOST_STREAM
GLOO, HOST_STREAM = "gloo:", -2
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_READ_CATS = (*GPU_CATS, "cuda_runtime", "cuda_driver", "user_annotation")


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return -1


#: a time in ns: an int, or an infinite float (which the clock check refuses)
Ns = int | float


def _ns(us: Any) -> Ns:
    """A Kineto time (µs, an int or a float) in whole ns, exactly: whole µs and the fraction apart (µs
    since the epoch are past 2**53 in ns, where float64 is off by up to 128 ns). An infinite time stays
    as it is (the clock check names it)."""
    if type(us) is int:
        return us * 1000
    if not math.isfinite(us):
        return float(us)
    whole = int(us)                 # the fraction left, us - whole, is exact (negative below zero)
    return whole * 1000 + round((us - whole) * 1000)


def _host_key(start: Ns) -> int:
    """The correlation key of a gloo collective (below every real one, which are >= 0): from its start."""
    return -2 - int(start) if isinstance(start, int) else -1


def _kind(name: str) -> str:
    """The collective of an NCCL kernel or a gloo annotation (`gloo:all_reduce`: AllReduce), else `other`."""
    if name.startswith(GLOO):
        return collective_type(name[len(GLOO):]) or "other"
    return collective_kind(name) or "other"


def batch_events(events: list[Event]) -> tuple[list[tuple[Any, ...]], dict[int, Ns], list[tuple[int, Ns, Ns]],
                                                list[tuple[str, Ns, Ns]]]:
    """The critical path's events of one batch: its GPU operations, the launch time of each
    correlation id, its iterations and its phases (CriticalPathEvents' lists)."""
    gpu: list[tuple[Any, ...]] = []
    launch: dict[int, Ns] = {}
    steps: list[tuple[int, Ns, Ns]] = []
    ranges: list[tuple[str, Ns, Ns]] = []
    for e in events:
        if e.cat not in _READ_CATS or e.ts is None or e.dur is None or math.isnan(e.dur):
            continue  # most events (cpu_op, flows) end at the first test
        a = e.args
        if e.cat in GPU_CATS and a is not None:
            name = str(e.name)
            nccl = name.startswith("nccl")
            seq = _int(a.Seq if a.Seq is not None else a.seq) if nccl else -1
            group = f"pg {a.group} {a.members or ''}".strip() if nccl and a.group is not None else None
            gpu.append((_ns(e.ts), _ns(e.ts + e.dur), _int(a.stream), _int(a.correlation), name, group, seq))
        elif e.cat in ("cuda_runtime", "cuda_driver") and a is not None and _int(a.correlation) >= 0:
            launch[_int(a.correlation)] = _ns(e.ts)
        elif e.cat == "user_annotation":
            m = STEP.fullmatch(str(e.name))
            if m:
                steps.append((int(m.group(1)), _ns(e.ts), _ns(e.ts + e.dur)))
            elif str(e.name).startswith(GLOO):      # a CPU collective: launched where it starts
                start = _ns(e.ts)
                gpu.append((start, _ns(e.ts + e.dur), HOST_STREAM, _host_key(start), str(e.name), None, -1))
                launch[_host_key(start)] = start
            else:
                ranges.append((str(e.name), _ns(e.ts), _ns(e.ts + e.dur)))
    return gpu, launch, steps, ranges


class CriticalPathEvents(Gatherer):
    """The critical path's events of one trace, gathered batch by batch (a Gatherer:
    batch_events); `frame` turns them into the rank's events table."""

    part = staticmethod(batch_events)

    def reset(self) -> None:
        self.gpu: list[tuple[Any, ...]] = []
        self.launch: dict[int, Ns] = {}
        self.steps: list[tuple[int, Ns, Ns]] = []
        self.ranges: list[tuple[str, Ns, Ns]] = []

    def merge(self, part: tuple[list[tuple[Any, ...]], dict[int, Ns], list[tuple[int, Ns, Ns]],
                                list[tuple[str, Ns, Ns]]]) -> None:
        """Keep one batch's events (the batches in file order: a later launch of a correlation id wins)."""
        gpu, launch, steps, ranges = part
        self.gpu += gpu
        self.launch.update(launch)
        self.steps += steps
        self.ranges += ranges

    def frame(self, path: Path, rank: int | None) -> pd.DataFrame:
        """The rank's events table (critical_path.rank_events, given numpy columns). TraceError: no
        GPU operation."""
        if not self.gpu:
            raise TraceError(f"{path}: no GPU events (kernel, gpu_memcpy, gpu_memset) nor gloo collectives")
        start, end, stream, corr, name, group, seq = (np.array(c, dtype=object) for c in zip(*self.gpu, strict=True))
        stream, corr = stream.astype(np.int64), corr.astype(np.int64)
        codes, names = pd.factorize(name)                  # a regex per kernel name, not per kernel
        self._check_clocks(path, start, end, corr, codes, names)
        start = start.astype(np.int64)
        nccl_name = np.array([n.startswith(("nccl", GLOO)) for n in names.tolist()], dtype=bool)
        nccl = nccl_name[codes]
        kinds = [_kind(n) if is_nccl else None for n, is_nccl in zip(names.tolist(), nccl_name.tolist(), strict=True)]
        # NCCL streams named in order of first start (equal starts: by stream number)
        streams, which = np.unique(stream[nccl], return_inverse=True)
        first = np.full(len(streams), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, which.reshape(-1), start[nccl])
        stream_names = {s: f"stream{i}" for i, s in enumerate(streams[np.argsort(first, kind="stable")].tolist())}
        distinct, at_stream = np.unique(stream, return_inverse=True)
        by_stream = np.array([stream_names.get(s, np.nan) for s in distinct.tolist()], dtype=object)[at_stream.reshape(-1)]
        ops = {"start": start, "end": end.astype(np.int64), "stream": stream, "name": name,
               "launch": self._launch(corr), "collective": np.array(kinds, dtype=object)[codes],
               "channel": np.where(pd.notna(group), group, by_stream), "seq": seq.astype(np.int64)}
        steps = np.array(self.steps, dtype=np.int64).reshape(-1, 3)
        ranges = list(zip(*self.ranges, strict=True)) or [(), (), ()]
        return events_of_rank(0 if rank is None else rank, ops,
                              {"number": steps[:, 0], "start": steps[:, 1], "end": steps[:, 2]},
                              {"name": np.array(ranges[0], dtype=object), "start": np.array(ranges[1], dtype=np.int64),
                               "end": np.array(ranges[2], dtype=np.int64)})

    def _check_clocks(self, path: Path, start: np.ndarray, end: np.ndarray, corr: np.ndarray, codes: np.ndarray,
                      names: pd.Index) -> None:
        """TraceError where the times (ns, Python ints) of the GPU events, or of the CPU calls and
        annotations, cannot be believed (clocks.clock_problem: before 0, out of range, ending before
        they start, a GPU clock off the launches' CPU clock), before they are made int64 (a time past
        int64 would not be one)."""
        try:
            start_f, end_f, launch = start.astype(np.float64), end.astype(np.float64), self._launch(corr, np.float64)
            marks = np.array([(s, e) for _, s, e in self.steps] + [(s, e) for _, s, e in self.ranges]
                             + [(t, t) for t in self.launch.values()], dtype=np.float64).reshape(-1, 2)
        except OverflowError:       # past float64 (1e308)
            raise TraceError(f"{path}: timestamps out of range: the clock is damaged") from None
        kind = np.array(["memcpy" if n.startswith("Memcpy") else "memset" if n.startswith("Memset") else "kernel"
                         for n in names.tolist()], dtype=object)[codes]
        problem = clock_problem(start_f, end_f, 1.0, KINETO_SLACK_NS, np.where(launch >= 0, launch, np.nan), kind,
                                what="GPU events") or \
            clock_problem(marks[:, 0], marks[:, 1], 1.0, KINETO_SLACK_NS, what="CPU events")
        if problem is not None:
            raise TraceError(f"{path}: {problem}")

    def _launch(self, corr: np.ndarray, dtype: type = np.int64) -> np.ndarray:
        """The start of the CPU call with each correlation id (ns, exact as int64; -1 where the trace has
        none); as float64 with `dtype` (times past int64 included)."""
        keys = np.fromiter(self.launch, dtype=np.int64, count=len(self.launch))
        starts: np.ndarray = np.fromiter(self.launch.values(), dtype=dtype, count=len(self.launch))
        if not len(keys):
            return np.full(len(corr), -1, dtype=dtype)
        by_key = np.argsort(keys)
        keys, starts = keys[by_key], starts[by_key]
        at = np.minimum(np.searchsorted(keys, corr), len(keys) - 1)
        return np.where(keys[at] == corr, starts[at], -1)


def file_events(path: Path, rank: int | None = None, helpers: int = 1) -> pd.DataFrame:
    """One rank's critical-path events from its trace (`rank`, else distributedInfo.rank or the
    `rank<N>` of the name), decoded with `helpers` (load.gather). TraceError names a file that is
    not a Kineto trace."""
    events = CriticalPathEvents()
    found = gather(Path(path), events, helpers=helpers)
    return events.frame(Path(path), found if rank is None else rank)


def _events_or_error(path: Path, helpers: int) -> pd.DataFrame | str:
    """file_events for one file of load_events, or the line that says why it has none."""
    try:
        events = file_events(path, helpers=helpers)
    except TraceError as exc:
        return str(exc)
    if events.empty:  # torch.profiler writes ProfilerStep#N only under a schedule: say so, never 0 rows
        return (f"{path}: no collective in an iteration: no ProfilerStep#N range with NCCL work launched in it "
                "(torch.profiler marks steps only when profile() is given a schedule)")
    return events


def load_events(paths: Sequence[Path], workers: int | None = None) -> tuple[pd.DataFrame | None, list[str]]:
    """Every trace's events, the files in `workers` processes as load.load_traces loads them
    (map_traces); (events of the usable files or None, one error line per file that could not be
    used, or that has no iteration)."""
    results = map_traces(_events_or_error, list(paths), workers)
    parts: dict[int, tuple[Path, pd.DataFrame]] = {}
    errors = []
    for path, result in zip(paths, results, strict=True):
        rank = int(result["rank"].iloc[0]) if not isinstance(result, str) else -1
        if isinstance(result, str):
            errors.append(result)
        elif rank in parts:            # as load.load_traces: a rank's events once
            errors.append(f"{path}: rank {rank} already loaded from {parts[rank][0]}")
        else:
            parts[rank] = (path, result)
    if not parts:
        return None, errors
    return pd.concat([frame for _, frame in parts.values()], ignore_index=True), errors
