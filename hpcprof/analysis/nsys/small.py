"""The six `nsys stats` summary reports with the standard library only (sqlite3, no numpy,
pandas, pyarrow or SQLAlchemy): the engine for per-rank exports, where importing the columnar
engine (`stats.py`) costs more than the whole report.

It computes what `stats.py` computes, row by row, in nsys's own terms: SQLite's GROUP BY order
(integer ids, or text in byte order with NULL first), Σ/count/min/max/median per group, the
sample standard deviation as SQLite's Welford `stdev()` over the rows in table order, one-decimal
rounding as the nsys of the layout does it (2022.4: SQLite 3.36's long-double printf, emulated
exactly with fractions; 2025: the exact binary value, half away from zero), rows by total time
descending. Both engines are checked against nsys itself by the differential tests.
"""

from __future__ import annotations

import csv
import math
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterable
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, TextIO

from hpcprof.analysis.nsys.schema import (
    GPU_TABLES,
    KERNEL,
    MEMCPY,
    MEMSET,
    MEMSET_LABEL,
    NO_GPU_ACTIVITY,
    NO_STRINGS,
    NVTX,
    NVTX_DOMAIN_CREATE,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    OLD_MEMCPY_LABELS,
    OSRT,
    OSRT_EVENT_CLASS,
    RUNTIME,
    STRINGS,
    MissingData,
    NsysInputError,
    check_sqlite_file,
)

OLD, NEW = "2022.4", "2025.3"
SUMMARY_COLS = ["Time (%)", "Total Time (ns)", "{count}", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
                "StdDev (ns)"]
SUMMARY_FMT = ["f1", "i", "i", "f1", "f1", "i", "i", "f1"]
CELL_FORMATS = {"i": ("%d", int), "f1": ("%.1f", float), "f3": ("%.3f", float)}


class Report:
    """One report: header, CSV cell format per column ("i", "f1", "f3", "s"), rows, NULL text.
    (Plain classes, not dataclasses: this module is on the start-up path.)"""

    __slots__ = ("columns", "formats", "rows", "null")

    def __init__(self, columns: list[str], formats: list[str], rows: list[tuple[Any, ...]], null: str) -> None:
        self.columns, self.formats, self.rows, self.null = columns, formats, rows, null


# ---------------------------------------------------------------------------------------
# numerics


def _long_double(r: Fraction) -> Fraction:
    """`r` rounded to x87 extended precision (64-bit significand, ties to even)."""
    if r == 0:
        return r
    sign, r = (1, r) if r > 0 else (-1, -r)
    shift = r.numerator.bit_length() - r.denominator.bit_length() - 64
    scaled = r / Fraction(2) ** shift
    while scaled >= 1 << 64:
        scaled /= 2
        shift += 1
    while scaled < 1 << 63:
        scaled *= 2
        shift -= 1
    return sign * Fraction(round(scaled)) * Fraction(2) ** shift


def sqlite_round1(x: float) -> float:
    """round(x, 1) as SQLite 3.36 (inside nsys 2022.4) computes it: `%.1f` in long double after
    adding 0.05 and a 3e-16 relative fudge; NaN stays NaN (as stats.sqlite_round1)."""
    if math.isnan(x):
        return x
    mag = Fraction(abs(x))
    exponent = math.frexp(abs(x))[1] - 1
    fudge = _long_double(mag * Fraction(3e-16)) if 1 + exponent // 3 < 15 else Fraction(0)
    total = _long_double(_long_double(mag + Fraction(0.05)) + fudge)
    tenths = math.floor(_long_double(total * 10))
    if x == 0:
        return 0.0
    return math.copysign(1.0, x) * (float(tenths) / 10.0) + 0.0


def exact_round1(x: float) -> float:
    """round(x, 1) as nsys 2025 computes it: the exact binary value, half away from zero."""
    if math.isnan(x):
        return x
    return float(Decimal(x).quantize(Decimal("0.1"), ROUND_HALF_UP))


def round1(x: float, layout: str) -> float:
    return sqlite_round1(x) if layout == OLD else exact_round1(x)


class Stats:
    """Statistics of one group's values, given in table row order: total, count, avg, med, min,
    max and std (the sample standard deviation as SQLite's `stdev()`: Welford in row order)."""

    __slots__ = ("total", "count", "avg", "med", "min", "max", "std")

    def __init__(self, values: list[int]) -> None:
        n = len(values)
        ordered = sorted(values)
        mean = spread = 0.0
        for k, x in enumerate(values, start=1):
            delta = x - mean
            mean += delta / k
            spread += delta * (x - mean)
        self.total, self.count = sum(values), n
        self.avg = float(self.total) / n
        self.med = (float(ordered[(n - 1) // 2]) + float(ordered[n // 2])) / 2.0
        self.min, self.max = ordered[0], ordered[-1]
        self.std = math.sqrt(spread / (n - 1)) if n > 1 else 0.0


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
             label_cols: list[str], tiebreak: Callable[[int, Stats], tuple] = lambda i, s: ()) -> Report:
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
    return Report(columns, SUMMARY_FMT + ["s"] * len(label_cols), [rows[i] for i in order],
                  "None" if layout == OLD else "")


# ---------------------------------------------------------------------------------------
# the export


class SmallExport:
    """An nsys SQLite export read with the standard library (read-only, immutable)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        check_sqlite_file(path)
        uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"
        try:
            self.conn = sqlite3.connect(uri, uri=True)
            self.tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            raise NsysInputError(f"{path}: unreadable SQLite file ({exc})") from None
        if STRINGS not in self.tables:
            raise NsysInputError(f"{path}: {NO_STRINGS}")
        if not any(t in self.tables and self.query(f'SELECT 1 FROM "{t}" LIMIT 1') for t in GPU_TABLES):
            raise NsysInputError(f"{path}: {NO_GPU_ACTIVITY}")

    def close(self) -> None:
        self.conn.close()

    def query(self, sql: str) -> list[tuple]:
        try:
            return self.conn.execute(sql).fetchall()
        except sqlite3.DatabaseError as exc:
            raise NsysInputError(f"{self.path}: SQLite error ({exc})") from None

    def need(self, table: str, what: str) -> None:
        if table not in self.tables:
            raise MissingData(f"no {what}")

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.query(f'PRAGMA table_info("{table}")')} if table in self.tables else set()

    def strings(self, ids: Iterable[int]) -> dict[int, str]:
        """StringIds.value of each id (unknown ids are absent)."""
        wanted = sorted({i for i in ids if i is not None})
        found: dict[int, str] = {}
        for at in range(0, len(wanted), 50_000):
            listed = ",".join(map(str, wanted[at:at + 50_000]))
            found.update(self.query(f"SELECT id, value FROM {STRINGS} WHERE id IN ({listed})"))
        return found


# ---------------------------------------------------------------------------------------
# reports


def _clean_api_name(name: str | None) -> str | None:
    """Drop a `_vNNNN` suffix, as nsys's API reports do."""
    return name[:-6] if isinstance(name, str) and len(name) >= 6 and name[-6:-4] == "_v" else name


def _by_name_id(export: SmallExport, table: str, where: str, layout: str, clean: bool) -> Report:
    groups = _grouped(export.query(f'SELECT coalesce(nameId, -1), coalesce("end" - "start", -1) FROM {table}{where}'))
    names = export.strings(groups)
    labels = [_clean_api_name(names.get(i)) if clean else names.get(i) for i in groups]
    return _summary(groups, "Num Calls", layout, [labels], ["Name"])


def cuda_api_sum(export: SmallExport, layout: str) -> Report:
    """CUDA runtime and driver API calls per API name."""
    export.need(RUNTIME, "CUDA trace data")
    return _by_name_id(export, RUNTIME, "", layout, clean=True)


def osrt_sum(export: SmallExport, layout: str) -> Report:
    """OS runtime calls per function name."""
    export.need(OSRT, "OS Runtime trace data")
    return _by_name_id(export, OSRT, f" WHERE eventClass = {OSRT_EVENT_CLASS}", layout, clean=False)


def _kernel_rows(export: SmallExport, extra: str = "") -> list[tuple]:
    export.need(KERNEL, "CUDA kernel data")
    return export.query(f'SELECT coalesce(start, -1), coalesce("end", -1), coalesce(demangledName, -1){extra} '
                        f"FROM {KERNEL}")


def cuda_gpu_kern_sum(export: SmallExport, layout: str) -> Report:
    """Kernels per name (nsys 2024+ `cuda_gpu_kern_sum`): ties by count, then name."""
    rows = _kernel_rows(export)
    names = export.strings(r[2] for r in rows)
    groups = _grouped(((names.get(name_id), end - start) for start, end, name_id in rows), _text_order)
    return _summary(groups, "Instances", layout, [list(groups)], ["Name"], lambda i, s: (s.count,))


def gpukernsum(export: SmallExport, layout: str) -> Report:
    """Kernels per (name, grid, block): nsys 2022.4's `gpukernsum`."""
    dims = "".join(f", coalesce({c}, -1)" for c in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"))
    rows = _kernel_rows(export, dims)
    groups = _grouped(((r[2], "%4d %4d %4d" % r[3:6], "%4d %4d %4d" % r[6:9]), r[1] - r[0])  # noqa: UP031 (nsys's C format)
                      for r in rows)
    names = export.strings(key[0] for key in groups)
    return _summary(groups, "Instances", layout, [[k[1] for k in groups], [k[2] for k in groups],
                                                  [names.get(k[0]) for k in groups]],
                    ["GridXYZ", "BlockXYZ", "Name"])


def _memops(export: SmallExport, layout: str, value: int) -> dict[str, Stats]:
    """Memcpy rows (by operation label; kinds without a label are left out, as nsys's join does)
    then memset rows: statistics of duration (`value` 1) or bytes (2) per label, in text order."""
    if MEMCPY not in export.tables and MEMSET not in export.tables:
        raise MissingData("no GPU memory data")
    labels = OLD_MEMCPY_LABELS
    if layout != OLD and "ENUM_CUDA_MEMCPY_OPER" in export.tables:
        labels = {int(i): f"[CUDA memcpy {label}]" for i, label in
                  export.query("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER")}
    pairs: list[tuple[str, int]] = []
    select = 'coalesce("end" - "start", -1), coalesce(bytes, -1)'
    if MEMCPY in export.tables:
        pairs += [(labels[r[0]], r[value]) for r in export.query(f"SELECT coalesce(copyKind, -1), {select} "
                                                                 f"FROM {MEMCPY}") if r[0] in labels]
    if MEMSET in export.tables:
        pairs += [(MEMSET_LABEL, r[value]) for r in export.query(f"SELECT -1, {select} FROM {MEMSET}")]
    return _grouped(pairs, _text_order)


def cuda_gpu_mem_time_sum(export: SmallExport, layout: str) -> Report:
    """Memcpy and memset operations per kind: time."""
    groups = _memops(export, layout, 1)
    return _summary(groups, "Count", layout, [list(groups)], ["Operation"])


def cuda_gpu_mem_size_sum(export: SmallExport, layout: str) -> Report:
    """Memcpy and memset operations per kind: bytes, shown in MB (10^6 bytes)."""
    groups = _memops(export, layout, 2)
    mb = 1e6
    rows = [(float(s.total) / mb, s.count, s.avg / mb, s.med / mb, float(s.min) / mb, float(s.max) / mb, s.std / mb, op)
            for op, s in groups.items()]
    totals = [s.total for s in groups.values()]
    order = sorted(range(len(rows)), key=lambda i: (-totals[i], i))
    return Report(["Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)", "Operation"],
                  ["f3", "i", "f3", "f3", "f3", "f3", "f3", "s"], [rows[i] for i in order],
                  "None" if layout == OLD else "")


def nvtx_sum(export: SmallExport, layout: str) -> Report:
    """NVTX push/pop and start/end ranges per (name, style). A range's name is its StringIds text
    (else its inline text), `domain:name` where the process created its domain (eventType 75; the
    first such row by start); unterminated ranges end at the export's last NVTX timestamp."""
    export.need(NVTX, "NV Tools Extension (NVTX) data")
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
        domains.setdefault((r[5], (r[3] >> 24) & 0xFFFFFF), r[6] if layout == OLD else label(r[4], r[6]))

    def name(r: tuple) -> str | None:
        lab = label(r[4], r[6])
        if not domains:
            return lab if layout == OLD else f":{lab or ''}"
        dom = domains.get((r[5], (r[3] >> 24) & 0xFFFFFF))
        if layout == OLD:
            return lab if dom is None else f"{dom}:{lab}"
        return f"{dom or ''}:{lab or ''}"

    pairs = (((name(r), 1 if r[2] in NVTX_STARTEND else 0), (r[1] if r[1] >= 0 else last) - r[0])
             for r in rows if r[2] in kinds)
    groups = _grouped(pairs, lambda key: (_text_order(key[0]), key[1]))
    return _summary(groups, "Instances", layout, [["StartEnd" if k[1] else "PushPop" for k in groups],
                                                  [k[0] for k in groups]], ["Style", "Range"])


#: report name -> (function, layout): the six summary reports in both spellings
REPORTS: dict[str, tuple[Callable[[SmallExport, str], Report], str]] = {
    "cuda_gpu_kern_sum": (cuda_gpu_kern_sum, NEW), "cuda_api_sum": (cuda_api_sum, NEW),
    "cuda_gpu_mem_time_sum": (cuda_gpu_mem_time_sum, NEW), "cuda_gpu_mem_size_sum": (cuda_gpu_mem_size_sum, NEW),
    "nvtx_sum": (nvtx_sum, NEW), "osrt_sum": (osrt_sum, NEW),
    "gpukernsum": (gpukernsum, OLD), "cudaapisum": (cuda_api_sum, OLD), "gpumemtimesum": (cuda_gpu_mem_time_sum, OLD),
    "gpumemsizesum": (cuda_gpu_mem_size_sum, OLD), "nvtxsum": (nvtx_sum, OLD), "osrtsum": (osrt_sum, OLD),
}


def run_reports(path: Path, names: list[str]) -> list[Report | MissingData | NsysInputError]:
    """Reports `names` of the export at `path` (NsysInputError when the file itself is unusable);
    each entry is the report or the MissingData/NsysInputError it raised."""
    export = SmallExport(path)
    try:
        out: list[Report | MissingData | NsysInputError] = []
        for name in names:
            func, layout = REPORTS[name]
            try:
                out.append(func(export, layout))
            except (MissingData, NsysInputError) as exc:
                out.append(exc)
        return out
    finally:
        export.close()


def _cell(value: Any, fmt: str, null: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return null
    if isinstance(value, str) and value == "":
        return ""
    if fmt in CELL_FORMATS:
        spec, kind = CELL_FORMATS[fmt]
        return spec % kind(value)
    return str(value)


def write_csv(report: Report, out: TextIO) -> None:
    """Write a report as `nsys stats --format csv` does; no rows: an empty file."""
    if not report.rows:
        return
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(report.columns)
    writer.writerows([_cell(v, f, report.null) for v, f in zip(row, report.formats, strict=False)] for row in report.rows)
