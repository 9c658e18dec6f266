"""NVTX ranges projected onto the GPU, as nsys's SQL computes them: `nvtx_gpu_proj_trace` (nsys
2022.4: `nvtxgpuproj`), `nvtx_gpu_proj_sum` (2024+ only) and `nvtx_kern_sum` (2022.4: `nvtxkernsum`).

The rules, read from the report scripts of nsys 2022.4 and 2025.3.1 (their SQL):
- A range is a push/pop or start/end NVTX event (types 59, 60, 70, 71) that ends on the thread it
  started on (`endGlobalTid IS NULL`); an unterminated one ends at the last NVTX timestamp (2022.4:
  of every NVTX event; 2025: of the ranges). It *encloses* a CUDA API call of its own thread when
  range start <= call start and call end <= range end (both bounds inclusive); a GPU operation
  (kernel, memcpy, memset) belongs to the call of the same correlation id and process.
- Its name: 2022.4 `domain:text`, or the text alone outside a named domain (NULL where the text
  is); 2025 always `domain:text`, empty parts as "" (`:text`). A domain is named by its create
  event (type 75): the first per (domain, thread), joined by process.
- Parent: the enclosing range of the same thread (not itself) with the smallest
  (child start - parent start) + (parent end - child end), ties to the first range (row id);
  level and range stack follow parents from the roots; a range whose chain of parents never
  reaches a root (two equal ranges are each other's parent) has no level, stack or parent id.
- Trace: one row per range enclosing at least one launch: projected start = first operation
  start, duration = last operation end - that start, NumGPUOps = distinct correlation ids,
  NumChild = children that are rows too. Rows by range id: the SQL's `ORDER BY "Projected
  Start", "Projected Duration" DESC` names no column (the columns are "Projected Start:ts_ns"
  and "Projected Duration:dur_ns"), so SQLite reads both as string constants and the rows keep
  the GROUP BY order of the projection (range id ascending), in 2022.4 and 2025.3.1 alike.
- Summary: trace rows per (name, style), ordered by total projected time descending, ties in
  (name, style) order; averages of level skip ranges without one.
- Kernel summary: every kernel once per enclosing range (once with NULL range where none, NULL
  PID/TID where its call is missing) per (PID, TID, range, style, kernel name); ordered by range
  name, PID, TID (NULL first), total descending, ties by style and kernel name.
"""

from __future__ import annotations

import numpy as np

from hpcprof.tools.nsys.stats.db import Export, process_of
from hpcprof.tools.nsys.stats.loaders import kernels
from hpcprof.tools.nsys.stats.numerics import Groups, group_codes, join_rows, round1_array
from hpcprof.tools.nsys.stats.schema import (
    GPU_TABLES,
    NVTX,
    NVTX_DOMAIN_CREATE,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    OLD,
    RUNTIME,
)
from hpcprof.tools.nsys.stats.table import Table, make_table, null_text

RANGE_TYPES = NVTX_PUSHPOP + NVTX_STARTEND


#: a projection input or result: named numpy columns of equal length
Columns = dict[str, np.ndarray]


def _optional(export: Export, column: str) -> str:
    return f'"{column}"' if column in export.columns(NVTX) else "NULL"


def nvtx_projection_ranges(export: Export, layout: str) -> tuple[Columns, tuple[int, int]]:
    """The ranges nsys projects (columns id, start, end, has_end, tid, name, style), by row id, and
    the first and last timestamp of every range (nsys 2025's NVTX_EVENTS_MINMAXTS); read once per
    export and layout (the projection reports share them; callers do not modify them)."""
    return export.memo(f"nvtx_projection_ranges/{layout}", lambda: _read_projection_ranges(export, layout))


def _read_projection_ranges(export: Export, layout: str) -> tuple[Columns, tuple[int, int]]:
    types = ", ".join(map(str, RANGE_TYPES))
    rows = export.sql_rows(
        f'SELECT rowid, start, "end", eventType, globalTid, {_optional(export, "endGlobalTid")}, '
        f'{_optional(export, "textId")}, {_optional(export, "domainId")}, {_optional(export, "text")} '
        f"FROM {NVTX} WHERE eventType IN ({types}, {NVTX_DOMAIN_CREATE}) ORDER BY rowid")
    ids, start, end, etype, tid, end_tid, text_id, domain, text = (list(c) for c in zip(*rows, strict=True)) \
        if rows else ([] for _ in range(9))
    known = [i for i in dict.fromkeys(text_id) if i is not None]
    strings = dict(zip(known, export.strings(np.array(known, dtype=np.int64)).tolist(), strict=True)) if known else {}
    # a range's label: the StringIds value of its textId, else its inline text
    label = [t if (s := strings.get(i) if i is not None else None) is None else s
             for i, t in zip(text_id, text, strict=True)]
    pids = process_of(np.array(tid, dtype=np.int64)).tolist()
    # the domain names: per (domain, process) the create event with the smallest start (NULL domain as -1)
    domains: dict[tuple[int, int], str | None] = {}
    created = sorted((k for k, t in enumerate(etype) if t == NVTX_DOMAIN_CREATE), key=lambda k: start[k])
    for k in created:
        domains.setdefault((-1 if domain[k] is None else domain[k], pids[k]), text[k] if layout == OLD else label[k])
    spans = [k for k, t in enumerate(etype) if t != NVTX_DOMAIN_CREATE]
    kept = [k for k in spans if end_tid[k] is None]           # ranges that end on the thread they started on
    last = _last_timestamp(export, layout)
    names = []
    for k in kept:
        key = (-1 if domain[k] is None else domain[k], pids[k])
        names.append(_range_name(domains.get(key), key in domains, label[k], layout))
    ends = [last if end[k] is None else end[k] for k in kept]
    out = {"id": np.array([ids[k] for k in kept], dtype=np.int64), "start": np.array([start[k] for k in kept], dtype=np.int64),
           "end": np.array([-1 if e is None else e for e in ends], dtype=np.int64),
           "has_end": np.array([e is not None for e in ends], dtype=bool),
           "tid": np.array([tid[k] for k in kept], dtype=np.int64), "name": np.array(names + [None], dtype=object)[:-1],
           "style": np.array(["PushPop" if etype[k] in NVTX_PUSHPOP else "StartEnd" for k in kept], dtype=object)}
    times = [t for k in spans for t in (start[k], end[k]) if t is not None]
    return out, ((min(times), max(times)) if times else (0, 0))


def _last_timestamp(export: Export, layout: str) -> int | None:
    """Where an unterminated range ends: the last NVTX timestamp (2022.4: of every event; 2025: of ranges)."""
    where = "" if layout == OLD else f" WHERE eventType IN ({', '.join(map(str, RANGE_TYPES))})"
    [(last,)] = export.sql_rows(f'SELECT max(max(start), max("end")) FROM {NVTX}{where}')
    return last


def _range_name(domain: str | None, named: bool, label: str | None, layout: str) -> str | None:
    """A range's name (see the module docstring): `named` where its domain has a create event."""
    if layout != OLD:
        return f"{domain or ''}:{label or ''}"
    if not named or domain is None:
        return label
    return None if label is None else f"{domain}:{label}"


def enclosed_pairs(outer: Columns, inner: Columns) -> tuple[np.ndarray, np.ndarray]:
    """(outer row, inner row) of every inner interval within an outer one of the same thread
    (columns start, end, tid; bounds inclusive), outer rows ascending, then inner rows ascending."""
    out_o, out_i = [], []
    o_start, o_end, o_tid = (np.asarray(outer[c], dtype=np.int64) for c in ("start", "end", "tid"))
    i_start, i_end, i_tid = (np.asarray(inner[c], dtype=np.int64) for c in ("start", "end", "tid"))
    for tid in np.intersect1d(o_tid, i_tid):
        oi = np.flatnonzero(o_tid == tid)
        ii = np.flatnonzero(i_tid == tid)
        ii = ii[np.argsort(i_start[ii], kind="stable")]
        starts = i_start[ii]
        lo = np.searchsorted(starts, o_start[oi], "left")
        hi = np.searchsorted(starts, o_end[oi], "right")
        counts = np.maximum(hi - lo, 0)
        rep = np.repeat(oi, counts)
        pos = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
        cand = ii[pos]
        keep = i_end[cand] <= o_end[rep]
        out_o.append(rep[keep])
        out_i.append(cand[keep])
    if not out_o:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    o, i = np.concatenate(out_o), np.concatenate(out_i)
    order = np.lexsort((i, o))
    return o[order], i[order]


def _launches(export: Export, tables: tuple[str, ...]) -> Columns:
    """GPU operations of `tables` joined with the CUDA API call that launched them (same
    correlation id and process), operations in table order: op_start, op_end, corr, start, end, tid."""
    return export.memo(f"launches/{','.join(tables)}", lambda: _read_launches(export, tables))


def _read_launches(export: Export, tables: tuple[str, ...]) -> Columns:
    parts = []
    for table in tables:
        if export.has(table):
            parts.append(export.int_columns(table, ("start", "end", "correlationId", "globalPid")))
    ops = {c: np.concatenate([p[c] for p in parts]) for c in ("start", "end", "correlationId", "globalPid")}
    r = export.int_columns(RUNTIME, ("start", "end", "correlationId", "globalTid"))
    oi, ri = join_rows([ops["correlationId"], ops["globalPid"]], [r["correlationId"], process_of(r["globalTid"])])
    return {"op_start": ops["start"][oi], "op_end": ops["end"][oi], "corr": ops["correlationId"][oi],
            "start": r["start"][ri], "end": r["end"][ri], "tid": r["globalTid"][ri]}


#: nsys's NVTX_PARENT statement (2022.4 joins, 2025 left-joins; the same rows either way)
PARENT_SQL = """
SELECT cr.rangeId AS cid, pr.rangeId AS pid, min((cr.startNS - pr.startNS) + (pr.endNS - cr.endNS)) AS tightness
FROM ridx AS cr JOIN ridx AS pr
ON pr.rangeId != cr.rangeId AND pr.startTS <= cr.startTS AND pr.endTS >= cr.endTS
   AND pr.startNS <= cr.startNS AND pr.endNS >= cr.endNS AND pr.tid == cr.tid
GROUP BY cid"""


def rtree_scale(times: np.ndarray, low: int, high: int) -> list[float]:
    """nsys 2025's rtree_scale(t, low, high) of each time: float32(1 + (t - low) / (high - low)), 1 where
    high = low (its SQLite's function, probed: benchmarks/gpu/rtree_scale_probe.py)."""
    if high == low:
        return [1.0] * len(times)
    return (1.0 + (times - low) / float(high - low)).astype(np.float32).astype(np.float64).tolist()


def _parents(ranges: Columns, bounds: tuple[int, int], layout: str) -> np.ndarray:
    """Row of each range's parent (-1: none): the tightest other enclosing range of its thread.

    Computed as nsys computes it, in an SQLite R*Tree of the ranges: its coordinates are float32
    (bounds rounded outwards), so at large timestamps a range a few ns inside another may not
    count as enclosed, and of equally tight parents the first the R*Tree yields wins (its node
    order after splits, not the row id). 2022.4 stores the timestamps as float32. nsys 2025 stores
    rtree_scale(t, min, max) = float32(1 + (t - min) / (max - min)) (1 where max = min), min and max
    being the first and last timestamp of every range: the function of its own SQLite, probed on
    the GPU machine (benchmarks/gpu/rtree_scale_probe.py, 350 of 350 values). Which tied parent the
    R*Tree yields first changed between SQLite 3.40 and 3.46 (nsys 2022.4 ships 3.36, nsys 2025.3.1
    3.46): the 2022.4 layout runs in Python's sqlite3 (3.40.1 on Debian 12, as CI), the 2025 one in
    apsw's bundled SQLite (3.54: the same parents as nsys 2025.3.1's on every probed export,
    benchmarks/gpu/results/nvtx_parent_probe.txt)."""
    import sqlite3

    import apsw

    if not len(ranges["id"]):
        return np.empty(0, dtype=np.int64)
    start, end = ranges["start"], ranges["end"]
    if layout == OLD:
        kind, lo_ts, hi_ts = "rtree", start.tolist(), end.tolist()
    else:
        low, high = bounds
        kind, lo_ts, hi_ts = "rtree", rtree_scale(start, low, high), rtree_scale(end, low, high)
    ids = ranges["id"]
    con = sqlite3.connect(":memory:") if layout == OLD else apsw.Connection(":memory:")
    try:
        con.execute(f"CREATE VIRTUAL TABLE ridx USING {kind}(rangeId, startTS, endTS, +startNS INTEGER, "
                    "+endNS INTEGER, +tid INTEGER)")
        con.executemany("INSERT INTO ridx VALUES (?, ?, ?, ?, ?, ?)",
                        zip(ids.tolist(), lo_ts, hi_ts, start.tolist(), end.tolist(),
                            ranges["tid"].tolist(), strict=True))
        pairs: list[tuple[int, int, int]] = con.execute(PARENT_SQL).fetchall()  # type: ignore[assignment]
    finally:
        con.close()
    row_of = {int(i): r for r, i in enumerate(ids.tolist())}
    parent = np.full(len(ids), -1, dtype=np.int64)
    for child, par, _ in pairs:
        parent[row_of[child]] = row_of[par]
    return parent


def _tree(ids: np.ndarray, parent: np.ndarray) -> tuple[list[int | None], list[str | None]]:
    """Level and range stack (":id:id") of every range reachable from a root; None otherwise."""
    children: dict[int, list[int]] = {}
    for child, p in enumerate(parent.tolist()):
        children.setdefault(p, []).append(child)
    level: list[int | None] = [None] * len(parent)
    stack: list[str | None] = [None] * len(parent)
    todo = [(root, 0, f":{ids[root]}") for root in children.get(-1, [])]
    while todo:
        node, depth, path = todo.pop()
        level[node], stack[node] = depth, path
        todo.extend((c, depth + 1, f"{path}:{ids[c]}") for c in children.get(node, []))
    return level, stack


def _projection(export: Export, layout: str) -> Columns:
    """One row per range enclosing a launch (rows by range id): the trace's columns; computed once
    per export and layout (nvtx_gpu_proj_trace and nvtx_gpu_proj_sum share it)."""
    return export.memo(f"nvtx_projection/{layout}", lambda: _compute_projection(export, layout))


def _ended(export: Export, layout: str) -> tuple[Columns, tuple[int, int]]:
    """The projected ranges that have an end (nvtx_projection_ranges's), and the bounds."""
    ranges, bounds = nvtx_projection_ranges(export, layout)
    return {c: v[ranges["has_end"]] for c, v in ranges.items()}, bounds


def _compute_projection(export: Export, layout: str) -> Columns:
    ranges, bounds = _ended(export, layout)
    calls = _launches(export, GPU_TABLES)
    ro, ci = enclosed_pairs(ranges, calls)                # by range, then call
    rows, firsts = np.unique(ro, return_index=True)
    first = np.minimum.reduceat(calls["op_start"][ci], firsts) if len(ro) else np.empty(0, dtype=np.int64)
    last = np.maximum.reduceat(calls["op_end"][ci], firsts) if len(ro) else np.empty(0, dtype=np.int64)
    distinct_ops = np.unique(np.stack((ro, calls["corr"][ci])), axis=1)[0] if len(ro) else ro
    ops = np.bincount(np.searchsorted(rows, distinct_ops), minlength=len(rows)).astype(np.int64)
    parent = _parents(ranges, bounds, layout)
    level, stack = _tree(ranges["id"], parent)
    in_proj = np.zeros(len(parent), dtype=bool)
    in_proj[rows] = True
    child_count = np.bincount(parent[in_proj & (parent >= 0)], minlength=len(parent))
    reached = np.array([v is not None for v in level], dtype=bool)
    parent_id = np.where(reached & (parent >= 0), ranges["id"][np.maximum(parent, 0)], -1)
    tid = ranges["tid"][rows]
    return {
        "name": ranges["name"][rows], "proj_start": first, "proj_dur": last - first, "start": ranges["start"][rows],
        "dur": (ranges["end"] - ranges["start"])[rows], "style": ranges["style"][rows], "pid": (tid >> 24) & 0xFFFFFF,
        "tid": tid & 0xFFFFFF, "ops": ops, "level": np.array([level[r] for r in rows] + [None], dtype=object)[:-1],
        "children": child_count[rows], "id": ranges["id"][rows],
        "parent": np.array([None if p < 0 else int(p) for p in parent_id[rows]] + [None], dtype=object)[:-1],
        "stack": np.array([stack[r] for r in rows] + [None], dtype=object)[:-1]}


def _named(p: Columns) -> Columns:
    """The rows of `p` whose name is not NULL."""
    keep = np.array([v is not None for v in p["name"].tolist()], dtype=bool)
    return {c: v[keep] for c, v in p.items()}


def nvtx_gpu_proj_trace(export: Export, layout: str) -> Table:
    """NVTX ranges projected onto the GPU, one row per range that launched GPU work."""
    p = _projection(export, layout)
    if layout != OLD:
        p = _named(p)
    cols = {"Name": p["name"], "Projected Start (ns)": p["proj_start"], "Projected Duration (ns)": p["proj_dur"],
            "Orig Start (ns)": p["start"], "Orig Duration (ns)": p["dur"], "Style": p["style"], "PID": p["pid"],
            "TID": p["tid"], "NumGPUOps": p["ops"], "Lvl": p["level"], "NumChild": p["children"],
            "RangeId": p["id"], "ParentId": p["parent"], "RangeStack": p["stack"]}
    return make_table(cols, ["s"] + ["i"] * 4 + ["s"] + ["i"] * 7 + ["s"], null=null_text(layout))


def nvtx_gpu_proj_sum(export: Export, layout: str) -> Table:
    """The projected ranges per (name, style): projected and original time, GPU ops, level, children."""
    p = _named(_projection(export, layout))
    codes, (names, styles) = group_codes(p["name"], p["style"])
    n = len(names)
    g = Groups(codes, p["proj_dur"], n)
    count = np.bincount(codes, minlength=n)
    level = p["level"]
    has_level = np.array([v is not None for v in level], dtype=bool)
    level_sum = np.bincount(codes[has_level], weights=level[has_level].astype(np.float64), minlength=n)
    level_n = np.bincount(codes[has_level], minlength=n)
    ops = np.bincount(codes, weights=p["ops"].astype(np.float64), minlength=n)
    children = np.bincount(codes, weights=p["children"].astype(np.float64), minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        avg_level = round1_array(level_sum / level_n, layout)
    cols = {"Range": names, "Style": styles, "Total Proj Time (ns)": g.total,
            "Total Range Time (ns)": np.bincount(codes, weights=p["dur"].astype(np.float64), minlength=n)
            .astype(np.int64) if n else np.empty(0, dtype=np.int64),
            "Range Instances": count, "Proj Avg (ns)": round1_array(g.avg, layout),
            "Proj Med (ns)": round1_array(g.med, layout), "Proj Min (ns)": g.min, "Proj Max (ns)": g.max,
            "Proj StdDev (ns)": round1_array(g.std, layout), "Total GPU Ops": ops.astype(np.int64),
            "Avg GPU Ops": round1_array(ops / np.maximum(count, 1), layout),
            "Avg Range Lvl": np.where(level_n > 0, avg_level, np.nan),
            "Avg Num Child": round1_array(children / np.maximum(count, 1), layout)}
    order = np.lexsort((np.arange(n), -g.total))
    return make_table(cols, ["s", "s", "i", "i", "i", "f1", "f1", "i", "i", "f1", "i", "f1", "f1", "f1"], order,
                      null=null_text(layout))


def nvtx_kern_sum(export: Export, layout: str) -> Table:
    """Kernels per (enclosing NVTX range, PID, TID, kernel name): range and kernel instances and times."""
    ranges, _ = _ended(export, layout)
    k = kernels(export, ("correlationId", "globalPid"))
    r = export.int_columns(RUNTIME, ("start", "end", "correlationId", "globalTid"))
    # LEFT JOIN the launching call: kernels in table order (each once per matching call, once without one)
    kernel, call = join_rows([k["correlationId"], k["globalPid"]], [r["correlationId"], process_of(r["globalTid"])],
                             keep_unmatched=True)
    has_call = call >= 0
    with_call = np.flatnonzero(has_call)
    ro, ji = enclosed_pairs(ranges, {c: r[c][call[with_call]] for c in ("start", "end")}
                            | {"tid": r["globalTid"][call[with_call]]})
    ji = with_call[ji]
    enclosed = np.zeros(len(kernel), dtype=bool)
    enclosed[ji] = True
    rows = np.concatenate((ji, np.flatnonzero(~enclosed)))
    rng = np.concatenate((ro, np.full(int((~enclosed).sum()), -1)))
    order = np.lexsort((rng, rows))                                       # kernel order, then range id
    rows, rng = rows[order], rng[order]
    tid = np.append(r["globalTid"], -1)[call[rows]]                     # -1: no call
    pid_key = np.where(tid >= 0, (tid >> 24) & 0xFFFFFF, -1)          # -1: no call (NULL, first)
    tid_key = np.where(tid >= 0, tid & 0xFFFFFF, -1)
    no_range = np.array([None], dtype=object)                          # row -1: no enclosing range
    names = np.concatenate((ranges["name"], no_range))[rng]
    styles = np.concatenate((ranges["style"], no_range))[rng]
    knames = export.strings(k["nameId"][kernel[rows]])
    codes, (upid, utid, uname, ustyle, ukname) = group_codes(pid_key, tid_key, names, styles, knames)
    n = len(upid)
    g = Groups(codes, (k["end"] - k["start"])[kernel[rows]], n)
    in_range = rng >= 0
    nvtx_inst = _distinct_per_group(codes[in_range], rng[in_range], n)
    kern_inst = _distinct_per_group(codes, kernel[rows], n)
    cols = {"NVTX Range": uname, "Style": ustyle, "PID": _null_below_zero(upid), "TID": _null_below_zero(utid),
            "NVTX Inst": nvtx_inst,
            "Kern Inst": kern_inst, "Total Time (ns)": g.total, "Avg (ns)": round1_array(g.avg, layout),
            "Med (ns)": round1_array(g.med, layout), "Min (ns)": g.min, "Max (ns)": g.max,
            "StdDev (ns)": round1_array(g.std, layout), "Kernel Name": ukname}
    order = np.lexsort((np.arange(n), -g.total, utid, upid, group_codes(np.asarray(uname, dtype=object))[0]))
    return make_table(cols, ["s", "s", "i", "i", "i", "i", "i", "f1", "f1", "i", "i", "f1", "s"], order,
                      null=null_text(layout))


def _null_below_zero(values: np.ndarray) -> np.ndarray:
    """Integers as objects, NULL (None) where negative (no such value)."""
    out = np.asarray(values, dtype=np.int64).astype(object)
    out[np.asarray(values) < 0] = None
    return out


def _distinct_per_group(codes: np.ndarray, values: np.ndarray, ngroups: int) -> np.ndarray:
    """How many distinct `values` each group code 0..ngroups-1 has."""
    if not len(codes):
        return np.zeros(ngroups, dtype=np.int64)
    pairs = np.unique(np.stack((codes, values)), axis=1)
    return np.bincount(pairs[0], minlength=ngroups).astype(np.int64)
