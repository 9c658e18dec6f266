"""The critical path across ranks: per iteration, the chain of GPU work and collectives that set its
length, and which rank's work the other ranks waited for in which collective.

Two steps, so that one rank's profile is read at a time and memory stays flat in the number of ranks:

* `rank_events` (per rank, tool-neutral: the nsys and Kineto modules feed it): the rank's collective
  kernels in each iteration, each keyed across ranks by (channel, seq) — channel: the communicator
  (process group) or the NCCL stream in order of first use; seq: the collective's sequence number
  where the trace has one, else its launch order on that channel within the iteration — with the GPU
  work that ran on that rank before it since the rank's previous collective (its *lead*), as runs of
  operations per NVTX phase (the innermost range around the launching call), else per kernel name.
  The runs tile the lead: an idle gap counts with the run before it (the gap at the lead's start,
  with the first run). A lead with no GPU work at all is named `IDLE` (the rank's host was late).
* `critical_path` (across ranks): a collective kernel ends on every rank at about the same time, so
  the rank whose kernel started last (the *critical rank*) is the one the others waited for, and its
  kernel is the shortest; the wait of rank r is r's kernel duration minus that shortest one (equal to
  last start − r's start when the ends coincide). Durations, not starts, are compared because every
  rank's times are on its own clock (the two nsys sessions of the 2×H200 fixture started 26 ms apart
  and their collective ends still differ by 24-32 µs after aligning the session starts), while
  durations are not. The chain is walked back from the iteration's end: the tail on the rank with
  the longest work after its last collective, that collective on its critical rank, that rank's lead,
  the collective the lead started from, and so on to the iteration's start. What held a collective is
  the phase of the critical rank's lead that took the most longer than on the rank that waited longest
  (the one nearest the collective among equals). Each segment's start/end is on its own rank's
  clock; the iteration's length on the critical path is the sum of the chain's compute and
  collective segments.

Beside each collective, the rank's other work that ran during it (kind `overlap`: the union of its
operations other than collectives cut to the collective's span, keyed by the collective's channel
and seq; collective_wait.transfer_wait counts the transfer it hides). Times are ns. Tables (the
report consumes these names): one row per iteration (`ROW_COLUMNS`) and the chain's segments
(`SEGMENT_COLUMNS`; wait segments: the rank that waited longest in each collective of the chain).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hpcprof.analysis.ranges import inside
from hpcprof.core.catalog import CRITICAL_PATH_KEYS

if TYPE_CHECKING:
    from typing import TypeAlias

    import pandas as pd

    #: a DataFrame, or a mapping of column name to numpy array
    Table: TypeAlias = "pd.DataFrame | Mapping[str, np.ndarray]"

#: the name of a lead in which the rank's GPU ran nothing
IDLE = "[GPU idle]"
#: the kind of the rows of the other work a rank ran during one of its collectives (module docstring)
OVERLAP = "overlap"
EVENT_COLUMNS = ["rank", "iteration", "kind", "channel", "seq", "name", "start", "end", "prev_channel", "prev_seq"]
ROW_COLUMNS = ["iteration", "iteration_ns", "collective", "critical_rank", "held_by", "held_ns", "waiting_ranks"]
SEGMENT_COLUMNS = ["iteration", "segment", "rank", "kind", "name", "start_ns", "end_ns", "duration_ns"]
#: the per-rank table collect keeps (`<tool>_critical_path_events`) and the two it reduces it to
EVENTS_TABLE, ROWS_TABLE, SEGMENTS_TABLE = CRITICAL_PATH_KEYS
END = ("", -1)     # (channel, seq) of an iteration's end: its lead is the tail after the last collective
Segment = tuple[int, str, str, int, int]                                # rank, kind, name, start, end
Held = tuple[tuple[str, int], int, str, int, list[Segment]]             # key, critical rank, name, wait, lead


def empty_events() -> pd.DataFrame:
    """An events table without rows, with its column types."""
    import pandas as pd

    return pd.DataFrame({c: pd.Series(dtype=object if c in ("kind", "channel", "name", "prev_channel") else np.int64)
                         for c in EVENT_COLUMNS})


def str_each(values: np.ndarray) -> np.ndarray:
    """[str(v) for v in values] as an object array: one str() per distinct value (None, NaN: per row)."""
    import pandas as pd

    codes, distinct = pd.factorize(np.asarray(values, dtype=object))
    out = np.array([str(v) for v in distinct] + [""], dtype=object)[:-1][codes] if len(distinct) else \
        np.empty(len(codes), dtype=object)
    missing = np.flatnonzero(codes < 0)
    out[missing] = [str(v) for v in np.asarray(values, dtype=object)[missing].tolist()]
    return out


def _parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For ranges sorted by start, the index of each one's enclosing range on the stack walk
    (pop while the top ends before the range starts; the top left is its parent): the latest
    earlier range ending at or after its start (a range ending before it started was popped
    before, or is above it), -1 for none. By pointer jumping: each range's candidate moves to
    its candidate's candidate, skipping only ranges that end before it starts; O(n log n), no
    Python loop per range."""
    candidate = np.arange(-1, len(starts) - 1)
    parent = np.full(len(starts), -1, dtype=np.int64)
    todo = np.arange(len(starts))
    while len(todo):
        at = candidate[todo]
        done = (at < 0) | (ends[np.maximum(at, 0)] >= starts[todo])
        parent[todo[done]] = at[done]
        todo = todo[~done]
        candidate[todo] = candidate[candidate[todo]]
    return parent


def _innermost(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each time in `at`, the index of the innermost of the nested ranges (sorted by start, then
    longest first) that contains it; -1 where none does."""
    if len(starts) == 0:
        return np.full(len(at), -1, dtype=np.int64)
    parent = _parents(starts, ends)
    found = np.searchsorted(starts, at, side="right") - 1
    while True:
        outside = (found >= 0) & (ends[np.maximum(found, 0)] < at)
        if not outside.any():
            return found
        found[outside] = parent[found[outside]]


def _stacked(group: np.ndarray, t: np.ndarray, base: np.ndarray, span: np.ndarray) -> np.ndarray:
    """Times `t` of groups numbered 0..n-1 (`base`: each group's earliest time, `span`: its length) on
    one increasing axis: group g's times t in [base, base + span] map into a band of their own."""
    offset = np.concatenate(([0], np.cumsum(span + 1)[:-1]))
    return offset[group] + (t - base[group])


def _lead_runs(lead_lo: np.ndarray, lead_hi: np.ndarray, pair_lead: np.ndarray, pair_op: np.ndarray,
               starts: np.ndarray, label_code: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every lead [lo, hi] as (lead, first operation, start, end) runs of consecutive operations with the same
    label (`pair_lead`, `pair_op`: the operations of each lead, by lead then start); an idle lead as one run
    with operation -1 when hi > lo. The runs tile each lead (module docstring); in lead order."""
    new = np.ones(len(pair_lead), dtype=bool)
    new[1:] = (pair_lead[1:] != pair_lead[:-1]) | (label_code[pair_op[1:]] != label_code[pair_op[:-1]])
    first = np.flatnonzero(new)
    lead, op = pair_lead[first], pair_op[first]
    opens = np.ones(len(first), dtype=bool)
    opens[1:] = lead[1:] != lead[:-1]
    lo, hi = lead_lo[lead], lead_hi[lead]
    bound = np.where(opens, lo, np.clip(starts[op], lo, hi))
    # the running maximum within each lead: each lead's bounds in a band of their own on one axis
    span = np.maximum(lead_hi - lead_lo, 0)
    offset = np.concatenate(([0], np.cumsum(span + 1)[:-1]))
    begin = np.maximum.accumulate(offset[lead] + (bound - lo)) - offset[lead] + lo
    closes = np.ones(len(first), dtype=bool)
    closes[:-1] = opens[1:]                           # the last run of its lead ends at hi
    close = np.where(closes, hi, np.append(begin[1:], 0))
    idle = np.setdiff1d(np.flatnonzero(lead_hi > lead_lo), lead)
    lead = np.concatenate((lead, idle))
    order = np.argsort(lead, kind="stable")
    return (lead[order], np.concatenate((op, np.full(len(idle), -1)))[order],
            np.concatenate((begin, lead_lo[idle]))[order], np.concatenate((close, lead_hi[idle]))[order])


def _iteration_events(rank: np.ndarray, iteration: np.ndarray, number: np.ndarray, shift: np.ndarray,
                      is_coll: np.ndarray, start: np.ndarray, end: np.ndarray, channel: np.ndarray, seq: np.ndarray,
                      label: np.ndarray, kind: np.ndarray) -> dict[str, np.ndarray]:
    """The events columns from timed operations sorted by iteration (a key unique across parts; `rank`,
    `number` and `shift`: each operation's rank, iteration number and the shift of its part's times, taken
    off the rows' times), then start (module docstring): per iteration with collectives, each collective's
    lead and the collective, then the tail."""
    import pandas as pd

    bounds = np.flatnonzero(np.concatenate(([True], iteration[1:] != iteration[:-1])))
    size = np.diff(np.append(bounds, len(iteration)))
    group = np.repeat(np.arange(len(bounds)), size)
    has_coll = np.add.reduceat(is_coll.astype(np.int64), bounds) > 0 if len(bounds) else np.zeros(0, dtype=bool)
    first_start = np.minimum.reduceat(start, bounds) if len(bounds) else start[:0]
    last_end = np.maximum.reduceat(end, bounds) if len(bounds) else end[:0]
    span = last_end - first_start
    coll = np.flatnonzero(is_coll)                   # by iteration, then start
    c_group, cs, ce = group[coll], start[coll], end[coll]
    # each collective's previous one: the latest of its iteration to end before it starts (never itself)
    by_end = np.lexsort((ce, c_group))
    axis_end = _stacked(c_group, ce, first_start, span)[by_end]
    latest = np.searchsorted(axis_end, _stacked(c_group, cs, first_start, span), side="right") - 1
    j = np.arange(len(coll))
    latest = latest - ((latest >= 0) & (by_end[np.maximum(latest, 0)] == j))
    c_first = np.searchsorted(c_group[by_end], c_group, side="left")        # the iteration's first in by_end
    prev = np.where(latest >= c_first, by_end[np.maximum(latest, 0)], -1)
    # the tail: from the end of the iteration's (first) collective to end last, to the iteration's end
    groups = np.flatnonzero(has_coll)
    c_bounds = np.searchsorted(c_group, groups)
    if len(c_bounds):
        top = np.repeat(np.maximum.reduceat(ce, c_bounds), np.diff(np.append(c_bounds, len(coll))))
        last = np.minimum.reduceat(np.where(ce == top, np.arange(len(coll)), len(coll)), c_bounds)
    else:
        last = np.empty(0, dtype=np.int64)
    # leads: one per collective, then one tail per iteration with collectives
    lead_group = np.concatenate((c_group, groups))
    lead_lo = np.concatenate((np.where(prev >= 0, ce[np.maximum(prev, 0)], first_start[c_group]), ce[last]))
    lead_hi = np.concatenate((cs, last_end[groups]))
    work = np.flatnonzero(~is_coll)
    w_group = group[work]
    by_w_end = np.lexsort((end[work], w_group))
    axis_w = _stacked(w_group, end[work], first_start, span)[by_w_end]
    lo = np.searchsorted(axis_w, _stacked(lead_group, lead_lo, first_start, span), side="right")
    hi = np.searchsorted(axis_w, _stacked(lead_group, lead_hi, first_start, span), side="right")
    counts = np.maximum(hi - lo, 0)
    pair_lead = np.repeat(np.arange(len(lead_lo)), counts)
    pair_op = work[by_w_end[np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
                            + np.repeat(lo, counts)]]
    by_start = np.lexsort((pair_op, pair_lead))              # each lead's operations in start order
    label_code = pd.factorize(label)[0]
    run_lead, run_op, run_start, run_end = _lead_runs(lead_lo, lead_hi, pair_lead[by_start], pair_op[by_start],
                                                      start, label_code)
    over, over_start, over_end = inside(cs, ce, start[work], end[work])      # the work during each collective
    # rows: per iteration, per collective (start order) its lead's runs, itself, the work beside it; the tail
    n_c, n_runs, n_it, n_ov = len(coll), len(run_lead), len(groups), len(over)
    slot = np.concatenate((j - np.searchsorted(c_group, c_group), np.full(n_it, 1 << 40)))   # the tail last
    lead_key = np.concatenate((channel[coll], np.full(n_it, END[0], dtype=object)))
    lead_seq = np.concatenate((seq[coll], np.full(n_it, END[1])))
    key = (lambda i: np.where(i >= 0, channel[coll][np.maximum(i, 0)], END[0]),
           lambda i: np.where(i >= 0, seq[coll][np.maximum(i, 0)], END[1]))
    row_group = np.concatenate((lead_group[run_lead], c_group, groups, c_group[over]))
    row_slot = np.concatenate((slot[run_lead], slot[:n_c], np.full(n_it, 1 << 40), slot[over]))
    row_sub = np.repeat([0, 1, 1, 2], [n_runs, n_c, n_it, n_ov])
    order = np.lexsort((np.arange(len(row_group)), row_sub, row_slot, row_group))
    back = shift[bounds][row_group]
    run_name = np.array([IDLE if i < 0 else str(label[i]) for i in run_op.tolist()], dtype=object)
    cols = {
        "rank": rank[bounds][row_group],
        "iteration": number[bounds][row_group],
        "kind": np.repeat(np.array(["compute", "collective", "end", OVERLAP], dtype=object),
                          [n_runs, n_c, n_it, n_ov]),
        "channel": np.concatenate((lead_key[run_lead], channel[coll], np.full(n_it, END[0], dtype=object),
                                   channel[coll][over])),
        "seq": np.concatenate((lead_seq[run_lead], seq[coll], np.full(n_it, END[1]), seq[coll][over])),
        "name": np.concatenate((run_name, np.array([str(x) for x in kind[coll].tolist()], dtype=object),
                                np.full(n_it + n_ov, "", dtype=object))),
        "start": np.concatenate((run_start, cs, last_end[groups], over_start)) - back,
        "end": np.concatenate((run_end, ce, last_end[groups], over_end)) - back,
        "prev_channel": np.concatenate((np.full(n_runs, "", dtype=object), key[0](prev), channel[coll][last],
                                        np.full(n_ov, "", dtype=object))),
        "prev_seq": np.concatenate((np.full(n_runs, -1), key[1](prev), seq[coll][last], np.full(n_ov, -1)))}
    return {c: v[order].astype(object if v.dtype == object else np.int64) for c, v in cols.items()}


def rank_events(rank: int, ops: Table, iterations: Table, ranges: Table) -> pd.DataFrame:
    """rank_event_columns as a DataFrame (empty_events when it has no row)."""
    import pandas as pd

    columns = rank_event_columns(rank, ops, iterations, ranges)
    return pd.DataFrame(columns) if columns is not None else empty_events()


def rank_event_columns(rank: int, ops: Table, iterations: Table, ranges: Table) -> dict[str, np.ndarray] | None:
    """One rank's collectives per iteration and the GPU work before each (module docstring), as
    numpy columns (text as object arrays of str); None when it has no row.

    `ops`: the rank's GPU operations: start, end, launch (start of the launching CPU call; NaN/-1
    when unknown: left out; integer ns are used exactly), stream, name, collective (type, None for
    compute), and optionally channel (str) and seq (int, -1 where unknown) for collectives.
    `iterations`: number, start, end of the iteration ranges on the CPU. `ranges`: name, start, end
    of the other CPU ranges; those inside an iteration are its phases. Ranges are matched by time
    in the whole process, as the autograd and communication threads launch outside the thread that
    opened the range. Each a DataFrame or a mapping of column name to numpy array."""
    return events_of_ranks([(rank, ops, iterations, ranges)])


def events_of_ranks(parts: Sequence[tuple[int, Table, Table, Table]]) -> dict[str, np.ndarray] | None:
    """rank_event_columns of several (rank, ops, iterations, ranges) at once (ranks, or processes of
    a rank), their rows in the order of `parts`: each part's times moved into a band of their own on
    one axis (their order and differences kept), so that one pass of the array operations serves all
    of them; None when no part has a row."""
    import pandas as pd

    if not parts:
        return None
    keeps, ats = [], []
    for _, ops, _, _ in parts:
        launch = np.asarray(ops["launch"])
        if launch.dtype.kind not in "iu":  # integers stay exact (ns since the epoch pass 2**53)
            launch = launch if launch.dtype == np.float64 else pd.to_numeric(launch, errors="coerce").astype(np.float64)
        keep: np.ndarray = launch >= 0
        if launch.dtype.kind == "f":
            keep &= np.isfinite(launch)
        keeps.append(keep)
        ats.append(launch[keep].astype(np.int64))

    def joined(tables: list[Table], column: str, dtype: Any = None, default: Any = None) -> np.ndarray:
        arrays = [np.asarray(t[column], dtype=dtype) if column in t else np.full(len(np.asarray(t["start"])), default,
                                                                                  dtype=dtype) for t in tables]
        return np.concatenate(arrays) if arrays else np.empty(0, dtype=dtype)

    all_ops, all_its, all_ranges = [p[1] for p in parts], [p[2] for p in parts], [p[3] for p in parts]
    keep = np.concatenate(keeps)
    part_of_op = np.repeat(np.arange(len(parts)), [len(k) for k in keeps])[keep]
    at = np.concatenate(ats)
    start, end = joined(all_ops, "start", np.int64)[keep], joined(all_ops, "end", np.int64)[keep]
    kind = joined(all_ops, "collective", np.object_)[keep]
    it_part = np.repeat(np.arange(len(parts)), [len(np.asarray(t["start"])) for t in all_its])
    it_start, it_end = joined(all_its, "start", np.int64), joined(all_its, "end", np.int64)
    it_number = joined(all_its, "number", np.int64)
    ph_part = np.repeat(np.arange(len(parts)), [len(np.asarray(t["start"])) for t in all_ranges])
    ph_start, ph_end = joined(all_ranges, "start", np.int64), joined(all_ranges, "end", np.int64)
    if not len(at) or not len(it_start):
        return None
    # each part's times in a band of its own: t + shift[part]; parts too long to share one axis one by one
    times = np.concatenate((start, end, at, it_start, it_end, ph_start, ph_end))
    owner = np.concatenate((part_of_op, part_of_op, part_of_op, it_part, it_part, ph_part, ph_part))
    low, high = np.full(len(parts), np.iinfo(np.int64).max), np.full(len(parts), np.iinfo(np.int64).min)
    np.minimum.at(low, owner, times)
    np.maximum.at(high, owner, times)
    present = high >= low
    span = np.where(present, high - low, 0)
    if len(parts) > 1 and float(np.sum(span.astype(np.float64) + 1)) >= 2.0 ** 62:
        each = [cols for part in parts if (cols := events_of_ranks([part])) is not None]
        return {c: np.concatenate([e[c] for e in each]) for c in EVENT_COLUMNS} if each else None
    shift = np.concatenate(([0], np.cumsum(span + 1)[:-1])) - np.where(present, low, 0)
    start, end, at = start + shift[part_of_op], end + shift[part_of_op], at + shift[part_of_op]
    it_start, it_end = it_start + shift[it_part], it_end + shift[it_part]
    ph_start, ph_end = ph_start + shift[ph_part], ph_end + shift[ph_part]

    by_start = np.argsort(it_start, kind="stable")
    it_start, it_end, it_part, it_number = it_start[by_start], it_end[by_start], it_part[by_start], it_number[by_start]
    is_coll = pd.notna(kind)
    k = np.searchsorted(it_start, at, side="right") - 1
    inside = (k >= 0) & (at <= it_end[np.maximum(k, 0)])
    # an iteration: a key per (part, number), so that ranges of one number in one part are one iteration
    it_key = np.unique(np.stack((it_part, it_number)), axis=1, return_inverse=True)[1].reshape(-1)
    iteration = np.where(inside, it_key[np.maximum(k, 0)], -1)
    number = it_number[np.maximum(k, 0)]

    # phases: ranges inside an iteration; the innermost one around each launch names the operation
    ph = np.lexsort((-ph_end, ph_start))          # by start, then longest first; stable
    pk = np.searchsorted(it_start, ph_start[ph], side="right") - 1
    ph = ph[(pk >= 0) & (ph_end[ph] <= it_end[np.maximum(pk, 0)])]
    found = _innermost(ph_start[ph], ph_end[ph], at)
    phase = np.where(found >= 0, joined(all_ranges, "name", np.object_)[ph][np.maximum(found, 0)] if len(ph)
                     else None, None)
    label = np.where(pd.isna(phase), joined(all_ops, "name", np.object_)[keep], phase)

    channel = joined(all_ops, "channel", np.object_)[keep]
    named = np.repeat(np.array(["channel" in ops for ops in all_ops]), [len(k) for k in keeps])[keep]
    if not named.all():                           # NCCL streams in order of first use, per part
        stream = joined(all_ops, "stream", np.int64, -1)[keep]
        channel[~named] = _stream_channels(part_of_op[~named], stream[~named], start[~named], is_coll[~named])
    seq = joined(all_ops, "seq", np.int64, -1)[keep]
    order = np.lexsort((end, start))              # by start, then end; stable (bands: by part first)
    start, end, iteration, number, is_coll, channel, seq, label, kind, part_of_op = (
        a[order] for a in (start, end, iteration, number, is_coll, channel, seq, label, kind, part_of_op))
    # a collective's launch order on its channel within the iteration, where the trace gives no seq
    numbered = is_coll & pd.notna(channel)
    channel_code = pd.factorize(channel[numbered])[0]
    groups = np.unique(iteration[numbered] * (int(channel_code.max(initial=0)) + 1) + channel_code,
                       return_inverse=True)[1].reshape(-1)
    rank_in_group = np.zeros(len(groups), dtype=np.int64)
    if len(groups):
        by_group = np.argsort(groups, kind="stable")
        sorted_groups = groups[by_group]
        group_first = np.flatnonzero(np.concatenate(([True], sorted_groups[1:] != sorted_groups[:-1])))
        sizes = np.diff(np.append(group_first, len(groups)))
        rank_in_group[by_group] = np.arange(len(groups)) - np.repeat(group_first, sizes)
    seq[numbered] = np.where(seq[numbered] >= 0, seq[numbered], rank_in_group)

    # the timed operations by part, iteration number (each in start order)
    timed = np.flatnonzero(iteration >= 0)
    timed = timed[np.lexsort((number[timed], part_of_op[timed]))]
    ranks = np.array([rank for rank, _, _, _ in parts], dtype=np.int64)
    cols = _iteration_events(ranks[part_of_op[timed]], iteration[timed], number[timed], shift[part_of_op[timed]],
                             is_coll[timed], start[timed], end[timed], str_each(channel[timed]), seq[timed],
                             label[timed], kind[timed])
    return cols if len(cols["rank"]) else None


def _stream_channels(part: np.ndarray, stream: np.ndarray, start: np.ndarray, is_coll: np.ndarray) -> np.ndarray:
    """Each operation's channel where the trace names none: its NCCL stream as `stream<i>`, i the
    order of the stream's first collective within the operation's part (ties by stream id); None on a
    stream of no collective."""
    out = np.full(len(stream), None, dtype=object)
    if not is_coll.any():
        return out
    values, code = np.unique(stream, return_inverse=True)
    key = part * len(values) + code.reshape(-1)                 # (part, stream) in that order
    keys, which = np.unique(key[is_coll], return_inverse=True)
    first = np.full(len(keys), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, which.reshape(-1), start[is_coll])
    owner = keys // len(values)
    order = np.lexsort((keys, first, owner))                    # per part: by first use, then stream id
    position = np.empty(len(keys), dtype=np.int64)
    position[order] = np.arange(len(keys)) - np.searchsorted(owner[order], owner[order], side="left")
    names = np.array([f"stream{i}" for i in position.tolist()], dtype=object)
    at = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
    found = keys[at] == key
    out[found] = names[at[found]]
    return out
def _culprit(lead: list[Segment], other: list[Segment]) -> str:
    """What held a collective on its critical rank: of the runs of its lead, the phase that took the most
    longer than on the rank that waited longest (`other`'s lead into the same collective); among equals
    the one nearest the collective. IDLE for a lead without GPU work."""
    if not lead:
        return IDLE
    excess: dict[str, int] = {}
    for _, _, name, start, end in lead:
        excess[name] = excess.get(name, 0) + end - start
    for _, _, name, start, end in other:
        if name in excess:
            excess[name] -= end - start
    most = max(excess.values())
    return next(name for _, _, name, _, _ in reversed(lead) if excess[name] == most)


def _dense(*columns: np.ndarray) -> np.ndarray:
    """One code per distinct combination of `columns` (equal rows, equal codes; integer columns).
    The columns are combined in mixed radix (each shifted to start at 0) and hashed once, where
    their ranges' product fits in int64; else each is combined with the codes so far and the
    result made dense again (no overflow)."""
    import pandas as pd

    if not len(columns[0]):
        return np.zeros(0, dtype=np.int64)
    lows = [int(column.min()) for column in columns]
    sizes = [int(column.max()) - low + 1 for column, low in zip(columns, lows, strict=True)]
    if float(np.prod(np.array(sizes, dtype=np.float64))) < 2.0 ** 62:
        code = np.zeros(len(columns[0]), dtype=np.int64)
        for column, low, size in zip(columns, lows, sizes, strict=True):
            code = code * size + (column.astype(np.int64, copy=False) - low)
        return pd.factorize(code)[0]
    code = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        values, _ = pd.factorize(column)
        code, _ = pd.factorize(code * (int(values.max(initial=0)) + 1) + values)
    return code


def _in_order(*keys: np.ndarray) -> bool:
    """Whether the rows are already sorted by `keys` (the first the most significant), as a stable
    np.lexsort of them would leave them: the events of collect's ranks are, in rank order."""
    if len(keys[0]) < 2:
        return True
    later, same = np.zeros(len(keys[0]) - 1, dtype=bool), np.ones(len(keys[0]) - 1, dtype=bool)
    for key in keys:
        step = np.diff(key)
        later |= same & (step > 0)
        same &= step == 0
    return bool((later | same).all())


def _text_codes(column: pd.Series) -> tuple[np.ndarray, dict[str, int]]:
    """A text column as codes and {text: code}, without a str per row (an Arrow-backed column is
    dictionary-encoded in Arrow); a missing value is a text of its own, str() of it."""
    import pandas as pd

    codes, uniques = pd.factorize(column, use_na_sentinel=False)
    return codes.astype(np.int64), {str(u): i for i, u in enumerate(uniques)}


def _first_where(group: np.ndarray, hit: np.ndarray, ngroups: int) -> np.ndarray:
    """Per group (codes of rows in order), the first row where `hit` is true (-1 where none)."""
    rows = np.flatnonzero(hit)
    first = np.full(ngroups, -1, dtype=np.int64)
    first[group[rows][::-1]] = rows[::-1]
    return first


def critical_path(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per iteration, the chain's segments) from every rank's `rank_events` (module docstring).
    Needs collectives of at least two ranks; otherwise both tables are empty. Columnar: text columns
    as codes, each collective's critical rank and longest wait by group reductions, a lead found by
    binary search in the rows sorted by rank and iteration (no Python object per event row)."""
    import pandas as pd

    rows_out = pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
        ROW_COLUMNS, ("int64", "float64", "object", "int64", "object", "float64", "int64"), strict=True)})
    segs_out = pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
        SEGMENT_COLUMNS, ("int64", "int64", "int64", "object", "object", "float64", "float64", "float64"),
        strict=True)})
    if events is None or events.empty:
        return rows_out, segs_out
    rank, iteration, seq, start, end, prev_seq = (events[c].to_numpy(np.int64) for c in
                                                  ("rank", "iteration", "seq", "start", "end", "prev_seq"))
    kind, kinds = _text_codes(events["kind"])
    is_coll = kind == kinds.get("collective", -1)
    if not is_coll.any() or rank[is_coll].min() == rank[is_coll].max():
        return rows_out, segs_out
    name, names = _text_codes(events["name"])
    channel, channels = _text_codes(events["channel"])
    prev_channel, prev_channels = _text_codes(events["prev_channel"])
    prev_channel = np.array([channels.setdefault(c, len(channels)) for c in prev_channels], dtype=np.int64)[prev_channel]
    if not _in_order(rank, iteration, start):                    # rank, iteration, start (stable)
        order = np.lexsort((start, iteration, rank))
        rank, iteration, seq, start, end, prev_seq, kind, name, channel, prev_channel = (
            a[order] for a in (rank, iteration, seq, start, end, prev_seq, kind, name, channel, prev_channel))
        is_coll = kind == kinds.get("collective", -1)
    channel_text = np.array(list(channels), dtype=object)
    name_text = np.array(list(names), dtype=object)

    # per collective (iteration, channel, seq): its critical rank (the shortest kernel, the first of
    # equals), the rank that waited longest (the first of equals) and how many waited
    coll = np.flatnonzero(is_coll)
    group = _dense(iteration[coll], channel[coll], seq[coll])
    ngroups = int(group.max()) + 1
    dur = end[coll] - start[coll]
    shortest = np.full(ngroups, np.iinfo(np.int64).max)
    np.minimum.at(shortest, group, dur)
    wait = dur - shortest[group]
    longest = np.full(ngroups, -1, dtype=np.int64)
    np.maximum.at(longest, group, wait)
    crit = coll[_first_where(group, dur == shortest[group], ngroups)]
    waiter_at = _first_where(group, wait == longest[group], ngroups)
    waiting = np.bincount(group, weights=wait > 0, minlength=ngroups).astype(np.int64)
    node: dict[tuple[int, str, int], tuple[int, str, int, int, tuple[str, int]]] = {}
    hold: dict[tuple[int, str, int], tuple[int, int, int]] = {}
    waiting_of: dict[tuple[int, str, int], int] = {}
    for g in range(ngroups):
        c, w = int(crit[g]), int(waiter_at[g])
        key = (int(iteration[c]), str(channel_text[channel[c]]), int(seq[c]))
        node[key] = (int(rank[c]), str(name_text[name[c]]), int(start[c]), int(end[c]),
                     (str(channel_text[prev_channel[c]]), int(prev_seq[c])))
        hold[key] = (int(rank[coll[w]]), int(wait[w]), int(start[coll[w]]))
        waiting_of[key] = int(waiting[g])

    # the tail: per iteration, the rank with the most work after its last collective (its end row's
    # previous collective, on the same rank)
    ends = np.flatnonzero(kind == kinds.get("end", -1))
    row_key = _dense(np.concatenate((rank[coll], rank[ends])), np.concatenate((iteration[coll], iteration[ends])),
                     np.concatenate((channel[coll], prev_channel[ends])), np.concatenate((seq[coll], prev_seq[ends])))
    coll_keys, first = np.unique(row_key[:len(coll)], return_index=True)
    at = np.minimum(np.searchsorted(coll_keys, row_key[len(coll):]), len(coll_keys) - 1)
    matched = coll_keys[at] == row_key[len(coll):]
    ends = ends[matched]
    tail = start[ends] - end[coll[first[at[matched]]]]
    its, it_code = np.unique(iteration[ends], return_inverse=True)
    most = np.full(len(its), np.iinfo(np.int64).min)
    np.maximum.at(most, it_code, tail)
    last = ends[_first_where(it_code, tail == most[it_code], len(its))]

    compute = np.flatnonzero(kind == kinds.get("compute", -1))
    first_iteration = int(iteration.min())
    span = int(iteration.max()) - first_iteration + 1
    lead_key = rank[compute] * span + (iteration[compute] - first_iteration)   # sorted: rank, then iteration
    c_channel, c_seq = channel[compute], seq[compute]
    rows: list[tuple[Any, ...]] = []
    segs: list[tuple[Any, ...]] = []
    for t in last.tolist():
        it = int(iteration[t])

        def lead_of(r: int, k: tuple[str, int], it: int = it) -> list[Segment]:
            """The compute runs of rank r's lead into collective k (channel, seq) of iteration it."""
            lo, hi = np.searchsorted(lead_key, [r * span + it - first_iteration, r * span + it - first_iteration + 1])
            ch = channels.get(k[0], -1)
            idx = compute[lo:hi][(c_channel[lo:hi] == ch) & (c_seq[lo:hi] == k[1])]
            return [(r, "compute", str(name_text[name[i]]), int(start[i]), int(end[i])) for i in idx.tolist()]

        blocks: list[tuple[list[Segment], Held | None]] = [(lead_of(int(rank[t]), END), None)]
        into, seen = (str(channel_text[prev_channel[t]]), int(prev_seq[t])), set()
        while into != END and (node_key := (it, *into)) in node and into not in seen:
            seen.add(into)
            r, nm, s, e, prev = node[node_key]
            w_rank, w, w_start = hold[node_key]
            lead = lead_of(r, into)
            waited: list[Segment] = [(w_rank, "wait", nm, w_start, w_start + w)] if w > 0 else []
            blocks.append((lead + waited + [(r, "collective", nm, s, e)], (into, r, nm, w, lead)))
            into = prev
        chain = [seg for block, _ in reversed(blocks) for seg in block]
        held = [info for _, info in reversed(blocks) if info is not None]
        if not held:
            continue
        on_path = sum(e - s for _, k, _, s, e in chain if k != "wait")
        k, r, nm, w, lead = max(held, key=lambda h: h[3])      # the first of equal waits
        node_key = (it, *k)
        rows.append((it, float(on_path), nm, r, _culprit(lead, lead_of(hold[node_key][0], k)), float(w),
                     waiting_of[node_key]))
        segs += [(it, i, rr, kk, n, float(s), float(e), float(e - s)) for i, (rr, kk, n, s, e) in enumerate(chain)]
    if rows:
        rows_out = pd.DataFrame(rows, columns=ROW_COLUMNS).astype(rows_out.dtypes.to_dict())
    if segs:
        segs_out = pd.DataFrame(segs, columns=SEGMENT_COLUMNS).astype(segs_out.dtypes.to_dict())
    return rows_out, segs_out


def collect_tables(read: Callable[[str], pd.DataFrame | None], log: Callable[[str], None]) -> dict[str, pd.DataFrame]:
    """`collect`'s cross-rank critical-path tables from the concatenated per-rank events table
    (none without it): a cross-rank step of the nsys and torch collectors (collector.Reducer)."""
    from hpcprof.analysis.clocks import aligned

    events = read(EVENTS_TABLE)
    if events is None or events.empty:
        return {}
    events, said = aligned(events)        # ranks' clocks far apart: moved onto one, and said
    if said is not None:
        log(f"critical path: {said}")
    rows, segments = critical_path(events)
    return {ROWS_TABLE: rows, SEGMENTS_TABLE: segments} if len(rows) else {}


def _duration(ns: float) -> str:
    return f"{ns / 1e6:.3g} ms" if ns >= 1e5 else f"{ns / 1e3:.3g} µs"


def critical_path_sentence(row: Mapping[str, Any]) -> str:
    """One finding from a row of the critical-path table, e.g.
    "iteration 12: rank 3's matmul2 held the ReduceScatter for 0.4 ms"."""
    if float(row["held_ns"]) <= 0:
        return f"iteration {int(row['iteration'])}: no rank waited for another in a collective"
    head = f"iteration {int(row['iteration'])}: rank {int(row['critical_rank'])}"
    held = _duration(float(row["held_ns"]))
    if row["held_by"] == IDLE:
        return f"{head} held the {row['collective']} for {held} (its GPU had no work before it: its host was late)"
    return f"{head}'s {row['held_by']} held the {row['collective']} for {held}"
