"""Columns of an nsys export that the reports and the distributed analyses read: kernels, CUDA API
calls, memory operations and their labels (the NVTX ranges and their names: nvtx.py).

Speed: the summary reports read each table once, with as few columns as possible (the ADBC
driver's cost is per row and per value moved): a group key and the duration packed into one
int64 in SQL (numerics.pack_sql), so one int64 sort gives groups, medians and all. Tables over
db.SPLIT_ROWS rows are read as rowid ranges in parallel threads, one per CPU the export may use
(db.Export._parts, map_batches). Where a packed read does not apply (a value out of range) the
caller falls back to the general column reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pyarrow as pa

from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.nsys.stats.numerics import DUR
from hpcprof.tools.nsys.stats.schema import (
    KERNEL,
    MEMCPY,
    MEMSET,
    MEMSET_LABEL,
    OLD,
    OLD_MEM_KINDS,
    OLD_MEMCPY_LABELS,
    RUNTIME,
    UM_CPU,
    UM_GPU,
    MissingData,
    clean_api_name,
    memcpy_label,
)


def need(export: Export, table: str, what: str) -> None:
    """MissingData("no `what`") unless the export has `table`."""
    if not export.has(table):
        raise MissingData(f"no {what}")


def clean_api_names(names: np.ndarray) -> np.ndarray:
    """schema.clean_api_name of every name."""
    return np.array([clean_api_name(n) for n in names], dtype=object)


#: the kernel columns collect's analyses read besides start, end and the name: the activity's
#: (activity.py), which the summaries read too (the same SQL: one read of a small export, see
#: Export.small_rows)
KERNEL_ACTIVITY = ("deviceId", "streamId", "globalPid", "correlationId", "shortName")


def columns_or_null(export: Export, table: str, names: Sequence[str], needed: int = 0) -> dict[str, np.ndarray]:
    """Integer columns `names` of `table` as int64 arrays by name, NULL as -1, as is every value of
    a column the export's table lacks (exports of older nsys, or made by other tools), past the
    first `needed` (columns every export has: no look-up of the table's columns for them alone)."""
    present = export.columns(table) if len(names) > needed else set()
    return export.int_columns(table, {c: f'"{c}"' if i < needed or c in present else "-1" for i, c in enumerate(names)})


#: the CUDA API call columns collect's analyses read, by name their SQL: the activity's four
#: (activity.py: NULL, or missing from the table, as -1) and the summaries' id and duration
#: (summaries.py: the columns nsys stats reads), read once from a small export (api_calls)
API_CALLS = {"globalTid": '"globalTid"', "start": '"start"', "end": '"end"', "correlationId": '"correlationId"',
             "nameId": '"nameId"', "dur": DUR}
API_ACTIVITY = ("globalTid", "start", "end", "correlationId")


def api_calls(export: Export, names: Sequence[str]) -> dict[str, np.ndarray]:
    """Columns `names` of API_CALLS as int64 arrays (NULL as -1): of a small export (see
    Export.small) all of them in one read that every caller shares (one SQL, kept: see
    Export.small_rows), of a large one, or one whose table lacks a column the summaries need,
    those asked for. An activity column the table lacks reads as -1."""
    present = export.columns(RUNTIME)
    shared = export.small(RUNTIME) and {"start", "end", "nameId"} <= present
    d = export.int_columns(RUNTIME, {c: "-1" if c in API_ACTIVITY and c not in present else API_CALLS[c]
                                     for c in (API_CALLS if shared else names)})
    return {c: d[c] for c in names}


def kernels(export: Export, extra: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Kernel rows as int64 columns (columns_or_null): start, end, nameId (the demangled name's
    StringIds id; + `extra`). Plain SQL: the summary reports never import SQLAlchemy (0.2-0.3 s)."""
    need(export, KERNEL, "CUDA kernel data")
    d = columns_or_null(export, KERNEL, ("start", "end", "demangledName", *extra), needed=3)
    return {"start": d["start"], "end": d["end"], "nameId": d["demangledName"], **{c: d[c] for c in extra}}


def memops(export: Export, layout: str, value: str = "duration") -> tuple[np.ndarray, np.ndarray]:
    """(operation name, duration or bytes) of every memcpy and memset row."""
    codes, names, values = memop_codes(export, layout, value)
    return names[codes], values


def nullable_ints(export: Export, table: str, columns: Sequence[str] | Mapping[str, str],
                  where: str = "") -> dict[str, np.ndarray]:
    """Integer `columns` (names, or {name: SQL}) of `table` in table order, each as (values with
    NULL as 0) and its NULL mask under `name + "?"`: the values as SQLite gives them, the masks
    from Arrow's validity bits (no SQL per row for them: IS NULL tests cost SQLite as much as the
    values, 1.48 M memcpys' 5 columns 0.8 -> 0.4 CPU-s). A column of other values (text, real)
    is read again as NULL-coalesced integers with the masks as the bits of one column."""
    exprs = dict(columns) if isinstance(columns, Mapping) else {c: f'"{c}"' for c in columns}
    n = len(exprs)

    def fill(batch: pa.RecordBatch, views: list[np.ndarray]) -> bool:
        # the masks start all False: a batch without NULLs writes none of its mask's pages
        for column, values, null in zip(batch.columns, views[:n], views[n:], strict=True):
            if pa.types.is_null(column.type):
                null[:] = True
                continue
            if column.type != pa.int64():
                return False
            values[:] = np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column), offset=column.offset * 8)
            if column.null_count:
                bits = np.unpackbits(np.frombuffer(column.buffers()[0], dtype=np.uint8), bitorder="little")
                np.equal(bits[column.offset:column.offset + len(column)], 0, out=null)
                values[null] = 0
        return True

    arrays = export.read_into(", ".join(exprs.values()), table, where, [np.int64] * n + [np.bool_] * n, fill)
    if arrays is None:
        nulls = " | ".join(f"((({e}) IS NULL) << {i})" for i, e in enumerate(exprs.values()))
        sql = ", ".join(f"coalesce({e}, 0)" for e in exprs.values()) + f", {nulls}"
        read = export.sql_ints(sql, table, where, ncols=n + 1)
        arrays = read[:n] + [(read[-1] >> i & 1).astype(bool) for i in range(n)]
    return {c: arrays[i] for i, c in enumerate(exprs)} | {c + "?": arrays[n + i] for i, c in enumerate(exprs)}


def memcpy_columns(export: Export) -> dict[str, np.ndarray]:
    """copyKind, duration ("dur") and bytes of every memcpy row, and virtualAddress where the
    export has both unified-memory page fault tables, with their NULL masks (nullable_ints): the
    memory summaries' read, from which the unified-memory reports take their migrations (one
    scan of MEMCPY for nsys 2022.4's default set; loaded once per export)."""
    def read() -> dict[str, np.ndarray]:
        cols = {"copyKind": '"copyKind"', "dur": DUR, "bytes": '"bytes"'}
        if export.has(UM_CPU) and export.has(UM_GPU) and "virtualAddress" in export.columns(MEMCPY):
            cols["virtualAddress"] = '"virtualAddress"'
        return nullable_ints(export, MEMCPY, cols)

    return cast(dict[str, np.ndarray], export.memo("memcpy", read))


#: one part of the memory operations (memop_parts): the label code of each row (an int: every
#: row's), and each row's duration and bytes (NULL as -1, as nsys's SQL coalesces)
MemopPart = tuple[np.ndarray | int, np.ndarray, np.ndarray]


def _memop_parts(export: Export, layout: str) -> tuple[list[MemopPart], np.ndarray]:
    """(parts, labels) of memop_parts."""
    names: list[Any] = []
    parts: list[MemopPart] = []
    if export.has(MEMCPY):
        m = memcpy_columns(export)
        kind, dur, size = (np.where(m[c + "?"], -1, m[c]) if m[c + "?"].any() else m[c]
                           for c in ("copyKind", "dur", "bytes"))
        labels = memcpy_labels(export, layout)
        kinds, kind_codes, keep = labeled_codes(kind, labels)
        names += [labels[k] for k in kinds.tolist()]
        parts.append((kind_codes, dur[keep], size[keep]))
    if export.has(MEMSET):
        dur, size = export.sql_ints(f"coalesce({DUR}, -1), coalesce(bytes, -1)", MEMSET, ncols=2)
        if len(dur):
            parts.append((len(names), dur, size))
            names.append(MEMSET_LABEL)
    return parts, np.array(names, dtype=object)


def memop_parts(export: Export, layout: str) -> tuple[list[MemopPart], np.ndarray]:
    """The memcpy rows (memcpy_columns) with a label only (nsys inner-joins the label table), then
    the memsets, as parts, and the labels their codes index: computed once per export and layout,
    and never concatenated here (the memory summaries pack them straight into their sort keys)."""
    if not export.has(MEMCPY) and not export.has(MEMSET):
        raise MissingData("no GPU memory data")
    return export.memo(f"memops {layout}", lambda: _memop_parts(export, layout))  # type: ignore[no-any-return]


def memop_codes(export: Export, layout: str, value: str = "duration") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(label code per memcpy/memset row, labels, duration or bytes per row) of memop_parts."""
    parts, names = memop_parts(export, layout)
    at = 1 if value == "duration" else 2
    if not parts:
        return np.empty(0, dtype=np.int64), names, np.empty(0, dtype=np.int64)
    codes = [np.full(len(p[1]), p[0], dtype=np.int64) if isinstance(p[0], int) else p[0] for p in parts]
    return np.concatenate(codes), names, np.concatenate([p[at] for p in parts])


#: copyKind values up to this are looked up by value (a table of this size at most)
KIND_TABLE = 1 << 16


def labeled_codes(kind: np.ndarray, labels: dict[int, str]) -> tuple[np.ndarray, np.ndarray, np.ndarray | slice]:
    """(the kinds of `labels` that `kind` holds, ascending; the index among them of each row whose
    kind has a label; which rows have one, a slice of all where all have), through a look-up
    table indexed by the kind itself (a few enum ids: one count and one gather over the rows, no
    sort; 1.48 M memcpys 0.11 -> 0.02 s), or by its offset from the labels' lowest id where
    the kinds are out of that table's range."""
    ids = np.array(sorted(labels), dtype=np.int64)
    if not len(ids) or not len(kind):
        return ids[:0], np.empty(0, dtype=np.int64), np.zeros(len(kind), dtype=bool)
    if 0 <= kind.min() and kind.max() < KIND_TABLE:
        slot, lo, width = kind, 0, int(kind.max()) + 1
        ids = ids[(ids >= 0) & (ids < width)]
    else:
        lo, hi = int(ids[0]), int(ids[-1])
        slot = kind - lo
        slot[(kind < lo) | (kind > hi)] = hi - lo + 1              # the slot of kinds without a label
        width = hi - lo + 2
    present = ids[np.bincount(slot, minlength=width)[ids - lo] > 0]
    table = np.full(width, -1, dtype=np.int64)
    table[present - lo] = np.arange(len(present))
    code = table[slot]
    keep = code >= 0
    return (present, code, slice(None)) if keep.all() else (present, code[keep], keep)


def memcpy_labels(export: Export, layout: str) -> dict[int, str]:
    """copyKind -> operation label of the layout (read once per export)."""
    if layout == OLD or not export.has("ENUM_CUDA_MEMCPY_OPER"):
        return OLD_MEMCPY_LABELS
    return export.memo("memcpy labels", lambda: {int(i): memcpy_label(label) for i, label in
                                                 export.sql_rows("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER")})


def mem_kind_labels(export: Export, layout: str) -> dict[int, str]:
    """Memory kind id -> label of the layout."""
    if layout == OLD or not export.has("ENUM_CUDA_MEM_KIND"):
        return OLD_MEM_KINDS
    return {int(i): str(label) for i, label in export.sql_rows("SELECT id, label FROM ENUM_CUDA_MEM_KIND")}



def grid_block_text(d: dict[str, np.ndarray], prefix: str) -> np.ndarray:
    """"%4d %4d %4d" of the columns `prefix`X, Y and Z, as nsys prints a kernel's grid or block."""
    xs, ys, zs = (d[f"{prefix}{a}"] for a in "XYZ")
    return np.char.mod("%4d", xs).astype(object) + " " + np.char.mod("%4d", ys) + " " + np.char.mod("%4d", zs)
