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

import gzip
import re
import zlib
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import msgspec
import numpy as np
import pandas as pd

SYNC_NAMES = ("Event Sync", "Context Sync")
_STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
_RANK_IN_NAME_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_Number = Union[int, float, None]


class TraceError(Exception):
    """A trace file that cannot be analysed; the message names the file."""


class _Args(msgspec.Struct):
    stream: Any = -1
    correlation: Any = -1


class _Event(msgspec.Struct):
    cat: Any = None
    name: Any = None
    ts: _Number = None
    dur: _Number = None
    args: Optional[_Args] = None


class _Trace(msgspec.Struct):
    traceEvents: Optional[list[_Event]] = None  # noqa: N815 (Kineto's key)
    distributedInfo: Any = None  # noqa: N815


class _Head(msgspec.Struct):
    distributedInfo: Any = None  # noqa: N815


@dataclass
class RankTrace:
    """One rank's events, reduced to what the analyses read (times in µs, file order).

    `gpu`: GPU events (`stream != -1`) with columns ts, dur, end, name, cat (categoricals),
    stream, correlation and launch_ts (start of the CPU call with the same correlation id, NaN
    when it is not in the trace). `cpu`: CPU events with a correlation id (runtime/driver calls)
    with ts, dur, name, correlation. `profiler_steps`: the step numbers that were kept.
    """

    path: Path
    rank: int
    gpu: pd.DataFrame
    cpu: pd.DataFrame
    profiler_steps: list[int] = field(default_factory=list)


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
        return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    except (OSError, EOFError, zlib.error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TraceError(f"{path}: cannot read: {reason}") from exc


def _rank_from(distributed_info: Any, path: Path) -> Optional[int]:
    if isinstance(distributed_info, dict) and isinstance(distributed_info.get("rank"), int):
        return distributed_info["rank"]
    match = _RANK_IN_NAME_RE.search(path.name)
    return int(match.group(1)) if match else None


def _as_int(value: Any) -> int:
    """HTA's stream normalisation: int(value), -1 when that fails."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return -1


def _int_column(values: list[Any]) -> np.ndarray:
    return np.fromiter(
        (v if type(v) is int else _as_int(v) for v in values), dtype=np.int64, count=len(values)
    )


def _str_index(values: np.ndarray) -> pd.Index:
    return pd.Index([v if isinstance(v, str) else str(v) for v in values], dtype=object)


def peek_rank(path: Path) -> Optional[int]:
    """The rank of a trace file (distributedInfo.rank, else `rank<N>` in the name), or None."""
    try:
        head = msgspec.json.decode(_read_bytes(path), type=_Head)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TraceError(f"{path}: not a Kineto JSON trace: {exc}") from exc
    return _rank_from(head.distributedInfo, path)


def load_trace(
    path: Path, rank: Optional[int] = None, include_last_profiler_step: bool = False
) -> RankTrace:
    """Load one rank's trace (`.json` or `.json.gz`); `rank` overrides the detected rank.

    Deviation from HTA 0.5.0: when ns timestamps are rounded, an event shorter than a microsecond
    that does not cross a microsecond boundary gets end < start in HTA (a negative duration, seen
    on short memsets), which shrinks merged busy time. Here such an event gets duration 0.
    Raises TraceError for unreadable or non-Kineto files and for traces without GPU events.
    """
    path = Path(path)
    try:
        doc = msgspec.json.decode(_read_bytes(path), type=_Trace)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TraceError(f"{path}: not a Kineto JSON trace: {exc}") from exc
    if doc.traceEvents is None:
        raise TraceError(f"{path}: no traceEvents array; not a Kineto trace")
    events = doc.traceEvents
    if rank is None:
        rank = _rank_from(doc.distributedInfo, path)
    ranked = 0 if rank is None else rank

    ts_raw = [e.ts for e in events]
    ts_is_float = any(type(v) is not int for v in ts_raw)  # pandas would make the column float64
    ts = np.array(ts_raw, dtype=np.float64)
    del ts_raw
    dur = np.array([e.dur for e in events], dtype=np.float64)
    cat_codes, cats = pd.factorize(np.array([e.cat for e in events], dtype=object))
    name_codes, names = pd.factorize(np.array([e.name for e in events], dtype=object))
    no_args = _Args()
    args = [e.args or no_args for e in events]
    del events, doc
    stream = _int_column([a.stream for a in args])
    corr = _int_column([a.correlation for a in args])
    del args

    names, cats = _str_index(names), _str_index(cats)
    is_step_name = names.str.contains("ProfilerStep", regex=False)
    is_sync_name = names.isin(SYNC_NAMES)
    step_name = np.append(is_step_name, False)[name_codes]  # code -1 (no name) -> False
    sync_name = np.append(is_sync_name, False)[name_codes]

    trace_cat = cats.get_loc("Trace") if "Trace" in cats else -2
    keep = ~np.isnan(dur) & (cat_codes >= 0) & (cat_codes != trace_cat)
    keep &= (stream != -1) | (corr != -1) | step_name | sync_name
    idx = np.flatnonzero(keep)
    ts, dur, stream, corr = ts[idx], dur[idx], stream[idx], corr[idx]
    name_codes, cat_codes, step_name, sync_name = (
        name_codes[idx], cat_codes[idx], step_name[idx], sync_name[idx]
    )
    end = ts + dur
    if ts_is_float:
        ts, end = np.ceil(ts), np.floor(end)
        end = np.maximum(end, ts)
        dur = end - ts

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
        kept = kept_cpu | (is_gpu & np.isin(corr, corr[kept_cpu]))

    on_stream = kept & (stream != -1)
    gpu_idx = np.flatnonzero(on_stream)
    partner = partner_of.reindex(corr[gpu_idx]).to_numpy()
    has_partner = ~np.isnan(partner)
    partner_i = np.where(has_partner, partner, 0).astype(np.int64)
    launch_ts = np.where(has_partner & kept[partner_i], ts[partner_i], np.nan)

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
    return RankTrace(path, ranked, gpu, cpu, sorted(step_numbers))


def load_traces(
    paths: Sequence[Path],
    ranks: Optional[Container[int]] = None,
    include_last_profiler_step: bool = False,
    rank_of: Optional[dict[Path, int]] = None,
) -> tuple[list[RankTrace], list[str]]:
    """Load every trace file (directories expanded), sorted by rank; bad files become errors.

    `ranks` keeps only those ranks (other files are only peeked at); `rank_of` gives ranks that
    override detection. Returns (traces, one error line per file that could not be used).
    """
    traces: dict[int, RankTrace] = {}
    errors: list[str] = []
    for path in find_trace_files(paths):
        rank = (rank_of or {}).get(path)
        try:
            if ranks is not None:
                rank = peek_rank(path) if rank is None else rank
                if (0 if rank is None else rank) not in ranks:
                    continue
            trace = load_trace(path, rank, include_last_profiler_step)
        except TraceError as exc:
            errors.append(str(exc))
            continue
        if trace.rank in traces:
            errors.append(f"{path}: rank {trace.rank} already loaded from {traces[trace.rank].path}")
            continue
        traces[trace.rank] = trace
    return [traces[r] for r in sorted(traces)], errors
