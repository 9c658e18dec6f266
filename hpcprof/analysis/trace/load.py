"""Load torch.profiler (Kineto) traces, one file per rank, into the columns HTA's analyses read.

A trace is decoded with msgspec against a schema that names only the fields the analyses use
(`ts, dur, cat, name, args.stream, args.correlation`), so the other fields are skipped without
being built as Python objects: peak memory is about the decompressed file plus a few hundred
bytes per event, not the ~10x of `json.load`. Only the events the analyses need are kept: GPU
events (`stream` set), CPU events with a correlation id (CUDA runtime/driver calls) and the
`ProfilerStep#N` annotations.

Semantics follow HTA 0.5.0's parser (`hta.common.trace_parser`, `hta.common.trace`):

* events without `dur` or `cat`, and the `Trace` event, are dropped;
* `args.stream` that is not an integer becomes -1 (no stream); missing correlation is -1;
* a GPU event is one with `stream >= 0` and `correlation >= 0`, or named `Event Sync` /
  `Context Sync`; everything else is a CPU event;
* ns-resolution traces (any float `ts`) are rounded to whole microseconds: the start is rounded
  up and the end down (see `load_trace` for the one deviation);
* with two or more distinct `ProfilerStep` names, the last (possibly truncated) step is dropped:
  CPU events that start at or after the last step's start are removed, and GPU events are kept
  only if a kept CPU event has their correlation id. `include_last_profiler_step=True` keeps
  everything up to the last step's end instead. With 0 or 1 step nothing is removed.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import re
import zlib
from collections.abc import Container, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import numpy as np
import pandas as pd

from hpcprof.ranks import rank_from_filename

SYNC_NAMES = ("Event Sync", "Context Sync")
PARALLEL_MIN_BYTES = 4 << 20  # below this, starting worker processes costs more than it saves
_STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")


class TraceError(Exception):
    """A trace file that cannot be analysed; the message names the file."""


class _Args(msgspec.Struct, gc=False):
    stream: Any = -1
    correlation: Any = -1


class _Event(msgspec.Struct, gc=False):
    cat: Any = None
    name: Any = None
    ts: int | float | None = None
    dur: float | None = math.nan  # missing (flow, metadata events) -> NaN, fast to convert
    args: _Args | None = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] | None = None  # noqa: N815 (Kineto's key)
    distributedInfo: Any = None  # noqa: N815


class _Head(msgspec.Struct):
    distributedInfo: Any = None  # noqa: N815


@dataclass
class RankTrace:
    """One rank's events, reduced to what the analyses read (times in µs, file order).

    `gpu`: GPU events (`stream != -1`) with columns ts, dur, end, name, cat (categoricals),
    stream, correlation and launch_ts (start of the CPU call with the same correlation id, NaN
    when it is not in the trace). `cpu`: CPU events with a correlation id (runtime/driver calls)
    with ts, dur, name, correlation. `profiler_steps`: the step numbers that were kept. Times are
    relative to `origin`, the earliest loaded start (µs on the trace's clock).
    """

    path: Path
    rank: int
    gpu: pd.DataFrame
    cpu: pd.DataFrame
    profiler_steps: list[int] = field(default_factory=list)
    origin: float = 0.0
    #: the kept `ProfilerStep#N` annotations: step (N), ts, end (µs, relative to `origin`)
    steps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["step", "ts", "end"]))


def find_trace_files(paths: Iterable[Path]) -> list[Path]:
    """Expand directories to their `*.json` / `*.json.gz` files (sorted); keep files as given."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))
        else:
            files.append(path)
    return files


def _read_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
        return zlib.decompress(data, wbits=31) if data[:2] == b"\x1f\x8b" else data
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except zlib.error as exc:
        raise TraceError(f"{path}: truncated or corrupt gzip data ({exc})") from exc


def _rank_from(distributed_info: Any, path: Path) -> int | None:
    if isinstance(distributed_info, dict) and isinstance(distributed_info.get("rank"), int):
        return distributed_info["rank"]
    return rank_from_filename(path)


def _as_int(value: Any) -> int:
    """HTA's stream normalisation: int(value), -1 when that fails."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return -1


def _int_column(values: list[Any]) -> np.ndarray:
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.fromiter(map(_as_int, values), dtype=np.int64, count=len(values))


def _str_index(values: np.ndarray) -> pd.Index:
    return pd.Index([v if isinstance(v, str) else str(v) for v in values], dtype=object)


def peek_rank(path: Path) -> int | None:
    """The rank of a trace file (distributedInfo.rank, else `rank<N>` in the name), or None."""
    try:
        head = msgspec.json.decode(_read_bytes(path), type=_Head)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TraceError(f"{path}: not a Kineto JSON trace: {exc}") from exc
    return _rank_from(head.distributedInfo, path)


T = TypeVar("T", bound=msgspec.Struct)


def decode_trace(path: Path, fields: type[T]) -> tuple[T, list[Any]]:
    """The trace's JSON decoded into `fields` (a msgspec Struct with a `traceEvents` field: only what
    the caller reads is decoded) and its events. TraceError names a file that is not a Kineto trace."""
    try:
        doc = msgspec.json.decode(_read_bytes(path), type=fields)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TraceError(f"{path}: not a Kineto JSON trace: {exc}") from exc
    events = getattr(doc, "traceEvents", None)
    if events is None:
        raise TraceError(f"{path}: no traceEvents array; not a Kineto trace")
    return doc, events


def load_trace(
    path: Path, rank: int | None = None, include_last_profiler_step: bool = False,
    clamp_sub_us: bool = False, ignore_unmatched_launches: bool = False,
) -> RankTrace:
    """Load one rank's trace (`.json` or `.json.gz`); `rank` overrides the detected rank.

    Times with fractional µs are rounded as HTA 0.5.0 does: start = ceil(ts), end =
    floor(ts + dur), dur = end - start. An event shorter than a microsecond that crosses no
    microsecond boundary so gets end < start (a negative duration, seen on short memsets and
    kernels), which HTA's idle gaps and busy unions then include. `clamp_sub_us=True` (a
    deviation from HTA, option `--clamp-sub-us`) gives such an event duration 0 instead.

    A GPU event whose correlation id has no CPU call in the trace gets, as in HTA 0.5.0, the start
    of the file's first event as its launch time (HTA's index-0 fallback), so that the idle time
    breakdown may count the gap before it as host_wait; `ignore_unmatched_launches=True` (a
    deviation, option `--ignore-unmatched-launches`) leaves its launch time unknown (never
    host_wait).
    Raises TraceError for unreadable or non-Kineto files and for traces without GPU events.
    """
    path = Path(path)
    doc, events = decode_trace(path, _Trace)
    if rank is None:
        rank = _rank_from(doc.distributedInfo, path)
    ranked = 0 if rank is None else rank

    ts_is_float = any(type(e.ts) is not int for e in events)  # pandas would make it float64
    no_args = _Args()
    args = [e.args or no_args for e in events]
    stream = _int_column([a.stream for a in args])
    corr = _int_column([a.correlation for a in args])
    del args
    name_codes, names = pd.factorize(np.array([e.name for e in events], dtype=object))
    names = _str_index(names)
    step_name = np.append(names.str.contains("ProfilerStep", regex=False), False)[name_codes]
    sync_name = np.append(names.isin(SYNC_NAMES), False)[name_codes]  # code -1 (no name): False

    # Only the events an analysis can use go further (most CPU ops and flow events do not).
    idx = np.flatnonzero((stream != -1) | (corr != -1) | step_name | sync_name)
    chosen = [events[i] for i in idx.tolist()]
    # HTA joins a GPU event whose correlation id has no CPU partner to the file's first event
    # (index 0), if HTA keeps that event (it has dur and cat)
    first = events[0] if events else None
    first_ts = (float(first.ts) if first is not None and first.ts is not None and first.cat is not None
                and first.dur is not None and first.dur == first.dur else math.nan)
    del events, doc
    ts = np.array([e.ts for e in chosen], dtype=np.float64)
    dur = np.array([e.dur for e in chosen], dtype=np.float64)
    cat = np.array([e.cat for e in chosen], dtype=object)
    del chosen
    keep = np.flatnonzero(~np.isnan(dur) & pd.notna(cat) & (cat != "Trace"))
    idx = idx[keep]
    ts, dur, stream, corr = ts[keep], dur[keep], stream[idx], corr[idx]
    name_codes, step_name, sync_name = name_codes[idx], step_name[idx], sync_name[idx]
    cat_codes, cats = pd.factorize(cat[keep])
    cats = _str_index(cats)
    del cat
    if ts_is_float:
        end = np.floor(ts + dur)
        ts = np.ceil(ts)
        first_ts = math.ceil(first_ts) if first_ts == first_ts else first_ts
        if clamp_sub_us:
            end = np.maximum(end, ts)
        dur = end - ts
    origin = ts.min() if len(ts) else 0.0
    first_ts -= origin
    ts = ts - origin  # relative times keep sums of µs exact in float64, as HTA's aligned ones
    end = ts + dur

    is_gpu = ((stream >= 0) & (corr >= 0)) | sync_name
    is_cpu = ~is_gpu
    # The CPU call of each GPU event: the last CPU event in file order with its correlation id.
    cpu_corr = pd.Series(np.flatnonzero(is_cpu & (corr != -1)))
    partner_of = pd.Series(cpu_corr.values, index=corr[cpu_corr.values])
    partner_of = partner_of[~partner_of.index.duplicated(keep="last")]

    steps = is_cpu & step_name
    kept = np.ones(len(ts), dtype=bool)
    if len(np.unique(name_codes[step_name])) >= 2:
        if include_last_profiler_step:
            kept_cpu = is_cpu & (ts <= end[steps].max())
        else:
            kept_cpu = is_cpu & (ts < ts[steps].max())
            first_ts = first_ts if first_ts < ts[steps].max() else math.nan
        kept = kept_cpu | (is_gpu & np.isin(corr, corr[kept_cpu]))

    on_stream = kept & (stream != -1)
    gpu_idx = np.flatnonzero(on_stream)
    partner = partner_of.reindex(corr[gpu_idx]).to_numpy()
    has_partner = ~np.isnan(partner)
    partner_i = np.where(has_partner, partner, 0).astype(np.int64)
    unmatched = math.nan if ignore_unmatched_launches else first_ts
    launch_ts = np.where(has_partner & kept[partner_i], ts[partner_i],
                         np.where(~has_partner & (corr[gpu_idx] >= 0), unmatched, np.nan))

    def categorical(codes: np.ndarray, uniques: pd.Index) -> pd.Categorical:
        return pd.Categorical.from_codes(codes, categories=uniques).remove_unused_categories()

    gpu = pd.DataFrame({
        "ts": ts[gpu_idx], "dur": dur[gpu_idx], "end": end[gpu_idx],
        "name": categorical(name_codes[gpu_idx], names),
        "cat": categorical(cat_codes[gpu_idx], cats),
        "stream": stream[gpu_idx], "correlation": corr[gpu_idx], "launch_ts": launch_ts,
    })
    if gpu.empty:
        raise TraceError(
            f"{path}: no GPU events (kernel, gpu_memcpy, gpu_memset)"
            + (" before the last ProfilerStep; try --include-last-step"
               if kept.sum() < len(kept) and (stream != -1).any() else
               "; was it recorded with ProfilerActivity.CUDA?")
        )
    cpu_idx = np.flatnonzero(kept & (stream == -1) & (corr != -1))
    cpu = pd.DataFrame({
        "ts": ts[cpu_idx], "dur": dur[cpu_idx],
        "name": categorical(name_codes[cpu_idx], names), "correlation": corr[cpu_idx],
    })
    step_numbers = {
        int(m.group(1))
        for m in map(_STEP_RE.search, names[name_codes[kept & steps]].unique())
        if m
    }
    step_idx = np.flatnonzero(kept & steps)
    step_of = [_STEP_RE.search(names[c]) for c in name_codes[step_idx]]
    numbered = np.array([m is not None for m in step_of], dtype=bool)
    step_table = pd.DataFrame({"step": np.array([int(m.group(1)) for m in step_of if m], dtype=np.int64),
                               "ts": ts[step_idx][numbered], "end": end[step_idx][numbered]})
    return RankTrace(path, ranked, gpu, cpu, sorted(step_numbers), origin, step_table)


def _load_wanted(path: Path, rank: int | None, ranks: Container[int] | None,
                 include_last_profiler_step: bool, clamp_sub_us: bool,
                 ignore_unmatched_launches: bool) -> RankTrace | str | None:
    """load_trace for one file of load_traces: the trace, its error line, or None if unwanted."""
    try:
        if ranks is not None:
            rank = peek_rank(path) if rank is None else rank
            if (0 if rank is None else rank) not in ranks:
                return None
        return load_trace(path, rank, include_last_profiler_step, clamp_sub_us, ignore_unmatched_launches)
    except TraceError as exc:
        return str(exc)


def load_traces(
    paths: Sequence[Path],
    ranks: Container[int] | None = None,
    include_last_profiler_step: bool = False,
    rank_of: dict[Path, int] | None = None,
    workers: int | None = None,
    clamp_sub_us: bool = False,
    ignore_unmatched_launches: bool = False,
) -> tuple[list[RankTrace], list[str]]:
    """Load every trace file (directories expanded), sorted by rank; bad files become errors.

    `ranks` keeps only those ranks (other files are only peeked at); `rank_of` gives ranks that
    override detection; `clamp_sub_us` and `ignore_unmatched_launches` as in `load_trace`.
    Files are loaded in `workers` processes, as HTA does (default: one per CPU core when the
    files total more than PARALLEL_MIN_BYTES on disk, else in this process); each file needs
    about twice its decompressed size in memory while it loads. Returns (traces, one error line
    per file that could not be used).
    """
    files = find_trace_files(paths)
    jobs = [(f, (rank_of or {}).get(f), ranks, include_last_profiler_step, clamp_sub_us,
             ignore_unmatched_launches) for f in files]
    if workers is None:
        size = sum(f.stat().st_size for f in files if f.is_file())
        workers = (os.cpu_count() or 1) if size > PARALLEL_MIN_BYTES else 1
    workers = min(workers, len(files))
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            results = list(pool.map(_load_wanted, *zip(*jobs, strict=False)))
    else:
        results = [_load_wanted(*job) for job in jobs]
    traces: dict[int, RankTrace] = {}
    errors: list[str] = []
    for path, result in zip(files, results, strict=False):
        if isinstance(result, str):
            errors.append(result)
        elif result is not None and result.rank in traces:
            first = traces[result.rank].path
            errors.append(f"{path}: rank {result.rank} already loaded from {first}")
        elif result is not None:
            traces[result.rank] = result
    return [traces[r] for r in sorted(traces)], errors
