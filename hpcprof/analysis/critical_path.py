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
  (the one nearest the collective among equals). Each segment's start/end
  is on its own rank's clock; the iteration's length on the critical path is the sum of the chain's
  compute and collective segments.

Times are ns. Tables (the report consumes these names): one row per iteration (`ROW_COLUMNS`) and
the chain's segments (`SEGMENT_COLUMNS`; wait segments: the rank that waited longest in each
collective of the chain).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    #: a DataFrame, or a mapping of column name to numpy array
    Table = pd.DataFrame | Mapping[str, np.ndarray]

#: the name of a lead in which the rank's GPU ran nothing
IDLE = "[GPU idle]"
EVENT_COLUMNS = ["rank", "iteration", "kind", "channel", "seq", "name", "start", "end", "prev_channel", "prev_seq"]
ROW_COLUMNS = ["iteration", "iteration_ns", "collective", "critical_rank", "held_by", "held_ns", "waiting_ranks"]
SEGMENT_COLUMNS = ["iteration", "segment", "rank", "kind", "name", "start_ns", "end_ns", "duration_ns"]
#: the per-rank table collect keeps (`<tool>_critical_path_events`) and the two it reduces it to
EVENTS_TABLE, ROWS_TABLE, SEGMENTS_TABLE = "critical_path_events", "critical_path", "critical_path_segments"
END = ("", -1)     # (channel, seq) of an iteration's end: its lead is the tail after the last collective
Segment = tuple[int, str, str, int, int]                                # rank, kind, name, start, end
Held = tuple[tuple[str, int], int, str, int, list[Segment]]             # key, critical rank, name, wait, lead


def empty_events() -> pd.DataFrame:
    """An events table without rows, with its column types."""
    import pandas as pd

    return pd.DataFrame({c: pd.Series(dtype=object if c in ("kind", "channel", "name", "prev_channel") else np.int64)
                         for c in EVENT_COLUMNS})


def _innermost(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each time in `at`, the index of the innermost of the nested ranges (sorted by start, then
    longest first) that contains it; -1 where none does."""
    if len(starts) == 0:
        return np.full(len(at), -1, dtype=np.int64)
    parent = np.full(len(starts), -1, dtype=np.int64)
    stack: list[int] = []
    for i in range(len(starts)):
        while stack and ends[stack[-1]] < starts[i]:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    found = np.searchsorted(starts, at, side="right") - 1
    while True:
        outside = (found >= 0) & (ends[np.maximum(found, 0)] < at)
        if not outside.any():
            return found
        found[outside] = parent[found[outside]]


def _runs(labels: np.ndarray, starts: np.ndarray, lo: int, hi: int) -> list[tuple[str, int, int]]:
    """The lead [lo, hi] as (name, start, end) runs of consecutive operations with the same label."""
    if len(labels) == 0:
        return [(IDLE, lo, hi)] if hi > lo else []
    first = np.flatnonzero(np.concatenate(([True], labels[1:] != labels[:-1])))
    bounds = [lo] + [int(min(max(starts[i], lo), hi)) for i in first[1:]] + [hi]
    bounds = list(np.maximum.accumulate(bounds))
    return [(str(labels[i]), int(bounds[k]), int(bounds[k + 1])) for k, i in enumerate(first)]


def rank_events(rank: int, ops: Table, iterations: Table, ranges: Table) -> pd.DataFrame:
    """One rank's collectives per iteration and the GPU work before each (module docstring).

    `ops`: the rank's GPU operations: start, end, launch (start of the launching CPU call; NaN/-1
    when unknown: left out), stream, name, collective (type, None for compute), and optionally
    channel (str) and seq (int, -1 where unknown) for collectives. `iterations`: number, start, end
    of the iteration ranges on the CPU. `ranges`: name, start, end of the other CPU ranges; those
    inside an iteration are its phases. Ranges are matched by time in the whole process, as the
    autograd and communication threads launch outside the thread that opened the range. Each a
    DataFrame or a mapping of column name to numpy array."""
    import pandas as pd

    launch = np.asarray(ops["launch"])
    launch = launch if launch.dtype == np.float64 else pd.to_numeric(launch, errors="coerce").astype(np.float64)
    keep = np.isfinite(launch) & (launch >= 0)
    it_start = np.asarray(iterations["start"], dtype=np.int64)
    if not keep.any() or len(it_start) == 0:
        return empty_events()
    by_start = np.argsort(it_start, kind="stable")
    it_start, it_end = it_start[by_start], np.asarray(iterations["end"], dtype=np.int64)[by_start]
    start, end = np.asarray(ops["start"], dtype=np.int64)[keep], np.asarray(ops["end"], dtype=np.int64)[keep]
    at = launch[keep].astype(np.int64)
    kind = np.asarray(ops["collective"], dtype=object)[keep]
    is_coll = pd.notna(kind)
    k = np.searchsorted(it_start, at, side="right") - 1
    inside = (k >= 0) & (at <= it_end[np.maximum(k, 0)])
    iteration = np.where(inside, np.asarray(iterations["number"], dtype=np.int64)[by_start][np.maximum(k, 0)], -1)

    # phases: ranges inside an iteration; the innermost one around each launch names the operation
    ph_start, ph_end = np.asarray(ranges["start"], dtype=np.int64), np.asarray(ranges["end"], dtype=np.int64)
    ph = np.lexsort((-ph_end, ph_start))          # by start, then longest first; stable
    pk = np.searchsorted(it_start, ph_start[ph], side="right") - 1
    ph = ph[(pk >= 0) & (ph_end[ph] <= it_end[np.maximum(pk, 0)])]
    found = _innermost(ph_start[ph], ph_end[ph], at)
    phase = np.where(found >= 0, np.asarray(ranges["name"], dtype=object)[ph][np.maximum(found, 0)] if len(ph)
                     else None, None)
    label = np.where(pd.isna(phase), np.asarray(ops["name"], dtype=object)[keep], phase)

    if "channel" in ops:
        channel = np.asarray(ops["channel"], dtype=object)[keep]
    else:                                         # NCCL streams in order of first use
        stream = np.asarray(ops["stream"])[keep]
        streams, which = np.unique(stream[is_coll], return_inverse=True)
        first = np.full(len(streams), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, which.reshape(-1), start[is_coll])
        names = {s: f"stream{i}" for i, s in enumerate(streams[np.argsort(first, kind="stable")].tolist())}
        channel = np.array([names.get(s) for s in stream.tolist()], dtype=object)
    seq = np.asarray(ops["seq"], dtype=np.int64)[keep] if "seq" in ops else np.full(len(start), -1, dtype=np.int64)
    order = np.lexsort((end, start))              # by start, then end; stable
    start, end, iteration, is_coll, channel, seq, label, kind = (
        a[order] for a in (start, end, iteration, is_coll, channel, seq, label, kind))
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

    # the timed operations by iteration (each in start order): one slice per iteration
    timed = np.flatnonzero(iteration >= 0)
    timed = timed[np.argsort(iteration[timed], kind="stable")]
    iteration, is_coll, start, end = iteration[timed], is_coll[timed], start[timed], end[timed]
    channel = [str(c) for c in channel[timed].tolist()]
    seq_of, label, kind = seq[timed].tolist(), label[timed], kind[timed]
    bounds = np.flatnonzero(np.concatenate(([True], iteration[1:] != iteration[:-1], [True]))).tolist()
    rows: list[tuple[Any, ...]] = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        coll = a + np.flatnonzero(is_coll[a:b])
        if not len(coll):
            continue
        number = int(iteration[a])
        work = a + np.flatnonzero(~is_coll[a:b])
        cs, ce = start[coll], end[coll]
        keys = [(channel[i], seq_of[i]) for i in coll.tolist()]
        ws, we, wl = start[work], end[work], label[work]
        first_start, last_end = int(start[a:b].min()), int(end[a:b].max())
        names = kind[coll]

        def lead(key: tuple[str, int], lo: int, hi: int, number: int = number, ws: np.ndarray = ws,
                 we: np.ndarray = we, wl: np.ndarray = wl) -> None:
            sel = (we > lo) & (we <= hi)
            for name, s, e in _runs(wl[sel], ws[sel], lo, hi):
                rows.append((rank, number, "compute", key[0], key[1], name, s, e, "", -1))

        by_end = np.argsort(ce, kind="stable")          # the previous collective: the latest to end before
        latest = np.searchsorted(ce[by_end], cs, side="right") - 1
        for j in range(len(cs)):
            i = int(latest[j]) - int(latest[j] >= 0 and by_end[latest[j]] == j)   # never itself (0 ns)
            prev = int(by_end[i]) if i >= 0 else -1
            lo = int(ce[prev]) if prev >= 0 else first_start
            pkey = keys[prev] if prev >= 0 else END
            lead(keys[j], lo, int(cs[j]))
            rows.append((rank, number, "collective", keys[j][0], keys[j][1], str(names[j]),
                         int(cs[j]), int(ce[j]), pkey[0], pkey[1]))
        last = int(np.argmax(ce))
        lead(END, int(ce[last]), last_end)
        rows.append((rank, number, "end", END[0], END[1], "", last_end, last_end, keys[last][0], keys[last][1]))
    if not rows:
        return empty_events()
    return pd.DataFrame({c: np.array(v, dtype=object if c in ("kind", "channel", "name", "prev_channel") else np.int64)
                         for c, v in zip(EVENT_COLUMNS, zip(*rows, strict=True), strict=True)})


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


def critical_path(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per iteration, the chain's segments) from every rank's `rank_events` (module docstring).
    Needs collectives of at least two ranks; otherwise both tables are empty."""
    import pandas as pd

    rows_out = pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
        ROW_COLUMNS, ("int64", "float64", "object", "int64", "object", "float64", "int64"), strict=True)})
    segs_out = pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
        SEGMENT_COLUMNS, ("int64", "int64", "int64", "object", "object", "float64", "float64", "float64"),
        strict=True)})
    if events is None or events.empty or events.loc[events["kind"] == "collective", "rank"].nunique() < 2:
        return rows_out, segs_out
    events = events.sort_values(["rank", "iteration", "start"], kind="stable").reset_index(drop=True)
    key = ["iteration", "channel", "seq"]
    coll = events[events["kind"] == "collective"].copy()
    coll["dur"] = coll["end"] - coll["start"]
    by_key = coll.groupby(key, sort=False)
    coll["wait"] = coll["dur"] - by_key["dur"].transform("min")
    crit = coll.loc[by_key["dur"].idxmin()].set_index(key)
    waiter = coll.loc[by_key["wait"].idxmax()].set_index(key)
    waiting = (coll["wait"] > 0).groupby([coll[k] for k in key]).sum()
    node = {k: (int(r["rank"]), str(r["name"]), int(r["start"]), int(r["end"]), (str(r["prev_channel"]), int(r["prev_seq"])))
            for k, r in crit.iterrows()}
    hold = {k: (int(r["rank"]), int(r["wait"]), int(r["start"])) for k, r in waiter.iterrows()}

    # the tail: per iteration, the rank with the most work after its last collective
    ends = events[events["kind"] == "end"].merge(
        coll[["rank", "iteration", "channel", "seq", "end"]].rename(
            columns={"channel": "prev_channel", "seq": "prev_seq", "end": "prev_end"}),
        on=["rank", "iteration", "prev_channel", "prev_seq"])
    ends["tail"] = ends["start"] - ends["prev_end"]
    last = ends.loc[ends.groupby("iteration")["tail"].idxmax()]
    compute = events[events["kind"] == "compute"]
    leads = compute.groupby(["rank", "iteration", "channel", "seq"], sort=False).indices
    names, starts, stops = (compute[c].to_numpy() for c in ("name", "start", "end"))

    rows, segs = [], []
    for _, t in last.iterrows():
        it = int(t["iteration"])

        def lead_of(rank: int, k: tuple[str, int], it: int = it) -> list[Segment]:
            idx = leads.get((rank, it, k[0], k[1]), [])
            return [(rank, "compute", str(names[i]), int(starts[i]), int(stops[i])) for i in idx]

        blocks: list[tuple[list[Segment], Held | None]] = [(lead_of(int(t["rank"]), END), None)]
        at, seen = (str(t["prev_channel"]), int(t["prev_seq"])), set()
        while at != END and (node_key := (it, *at)) in node and at not in seen:
            seen.add(at)
            rank, name, start, end, prev = node[node_key]
            w_rank, wait, w_start = hold[node_key]
            lead = lead_of(rank, at)
            waited = [(w_rank, "wait", name, w_start, w_start + wait)] if wait > 0 else []
            blocks.append((lead + waited + [(rank, "collective", name, start, end)], (at, rank, name, wait, lead)))
            at = prev
        chain = [seg for block, _ in reversed(blocks) for seg in block]
        held = [info for _, info in reversed(blocks) if info is not None]
        if not held:
            continue
        on_path = sum(e - s for _, kind, _, s, e in chain if kind != "wait")
        k, rank, name, wait, lead = max(held, key=lambda h: h[3])      # the first of equal waits
        node_key = (it, *k)
        rows.append((it, float(on_path), name, rank, _culprit(lead, lead_of(hold[node_key][0], k)), float(wait),
                     int(waiting.get(node_key, 0))))
        segs += [(it, i, r, kind, n, float(s), float(e), float(e - s)) for i, (r, kind, n, s, e) in enumerate(chain)]
    if rows:
        rows_out = pd.DataFrame(rows, columns=ROW_COLUMNS).astype(rows_out.dtypes.to_dict())
    if segs:
        segs_out = pd.DataFrame(segs, columns=SEGMENT_COLUMNS).astype(segs_out.dtypes.to_dict())
    return rows_out, segs_out


def collect_tables(read: Callable[[str], pd.DataFrame | None]) -> dict[str, pd.DataFrame]:
    """`collect`'s cross-rank tables from the concatenated per-rank events table (none without it)."""
    events = read(EVENTS_TABLE)
    if events is None or events.empty:
        return {}
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
