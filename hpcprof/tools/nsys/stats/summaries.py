"""The per-rank summary reports `hpcprof collect` keeps (stats.SUMMARY_REPORTS), of many exports at
once: each export read on its own, the grouping, statistics, rounding and row order done once over
the rows of all (a per-rank export has a few hundred rows per report, and numpy's cost per call is
most of its time), each export's rows those the columnar engine (reports.py) gives it alone: the
same groups in the same GROUP BY order, the numbers to the bit, the same row order.

Each report is a reader (one export's group key and value per row, in table order) and a grouping
of the (export, key) pairs: by StringIds id (API calls, OS runtime calls), by the text an id names
(kernels), by label text (memory operations), by (range text, style) (NVTX).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.nsys.stats.loaders import (
    KERNEL_ACTIVITY,
    api_calls,
    clean_api_names,
    kernels,
    memop_codes,
)
from hpcprof.tools.nsys.stats.numerics import DUR, Groups, factorize_sorted
from hpcprof.tools.nsys.stats.nvtx import process_ranges, read_process_ranges
from hpcprof.tools.nsys.stats.schema import (
    NEW,
    NO_STRINGS,
    NVTX_STARTEND,
    OSRT,
    OSRT_EVENT_CLASS,
    STRINGS,
    MissingData,
    NsysInputError,
)
from hpcprof.tools.nsys.stats.stats import SUMMARY_REPORTS, spec_of
from hpcprof.tools.nsys.stats.table import SUMMARY_FMT, Table, make_table, null_text

#: the layout of every summary report collect keeps (their current names)
LAYOUT = NEW
assert all(spec_of(name).layout(name) == LAYOUT for name in SUMMARY_REPORTS)


class JointReport(NamedTuple):
    """One report of many exports: its rows (each export's in the order the report gives them,
    exports in input order), the position of each row's export, and the positions of the exports
    that have the report (the others lack its data: MissingData)."""

    table: Table
    export: np.ndarray
    present: list[int]


class _Rows(NamedTuple):
    """The rows of one report's exports: export position, group key and value of each row."""

    export: np.ndarray
    key: np.ndarray
    value: np.ndarray
    present: list[int]


#: one export's (group key, value) per row, in table order
Reader = Callable[[Export], tuple[np.ndarray, np.ndarray]]


def summaries_of(exports: Sequence[Export]) -> tuple[dict[str, JointReport], dict[int, NsysInputError]]:
    """SUMMARY_REPORTS of every export: per report its JointReport, and the exports that failed (by
    position: the error that stops the export's summaries, as the columnar engine raises it)."""
    failed: dict[int, NsysInputError] = {at: NsysInputError(f"{export.path}: {NO_STRINGS}")
                                         for at, export in enumerate(exports) if not export.has(STRINGS)}
    out = {"cuda_gpu_kern_sum": _kernels(exports, failed),
           "cuda_api_sum": _by_id(exports, failed, "cuda_api_sum", _calls, clean=True),
           "cuda_gpu_mem_time_sum": _memops(exports, failed, "cuda_gpu_mem_time_sum", "duration"),
           "cuda_gpu_mem_size_sum": _memops(exports, failed, "cuda_gpu_mem_size_sum", "bytes"),
           "nvtx_sum": _nvtx(exports, failed),
           "osrt_sum": _by_id(exports, failed, "osrt_sum", _os_calls, clean=False)}
    assert tuple(out) == SUMMARY_REPORTS
    return out, failed


# ---------------------------------------------------------------------------------------
# the reports


def _calls(export: Export) -> tuple[np.ndarray, np.ndarray]:
    """(nameId, duration) of each CUDA API call (NULL as -1; the activity's read, kept for a small export)."""
    d = api_calls(export, ("nameId", "dur"))
    return d["nameId"], d["dur"]


def _os_calls(export: Export) -> tuple[np.ndarray, np.ndarray]:
    """(nameId, duration) of each OS runtime call of nsys's event class (NULL as -1)."""
    d = export.int_columns(OSRT, {"nameId": "nameId", "dur": DUR}, f"eventClass = {OSRT_EVENT_CLASS}")
    return d["nameId"], d["dur"]


def _by_id(exports: Sequence[Export], failed: dict[int, NsysInputError], name: str, read: Reader,
           clean: bool) -> JointReport:
    """Calls per StringIds id (SQLite groups by the id, not its text): cuda_api_sum, osrt_sum."""
    rows = _read(exports, failed, name, read)
    codes, group_export, ids = _pairs(rows.export, rows.key)
    names = _texts(exports, failed, group_export, ids)
    return _summary(rows, codes, group_export, {"Name": clean_api_names(names) if clean else names}, "Num Calls")


def _kernels(exports: Sequence[Export], failed: dict[int, NsysInputError]) -> JointReport:
    """Kernels per name text (cuda_gpu_kern_sum): ties by count, then name."""
    def read(export: Export) -> tuple[np.ndarray, np.ndarray]:
        d = kernels(export, KERNEL_ACTIVITY)   # the activity's read, kept for a small export (collect reads it first)
        return d["nameId"], d["end"] - d["start"]

    rows = _read(exports, failed, "cuda_gpu_kern_sum", read)
    id_codes, id_export, ids = _pairs(rows.export, rows.key)
    name_codes, group_export, names = _pairs(id_export, _texts(exports, failed, id_export, ids))
    codes = name_codes[id_codes]
    return _summary(rows, codes, group_export, {"Name": names}, "Instances", by_count=True)


def _memops(exports: Sequence[Export], failed: dict[int, NsysInputError], name: str, value: str) -> JointReport:
    """Memcpy and memset operations per label: time, or bytes in MB (10^6 bytes)."""
    def read(export: Export) -> tuple[np.ndarray, np.ndarray]:
        codes, labels, values = memop_codes(export, LAYOUT, value)
        return labels[codes], values

    rows = _read(exports, failed, name, read)
    codes, group_export, labels = _pairs(rows.export, rows.key)
    return _summary(rows, codes, group_export, {"Operation": labels}, "Count", megabytes=value == "bytes")


def _nvtx(exports: Sequence[Export], failed: dict[int, NsysInputError]) -> JointReport:
    """NVTX push/pop and start/end ranges per (range text, style): nvtx.process_ranges of all the
    exports (those not read yet read in one pass)."""
    spec = spec_of("nvtx_sum")
    checked: list[int] = []
    for at, one in enumerate(exports):
        try:
            if at not in failed:
                spec.check(one.table_names)
                checked.append(at)
        except MissingData:
            pass
    read_process_ranges([exports[at] for at in checked], (LAYOUT,))
    present: list[int] = []
    parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
    for at in checked:
        try:
            columns, names = process_ranges(exports[at], LAYOUT)
        except NsysInputError as exc:
            failed[at] = exc
            continue
        except MissingData:
            continue
        present.append(at)
        parts.append((at, names[columns["name"]], columns["eventType"], columns["duration"]))
    position = np.repeat(np.array([p[0] for p in parts], dtype=np.int64), [len(p[1]) for p in parts])
    texts = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, dtype=object)
    start_end = np.isin(np.concatenate([p[2] for p in parts]) if parts else np.empty(0, np.int64), NVTX_STARTEND)
    values = np.concatenate([p[3] for p in parts]) if parts else np.empty(0, dtype=np.int64)
    text_codes, text_values = factorize_sorted(texts)
    codes, group_export, keys = _pairs(position, text_codes * 2 + start_end)       # PushPop (0) before StartEnd (1)
    style = np.where(keys % 2 == 1, "StartEnd", "PushPop").astype(object)
    labels = {"Style": style, "Range": text_values[keys // 2] if len(keys) else np.empty(0, dtype=object)}
    return _summary(_Rows(position, texts, values, present), codes, group_export, labels, "Instances")


# ---------------------------------------------------------------------------------------
# the joint steps


def _read(exports: Sequence[Export], failed: dict[int, NsysInputError], name: str, read: Reader) -> _Rows:
    """Report `name`'s rows of each export not failed that has its data (an export whose read
    raises NsysInputError is failed)."""
    spec = spec_of(name)
    present: list[int] = []
    keys: list[np.ndarray] = []
    values: list[np.ndarray] = []
    for at, export in enumerate(exports):
        if at in failed:
            continue
        try:
            spec.check(export.table_names)
            key, value = read(export)
        except MissingData:
            continue
        except NsysInputError as exc:
            failed[at] = exc
            continue
        present.append(at)
        keys.append(key)
        values.append(value)
    positions = np.repeat(np.array(present, dtype=np.int64), [len(v) for v in values])
    dtype = object if any(k.dtype == object for k in keys) else np.int64
    return _Rows(positions, np.concatenate(keys) if keys else np.empty(0, dtype=dtype),
                 np.concatenate(values) if values else np.empty(0, dtype=np.int64), present)


def _pairs(export: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (export, key) pairs numbered in (export, key) order, keys in SQLite's GROUP BY
    order (ascending; text in byte order, NULL first): (code of each row, export of each pair,
    key of each pair)."""
    if key.dtype == object:
        key_codes, distinct = factorize_sorted(key)
    else:                                   # integers: numpy's sort is cheaper than Arrow's hash on a few rows
        distinct, key_codes = np.unique(key, return_inverse=True)
    width = max(len(distinct), 1)
    pairs, codes = np.unique(export * width + key_codes, return_inverse=True)
    return codes.reshape(-1), pairs // width, distinct[pairs % width]


def _texts(exports: Sequence[Export], failed: dict[int, NsysInputError], group_export: np.ndarray,
           ids: np.ndarray) -> np.ndarray:
    """The StringIds text of each group's id, looked up in its export (None: unknown id; an export
    whose look-up fails is failed)."""
    out = np.full(len(ids), None, dtype=object)
    bounds = np.searchsorted(group_export, np.arange(len(exports) + 1)).tolist()
    for at, export in enumerate(exports):
        lo, hi = bounds[at], bounds[at + 1]
        if hi > lo and at not in failed:
            try:
                out[lo:hi] = export.strings(ids[lo:hi])
            except NsysInputError as exc:
                failed[at] = exc
    return out


def _summary(rows: _Rows, codes: np.ndarray, group_export: np.ndarray, labels: dict[str, np.ndarray],
             count_label: str, by_count: bool = False, megabytes: bool = False) -> JointReport:
    """The report of groups `codes` (each group of one export, groups in (export, key) order):
    nsys's eight summary columns (Time % of the group's export) or, `megabytes`, the MB columns,
    then `labels`; rows by export, then total descending (`by_count`: count ascending next), then
    GROUP BY order."""
    g = Groups(codes, rows.value, len(group_export))
    if megabytes:
        mb = 1e6
        columns = {"Total (MB)": g.total / mb, "Count": g.count, "Avg (MB)": g.avg / mb, "Med (MB)": g.med / mb,
                   "Min (MB)": g.min / mb, "Max (MB)": g.max / mb, "StdDev (MB)": g.std / mb}
        formats = ["f3", "i", "f3", "f3", "f3", "f3", "f3"]
    else:
        grand = np.zeros(int(group_export.max()) + 1 if len(group_export) else 0, dtype=np.int64)
        np.add.at(grand, group_export, g.total)
        columns, formats = g.summary(count_label, LAYOUT, grand[group_export]), list(SUMMARY_FMT)
    keys = [np.arange(len(group_export))] + ([g.count] if by_count else []) + [-g.total, group_export]
    order = np.lexsort(keys)
    table = make_table(columns | labels, formats + ["s"] * len(labels), order, null=null_text(LAYOUT))
    return JointReport(table, group_export[order], rows.present)
