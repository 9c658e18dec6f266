"""The summary reports of `nsys stats` with the standard library only (sqlite3; no numpy,
pandas, pyarrow or SQLAlchemy): the standard-library engine, for CSV of small exports, where
importing the columnar engine costs more than the whole report (stats.py says by how much; it
registers these functions beside their columnar twins, one ReportSpec each).

It computes what the columnar engine computes, row by row, in nsys's own terms: SQLite's GROUP BY
order (integer ids, or text in byte order with NULL first), Σ/count/min/max/median per group, the
sample standard deviation as SQLite's Welford `stdev()` over the rows in table order, one-decimal
rounding as the nsys of the layout does it (numerics.round1), rows by total time descending. Both
engines are checked against nsys itself by the differential tests.
"""

from __future__ import annotations

import math
import os
import sqlite3

from hpcprof.analysis.nsys_stats.numerics import round1, sample_stdev
from hpcprof.analysis.nsys_stats.schema import (
    KERNEL,
    MEMCPY,
    MEMSET,
    MEMSET_LABEL,
    NO_STRINGS,
    NVTX,
    NVTX_DOMAIN_CREATE,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    OLD,
    OLD_MEMCPY_LABELS,
    OSRT,
    OSRT_EVENT_CLASS,
    RUNTIME,
    STRINGS,
    NsysInputError,
    check_sqlite_file,
    clean_api_name,
    memcpy_label,
    nvtx_domain_name,
    nvtx_name,
)
from hpcprof.analysis.nsys_stats.table import SUMMARY_COLS, SUMMARY_FMT, Table, null_text

TYPE_CHECKING = False          # typing's constant without importing typing (the quick lane's start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path
    from typing import Any


class Stats:
    """Statistics of one group's values, given in table row order: total, count, avg, med, min,
    max and std (numerics.sample_stdev). (Plain classes, not dataclasses: the start-up path.)"""

    __slots__ = ("total", "count", "avg", "med", "min", "max", "std")

    def __init__(self, values: list[int]) -> None:
        n = len(values)
        ordered = sorted(values)
        self.total, self.count = sum(values), n
        self.avg = float(self.total) / n
        self.med = (float(ordered[(n - 1) // 2]) + float(ordered[n // 2])) / 2.0
        self.min, self.max = ordered[0], ordered[-1]
        self.std = sample_stdev(values, n)


def _grouped(pairs: Iterable[tuple[Any, int]], sort_key: Callable[[Any], Any] | None = None) -> dict[Any, Stats]:
    """Statistics per key, keys in SQLite GROUP BY order (`sort_key` for text with NULL)."""
    groups: dict[Any, list[int]] = {}
    for key, value in pairs:
        groups.setdefault(key, []).append(value)
    return {key: Stats(groups[key]) for key in sorted(groups, key=sort_key)}


def _text_order(value: str | None) -> tuple[int, str]:
    """SQLite's BINARY order of text (code points = UTF-8 bytes) with NULL first."""
    return (0, "") if value is None else (1, value)


def _summary(groups: dict[Any, Stats], count_label: str, layout: str, labels: list[list[Any]],
             label_cols: list[str], tiebreak: Callable[[int, Stats], tuple] = lambda i, s: ()) -> Table:
    """The eight summary columns plus `label_cols`, rows by total descending, then `tiebreak`,
    then GROUP BY order."""
    stats = list(groups.values())
    grand = float(sum(s.total for s in stats))
    rows = []
    for i, s in enumerate(stats):
        share = float(s.total) * 100.0 / grand if grand else math.nan
        rows.append((round1(share, layout), s.total, s.count, round1(s.avg, layout), round1(s.med, layout),
                     s.min, s.max, round1(s.std, layout), *(column[i] for column in labels)))
    order = sorted(range(len(stats)), key=lambda i: (-stats[i].total, *tiebreak(i, stats[i]), i))
    columns = [c.format(count=count_label) for c in SUMMARY_COLS] + label_cols
    return Table.from_rows(columns, SUMMARY_FMT + ["s"] * len(label_cols), [rows[i] for i in order],
                           null_text(layout))


# ---------------------------------------------------------------------------------------
# the export


class SmallExport:
    """An nsys SQLite export read with the standard library (read-only, immutable)."""

    def __init__(self, path: str | Path) -> None:
        """Open `path` (close closes it)."""
        self.path = path
        self.known_strings: dict[int, str | None] = {}      # StringIds values looked up (None: no such id)
        check_sqlite_file(path)
        uri = "file:" + _uri_path(os.path.realpath(path)) + "?mode=ro&immutable=1"
        try:
            self.conn = sqlite3.connect(uri, uri=True)
            self.tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            raise NsysInputError(f"{path}: unreadable SQLite file ({exc})") from None
        if STRINGS not in self.tables:
            self.conn.close()
            raise NsysInputError(f"{path}: {NO_STRINGS}")

    def close(self) -> None:
        self.conn.close()

    def has(self, table: str) -> bool:
        """Whether the export has `table`."""
        return table in self.tables

    def query(self, sql: str) -> list[tuple]:
        try:
            return self.conn.execute(sql).fetchall()
        except sqlite3.DatabaseError as exc:
            raise NsysInputError(f"{self.path}: SQLite error ({exc})") from None

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.query(f'PRAGMA table_info("{table}")')} if table in self.tables else set()

    def strings(self, ids: Iterable[int]) -> dict[int, str]:
        """StringIds.value of each id (unknown ids are absent); each id looked up once."""
        asked = {i for i in ids if i is not None}
        known = self.known_strings
        wanted = sorted(i for i in asked if i not in known)
        for at in range(0, len(wanted), 50_000):
            part = wanted[at:at + 50_000]
            found = dict(self.query(f"SELECT id, value FROM {STRINGS} WHERE id IN ({','.join(map(str, part))})"))
            known.update((i, found.get(i)) for i in part)
        return {i: value for i in asked if (value := known[i]) is not None}


def _uri_path(path: str) -> str:
    """`path` as the path of an SQLite URI: `%`, `?` and `#` escaped (urllib.parse.quote would do, at
    2 ms of imports on the quick lane's start-up)."""
    return path.replace("%", "%25").replace("?", "%3f").replace("#", "%23")


# ---------------------------------------------------------------------------------------
# reports


def _by_name_id(export: SmallExport, table: str, where: str, layout: str, clean: bool) -> Table:
    groups = _grouped(export.query(f'SELECT coalesce(nameId, -1), coalesce("end" - "start", -1) FROM {table}{where}'))
    names = export.strings(groups)
    labels = [clean_api_name(names.get(i)) if clean else names.get(i) for i in groups]
    return _summary(groups, "Num Calls", layout, [labels], ["Name"])


def cuda_api_sum(export: SmallExport, layout: str) -> Table:
    """CUDA runtime and driver API calls per API name."""
    return _by_name_id(export, RUNTIME, "", layout, clean=True)


def osrt_sum(export: SmallExport, layout: str) -> Table:
    """OS runtime calls per function name."""
    return _by_name_id(export, OSRT, f" WHERE eventClass = {OSRT_EVENT_CLASS}", layout, clean=False)


def _kernel_rows(export: SmallExport, extra: str = "") -> list[tuple]:
    return export.query(f'SELECT coalesce(start, -1), coalesce("end", -1), coalesce(demangledName, -1){extra} '
                        f"FROM {KERNEL}")


def cuda_gpu_kern_sum(export: SmallExport, layout: str) -> Table:
    """Kernels per name (nsys 2024+ `cuda_gpu_kern_sum`): ties by count, then name."""
    rows = _kernel_rows(export)
    names = export.strings(r[2] for r in rows)
    groups = _grouped(((names.get(name_id), end - start) for start, end, name_id in rows), _text_order)
    return _summary(groups, "Instances", layout, [list(groups)], ["Name"], lambda i, s: (s.count,))


def cuda_gpu_kern_gb_sum(export: SmallExport, layout: str) -> Table:
    """Kernels per (name, grid, block). nsys 2022.4 (`gpukernsum`) groups by (nameId, grid text,
    block text), ties in that order; nsys 2024+ by (name text, the six dimensions as numbers),
    ties by count, name, then the dimensions."""
    dims = "".join(f", coalesce({c}, -1)" for c in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"))
    rows = _kernel_rows(export, dims)
    if layout == OLD:
        groups = _grouped(((r[2], _dims_text(r[3:6]), _dims_text(r[6:9])), r[1] - r[0]) for r in rows)
        names = export.strings(key[0] for key in groups)
        return _summary(groups, "Instances", layout, [[k[1] for k in groups], [k[2] for k in groups],
                                                      [names.get(k[0]) for k in groups]],
                        ["GridXYZ", "BlockXYZ", "Name"])
    texts = export.strings(r[2] for r in rows)
    by_text = _grouped((((texts.get(r[2]), r[3:6], r[6:9]), r[1] - r[0]) for r in rows),
                       lambda key: (_text_order(key[0]), key[1], key[2]))
    keys = list(by_text)
    return _summary(by_text, "Instances", layout, [[_dims_text(k[1]) for k in keys], [_dims_text(k[2]) for k in keys],
                                                   [k[0] for k in keys]], ["GridXYZ", "BlockXYZ", "Name"],
                    lambda i, s: (s.count, _text_order(keys[i][0]), *keys[i][1], *keys[i][2]))


def _dims_text(dims: tuple[int, ...]) -> str:
    """A kernel's grid or block as nsys prints it: "%4d %4d %4d"."""
    return "%4d %4d %4d" % dims  # noqa: UP031 (nsys's C format)


def _memops(export: SmallExport, layout: str, value: int) -> dict[str, Stats]:
    """Memcpy rows (by operation label; kinds without a label are left out, as nsys's join does)
    then memset rows: statistics of duration (`value` 1) or bytes (2) per label, in text order."""
    labels = OLD_MEMCPY_LABELS
    if layout != OLD and "ENUM_CUDA_MEMCPY_OPER" in export.tables:
        labels = {int(i): memcpy_label(label) for i, label in
                  export.query("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER")}
    pairs: list[tuple[str, int]] = []
    select = 'coalesce("end" - "start", -1), coalesce(bytes, -1)'
    if MEMCPY in export.tables:
        pairs += [(labels[r[0]], r[value]) for r in export.query(f"SELECT coalesce(copyKind, -1), {select} "
                                                                 f"FROM {MEMCPY}") if r[0] in labels]
    if MEMSET in export.tables:
        pairs += [(MEMSET_LABEL, r[value]) for r in export.query(f"SELECT -1, {select} FROM {MEMSET}")]
    return _grouped(pairs, _text_order)


def cuda_gpu_mem_time_sum(export: SmallExport, layout: str) -> Table:
    """Memcpy and memset operations per kind: time."""
    groups = _memops(export, layout, 1)
    return _summary(groups, "Count", layout, [list(groups)], ["Operation"])


def cuda_gpu_mem_size_sum(export: SmallExport, layout: str) -> Table:
    """Memcpy and memset operations per kind: bytes, shown in MB (10^6 bytes)."""
    groups = _memops(export, layout, 2)
    mb = 1e6
    rows = [(float(s.total) / mb, s.count, s.avg / mb, s.med / mb, float(s.min) / mb, float(s.max) / mb, s.std / mb, op)
            for op, s in groups.items()]
    totals = [s.total for s in groups.values()]
    order = sorted(range(len(rows)), key=lambda i: (-totals[i], i))
    return Table.from_rows(["Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)",
                            "Operation"], ["f3", "i", "f3", "f3", "f3", "f3", "f3", "s"], [rows[i] for i in order],
                           null_text(layout))


def nvtx_sum(export: SmallExport, layout: str) -> Table:
    """NVTX push/pop and start/end ranges per (name, style). A range's name is its StringIds text
    (else its inline text), `domain:name` where the process created its domain (eventType 75; the
    first such row by start); unterminated ranges end at the export's last NVTX timestamp."""
    cols = export.columns(NVTX)
    optional = ", ".join(f"coalesce({c}, -1)" if c in cols else "-1" for c in ("textId", "domainId"))
    rows = export.query(f'SELECT coalesce(start, -1), coalesce("end", -1), coalesce(eventType, -1), '
                        f'coalesce(globalTid, -1), {optional}, {"text" if "text" in cols else "NULL"} FROM {NVTX}')
    last = max((max(r[0], r[1]) for r in rows), default=0)
    last = max(last, 0)
    strings = export.strings(r[4] for r in rows if r[4] >= 0)

    def label(text_id: int, text: str | None) -> str | None:
        resolved = strings.get(text_id) if text_id >= 0 else None
        return text if resolved is None else resolved

    kinds = NVTX_PUSHPOP + NVTX_STARTEND
    domains: dict[tuple[int, int], str | None] = {}
    for r in sorted((r for r in rows if r[2] == NVTX_DOMAIN_CREATE), key=lambda r: r[0]):
        domains.setdefault((r[5], (r[3] >> 24) & 0xFFFFFF), nvtx_domain_name(r[6], label(r[4], r[6]), layout))

    def name(r: tuple) -> str | None:
        return nvtx_name(domains.get((r[5], (r[3] >> 24) & 0xFFFFFF)), label(r[4], r[6]), layout)

    pairs = (((name(r), 1 if r[2] in NVTX_STARTEND else 0), (r[1] if r[1] >= 0 else last) - r[0])
             for r in rows if r[2] in kinds)
    groups = _grouped(pairs, lambda key: (_text_order(key[0]), key[1]))
    return _summary(groups, "Instances", layout, [["StartEnd" if k[1] else "PushPop" for k in groups],
                                                  [k[0] for k in groups]], ["Style", "Range"])
