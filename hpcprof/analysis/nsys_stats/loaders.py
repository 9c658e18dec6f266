"""Columns of an nsys export that the reports and the distributed analyses read: kernels, CUDA API
calls, memory operations and their labels (the NVTX ranges and their names: nvtx.py).

Speed: the summary reports read each table once, with as few columns as possible (the ADBC
driver's cost is per row and per value moved): a group key and the duration packed into one
int64 in SQL (numerics.pack_sql), so one int64 sort gives groups, medians and all. Tables over a
million rows are read as two rowid ranges in parallel threads (db.Export.map_batches). Where a
packed read does not apply (a value out of range) the caller falls back to the general column reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pyarrow as pa

from hpcprof.analysis.nsys_stats.db import Export
from hpcprof.analysis.nsys_stats.numerics import DUR
from hpcprof.analysis.nsys_stats.schema import (
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

    def decode(batch: pa.RecordBatch) -> list[tuple[np.ndarray, np.ndarray | None]] | None:
        out: list[tuple[np.ndarray, np.ndarray | None]] = []
        for column in batch.columns:
            if pa.types.is_null(column.type):
                out.append((np.zeros(len(column), dtype=np.int64), np.ones(len(column), dtype=bool)))
                continue
            if column.type != pa.int64():
                return None
            values = np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column), offset=column.offset * 8)
            null = None                              # no NULL in the batch: no mask to build
            if column.null_count:                    # a view until then: copied once, by the concatenation
                bits = np.unpackbits(np.frombuffer(column.buffers()[0], dtype=np.uint8), bitorder="little")
                null = ~bits[column.offset:column.offset + len(column)].astype(bool)
                values = np.where(null, 0, values)
            out.append((values, null))
        return out

    parts = export.map_batches(", ".join(exprs.values()), table, where, decode)
    if any(p is None for p in parts):
        nulls = " | ".join(f"((({e}) IS NULL) << {i})" for i, e in enumerate(exprs.values()))
        sql = ", ".join(f"coalesce({e}, 0)" for e in exprs.values()) + f", {nulls}"
        arrays = export.sql_ints(sql, table, where, ncols=len(exprs) + 1)
        parts = [[(arrays[i], (arrays[-1] >> i & 1).astype(bool)) for i in range(len(exprs))]]
    columns_of = [cast(list[tuple[np.ndarray, np.ndarray | None]], p) for p in parts]
    result = {}
    for i, c in enumerate(exprs):
        result[c] = np.concatenate([p[i][0] for p in columns_of]) if parts else np.empty(0, dtype=np.int64)
    none = np.zeros(len(next(iter(result.values()))), dtype=bool)   # the columns without NULLs share it, unwritten
    for i, c in enumerate(exprs):
        masks = [p[i][1] for p in columns_of]
        result[c + "?"] = none if all(m is None for m in masks) else np.concatenate(
            [np.zeros(len(p[i][0]), dtype=bool) if m is None else m for p, m in zip(columns_of, masks, strict=True)])
    return result


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


def _memop_codes(export: Export, layout: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(label code per memcpy/memset row, labels, duration per row, bytes per row; NULL as -1):
    the memcpy rows (memcpy_columns) with a label only (nsys inner-joins the label table), then
    the memsets."""
    names: list[Any] = []
    codes: list[Any] = []
    durations: list[Any] = []
    sizes: list[Any] = []
    if export.has(MEMCPY):
        m = memcpy_columns(export)                       # NULL as -1, as nsys's SQL coalesces
        kind, dur, size = (np.where(m[c + "?"], -1, m[c]) if m[c + "?"].any() else m[c]
                           for c in ("copyKind", "dur", "bytes"))
        labels = memcpy_labels(export, layout)
        kinds, kind_codes, keep = labeled_codes(kind, labels)
        names += [labels[k] for k in kinds.tolist()]
        codes.append(kind_codes)
        durations.append(dur[keep])
        sizes.append(size[keep])
    if export.has(MEMSET):
        dur, size = export.sql_ints(f"coalesce({DUR}, -1), coalesce(bytes, -1)", MEMSET, ncols=2)
        if len(dur):
            codes.append(np.full(len(dur), len(names), dtype=np.int64))
            names.append(MEMSET_LABEL)
            durations.append(dur)
            sizes.append(size)
    if not codes:
        empty = np.empty(0, dtype=np.int64)
        return empty, np.array(names, dtype=object), empty, empty
    return (np.concatenate(codes), np.array(names, dtype=object), np.concatenate(durations),
            np.concatenate(sizes))


def memop_codes(export: Export, layout: str, value: str = "duration") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(label code per memcpy/memset row, labels, duration or bytes per row): computed once per
    export and layout for both values."""
    if not export.has(MEMCPY) and not export.has(MEMSET):
        raise MissingData("no GPU memory data")
    codes, names, durations, sizes = export.memo(f"memops {layout}", lambda: _memop_codes(export, layout))
    return codes, names, durations if value == "duration" else sizes


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
