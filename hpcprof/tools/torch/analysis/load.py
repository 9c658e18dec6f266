"""Load torch.profiler (Kineto) traces, one file per rank, into the columns HTA's analyses read.

A trace is decoded once, streaming (trace/stream.py: batches of about 1 MB of JSON, gzip inflated on the fly), with
msgspec against a schema that names only the fields read (trace/schema.py: `LoadEvent`'s `ts, dur, cat, name,
args.stream, args.correlation` for the analyses; `Event` adds the events' phase and thread for the idle attribution,
the NCCL kernels' process group and sequence number and the collectives' sizes for the critical path and
trace/collectives.py, when decoded in the same pass), so the other fields are skipped without being built as Python
objects and the whole JSON is never in memory: a batch's events are reduced to columns before the next is decoded.
Only the events the analyses need are kept: GPU events (`stream` set), CPU events with a correlation id (CUDA
runtime/driver calls) and the `ProfilerStep#N` annotations (48 bytes each).

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

import functools
import math
import mmap
import re
from collections import deque
from collections.abc import Callable, Container, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import msgspec
import numpy as np

from hpcprof.analysis.clocks import clock_problem
from hpcprof.core.cpus import usable_cpus
from hpcprof.core.pool import process_pool, worker_context
from hpcprof.run.ranks import rank_from_filename
from hpcprof.tools.torch.analysis.schema import Event, Head, LoadEvent, NoFields
from hpcprof.tools.torch.analysis.stream import BATCH_BYTES, EventStream, TraceError
from hpcprof.tools.torch.analysis.table import Table, first_seen, texts, used_categories

SYNC_NAMES = ("Event Sync", "Context Sync")
PARALLEL_MIN_BYTES = 4 << 20  # below this, starting worker processes costs more than it saves
MAX_HELPERS = 3  # helpers of one file in scan_split: as many as one process inflating and cutting keeps busy
#                 (a 4th was no faster on a 16-core host and cost ~10 MB: benchmarks/trace_helpers.py)
SPLIT_BATCH_BYTES = 512 << 10  # JSON text per batch of scan_split: 1 MiB costs each helper ~4 MB more
_STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
#: how far Kineto's µs rounding may move an event's end before its start (clocks.clock_problem's slack)
KINETO_SLACK_NS = 1000.0
T = TypeVar("T")


@dataclass
class RankTrace:
    """One rank's events, reduced to what the analyses read (times in µs, file order).

    `gpu`: GPU events (`stream != -1`) with columns ts, dur, end, name, cat (categorical: codes
    into `gpu.categories`), stream, correlation and launch_ts (start of the CPU call with the same
    correlation id, NaN when it is not in the trace). `cpu`: CPU events with a correlation id
    (runtime/driver calls) with ts, dur, name (categorical), correlation. `profiler_steps`: the step
    numbers that were kept. Times are relative to `origin`, the earliest loaded start (µs on the
    trace's clock).
    """

    path: Path
    rank: int
    gpu: Table
    cpu: Table
    profiler_steps: list[int] = field(default_factory=list)
    origin: float = 0.0
    #: the kept `ProfilerStep#N` annotations of the CPU: step (N), ts, end (µs, relative to `origin`)
    steps: Table = field(default_factory=lambda: Table({"step": np.zeros(0, dtype=np.int64),
                                                        "ts": np.zeros(0), "end": np.zeros(0)}))


def find_trace_files(paths: Iterable[Path]) -> list[Path]:
    """Expand directories to their `*.json` / `*.json.gz` files (sorted); keep files as given."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))
        else:
            files.append(path)
    return files


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


def _file_codes(codes: dict[Any, int], uniques: np.ndarray) -> np.ndarray:
    """The file-wide codes of one batch's factorized uniques (new ones are numbered on), with -1
    (no value) last so that a batch code of -1 maps to -1."""
    return np.array([codes.setdefault(u, len(codes)) for u in uniques.tolist()] + [-1], dtype=np.int64)


def _distinct(values: list[Any]) -> np.ndarray:
    """pd.factorize's distinct values of JSON values (in order of first appearance, None left out)
    without pandas: batch_columns runs in scan_split's helper processes, where pandas' machinery
    copied ~1.6 MiB of the pages each inherited (benchmarks/gpu/trace_factorize_ab.py)."""
    seen = dict.fromkeys(values)
    seen.pop(None, None)
    distinct = np.empty(len(seen), dtype=object)
    distinct[:] = list(seen)
    return distinct


def _codes(values: list[Any], distinct: np.ndarray) -> np.ndarray:
    """pd.factorize's codes of `values` (None -1) against `distinct`, _distinct of values that include them."""
    index = dict(zip(distinct.tolist(), range(len(distinct)), strict=True))
    index[None] = -1
    return np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))


def peek_rank(path: Path) -> int | None:
    """The rank of a trace file (distributedInfo.rank, else `rank<N>` in the name), or None."""
    stream = EventStream(path, Head, NoFields)
    for _ in stream:
        pass
    return _rank_from(stream.head.distributedInfo, path)


def scan_trace(path: Path, *consumers: Callable[[list[Any]], None], batch_bytes: int = BATCH_BYTES,
               event: type[LoadEvent] = Event, heads: Iterable[Callable[[Head], None]] = ()) -> int | None:
    """Decode the trace once, streaming, into `event` Structs: each batch of its events (file order) goes to every
    consumer in turn, then its other members to each of `heads`; returns the rank of its distributedInfo, else name."""
    stream = EventStream(path, Head, event, batch_bytes)
    for batch in stream:
        for consume in consumers:
            consume(batch)
    for keep in heads:
        keep(stream.head)
    return _rank_from(stream.head.distributedInfo, path)


class Gatherer:
    """What one decode of a trace gathers, batch by batch: `part` reduces a batch of events to what `merge` keeps (a
    static method, so that scan_split's helper processes can run it: its result is sent back), `merge` keeps it (the
    batches in file order); `add` is both, a scan_trace consumer; `head` keeps what the trace's other members say.
    `reset` empties it (a split decode that failed is done again in order), and makes it. `event`: the Struct of
    the fields `part` reads."""

    event: type[LoadEvent] = Event

    def __init__(self) -> None:
        self.reset()

    @staticmethod
    def part(events: list[Event]) -> Any:
        raise NotImplementedError

    def merge(self, part: Any) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def add(self, events: list[Event]) -> None:
        """Keep what one batch holds (in file order)."""
        self.merge(self.part(events))

    def head(self, head: Head) -> None:
        """Given the trace's other members after its events (kept only where a gatherer needs them)."""


def gather(path: Path, *gatherers: Gatherer, helpers: int = 1) -> int | None:
    """Decode the trace once into every gatherer, as scan_trace; with `helpers` > 1, a file of
    PARALLEL_MIN_BYTES or more has its batches decoded by that many processes (scan_split; the same
    result), falling back to one process when that fails. Returns the trace's rank, as scan_trace."""
    path = Path(path)
    if helpers > 1 and path.is_file() and path.stat().st_size >= PARALLEL_MIN_BYTES:
        try:
            return scan_split(path, gatherers, helpers)
        except SplitFailed:
            for gatherer in gatherers:
                gatherer.reset()
    return scan_trace(path, *(g.add for g in gatherers), event=_event_of([type(g) for g in gatherers]),
                      heads=[g.head for g in gatherers])


def _event_of(kinds: Iterable[type[Gatherer]]) -> type[LoadEvent]:
    """The Struct one decode for all these kinds of gatherers uses: theirs where they agree, else
    Event (every field)."""
    events = {kind.event for kind in kinds}
    return events.pop() if len(events) == 1 else Event


@functools.cache
def _decoder(event: type[LoadEvent]) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(list[event])  # type: ignore[valid-type]  # (the Struct type given at run time)


def helpers_of(cores: int) -> int:
    """The helper processes a file given `cores` cores decodes with (gather's `helpers`): the cores
    beside its own, up to MAX_HELPERS; one would only share the file's core (none then)."""
    helpers = min(MAX_HELPERS, cores - 1)
    return helpers if helpers > 1 else 0


class BatchColumns(NamedTuple):
    """One batch of events reduced to the columns TraceColumns keeps: the usable events' values,
    their names and categories as codes into the batch's own distinct values (`names`: of every
    event of the batch, in order of first appearance; `cats`: of the events kept), and what the
    file needs of the whole batch (its number of events, whether any `ts` is a float, and the
    start of its first event where HTA would keep it: NaN otherwise)."""

    events: int
    first_ts: float
    ts_is_float: bool
    names: np.ndarray
    cats: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    name: np.ndarray
    cat: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray


def batch_columns(events: Sequence[LoadEvent]) -> BatchColumns | None:
    """The usable events of one batch (GPU events, CPU events with a correlation id, ProfilerStep
    annotations, sync events) as BatchColumns; None for no events."""
    if not events:
        return None
    first = events[0]
    first_ts = (float(first.ts) if first.ts is not None and first.cat is not None
                and first.dur is not None and first.dur == first.dur else math.nan)
    ts_is_float = bool(set(map(type, [e.ts for e in events])) - {int})
    args = [e.args for e in events]
    stream = _int_column([-1 if a is None else a.stream for a in args])
    corr = _int_column([-1 if a is None else a.correlation for a in args])
    del args
    names = [e.name for e in events]
    uniques = _distinct(names)
    kept = (stream != -1) | (corr != -1)
    # the names of ProfilerStep annotations and sync events, looked for only in a batch that has one
    marked = {name for name, text in zip(uniques.tolist(), texts(uniques.tolist()).tolist(), strict=True)
              if "ProfilerStep" in text or text in SYNC_NAMES}
    if marked:
        kept |= np.fromiter(map(marked.__contains__, names), dtype=bool, count=len(names))
    idx = np.flatnonzero(kept)
    chosen = [events[i] for i in idx.tolist()]
    cat_values = [e.cat for e in chosen]
    cats = _distinct(cat_values)
    return BatchColumns(len(events), first_ts, ts_is_float, uniques, cats,
                        np.array([e.ts for e in chosen], dtype=np.float64),
                        np.array([e.dur for e in chosen], dtype=np.float64),
                        _codes([e.name for e in chosen], uniques), _codes(cat_values, cats), stream[idx], corr[idx])


#: where scan_split puts the texts its helpers decode, when they are forked from it: a shared
#: anonymous mapping of a slot per batch in flight, made before the helpers start so that they
#: inherit it (a text sent through the pipe costs a helper its copies, ~2 MB of heap it keeps)
_SHARED: mmap.mmap | None = None


def decode_batch(text: bytes | tuple[int, int], kinds: Sequence[type[Gatherer]]) -> list[Any]:
    """The part (Gatherer.part) of each kind of gatherer of one of EventStream.texts(), decoded
    once, here (in a helper process of scan_split): `text` itself, or its (offset, length) in
    _SHARED; msgspec's DecodeError when the text is not a list of events."""
    if isinstance(text, tuple):
        assert _SHARED is not None, "a slot of _SHARED outside a helper forked by scan_split"
        offset, length = text
        with memoryview(_SHARED) as shared:
            events = _decoder(_event_of(kinds)).decode(shared[offset:offset + length])
    else:
        events = _decoder(_event_of(kinds)).decode(text)
    return [kind.part(events) for kind in kinds]


class SplitFailed(Exception):
    """scan_split could not finish (a batch cut at a `}` inside a string, a helper that died): the
    file is scanned again in order."""


def scan_split(path: Path, gatherers: Sequence[Gatherer], helpers: int) -> int | None:
    """scan_trace(path, *(g.add for g in gatherers)) with the batches decoded by `helpers` processes: this one
    inflates the file and cuts its text at candidate event boundaries (EventStream.texts), the helpers decode each
    batch to each gatherer's part (decode_batch), and the parts are merged here in file order, at most 2 x `helpers`
    batches in flight (memory stays flat in the file's size). Returns the trace's rank, as scan_trace. SplitFailed
    when a batch does not decode (a cut inside a string, which misplaces the later cuts too, or a damaged file:
    scan_trace then says which), a helper died or none could start."""
    global _SHARED
    kinds = [type(g) for g in gatherers]
    stream = EventStream(path, Head, _event_of(kinds), SPLIT_BATCH_BYTES)
    pending: deque[Future[list[Any]]] = deque()

    def merge(parts: list[Any]) -> None:
        for gatherer, part in zip(gatherers, parts, strict=True):
            gatherer.merge(part)

    # a slot per batch in flight (at most 2 x helpers - 1 while the next is written); a text longer
    # than a slot, or helpers not forked from here (a fork server's), go through the pipe
    slots, slot_bytes = 2 * helpers, 2 * SPLIT_BATCH_BYTES
    context = worker_context([__name__])
    pool: ProcessPoolExecutor | None = None
    try:
        _SHARED = mmap.mmap(-1, slots * slot_bytes) if context.get_start_method() == "fork" else None
        pool = process_pool(helpers, context)
        for i, text in enumerate(stream.texts()):
            if i == 0:      # the first batch here, before the helpers fork: they then share what its
                merge(decode_batch(text, kinds))    # decode made on first use (lazy imports, caches)
                continue
            where: bytes | tuple[int, int] = text
            if _SHARED is not None and len(text) <= slot_bytes:
                offset = i % slots * slot_bytes
                _SHARED[offset:offset + len(text)] = text
                where = (offset, len(text))
            pending.append(pool.submit(decode_batch, where, kinds))
            while len(pending) >= 2 * helpers or (pending and pending[0].done()):
                merge(pending.popleft().result())
        while pending:
            merge(pending.popleft().result())
    except (msgspec.DecodeError, msgspec.ValidationError, TraceError, BrokenProcessPool, OSError) as exc:
        raise SplitFailed(str(exc)) from None   # OSError: e.g. no process could start (a login node's ulimit -u)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        if _SHARED is not None:
            _SHARED.close()
            _SHARED = None
    for gatherer in gatherers:
        gatherer.head(stream.head)
    return _rank_from(stream.head.distributedInfo, path)


class TraceColumns(Gatherer):
    """The columns load_trace needs, gathered batch by batch (a Gatherer: batch_columns) from the
    events an analysis can use: GPU events (`stream` set), CPU events with a correlation id,
    ProfilerStep annotations and sync events (most CPU ops and flow events are dropped here)."""

    part = staticmethod(batch_columns)
    event = LoadEvent

    def reset(self) -> None:
        self.ts_is_float = False  # any float ts (pandas would make the column float64)
        self.first_ts = math.nan  # HTA's index-0 fallback: the first event's start, if HTA keeps it
        self.seen = 0
        self.names: dict[Any, int] = {}  # name -> code, in order of first appearance in the file
        self.cats: dict[Any, int] = {}  # cat -> code, likewise among the events kept
        self.columns: dict[str, list[np.ndarray]] = {
            key: [] for key in ("ts", "dur", "cat", "name", "stream", "correlation")}

    def merge(self, batch: BatchColumns | None) -> None:
        """Append one batch's columns (batch_columns; the batches in file order), its codes made
        the file's."""
        if batch is None:
            return
        if self.seen == 0:
            self.first_ts = batch.first_ts
        self.seen += batch.events
        self.ts_is_float = self.ts_is_float or batch.ts_is_float
        column = self.columns
        column["ts"].append(batch.ts)
        column["dur"].append(batch.dur)
        column["cat"].append(_file_codes(self.cats, batch.cats)[batch.cat])
        column["name"].append(_file_codes(self.names, batch.names)[batch.name])
        column["stream"].append(batch.stream)
        column["correlation"].append(batch.correlation)

    def trace(self, path: Path, rank: int | None, include_last_profiler_step: bool = False,
              clamp_sub_us: bool = False, ignore_unmatched_launches: bool = False) -> RankTrace:
        """The RankTrace of the events added (arguments as load_trace's)."""
        ranked = 0 if rank is None else rank
        ts_is_float, first_ts = self.ts_is_float, self.first_ts
        col = {key: np.concatenate(parts) if parts else np.zeros(0) for key, parts in self.columns.items()}
        names = texts(self.names)
        cat = col["cat"].astype(np.int64)
        keep = np.flatnonzero(~np.isnan(col["dur"]) & (cat != -1) & (cat != self.cats.get("Trace", -1)))
        ts, dur, name_codes = col["ts"][keep], col["dur"][keep], col["name"][keep].astype(np.int64)
        stream, corr = col["stream"][keep].astype(np.int64), col["correlation"][keep].astype(np.int64)
        step_name = np.array([*("ProfilerStep" in n for n in names), False])[name_codes]
        sync_name = np.array([*(n in SYNC_NAMES for n in names), False])[name_codes]  # code -1 (no name): False
        cat_codes, kept_cats = first_seen(cat[keep])  # categories in order of first appearance
        cats = texts(np.array(list(self.cats), dtype=object)[kept_cats])
        del cat, col
        if ts_is_float:
            end = np.floor(ts + dur)
            ts = np.ceil(ts)
            first_ts = math.ceil(first_ts) if first_ts == first_ts else first_ts
            if clamp_sub_us:
                end = np.maximum(end, ts)
            dur = end - ts
        problem = clock_problem(ts, ts + dur, 1000.0, KINETO_SLACK_NS, what="events")
        if problem is not None:
            raise TraceError(f"{path}: {problem}")
        origin = ts.min() if len(ts) else 0.0
        first_ts -= origin
        ts = ts - origin  # relative times keep sums of µs exact in float64, as HTA's aligned ones
        end = ts + dur

        is_gpu = ((stream >= 0) & (corr >= 0)) | sync_name
        is_cpu = ~is_gpu
        # The CPU call of each GPU event: the last CPU event in file order with its correlation id.
        cpu_rows = np.flatnonzero(is_cpu & (corr != -1))[::-1]
        partner_corr, last = np.unique(corr[cpu_rows], return_index=True)
        partner_row = cpu_rows[last]

        steps = is_cpu & step_name
        kept = np.ones(len(ts), dtype=bool)
        several_steps = len(set(name_codes[step_name].tolist())) >= 2  # (np.unique would import numpy.ma: 8 ms)
        if several_steps:
            if include_last_profiler_step:
                kept_cpu = is_cpu & (ts <= end[steps].max())
            else:
                kept_cpu = is_cpu & (ts < ts[steps].max())
                first_ts = first_ts if first_ts < ts[steps].max() else math.nan
            kept = kept_cpu | (is_gpu & np.isin(corr, corr[kept_cpu]))

        on_stream = kept & (stream != -1)
        gpu_idx = np.flatnonzero(on_stream)
        at = np.minimum(np.searchsorted(partner_corr, corr[gpu_idx]), max(len(partner_corr) - 1, 0))
        has_partner = partner_corr[at] == corr[gpu_idx] if len(partner_corr) else np.zeros(len(gpu_idx), dtype=bool)
        partner_i = np.where(has_partner, partner_row[at] if len(partner_row) else 0, 0)
        unmatched = math.nan if ignore_unmatched_launches else first_ts
        launched = np.where(has_partner & kept[partner_i], ts[partner_i], np.nan)   # the launches in the trace
        launch_ts = np.where(~has_partner & (corr[gpu_idx] >= 0), unmatched, launched)
        problem = clock_problem(ts[gpu_idx], end[gpu_idx], 1000.0, KINETO_SLACK_NS, launched,
                                cats[cat_codes[gpu_idx]], what="GPU events")
        if problem is not None:
            raise TraceError(f"{path}: {problem}")

        gpu_names, gpu_name_values = used_categories(name_codes[gpu_idx], names)
        gpu_cats, gpu_cat_values = used_categories(cat_codes[gpu_idx], cats)
        gpu = Table({"ts": ts[gpu_idx], "dur": dur[gpu_idx], "end": end[gpu_idx], "name": gpu_names,
                     "cat": gpu_cats, "stream": stream[gpu_idx], "correlation": corr[gpu_idx],
                     "launch_ts": launch_ts}, {"name": gpu_name_values, "cat": gpu_cat_values})
        if not len(gpu):
            raise TraceError(
                f"{path}: no GPU events (kernel, gpu_memcpy, gpu_memset)"
                + (" before the last ProfilerStep; try --include-last-step"
                   if kept.sum() < len(kept) and (stream != -1).any() else
                   "; was it recorded with ProfilerActivity.CUDA?")
            )
        cpu_idx = np.flatnonzero(kept & (stream == -1) & (corr != -1))
        cpu_names, cpu_name_values = used_categories(name_codes[cpu_idx], names)
        cpu = Table({"ts": ts[cpu_idx], "dur": dur[cpu_idx], "name": cpu_names, "correlation": corr[cpu_idx]},
                    {"name": cpu_name_values})
        step_numbers = {
            int(m.group(1))
            for m in map(_STEP_RE.search, set(names[name_codes[kept & steps]].tolist()))
            if m
        }
        annotation = cats.tolist().index("gpu_user_annotation") if "gpu_user_annotation" in cats.tolist() else -1
        cpu_steps = steps & (cat_codes != annotation)
        step_idx = np.flatnonzero(kept & cpu_steps)         # torch 2.11 repeats each step on the GPU's row
        if several_steps and not include_last_profiler_step:
            step_idx = step_idx[ts[step_idx] < ts[cpu_steps].max()]  # the last, even where its GPU row came later
        step_of = [_STEP_RE.search(names[c]) for c in name_codes[step_idx]]
        numbered = np.array([m is not None for m in step_of], dtype=bool)
        step_table = Table({"step": np.array([int(m.group(1)) for m in step_of if m], dtype=np.int64),
                            "ts": ts[step_idx][numbered], "end": end[step_idx][numbered]})
        return RankTrace(path, ranked, gpu, cpu, sorted(step_numbers), origin, step_table)


def load_trace(
    path: Path, rank: int | None = None, include_last_profiler_step: bool = False,
    clamp_sub_us: bool = False, ignore_unmatched_launches: bool = False, helpers: int = 1,
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
    With `helpers` > 1, a file of PARALLEL_MIN_BYTES or more is decoded by that many processes
    (gather: the same columns), else in this one.

    Raises TraceError for unreadable or non-Kineto files and for traces without GPU events.
    """
    columns = TraceColumns()
    found = gather(Path(path), columns, helpers=helpers)
    return columns.trace(Path(path), found if rank is None else rank, include_last_profiler_step,
                         clamp_sub_us, ignore_unmatched_launches)


def map_traces(fn: Callable[[Path, int], T], files: Sequence[Path], workers: int | None = None) -> list[T]:
    """`fn(file, helpers)` for each of `files`, in order, in `workers` processes, a file each
    (default: one per usable CPU, cpus.usable_cpus, when the files total more than
    PARALLEL_MIN_BYTES on disk, else in this process); with more workers than files, the workers
    left over once each file has its own are shared out among the files as `helpers` (helpers_of:
    up to MAX_HELPERS each, none below two), for gather to decode one large trace on several cores.
    Without helpers, this process is one of the workers (_share_out). Where no worker process can
    start, every file is done in this process."""
    if workers is None:
        size = sum(f.stat().st_size for f in files if f.is_file())
        workers = usable_cpus() if size > PARALLEL_MIN_BYTES else 1
    helpers = [helpers_of(workers // len(files)) if files else 0] * len(files)
    if min(workers, len(files)) > 1:
        try:
            if helpers[0]:
                with process_pool(min(workers, len(files)), worker_context([__name__])) as pool:
                    return list(pool.map(fn, files, helpers))
            with process_pool(min(workers, len(files)) - 1, worker_context([__name__])) as pool:
                return _share_out(fn, files, pool)
        except OSError:         # no worker could start (a login node's ulimit -u): all in this process
            helpers = [0] * len(files)
    return [fn(f, h) for f, h in zip(files, helpers, strict=True)]


def _share_out(fn: Callable[[Path, int], T], files: Sequence[Path], pool: ProcessPoolExecutor) -> list[T]:
    """`fn(file, 0)` for each of `files`, in order: the first here while `pool` starts on the others,
    then each one no worker has started yet, from the last (a start and a transfer of its result
    fewer: benchmarks/results/comment_measurements.txt).
    The pool takes no more work once they are submitted: a worker then exits as soon as it is done,
    while this process decodes, rather than when the caller shuts the pool down (one that is still
    decoding, and so writes nothing, then dies with this process by die_with_parent alone: a shut
    down pool lists no workers for atomic.stop_on_sigterm)."""
    futures = [pool.submit(fn, f, 0) for f in files[1:]]
    pool.shutdown(wait=False)
    first = fn(files[0], 0)
    mine: dict[int, T] = {}
    for i in reversed(range(len(futures))):
        if futures[i].cancel():     # not started by a worker yet
            mine[i] = fn(files[i + 1], 0)
    return [first, *(mine[i] if i in mine else f.result() for i, f in enumerate(futures))]


def _load_wanted(path: Path, helpers: int, rank_of: dict[Path, int], ranks: Container[int] | None,
                 include_last_profiler_step: bool, clamp_sub_us: bool,
                 ignore_unmatched_launches: bool) -> RankTrace | str | None:
    """load_trace for one file of load_traces: the trace, its error line, or None if unwanted."""
    rank = rank_of.get(path)
    try:
        if ranks is not None:
            rank = peek_rank(path) if rank is None else rank
            if (0 if rank is None else rank) not in ranks:
                return None
        return load_trace(path, rank, include_last_profiler_step, clamp_sub_us, ignore_unmatched_launches, helpers)
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
    Files are loaded in `workers` processes, as HTA does, with the workers left over shared out
    as helpers of the files (map_traces). A file being loaded needs a few batches of its JSON text
    with their decoded events, and 48 bytes per kept event.
    Returns (traces, one error line per file that could not be used).
    """
    files = find_trace_files(paths)
    results = map_traces(functools.partial(_load_wanted, rank_of=rank_of or {}, ranks=ranks,
                                           include_last_profiler_step=include_last_profiler_step,
                                           clamp_sub_us=clamp_sub_us,
                                           ignore_unmatched_launches=ignore_unmatched_launches), files, workers)
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
