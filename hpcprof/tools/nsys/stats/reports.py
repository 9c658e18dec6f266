"""The columnar engine's reports: each a function `(export, layout) -> Table` with nsys's
columns, rounding and row order (numerics.py says how nsys computes the numbers; stats.py
registers each report once, with the tables it needs, and checks them before it runs one).

The GROUP BY keys are each report's own: 2022.4's gpukernsum groups by (nameId, grid text,
block text); 2024+'s cuda_gpu_kern_gb_sum by (name text, gridX, gridY, gridZ, blockX, blockY,
blockZ) as numbers and orders by total descending, count ascending, name (so of two tied grids
2048 comes before 13000, which the text "%4d" order puts first). Where a packed read does not
apply (loaders.py, nvtx.py), a report groups the general column reads instead: the same bytes.
"""

from __future__ import annotations

import numpy as np

from hpcprof.tools.nsys.stats.db import Export, process_of
from hpcprof.tools.nsys.stats.loaders import (
    clean_api_names,
    grid_block_text,
    kernels,
    mem_kind_labels,
    memcpy_labels,
    memop_codes,
    memop_parts,
    memops,
)
from hpcprof.tools.nsys.stats.numerics import (
    DUR,
    PACK_BITS,
    PACK_KEYS,
    PACK_MASK,
    Groups,
    by_total,
    distinct_of,
    factorize_sorted,
    group_codes,
    join_rows,
    pack_sql,
    round1_array,
    text_rank,
)
from hpcprof.tools.nsys.stats.nvtx import nvtx_groups_packed, nvtx_ranges
from hpcprof.tools.nsys.stats.schema import (
    KERNEL,
    MEMCPY,
    MEMSET,
    MEMSET_LABEL,
    NEW,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    OLD,
    OSRT,
    OSRT_EVENT_CLASS,
    RUNTIME,
    MissingData,
)
from hpcprof.tools.nsys.stats.table import SUMMARY_FMT, Table, make_table, null_text


def _name_summary(export: Export, ids: np.ndarray, values: np.ndarray, count_label: str, name_label: str,
                  layout: str, clean: bool = False) -> Table:
    """Summary grouped by a StringIds id (SQLite groups by the id, not by the text)."""
    codes, (uniq,) = group_codes(ids)
    return _id_summary_frame(export, uniq, Groups(codes, values, len(uniq)), count_label, name_label, layout, clean)


def _id_summary_frame(export: Export, ids: np.ndarray, g: Groups, count_label: str, name_label: str,
                      layout: str, clean: bool = False) -> Table:
    names = export.strings(ids.astype(np.int64))
    if clean:
        names = clean_api_names(names)
    cols = g.summary(count_label, layout) | {name_label: names}
    return make_table(cols, SUMMARY_FMT + ["s"], by_total(g.total), null=null_text(layout))


def _packed_by_id(export: Export, table: str, id_col: str, where: str = "") -> tuple[np.ndarray, Groups] | None:
    """Durations grouped by the StringIds id in `id_col`, read as one packed column
    (None when some row does not pack: the caller reads the columns instead)."""
    (v,) = export.sql_ints(pack_sql(id_col, DUR), table, where)
    if len(v) and v.min() < 0:
        return None
    return Groups.from_packed(v)


def cuda_api_sum(export: Export, layout: str = NEW) -> Table:
    """CUDA runtime and driver API calls per API name."""
    fast = _packed_by_id(export, RUNTIME, "nameId")
    if fast is not None:
        return _id_summary_frame(export, *fast, "Num Calls", "Name", layout, clean=True)
    d = export.int_columns(RUNTIME, {"nameId": "nameId", "dur": DUR})
    return _name_summary(export, d["nameId"], d["dur"], "Num Calls", "Name", layout, clean=True)


def osrt_sum(export: Export, layout: str = NEW) -> Table:
    """OS runtime calls per function name."""
    fast = _packed_by_id(export, OSRT, "nameId", f"eventClass = {OSRT_EVENT_CLASS}")
    if fast is not None:
        return _id_summary_frame(export, *fast, "Num Calls", "Name", layout)
    d = export.int_columns(OSRT, {"nameId": "nameId", "dur": DUR}, f"eventClass = {OSRT_EVENT_CLASS}")
    return _name_summary(export, d["nameId"], d["dur"], "Num Calls", "Name", layout)


def cuda_gpu_kern_gb_sum(export: Export, layout: str = NEW) -> Table:
    """Kernels per (name, grid, block): nsys 2022.4's `gpukernsum`, today's `cuda_gpu_kern_gb_sum`.

    2022.4 groups by (nameId, grid text, block text) and orders by total only, ties in that
    GROUP BY order. nsys 2024+ groups by (name text, gridX, gridY, gridZ, blockX, blockY, blockZ)
    and orders by total descending, count ascending, name, ties in that GROUP BY order: the
    dimensions as numbers, so a grid of 13000 comes after one of 2048 (as text it would not)."""
    fast = _kern_gb_packed(export)
    names = export.strings(fast[0].astype(np.int64)) if fast is not None else np.empty(0, dtype=object)
    if fast is not None and (layout == OLD or _distinct(names)):
        ids, g, grid_s, block_s = fast
    else:   # values that do not pack, or (2024+) two name ids with one text: group the columns
        dims = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
        d = kernels(export, dims)
        # group the dims first (few distinct), then (name, grid, block) with grid/block as text
        dcodes, dparts = group_codes(*(d[c] for c in dims))
        grid_u = grid_block_text(dict(zip(dims, dparts, strict=False)), "grid")
        block_u = grid_block_text(dict(zip(dims, dparts, strict=False)), "block")
        gcodes, (grid_u,) = group_codes(grid_u)
        bcodes, (block_u,) = group_codes(block_u)
        if layout == OLD:
            name_key = d["nameId"]
        else:
            name_key, name_texts = _kernel_name_codes(export, d["nameId"])
        codes, (ids, gi, bi) = group_codes(name_key, gcodes[dcodes], bcodes[dcodes])
        g = Groups(codes, d["end"] - d["start"], len(ids))
        grid_s, block_s = grid_u[gi.astype(np.int64)], block_u[bi.astype(np.int64)]
        names = export.strings(ids.astype(np.int64)) if layout == OLD else name_texts[ids.astype(np.int64)]
    cols = g.summary("Instances", layout) | {"GridXYZ": grid_s, "BlockXYZ": block_s, "Name": names}
    if layout == OLD:
        order = by_total(g.total)
    else:
        order = by_total(g.total, g.count, text_rank(names), *_dims_of(grid_s), *_dims_of(block_s))
    return make_table(cols, SUMMARY_FMT + ["s", "s", "s"], order, null=null_text(layout))


def _distinct(names: np.ndarray) -> bool:
    """Whether no two entries of `names` (text, None for an unknown id) are equal."""
    values = [v if isinstance(v, str) else None for v in names.tolist()]
    return len(set(values)) == len(values)


def _dims_of(texts: np.ndarray) -> list[np.ndarray]:
    """The three numbers of each "%4d %4d %4d" text, as three int64 arrays."""
    parts = np.array([[int(x) for x in t.split()] for t in texts.tolist()], dtype=np.int64).reshape(-1, 3)
    return [parts[:, 0], parts[:, 1], parts[:, 2]]


def _dims_text(packed: np.ndarray, shifts: tuple[int, int], mask: int) -> np.ndarray:
    """"%4d %4d %4d" of packed (x << shifts[0] | y << shifts[1] | z) dims."""
    d = {"X": packed >> shifts[0], "Y": (packed >> shifts[1]) & mask, "Z": packed & ((1 << shifts[1]) - 1)}
    return grid_block_text({f"p{a}": d[a] for a in "XYZ"}, "p")


def _kern_gb_packed(export: Export) -> tuple[np.ndarray, Groups, np.ndarray, np.ndarray] | None:
    """gpukernsum's groups from three packed columns: (nameId, duration), grid, block (None when
    some value does not pack). Returns (name ids, groups, grid text, block text) in GROUP BY order."""
    # integers a, b are both in 0..2^k-1 iff a | b is (a negative one sets the sign bit; NULL gives NULL):
    # one range check per packed column costs SQLite ~15% less CPU per row than one per dimension
    grid = ("CASE WHEN gridX BETWEEN 0 AND 2147483647 AND (gridY | gridZ) BETWEEN 0 AND 65535 "
            "THEN (gridX << 32) | (gridY << 16) | gridZ ELSE -1 END")
    block = ("CASE WHEN (blockX | blockY | blockZ) BETWEEN 0 AND 2097151 "
             "THEN (blockX << 42) | (blockY << 21) | blockZ ELSE -1 END")
    v, gp, bp = export.sql_ints(f"{pack_sql('demangledName', DUR)}, {grid}, {block}", KERNEL, ncols=3)
    if len(v) and min(v.min(), gp.min(), bp.min()) < 0:
        return None
    # each row's grid and block as its index into their distinct values (Arrow's hash: a view of
    # int32 indices, no sort and no code array per row), ranked by their text
    gindex, gu = distinct_of(gp)
    bindex, bu = distinct_of(bp)
    grid_rank, (grid_u,) = group_codes(_dims_text(gu, (32, 16), 0xFFFF))       # text order of the grids
    block_rank, (block_u,) = group_codes(_dims_text(bu, (42, 21), 0x1FFFFF))
    ng, nb = max(len(grid_u), 1), max(len(block_u), 1)
    key = v >> PACK_BITS
    key *= ng
    key += grid_rank[gindex]
    key *= nb
    key += block_rank[bindex]
    del gindex, bindex, gp, bp
    packs = int(key.max(initial=0)) < PACK_KEYS          # the key as it is (no hashing pass over the rows)
    code, ukey = (key, None) if packs else factorize_sorted(key)
    del key
    v &= PACK_MASK
    v |= code << PACK_BITS
    del code
    keys, g = Groups.from_packed(v)
    ukey = keys if ukey is None else ukey
    return ukey // (ng * nb), g, grid_u[(ukey // nb) % ng], block_u[ukey % nb]


def _kernel_name_codes(export: Export, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group kernels by name text: (code per row, names in code order)."""
    id_codes, (uid,) = group_codes(ids)
    names = export.strings(uid.astype(np.int64))
    name_codes, (uniq,) = group_codes(names)
    return name_codes[id_codes], uniq


def cuda_gpu_kern_sum(export: Export, layout: str = NEW) -> Table:
    """Kernels per name (nsys 2024+ `cuda_gpu_kern_sum`)."""
    d = kernels(export, ())
    codes, names = _kernel_name_codes(export, d["nameId"])
    g = Groups(codes, d["end"] - d["start"], len(names))
    cols = g.summary("Instances", layout) | {"Name": names}
    return make_table(cols, SUMMARY_FMT + ["s"], by_total(g.total, g.count, np.arange(len(names))),
                 null=null_text(layout))


def _memop_groups(export: Export, layout: str, value: str) -> tuple[np.ndarray, Groups]:
    """Distinct operation labels (sorted, as SQLite groups them) and their statistics: each part's
    rows packed as (label << 41 | value) straight into one array (Groups.from_packed), where the
    values fit, else through the concatenated rows (memop_codes)."""
    parts, names = memop_parts(export, layout)
    label_codes, (uniq,) = group_codes(names)                 # labels, not copyKinds, are the groups
    columns = [(code, durations if value == "duration" else sizes) for code, durations, sizes in parts]
    if not all(len(values) and values.min() >= 0 and values.max() <= PACK_MASK for _, values in columns):
        codes, _, values = memop_codes(export, layout, value)
        return uniq, Groups(label_codes[codes], values, len(uniq))
    v = np.empty(sum(len(values) for _, values in columns), dtype=np.int64)
    start = 0
    for code, values in columns:
        rows = v[start:start + len(values)]
        if isinstance(code, int):
            rows[:] = label_codes[code]
        else:
            np.take(label_codes, code, out=rows, mode="clip")   # unbuffered (see nvtx.nvtx_groups_packed)
        rows <<= PACK_BITS
        rows |= values
        start += len(rows)

    def in_rows(key: int) -> np.ndarray:
        return np.concatenate([values[:len(values) * int(label_codes[code] == key)] if isinstance(code, int)
                               else values[label_codes[code] == key] for code, values in columns])

    keys, g = Groups.from_packed(v, in_rows)
    return uniq[keys], g


def cuda_gpu_mem_time_sum(export: Export, layout: str = NEW) -> Table:
    """Memcpy and memset operations per kind: time."""
    uniq, g = _memop_groups(export, layout, "duration")
    cols = g.summary("Count", layout) | {"Operation": uniq}
    return make_table(cols, SUMMARY_FMT + ["s"], by_total(g.total), null=null_text(layout))


def cuda_gpu_mem_size_sum(export: Export, layout: str = NEW) -> Table:
    """Memcpy and memset operations per kind: bytes, shown in MB (10^6 bytes)."""
    uniq, g = _memop_groups(export, layout, "bytes")
    mb = 1e6
    cols = {"Total (MB)": g.total / mb, "Count": g.count, "Avg (MB)": g.avg / mb, "Med (MB)": g.med / mb,
            "Min (MB)": g.min / mb, "Max (MB)": g.max / mb, "StdDev (MB)": g.std / mb, "Operation": uniq}
    return make_table(cols, ["f3", "i", "f3", "f3", "f3", "f3", "f3", "s"], by_total(g.total), null=null_text(layout))


def cuda_gpu_sum(export: Export, layout: str = NEW, api: bool = False) -> Table:
    """Kernels and memory operations together, per name, with a Category column; `api`: CUDA API
    calls too, first (nsys 2022.4's `apigpusum`), their names without a `_vNNNN` suffix."""
    names, values, cats = [], [], []
    if api and export.has(RUNTIME):
        r = export.int_columns(RUNTIME, {"nameId": "nameId", "dur": DUR})
        id_codes, (uid,) = group_codes(r["nameId"])
        names.append(clean_api_names(export.strings(uid.astype(np.int64)))[id_codes])
        values.append(r["dur"])
        cats.append(np.full(len(id_codes), "CUDA_API", dtype=object))
    if export.has(KERNEL):
        d = kernels(export, ())
        codes, uniq = _kernel_name_codes(export, d["nameId"])
        names.append(uniq[codes])
        values.append(d["end"] - d["start"])
        cats.append(np.full(len(codes), "CUDA_KERNEL", dtype=object))
    try:
        mnames, mdur = memops(export, layout, "duration")
        names.append(mnames)
        values.append(mdur)
        cats.append(np.full(len(mnames), "MEMORY_OPER", dtype=object))
    except MissingData:
        pass
    allnames = np.concatenate(names)
    allcats = np.concatenate(cats)
    codes, (uniq,) = group_codes(allnames)
    g = Groups(codes, np.concatenate(values), len(uniq))
    category = np.empty(len(uniq), dtype=object)
    category[codes] = allcats                       # SQLite reports a bare column from the last row
    cols = g.summary("Instances", layout) | {"Category": category, "Operation": uniq}
    return make_table(cols, SUMMARY_FMT + ["s", "s"], by_total(g.total), null=null_text(layout))


def cuda_api_gpu_sum(export: Export, layout: str = OLD) -> Table:
    """CUDA API calls, kernels and memory operations together, per name (`apigpusum`)."""
    return cuda_gpu_sum(export, layout, api=True)


def _nvtx_summary(export: Export, event_types: tuple[int, ...], layout: str, style: bool) -> Table:
    fast = nvtx_groups_packed(export, event_types, layout, style)
    if fast is not None:
        ukey, g, sorted_names = fast
        uniq = [ukey // 2, ukey % 2]
    else:
        r, names = nvtx_ranges(export, event_types, layout)
        name_rank, (sorted_names,) = group_codes(names)          # GROUP BY order of the name text
        key = name_rank[r["name"].to_numpy()] * 2
        if style:
            key += np.isin(r["eventType"].to_numpy(), NVTX_STARTEND)          # PushPop (0) before StartEnd (1)
        codes, (ukey,) = group_codes(key)
        uniq = [ukey // 2, ukey % 2]
        g = Groups(codes, r["duration"].to_numpy(np.int64), len(uniq[0]))
    cols = g.summary("Instances", layout)
    fmts = list(SUMMARY_FMT)
    if style:
        cols["Style"] = np.where(uniq[1] == 1, "StartEnd", "PushPop").astype(object)
        fmts.append("s")
    cols["Range"] = sorted_names[uniq[0].astype(np.int64)]
    return make_table(cols, fmts + ["s"], by_total(g.total), null=null_text(layout))




def nvtx_sum(export: Export, layout: str = NEW) -> Table:
    """NVTX push/pop and start/end ranges per (name, style)."""
    return _nvtx_summary(export, NVTX_PUSHPOP + NVTX_STARTEND, layout, style=True)


def nvtx_pushpop_sum(export: Export, layout: str = NEW) -> Table:
    """NVTX push/pop ranges per name."""
    return _nvtx_summary(export, NVTX_PUSHPOP, layout, style=False)


def nvtx_startend_sum(export: Export, layout: str = NEW) -> Table:
    """NVTX start/end ranges per name."""
    return _nvtx_summary(export, NVTX_STARTEND, layout, style=False)


def cuda_kern_exec_sum(export: Export, layout: str = OLD) -> Table:
    """Kernel launch → execution per (PID, TID, device, API, kernel): total, API, queue and kernel time
    (`kernexecsum`, today's `cuda_kern_exec_sum`: the same SQL, each version rounding as its SQLite does)."""
    k = kernels(export, ("deviceId", "correlationId", "globalPid"))
    r = export.int_columns(RUNTIME, ("start", "end", "correlationId", "globalTid", "nameId"))
    ki, ri = join_rows([k["correlationId"], k["globalPid"]], [r["correlationId"], process_of(r["globalTid"])])
    kstart, kend, rstart, rend = k["start"][ki], k["end"][ki], r["start"][ri], r["end"][ri]
    api, que, kern, tot = rend - rstart, kstart - rend, kend - kstart, np.maximum(rend, kend) - rstart
    gtid = r["globalTid"][ri]
    pid, tid = (gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF
    api_names = clean_api_names(export.strings(r["nameId"][ri]))
    kern_names = export.strings(k["nameId"][ki])
    codes, (upid, utid, udev, uapi, ukern) = group_codes(pid, tid, k["deviceId"][ki], api_names, kern_names)
    n = len(upid)
    cols: dict[str, np.ndarray] = {"PID": upid, "TID": utid, "DevId": udev}
    gt, ga, gk = Groups(codes, tot, n), Groups(codes, api, n), Groups(codes, kern, n)
    queued = que >= 0
    gq = Groups(codes[queued], que[queued], n)
    cols["Count"] = gt.count
    cols["QCount"] = gq.count
    fmts = ["i"] * 5
    for prefix, g in (("T", gt), ("A", ga), ("Q", gq), ("K", gk)):
        empty = g.count == 0
        cols[f"{prefix}Avg (ns)"] = _nullable(round1_array(g.avg, layout), empty)
        cols[f"{prefix}Med (ns)"] = _nullable(round1_array(g.med, layout), empty)
        cols[f"{prefix}Min (ns)"] = _nullable(g.min, empty)
        cols[f"{prefix}Max (ns)"] = _nullable(g.max, empty)
        cols[f"{prefix}StdDev (ns)"] = round1_array(g.std, layout)
        fmts += ["f1", "f1", "i", "i", "f1"]
    cols["API Name"] = uapi
    cols["Kernel Name"] = ukern
    # ORDER BY 6 DESC: the rounded average total time (groups with equal rounded averages keep GROUP BY order)
    return make_table(cols, fmts + ["s", "s"], by_total(round1_array(gt.avg, layout)), null=null_text(layout))


def _nullable(values: np.ndarray, null: np.ndarray) -> np.ndarray:
    out = np.asarray(values, dtype=object)
    out[null] = None
    return out


def cuda_gpu_trace(export: Export, layout: str = NEW) -> Table:
    """One row per kernel, memcpy and memset, by start time. nsys's report needs the GPU table:
    without TARGET_INFO_GPU it fails and writes nothing (2022.4 and 2025.3.1 alike). Each table's
    rows are columns of a part (a column a table lacks is NULL in its rows), the parts' rows
    stably sorted by start: numpy only (pandas costs ~20 ms a report on a per-rank export)."""
    parts: list[dict[str, np.ndarray]] = []
    kinds = mem_kind_labels(export, layout)
    green = layout != OLD
    if export.has(KERNEL):
        extra: tuple[str, ...] = ("correlationId", *KERNEL_DIMS, "staticSharedMemory", "dynamicSharedMemory",
                                  "deviceId", "contextId", "streamId")
        extra += ("greenContextId",) if green and "greenContextId" in export.columns(KERNEL) else ()
        k = kernels(export, extra)
        part = {"start": k["start"], "dur": k["end"] - k["start"], "corr": k["correlationId"],
                "dev": k["deviceId"], "ctx": k["contextId"], "strm": k["streamId"],
                "green": k.get("greenContextId", np.zeros(len(k["start"]), dtype=np.int64)),
                "name": export.strings(k["nameId"])}
        part |= {head: k[column].astype(object) for column, head in zip(KERNEL_DIMS, TRACE_DIMS, strict=True)}
        part |= {"StcSMem (MB)": (k["staticSharedMemory"] / 1e6).astype(object),
                 "DymSMem (MB)": (k["dynamicSharedMemory"] / 1e6).astype(object)}
        parts.append(part)
    for table, is_copy in ((MEMCPY, True), (MEMSET, False)):
        if export.has(table):
            parts.append(_memop_trace_part(export, table, is_copy, layout, kinds))
    order = np.argsort(np.concatenate([p["start"] for p in parts]), kind="stable")

    def column(key: str, missing: object = None) -> np.ndarray:
        """Column `key` of every part, rows by start (`missing` in the rows of a part without it)."""
        values = [p[key] if key in p else np.full(len(p["start"]), missing, dtype=object) for p in parts]
        return np.concatenate(values)[order]

    gpu_names = _gpu_names(export)
    dev = column("dev")
    device = np.array([f"{gpu_names[i]} ({i})" if i in gpu_names else None for i in dev.tolist()], dtype=object)
    cols: dict[str, np.ndarray] = {"Start (ns)": column("start"), "Duration (ns)": column("dur"),
                                   "CorrId": column("corr")}
    cols |= {head: column(head) for head in (*TRACE_DIMS, "StcSMem (MB)", "DymSMem (MB)", "Bytes (MB)")}
    # nsys 2022.4 heads it "Throughput (MBps)", nsys 2025.3.1 "Throughput (MB/s)"; a kernel's is empty
    cols["Throughput (MBps)" if layout == OLD else "Throughput (MB/s)"] = column("thru", "" if layout == OLD else None)
    cols |= {"SrcMemKd": column("src"), "DstMemKd": column("dst"), "Device": device, "Ctx": column("ctx")}
    fmts = ["i", "i", "i", "i", "i", "i", "i", "i", "i", "i", "f3", "f3", "f3", "f3", "s", "s", "s", "i"]
    if green:
        gc = column("green")
        cols["GreenCtx"] = _nullable(gc, gc <= 0)
        fmts.append("i")
    cols["Strm"] = column("strm")
    cols["Name"] = column("name")
    return make_table(cols, fmts + ["i", "s"], null=null_text(layout))


KERNEL_DIMS = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread")
TRACE_DIMS = ("GrdX", "GrdY", "GrdZ", "BlkX", "BlkY", "BlkZ", "Reg/Trd")


def _memop_trace_part(export: Export, table: str, is_copy: bool, layout: str,
                      kinds: dict[int, str]) -> dict[str, np.ndarray]:
    """cuda_gpu_trace's columns of the memcpy (`is_copy`) or memset rows."""
    present = export.columns(table)
    read = {c: f'"{c}"' for c in ("start", "end", "correlationId", "bytes", "deviceId", "contextId", "streamId")}
    read["greenContextId"] = '"greenContextId"' if layout != OLD and "greenContextId" in present else "0"
    kinds_read = ("copyKind", "srcKind", "dstKind") if is_copy else ("memKind",)
    read |= {c: f'"{c}"' if is_copy or c in present else "-1" for c in kinds_read}
    m = export.int_columns(table, read)
    dur = m["end"] - m["start"]
    # SQL bytes * (1000000000 / duration): integer, turning REAL where the product overflows int64
    per_s = np.where(dur > 0, 1_000_000_000 // np.maximum(dur, 1), 0)
    as_real = m["bytes"].astype(np.float64) * per_s
    with np.errstate(over="ignore"):
        thru = np.where(np.abs(as_real) >= 2.0 ** 63, as_real, (m["bytes"] * per_s).astype(np.float64)) / 1e6
    if is_copy:
        labels = memcpy_labels(export, layout)
        names = np.array([labels.get(c) for c in m["copyKind"].tolist()], dtype=object)
        src = np.array([kinds.get(c) for c in m["srcKind"].tolist()], dtype=object)
        dst = np.array([kinds.get(c) for c in m["dstKind"].tolist()], dtype=object)
    else:
        names = np.full(len(dur), MEMSET_LABEL, dtype=object)
        src = np.array([kinds.get(c) for c in m["memKind"].tolist()], dtype=object)
        dst = np.full(len(dur), None, dtype=object)
    return {"start": m["start"], "dur": dur, "corr": m["correlationId"], "Bytes (MB)": (m["bytes"] / 1e6).astype(object),
            "thru": thru.astype(object), "src": src, "dst": dst, "dev": m["deviceId"], "ctx": m["contextId"],
            "strm": m["streamId"], "green": m["greenContextId"], "name": names}


def _gpu_names(export: Export) -> dict[int, str]:
    if not export.has("TARGET_INFO_GPU"):
        return {}
    return {int(i): str(n) for i, n in export.sql_rows('SELECT id, name FROM "TARGET_INFO_GPU"')}

