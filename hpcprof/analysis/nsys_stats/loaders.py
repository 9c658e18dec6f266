"""Columns of an nsys export that the reports and the distributed analyses read: kernels, CUDA API
calls, memory operations and their labels (the NVTX ranges and their names: nvtx.py).

Speed: the summary reports read each table once, with as few columns as possible (the ADBC
driver's cost is per row and per value moved): a group key and the duration packed into one
int64 in SQL (numerics.pack_sql), so one int64 sort gives groups, medians and all. Tables over a
million rows are read as two rowid ranges in parallel threads (db.Export.map_batches). Where a
packed read does not apply (a value out of range) the caller falls back to the general column reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

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


def _memop_columns(export: Export) -> dict[str, list[np.ndarray]]:
    """copyKind, duration and bytes of the memcpy rows, duration and bytes of the memset rows
    (NULL as -1), read once for all the reports of an export."""
    out = {}
    if export.has(MEMCPY):
        out[MEMCPY] = export.sql_ints(f"coalesce(copyKind, -1), coalesce({DUR}, -1), coalesce(bytes, -1)",
                                      MEMCPY, ncols=3)
    if export.has(MEMSET):
        out[MEMSET] = export.sql_ints(f"-1, coalesce({DUR}, -1), coalesce(bytes, -1)", MEMSET, ncols=3)
    return out


def memop_codes(export: Export, layout: str, value: str = "duration") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(label code per memcpy/memset row, labels, duration or bytes per row)."""
    tables = export.memo("memops", lambda: _memop_columns(export))
    if not tables:
        raise MissingData("no GPU memory data")
    labels = memcpy_labels(export, layout) if MEMCPY in tables else {}
    names: list[Any] = []
    codes: list[Any] = []
    values: list[Any] = []
    for table, (kind, dur, size) in tables.items():
        v = dur if value == "duration" else size
        if table == MEMCPY:
            kinds, kind_codes, keep = labeled_codes(kind, labels)     # nsys inner-joins the label table
            names += [labels[k] for k in kinds.tolist()]
            codes.append(kind_codes + (len(names) - len(kinds)))
            values.append(v[keep])
        elif len(v):
            codes.append(np.full(len(v), len(names), dtype=np.int64))
            names.append(MEMSET_LABEL)
            values.append(v)
    if not codes:
        return np.empty(0, dtype=np.int64), np.array(names, dtype=object), np.empty(0, dtype=np.int64)
    return np.concatenate(codes), np.array(names, dtype=object), np.concatenate(values)


def labeled_codes(kind: np.ndarray, labels: dict[int, str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the kinds of `labels` that `kind` holds, ascending; the index among them of each row whose
    kind has a label; which rows have one), through a look-up table over the labels' id range (a
    few enum ids): a pass per step, no sort (1.48 M memcpys: 0.10 -> 0.03 s against intersect1d,
    isin and searchsorted)."""
    ids = np.array(sorted(labels), dtype=np.int64)
    if not len(ids):
        return ids, ids, np.zeros(len(kind), dtype=bool)
    lo, hi = int(ids[0]), int(ids[-1])
    slot = kind - lo
    slot[(kind < lo) | (kind > hi)] = hi - lo + 1              # the slot of kinds without a label
    present = ids[np.bincount(slot, minlength=hi - lo + 2)[ids - lo] > 0]
    table = np.full(hi - lo + 2, -1, dtype=np.int64)
    table[present - lo] = np.arange(len(present))
    code = table[slot]
    keep = code >= 0
    return present, code[keep], keep


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
