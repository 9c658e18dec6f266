"""`nsys stats` reports recomputed from an export: same columns, rounding and row order.

Each report is a function `Export -> Table`: numpy columns carrying their CSV cell formats
(one per column: "i" integer, "f1" one decimal, "f3" three decimals, "s" text, and the text
of NULL), which `write_csv` uses to print exactly what `nsys stats --format csv` prints, with
no pandas (`run_report` gives the DataFrame, formats in `df.attrs`).

Two layouts exist: the old report names (gpukernsum, cudaapisum, ...) give nsys
2022.4's columns and labels; the current names (cuda_gpu_kern_sum, ...) give
those of nsys 2024-2025 (kernel summary by name only with tie-breaks,
`[CUDA memcpy Host-to-Device]` labels, `domain:range` NVTX names).

Numbers follow nsys's SQL: Total = Σ(end-start); Avg/Med/StdDev rounded to one
decimal as that nsys rounds (SQLite 3.36's long-double printf for 2022.4, for 2025 the
exact binary value rounded half away from zero: 239194.65 is 239194.6499.. and prints .6);
StdDev is the sample standard deviation (0 for fewer than 2 values);
Time % = round(100·total/Σtotal, 1); rows sorted by total, descending, ties in
GROUP BY order (the key order SQLite's sorter leaves them in: SQLite's ORDER BY sort is
stable, so rows with equal sort keys keep the order the grouping produced them in). The
GROUP BY keys are each report's own: 2022.4's gpukernsum groups by (nameId, grid text, block
text); 2024+'s cuda_gpu_kern_gb_sum by (name text, gridX, gridY, gridZ, blockX, blockY, blockZ)
as numbers and orders by total descending, count ascending, name (so of two tied grids 2048
comes before 13000, which the text "%4d" order puts first).

Speed: the summary reports read each table once, with as few columns as possible (the
ADBC driver's cost is per row and per value moved): a group key and the duration packed
into one int64 in SQL (`key << 41 | value`, checked in SQL, -1 where it does not fit), so
one int64 sort gives groups, medians and all; NVTX text is dictionary-encoded per batch in
Arrow and only distinct texts become Python strings. Tables over a million rows are read
as two rowid ranges in parallel threads. Where a packed read does not apply (a value out
of range, an unterminated NVTX range) the report falls back to the general column reads.
"""

from __future__ import annotations

import csv
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hpcprof.analysis.nsys import small
from hpcprof.analysis.nsys.db import (
    KERNEL,
    MEMCPY,
    MEMSET,
    NVTX,
    NVTX_DOMAIN_CREATE,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    OSRT,
    RUNTIME,
    Export,
    NsysInputError,
    TextCodes,
    arrow_of,
    numpy_of,
    pid_of,
    process_of,
)
from hpcprof.analysis.nsys.schema import (  # noqa: F401  (MissingData re-exported for the callers)
    MEMSET_LABEL,
    OLD_MEM_KINDS,
    OLD_MEMCPY_LABELS,
    OSRT_EVENT_CLASS,
    MissingData,
)
from hpcprof.analysis.nsys.small import SUMMARY_COLS, SUMMARY_FMT
from hpcprof.lazy import LazyModule

sa = LazyModule("sqlalchemy")
if TYPE_CHECKING:
    import pandas as pd
else:   # the summary reports and their CSV need no pandas (0.2-0.5 s of start-up): imported when used
    pd = LazyModule("pandas")

OLD, NEW = "2022.4", "2025.3"



# ---------------------------------------------------------------------------------------
# numerics


def sqlite_round1(x: np.ndarray) -> np.ndarray:
    """round(x, 1) as SQLite 3.36 (inside nsys 2022.4) computes it; NaN stays NaN.

    SQLite prints the value with `%.1f` in long double after adding 0.05 and a
    3e-16 relative fudge, then parses the text back."""
    x = np.asarray(x, dtype=np.float64)
    mag = np.abs(x).astype(np.longdouble)
    exps = np.frexp(np.abs(x))[1] - 1
    fudge = np.where(1 + exps // 3 < 15, mag * np.longdouble(3e-16), 0)
    tenths = np.floor((mag + np.longdouble(np.float64(0.05)) + fudge) * 10)
    with np.errstate(invalid="ignore"):
        out = np.sign(x) * (tenths.astype(np.float64) / 10.0)
    return np.where(np.isnan(x), np.nan, out + 0.0)


def exact_round1(x: np.ndarray) -> np.ndarray:
    """round(x, 1) as nsys 2025 computes it: the float64 value's exact binary expansion rounded
    half away from zero, so 3193803.15 (stored as 3193803.1499999...) gives 3193803.1 and
    8921.25 (exact in binary) gives 8921.3; NaN stays NaN."""
    return np.asarray([small.exact_round1(v) for v in np.asarray(x, dtype=np.float64).tolist()], dtype=np.float64)


def round1(x: np.ndarray, layout: str) -> np.ndarray:
    """round(x, 1) as the nsys of `layout` computes it (SQLite 3.36 in 2022.4, exact binary half away from zero in 2025)."""
    return sqlite_round1(x) if layout == OLD else exact_round1(x)


PACK_BITS = 41                       # value bits of a packed (key << 41 | value) int64
PACK_MASK = (1 << PACK_BITS) - 1     # values 0 .. 2^41-1 ns (36 min) or bytes (2 TB)
PACK_KEYS = 1 << 22                  # keys 0 .. 2^22-1
DUR = '"end" - "start"'              # SQL of a row's duration


def pack_sql(key: str, value: str) -> str:
    """SQL of `key << 41 | value` for one int64 column, -1 where either is out of range or NULL
    (then the caller falls back to reading the columns separately)."""
    return (f"CASE WHEN ({value}) BETWEEN 0 AND {PACK_MASK} AND ({key}) BETWEEN 0 AND {PACK_KEYS - 1} "
            f"THEN (({key}) << {PACK_BITS}) | ({value}) ELSE -1 END")


class Groups:
    """Sample statistics of `values` per group code (codes 0..n-1 in GROUP BY order)."""

    def __init__(self, codes: np.ndarray, values: np.ndarray, ngroups: int) -> None:
        if len(values) and ngroups < PACK_KEYS and values.min() >= 0 and values.max() <= PACK_MASK:
            v = codes.astype(np.int64) << PACK_BITS     # one int64 sort instead of a lexsort
            v |= values
            v.sort()
            v &= PACK_MASK                              # groups are contiguous: counts give the bounds
        else:
            v = values[np.lexsort((values, codes))]
        self._reduce(v, np.bincount(codes, minlength=ngroups).astype(np.int64),
                     lambda g: values[codes == g])

    @classmethod
    def from_packed(cls, v: np.ndarray) -> tuple[np.ndarray, Groups]:
        """Groups of packed `key << 41 | value` (sorted here, in place): (keys ascending, groups)."""
        in_rows = v.copy()                  # row order, for StdDev ties (see _welford_at_ties)
        v.sort()
        keys = v >> PACK_BITS
        starts = np.flatnonzero(keys[1:] != keys[:-1]) + 1 if len(v) else np.empty(0, dtype=np.int64)
        starts = np.concatenate(([0], starts)) if len(v) else starts
        ukeys = keys[starts]
        del keys
        v &= PACK_MASK
        g = cls.__new__(cls)
        g._reduce(v, np.diff(np.append(starts, len(v))).astype(np.int64),
                  lambda i: in_rows[(in_rows >> PACK_BITS) == ukeys[i]] & PACK_MASK)
        return ukeys, g

    def _reduce(self, v: np.ndarray, count: np.ndarray, in_rows: Callable[[int], np.ndarray]) -> None:
        """Statistics of `v`, sorted by (group, value), groups of `count` values each;
        `in_rows(g)` gives group g's values in the export's row order."""
        ngroups = len(count)
        self.count = count
        starts = np.concatenate(([0], np.cumsum(self.count)[:-1])).astype(np.int64)
        nonempty = self.count > 0
        s = starts[nonempty]
        n = self.count[nonempty]
        self.total = np.zeros(ngroups, dtype=np.int64)
        self.min = np.zeros(ngroups, dtype=np.int64)
        self.max = np.zeros(ngroups, dtype=np.int64)
        self.med = np.full(ngroups, np.nan)
        self.std = np.zeros(ngroups)
        with np.errstate(invalid="ignore", divide="ignore"):
            if len(v):
                self.total[nonempty] = np.add.reduceat(v, s)
                self.min[nonempty] = v[s]
                self.max[nonempty] = v[s + n - 1]
                self.med[nonempty] = (v[s + (n - 1) // 2].astype(np.float64) + v[s + n // 2]) / 2.0
            self.avg = self.total / self.count
            if len(v):
                dev = v.astype(np.float64)
                dev -= np.repeat(self.avg[nonempty], n)
                dev *= dev
                ss = np.add.reduceat(dev, s)
                self.std[nonempty] = np.where(n > 1, np.sqrt(ss / np.maximum(n - 1, 1)), 0.0)
                self._welford_at_ties(in_rows, nonempty)

    def _welford_at_ties(self, in_rows: Callable[[int], np.ndarray], nonempty: np.ndarray) -> None:
        """Where the two-pass StdDev sits on a rounding tie (x.x5), recompute it as nsys's SQLite
        `stdev()` does: Welford's running update over the rows in table order, whose rounding
        error decides the tie (a true 1.75 comes out 1.7499999999999998 and prints 1.7)."""
        tens = self.std * 10.0
        tie = nonempty & (self.count > 1) & (np.abs(tens - np.floor(tens) - 0.5) < 1e-9 * np.maximum(tens, 1.0))
        for g in np.flatnonzero(tie):
            mean = spread = 0.0
            for k, x in enumerate(in_rows(int(g)).tolist(), start=1):
                delta = x - mean
                mean += delta / k
                spread += delta * (x - mean)
            self.std[g] = np.sqrt(spread / (self.count[g] - 1))

    def ratio(self, layout: str) -> np.ndarray:
        """Time %: round(100·total/Σtotal, 1)."""
        grand = float(self.total.sum())
        with np.errstate(invalid="ignore", divide="ignore"):
            return round1(self.total.astype(np.float64) * 100.0 / grand, layout)

    def summary(self, count_label: str, layout: str) -> dict[str, np.ndarray]:
        """The eight standard summary columns."""
        cols = [c.format(count=count_label) for c in SUMMARY_COLS]
        vals = [self.ratio(layout), self.total, self.count, round1(self.avg, layout), round1(self.med, layout),
                self.min, self.max, round1(self.std, layout)]
        return dict(zip(cols, vals, strict=False))


def factorize_sorted(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(code of each value, distinct values in SQLite's order: ascending, NULL first). Values are
    hashed in Arrow and only the distinct ones sorted; text as Python orders str (code points,
    which is SQLite's byte order of UTF-8), None and NaN as NULL."""
    if key.dtype == object and len(key) <= PYTHON_FACTORIZE_MAX:
        return _factorize_objects(key)
    if key.dtype == object:
        encoded = pa.array(key, type=pa.string(), from_pandas=True).dictionary_encode()
        uniq = np.asarray(encoded.dictionary.to_numpy(zero_copy_only=False), dtype=object)
    else:
        encoded = arrow_of(key).dictionary_encode()
        uniq = numpy_of(encoded.dictionary)
    order = np.argsort(uniq, kind="stable")
    rank = np.empty(len(uniq) + 1, dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    index = numpy_of(encoded.indices)
    if not encoded.indices.null_count:
        return rank[index.astype(np.int64, copy=False)], uniq[order]
    rank[-1] = -1                                         # NULL: a code before every value
    codes = rank[np.where(np.isnan(index), len(uniq), index).astype(np.int64)] + 1
    return codes, np.concatenate((np.array([None], dtype=object), uniq[order].astype(object)))


#: object arrays up to this length are factorized in Python (`pa.array` of text imports pandas)
PYTHON_FACTORIZE_MAX = 200_000


def _factorize_objects(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """factorize_sorted of an object array (text, None/NaN as NULL) with a dict."""
    index: dict[object, int] = {}
    raw = np.fromiter((index.setdefault(None if v is None or v != v else v, len(index)) for v in key.tolist()),
                      dtype=np.int64, count=len(key))
    distinct = list(index)
    order = sorted(range(len(distinct)), key=lambda i: (distinct[i] is not None, distinct[i] or ""))
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[order] = np.arange(len(distinct))
    return rank[raw] if len(raw) else raw, np.array([distinct[i] for i in order] + [None], dtype=object)[:-1]


def group_codes(*keys: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Codes of the distinct key tuples, numbered in sorted (SQLite GROUP BY) order.

    NULL (None) sorts first, as in SQLite. Returns (codes, unique values per key)."""
    sub_codes, uniques = [], []
    for key in keys:
        codes, uniq = factorize_sorted(np.asarray(key))
        uniques.append(uniq)
        sub_codes.append(codes)
    if len(keys) == 1:
        return sub_codes[0], uniques
    dims = [len(u) for u in uniques]
    flat = np.ravel_multi_index(sub_codes, dims)
    used, codes = np.unique(flat, return_inverse=True)
    idx = np.unravel_index(used, dims)
    return codes.astype(np.int64), [u[i] for u, i in zip(uniques, idx, strict=False)]


class Table:
    """A report: its columns (numpy arrays in row order), the CSV cell format of each ("i"
    integer, "f1"/"f3" decimals, "s" text) and the text of NULL. `to_frame` gives the DataFrame
    (importing pandas then); `write_csv` needs no pandas."""

    def __init__(self, columns: dict[str, np.ndarray], formats: list[str], null: str) -> None:
        self.columns, self.formats, self.null = columns, formats, null

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def to_frame(self) -> pd.DataFrame:
        """The report as a DataFrame carrying its formats in `attrs`."""
        df = pd.DataFrame(self.columns)
        df.attrs["formats"] = self.formats
        df.attrs["null"] = self.null
        return df

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> Table:
        return cls({str(c): df[c].to_numpy(dtype=object) for c in df.columns},
                   df.attrs.get("formats", ["s"] * len(df.columns)), df.attrs.get("null", ""))


def frame(columns: dict[str, np.ndarray], formats: list[str], order: np.ndarray | None = None,
          null: str = "None") -> Table:
    """A report (rows in `order`) carrying its CSV cell formats."""
    arrays = {k: (np.asarray(v, dtype=object) if np.asarray(v).dtype == object else np.asarray(v))
              for k, v in columns.items()}
    if order is not None:
        arrays = {k: v[order] for k, v in arrays.items()}
    return Table(arrays, formats, null)


def by_total(total: np.ndarray, *tiebreak: np.ndarray) -> np.ndarray:
    """Row order: total descending, then the tie-break keys ascending, then group order."""
    keys = [np.arange(len(total))] + [np.asarray(t) for t in reversed(tiebreak)] + [-total]
    return np.lexsort(keys)


# ---------------------------------------------------------------------------------------
# input helpers


def _need(export: Export, table: str, what: str) -> None:
    if not export.has(table):
        raise MissingData(f"no {what}")


def clean_api_name(names: np.ndarray) -> np.ndarray:
    """Drop a `_vNNNN` suffix (exactly 4 characters after `_v`), as nsys's API reports do."""
    return np.array([n[:-6] if isinstance(n, str) and n[-6:-4] == "_v" and len(n) >= 6 else n
                     for n in names], dtype=object)


def kernel_name_column(export: Export, variant: str = "demangled") -> str:
    """The kernel column holding the name: demangledName, shortName (`base`) or mangledName."""
    cols = export.columns(KERNEL)
    if variant == "base":
        return "shortName"
    if variant == "mangled" and "mangledName" in cols:
        return "mangledName"
    return "demangledName"


def kernels(export: Export, extra: tuple[str, ...] = (), variant: str = "demangled") -> dict[str, np.ndarray]:
    """Kernel rows as int64 columns: start, end, nameId (+ `extra`)."""
    _need(export, KERNEL, "CUDA kernel data")
    t = export.table(KERNEL)
    name_col = kernel_name_column(export, variant)
    name = sa.func.coalesce(t.c[name_col], t.c.demangledName) if name_col != "demangledName" else t.c.demangledName
    return export.ints(sa.select(t.c.start, t.c.end, name.label("nameId"), *(t.c[c] for c in extra)))


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
    labels = memcpy_labels(export, layout)
    names: list[Any] = []
    codes: list[Any] = []
    values: list[Any] = []
    for table, (kind, dur, size) in tables.items():
        v = dur if value == "duration" else size
        if table == MEMCPY:
            kinds = np.intersect1d(np.array(list(labels), dtype=np.int64), kind)
            keep = np.isin(kind, kinds)                      # nsys inner-joins the label table
            kind_codes = np.searchsorted(kinds, kind[keep]) + len(names)
            names += [labels[k] for k in kinds.tolist()]
            codes.append(kind_codes)
            values.append(v[keep])
        elif len(v):
            codes.append(np.full(len(v), len(names), dtype=np.int64))
            names.append(MEMSET_LABEL)
            values.append(v)
    if not codes:
        return np.empty(0, dtype=np.int64), np.array(names, dtype=object), np.empty(0, dtype=np.int64)
    return np.concatenate(codes), np.array(names, dtype=object), np.concatenate(values)


def _memop_groups(export: Export, layout: str, value: str) -> tuple[np.ndarray, Groups]:
    """Distinct operation labels (sorted, as SQLite groups them) and their statistics."""
    codes, names, values = memop_codes(export, layout, value)
    label_codes, (uniq,) = group_codes(names)                 # labels, not copyKinds, are the groups
    return uniq, Groups(label_codes[codes], values, len(uniq))


def memcpy_labels(export: Export, layout: str) -> dict[int, str]:
    """copyKind -> operation label of the layout."""
    if layout == OLD or not export.has("ENUM_CUDA_MEMCPY_OPER"):
        return OLD_MEMCPY_LABELS
    t = export.table("ENUM_CUDA_MEMCPY_OPER")
    return {int(i): f"[CUDA memcpy {label}]" for i, label in export.rows(sa.select(t.c.id, t.c.label))}


def mem_kind_labels(export: Export, layout: str) -> dict[int, str]:
    """Memory kind id -> label of the layout."""
    if layout == OLD or not export.has("ENUM_CUDA_MEM_KIND"):
        return OLD_MEM_KINDS
    t = export.table("ENUM_CUDA_MEM_KIND")
    return {int(i): str(label) for i, label in export.rows(sa.select(t.c.id, t.c.label))}


def nvtx_ranges(export: Export, event_types: tuple[int, ...], layout: str,
                with_times: bool = False) -> tuple[pd.DataFrame, np.ndarray]:
    """NVTX ranges of `event_types` and their distinct names, from one scan of NVTX_EVENTS.

    Returns (ranges, names): ranges has duration (unterminated ranges end at the last
    NVTX timestamp), eventType, `name` (index into `names`) and, `with_times`, start,
    end and globalTid. Range text is the StringIds value of textId, else the inline
    text; with a domain (eventType 75 row of the same process) it becomes
    `domain:text`. The new layout always writes `domain:text`, with an empty domain
    for the default one."""
    _need(export, NVTX, "NV Tools Extension (NVTX) data")
    t = export.table(NVTX)
    cols = export.columns(NVTX)
    optional = [(t.c[c] if c in cols else sa.literal(-1)).label(c) for c in ("textId", "domainId")]
    stmt = sa.select(t.c.start, t.c.end, t.c.eventType, t.c.globalTid, *optional,
                     (t.c.text if "text" in cols else sa.null()).label("text"))
    names = ["start", "end", "eventType", "globalTid", "textId", "domainId"]
    columns = ["duration", "eventType", "textId", "text", "domainId", "pid"]
    columns += ["start", "end", "globalTid"] if with_times else []
    ranges: dict[str, list[np.ndarray]] = {n: [] for n in columns}
    domains: dict[str, list[np.ndarray]] = {n: [] for n in ("start", "domainId", "pid", "textId", "text")}
    last = 0
    codes = TextCodes()
    for batch in export.batches(stmt, text=(6,)):      # the last timestamp is over all events, marks included
        a = {n: batch.column(i).to_numpy().astype(np.int64, copy=False) for i, n in enumerate(names)}
        last = max(last, int(a["start"].max()), int(a["end"].max()))
        a["text"] = codes.encode(batch.column(6))
        a["pid"] = pid_of(a["globalTid"])
        # end - start, or -(start + 1) for an unterminated range (its end is known after the scan)
        a["duration"] = np.where(a["end"] >= 0, a["end"] - a["start"], -a["start"] - 1)
        for keep, into in ((np.isin(a["eventType"], event_types), ranges),
                           (a["eventType"] == NVTX_DOMAIN_CREATE, domains)):
            for n in into:
                into[n].append(a[n][keep].astype(NVTX_DTYPES.get(n, np.int64)))
    d = {n: _concat(ranges.pop(n), NVTX_DTYPES.get(n, np.int64)) for n in columns}
    dom = pd.DataFrame({n: _concat(v, NVTX_DTYPES.get(n, np.int64)) for n, v in domains.items()})
    texts = codes.values()
    # label of each distinct (textId, text): the StringIds value first, the inline text second
    width = len(texts) + 1
    pair, pairs = pd.factorize(np.concatenate((d["textId"], dom["textId"])).astype(np.int64) * width
                               + np.concatenate((d["text"], dom["text"])))
    pairs = np.asarray(pairs, dtype=np.int64)
    uid, utext = pairs // width, pairs % width
    label = texts[utext] if len(texts) else np.full(len(pairs), None, dtype=object)
    if (uid >= 0).any():
        resolved = export.strings(uid[uid >= 0])
        label[uid >= 0] = np.where(pd.isna(resolved), label[uid >= 0], resolved)
    n_ranges = len(d["duration"])
    if len(dom):
        dom["name"] = texts[dom["text"].to_numpy()] if layout == OLD else label[pair[n_ranges:]]
        domain_rows = {k: dom[k].to_numpy() for k in ("start", "domainId", "pid", "name")}
        name_code, range_names = _with_domains(d, domain_rows, pair[:n_ranges], label, layout)
    else:
        name_code = pair[:n_ranges]
        range_names = label if layout == OLD else np.array([f":{lab or ''}" for lab in label], dtype=object)
    duration = d["duration"]
    duration[duration < 0] = last + 1 + duration[duration < 0]
    out: dict[str, Any] = {"duration": duration, "eventType": d["eventType"], "name": name_code}
    if with_times:
        out |= {"start": d["start"], "end": np.where(d["end"] < 0, last, d["end"]), "globalTid": d["globalTid"]}
    return pd.DataFrame(out), range_names


NVTX_DTYPES = {"eventType": np.int16, "textId": np.int32, "domainId": np.int32, "text": np.int32, "pid": np.int32}


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def _with_domains(d: dict[str, np.ndarray], dom: dict[str, np.ndarray], pair: np.ndarray, label: np.ndarray,
                  layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Range name codes and names `domain:label`, the domain being the first eventType 75
    row (by start) with the range's domainId in the range's process (2022.4 names it by its
    inline text, newer nsys by its StringIds value or text). `dom` holds the domain rows'
    start, domainId, pid and name."""
    by_start = np.argsort(dom["start"], kind="stable")
    keys = (dom["domainId"].astype(np.int64)[by_start] << 32) | dom["pid"].astype(np.int64)[by_start]
    domain_keys, first = np.unique(keys, return_index=True)          # the first row of each (domain, process)
    domain_names = np.asarray(dom["name"], dtype=object)[by_start][first]
    row_keys = (d["domainId"].astype(np.int64) << 32) | d["pid"].astype(np.int64)
    at = np.searchsorted(domain_keys, row_keys)
    found = at < len(domain_keys)
    found[found] = domain_keys[at[found]] == row_keys[found]
    dom_of_row = np.where(found, at, -1)
    width = len(label) + 1
    combo, combos = factorize_sorted(dom_of_row * width + pair)
    combos = np.asarray(combos, dtype=np.int64)
    dom_names = np.concatenate((domain_names, np.array([None], dtype=object)))[combos // width]
    labels = label[combos % width]
    if layout == OLD:
        names = [lab if dn is None else f"{dn}:{lab}" for dn, lab in zip(dom_names, labels, strict=False)]
    else:
        names = [f"{dn or ''}:{lab or ''}" for dn, lab in zip(dom_names, labels, strict=False)]
    return combo, np.array(names, dtype=object)


# ---------------------------------------------------------------------------------------
# reports


def _name_summary(export: Export, ids: np.ndarray, values: np.ndarray, count_label: str, name_label: str,
                  layout: str, clean: bool = False) -> Table:
    """Summary grouped by a StringIds id (SQLite groups by the id, not by the text)."""
    codes, (uniq,) = group_codes(ids)
    return _id_summary_frame(export, uniq, Groups(codes, values, len(uniq)), count_label, name_label, layout, clean)


def _id_summary_frame(export: Export, ids: np.ndarray, g: Groups, count_label: str, name_label: str,
                      layout: str, clean: bool = False) -> Table:
    names = export.strings(ids.astype(np.int64))
    if clean:
        names = clean_api_name(names)
    cols = g.summary(count_label, layout) | {name_label: names}
    return frame(cols, SUMMARY_FMT + ["s"], by_total(g.total), null=_null(layout))


def _packed_by_id(export: Export, table: str, id_col: str, where: str = "") -> tuple[np.ndarray, Groups] | None:
    """Durations grouped by the StringIds id in `id_col`, read as one packed column
    (None when some row does not pack: the caller reads the columns instead)."""
    (v,) = export.sql_ints(pack_sql(id_col, DUR), table, where)
    if len(v) and v.min() < 0:
        return None
    return Groups.from_packed(v)


def _null(layout: str) -> str:
    return "None" if layout == OLD else ""


def cuda_api_sum(export: Export, layout: str = NEW) -> Table:
    """CUDA runtime and driver API calls per API name."""
    _need(export, RUNTIME, "CUDA trace data")
    fast = _packed_by_id(export, RUNTIME, "nameId")
    if fast is not None:
        return _id_summary_frame(export, *fast, "Num Calls", "Name", layout, clean=True)
    t = export.table(RUNTIME)
    d = export.ints(sa.select(t.c.nameId, (t.c.end - t.c.start).label("dur")))
    return _name_summary(export, d["nameId"], d["dur"], "Num Calls", "Name", layout, clean=True)


def osrt_sum(export: Export, layout: str = NEW) -> Table:
    """OS runtime calls per function name."""
    _need(export, OSRT, "OS Runtime trace data")
    fast = _packed_by_id(export, OSRT, "nameId", f"eventClass = {OSRT_EVENT_CLASS}")
    if fast is not None:
        return _id_summary_frame(export, *fast, "Num Calls", "Name", layout)
    t = export.table(OSRT)
    d = export.ints(sa.select(t.c.nameId, (t.c.end - t.c.start).label("dur"))
                    .where(t.c.eventClass == OSRT_EVENT_CLASS))
    return _name_summary(export, d["nameId"], d["dur"], "Num Calls", "Name", layout)


def _grid_block(d: dict[str, np.ndarray], prefix: str) -> np.ndarray:
    xs, ys, zs = (d[f"{prefix}{a}"] for a in "XYZ")
    return np.char.mod("%4d", xs).astype(object) + " " + np.char.mod("%4d", ys) + " " + np.char.mod("%4d", zs)


def cuda_gpu_kern_gb_sum(export: Export, layout: str = NEW, variant: str = "demangled") -> Table:
    """Kernels per (name, grid, block): nsys 2022.4's `gpukernsum`, today's `cuda_gpu_kern_gb_sum`.

    2022.4 groups by (nameId, grid text, block text) and orders by total only, ties in that
    GROUP BY order. nsys 2024+ groups by (name text, gridX, gridY, gridZ, blockX, blockY, blockZ)
    and orders by total descending, count ascending, name, ties in that GROUP BY order: the
    dimensions as numbers, so a grid of 13000 comes after one of 2048 (as text it would not)."""
    _need(export, KERNEL, "CUDA kernel data")
    fast = _kern_gb_packed(export, variant)
    names = export.strings(fast[0].astype(np.int64)) if fast is not None else np.empty(0, dtype=object)
    if fast is not None and (layout == OLD or _distinct(names)):
        ids, g, grid_s, block_s = fast
    else:   # values that do not pack, or (2024+) two name ids with one text: group the columns
        dims = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
        d = kernels(export, dims, variant)
        # group the dims first (few distinct), then (name, grid, block) with grid/block as text
        dcodes, dparts = group_codes(*(d[c] for c in dims))
        grid_u = _grid_block(dict(zip(dims, dparts, strict=False)), "grid")
        block_u = _grid_block(dict(zip(dims, dparts, strict=False)), "block")
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
        order = by_total(g.total, g.count, _rank(names), *_dims_of(grid_s), *_dims_of(block_s))
    return frame(cols, SUMMARY_FMT + ["s", "s", "s"], order, null=_null(layout))


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
    return _grid_block({f"p{a}": d[a] for a in "XYZ"}, "p")


def _kern_gb_packed(export: Export, variant: str) -> tuple[np.ndarray, Groups, np.ndarray, np.ndarray] | None:
    """gpukernsum's groups from three packed columns: (nameId, duration), grid, block (None when
    some value does not pack). Returns (name ids, groups, grid text, block text) in GROUP BY order."""
    col = kernel_name_column(export, variant)
    name = "demangledName" if col == "demangledName" else f"coalesce({col}, demangledName)"
    grid = ("CASE WHEN gridX BETWEEN 0 AND 2147483647 AND gridY BETWEEN 0 AND 65535 AND gridZ BETWEEN 0 AND 65535 "
            "THEN (gridX << 32) | (gridY << 16) | gridZ ELSE -1 END")
    block = ("CASE WHEN blockX BETWEEN 0 AND 2097151 AND blockY BETWEEN 0 AND 2097151 AND blockZ BETWEEN 0 AND 2097151 "
             "THEN (blockX << 42) | (blockY << 21) | blockZ ELSE -1 END")
    v, gp, bp = export.sql_ints(f"{pack_sql(name, DUR)}, {grid}, {block}", KERNEL, ncols=3)
    if len(v) and min(v.min(), gp.min(), bp.min()) < 0:
        return None
    gcode, gu = factorize_sorted(gp)
    bcode, bu = factorize_sorted(bp)
    grid_rank, (grid_u,) = group_codes(_dims_text(gu, (32, 16), 0xFFFF))       # text order of the grids
    block_rank, (block_u,) = group_codes(_dims_text(bu, (42, 21), 0x1FFFFF))
    ng, nb = max(len(grid_u), 1), max(len(block_u), 1)
    key = v >> PACK_BITS
    key *= ng
    key += grid_rank[gcode]
    key *= nb
    key += block_rank[bcode]
    del gcode, bcode, gp, bp
    code, ukey = factorize_sorted(key)
    del key
    v &= PACK_MASK
    v |= code << PACK_BITS
    del code
    _, g = Groups.from_packed(v)
    return ukey // (ng * nb), g, grid_u[(ukey // nb) % ng], block_u[ukey % nb]


def _rank(values: np.ndarray) -> np.ndarray:
    """Sort rank of text values (NULL first), for use as a tie-break key."""
    codes, _ = group_codes(np.asarray(values, dtype=object))
    return codes


def _kernel_name_codes(export: Export, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group kernels by name text: (code per row, names in code order)."""
    id_codes, (uid,) = group_codes(ids)
    names = export.strings(uid.astype(np.int64))
    name_codes, (uniq,) = group_codes(names)
    return name_codes[id_codes], uniq


def cuda_gpu_kern_sum(export: Export, layout: str = NEW, variant: str = "demangled") -> Table:
    """Kernels per name (nsys 2024+ `cuda_gpu_kern_sum`)."""
    d = kernels(export, (), variant)
    codes, names = _kernel_name_codes(export, d["nameId"])
    g = Groups(codes, d["end"] - d["start"], len(names))
    cols = g.summary("Instances", layout) | {"Name": names}
    return frame(cols, SUMMARY_FMT + ["s"], by_total(g.total, g.count, np.arange(len(names))),
                 null=_null(layout))


def cuda_gpu_mem_time_sum(export: Export, layout: str = NEW) -> Table:
    """Memcpy and memset operations per kind: time."""
    uniq, g = _memop_groups(export, layout, "duration")
    cols = g.summary("Count", layout) | {"Operation": uniq}
    return frame(cols, SUMMARY_FMT + ["s"], by_total(g.total), null=_null(layout))


def cuda_gpu_mem_size_sum(export: Export, layout: str = NEW) -> Table:
    """Memcpy and memset operations per kind: bytes, shown in MB (10^6 bytes)."""
    uniq, g = _memop_groups(export, layout, "bytes")
    mb = 1e6
    cols = {"Total (MB)": g.total / mb, "Count": g.count, "Avg (MB)": g.avg / mb, "Med (MB)": g.med / mb,
            "Min (MB)": g.min / mb, "Max (MB)": g.max / mb, "StdDev (MB)": g.std / mb, "Operation": uniq}
    return frame(cols, ["f3", "i", "f3", "f3", "f3", "f3", "f3", "s"], by_total(g.total), null=_null(layout))


def cuda_gpu_sum(export: Export, layout: str = NEW, variant: str = "demangled", api: bool = False) -> Table:
    """Kernels and memory operations together, per name, with a Category column; `api`: CUDA API
    calls too, first (nsys 2022.4's `apigpusum`), their names without a `_vNNNN` suffix."""
    names, values, cats = [], [], []
    if api and export.has(RUNTIME):
        rt = export.table(RUNTIME)
        r = export.ints(sa.select(rt.c.nameId, (rt.c.end - rt.c.start).label("dur")))
        id_codes, (uid,) = group_codes(r["nameId"])
        names.append(clean_api_name(export.strings(uid.astype(np.int64)))[id_codes])
        values.append(r["dur"])
        cats.append(np.full(len(id_codes), "CUDA_API", dtype=object))
    if export.has(KERNEL):
        d = kernels(export, (), variant)
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
    if not names:
        raise MissingData("no CUDA API, GPU kernel, nor memory operations data" if api
                          else "no GPU kernel/memory operations data")
    allnames = np.concatenate(names)
    allcats = np.concatenate(cats)
    codes, (uniq,) = group_codes(allnames)
    g = Groups(codes, np.concatenate(values), len(uniq))
    category = np.empty(len(uniq), dtype=object)
    category[codes] = allcats                       # SQLite reports a bare column from the last row
    cols = g.summary("Instances", layout) | {"Category": category, "Operation": uniq}
    return frame(cols, SUMMARY_FMT + ["s", "s"], by_total(g.total), null=_null(layout))


def cuda_api_gpu_sum(export: Export, layout: str = OLD, variant: str = "demangled") -> Table:
    """CUDA API calls, kernels and memory operations together, per name (`apigpusum`)."""
    return cuda_gpu_sum(export, layout, variant, api=True)


def _nvtx_summary(export: Export, event_types: tuple[int, ...], layout: str, style: bool) -> Table:
    fast = _nvtx_packed(export, event_types, layout, style)
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
    return frame(cols, fmts + ["s"], by_total(g.total), null=_null(layout))


NVTX_TYPE_SHIFT = 56                 # eventType << 56 | duration, one int64 per range
NVTX_NO_END = (1 << NVTX_TYPE_SHIFT) - 1
_TEXT_ID = re.compile(r"\x01(-?[0-9]+)\x02(.*)", re.DOTALL)


def _nvtx_packed(export: Export, event_types: tuple[int, ...], layout: str,
                 style: bool) -> tuple[np.ndarray, Groups, np.ndarray] | None:
    """The NVTX summary's groups from one scan of two columns: `eventType << 56 | duration`
    and the range's text, "\x01textId\x02text" where it has a textId. SQLite's expressions
    cost per row as much as the columns moved, so the SQL stays this small. Each batch's text
    is dictionary-encoded in C and released; the batch dictionaries are merged once at the end
    and only the distinct texts become Python strings. Returns (keys name rank * 2 + style,
    groups, names in GROUP BY order), or None where this does not apply (an unterminated range,
    a negative duration or one of 2^41 ns or more): nvtx_ranges then does it."""
    _need(export, NVTX, "NV Tools Extension (NVTX) data")
    cols = export.columns(NVTX)
    text = "coalesce(text, char(0))" if "text" in cols else "char(0)"
    if "textId" in cols:
        text = f"CASE WHEN textId IS NULL THEN {text} ELSE char(1) || textId || char(2) || {text} END"
    value = f"(eventType << {NVTX_TYPE_SHIFT}) | coalesce({DUR}, {NVTX_NO_END})"

    seen: dict[int, list[pa.Array]] = {}                  # per reading thread: its distinct texts so far

    def encode(batch: pa.RecordBatch) -> tuple[int, np.ndarray, np.ndarray]:
        encoded = batch.column(0).cast(pa.string()).dictionary_encode()
        known = seen.setdefault(threading.get_ident(), [pa.nulls(0, pa.string())])
        where = pc.index_in(encoded.dictionary, value_set=known[0])
        if where.null_count:                                  # texts new to this thread: append them
            known[0] = pa.concat_arrays([known[0], encoded.dictionary.filter(where.is_null())])
            where = pc.index_in(encoded.dictionary, value_set=known[0])
        codes = numpy_of(where).astype(np.int32)[numpy_of(encoded.indices)]
        # a copy: a view would keep the driver's whole batch (its text) alive
        return threading.get_ident(), codes, np.array(numpy_of(batch.column(1)), dtype=np.int64)

    parts = export.map_batches(f"{text}, {value}", NVTX, "", encode)     # no WHERE: filtering costs SQLite more
    if not parts:
        return None
    threads, local, packed = (list(x) for x in zip(*parts, strict=False))
    del parts
    v = np.concatenate(packed)
    del packed
    if v.min() < 0:
        return None
    etype = (v >> NVTX_TYPE_SHIFT).astype(np.int16)
    keep = _one_of(etype, event_types + (NVTX_DOMAIN_CREATE,))
    everything = bool(keep.all())
    if not everything:
        v, etype = v[keep], etype[keep]
    v &= NVTX_NO_END
    domains = etype == NVTX_DOMAIN_CREATE
    v[domains] = 0                                            # a domain's "duration" is unused
    if v.max(initial=0) > PACK_MASK:
        return None
    kls = _one_of(etype, NVTX_STARTEND)
    del etype
    # one dictionary for all threads' texts (C, hashing); each thread's codes mapped onto it
    order = list(seen)
    merged = pa.concat_arrays([seen[t][0] for t in order]).dictionary_encode()
    to_global = numpy_of(merged.indices)
    offsets = dict(zip(order, np.cumsum([0] + [len(seen[t][0]) for t in order]).tolist(), strict=False))
    seen.clear()
    pair = np.empty(sum(len(c) for c in local), dtype=np.int32)
    at = 0
    for t, c in zip(threads, local, strict=False):
        pair[at:at + len(c)] = to_global[c + offsets[t]] if offsets[t] else to_global[c]
        at += len(c)
    del local, to_global
    if not everything:
        pair = pair[keep]
    text_ids, inline = [], []
    for value_text in merged.dictionary.to_pylist():
        m = _TEXT_ID.fullmatch(value_text) if value_text.startswith("\x01") else None
        text_ids.append(int(m.group(1)) if m else -1)
        rest = m.group(2) if m else value_text
        inline.append(None if rest == "\x00" else rest)
    del merged
    inline_text = np.array(inline + [None], dtype=object)[:-1]
    label = _nvtx_labels(export, np.array(text_ids, dtype=np.int64), inline_text)
    if domains.any():
        dom_names = inline_text if layout == OLD else label
        found = _nvtx_domain_names(export, None if everything else keep, domains, pair, label, dom_names, layout)
        if found is None:
            return None
        pair, names = found
        v, kls = v[~domains], kls[~domains]
    else:
        names = label if layout == OLD else np.array([f":{lab or ''}" for lab in label], dtype=object)
    name_rank, (sorted_names,) = group_codes(names)
    if len(sorted_names) * 2 > PACK_KEYS:
        return None
    key_rows = name_rank[pair] * 2
    del pair
    if style:
        key_rows += kls                                       # PushPop (0) before StartEnd (1)
    del kls
    v |= key_rows << PACK_BITS
    del key_rows
    ukey, g = Groups.from_packed(v)
    return ukey, g, sorted_names


def _one_of(values: np.ndarray, choices: tuple[int, ...]) -> np.ndarray:
    """values ∈ choices, by comparisons (np.isin sorts, in memory the size of `values` several times)."""
    out = np.zeros(len(values), dtype=bool)
    for c in choices:
        out |= values == c
    return out


def _nvtx_labels(export: Export, text_ids: np.ndarray, inline: np.ndarray) -> np.ndarray:
    """Label of each (textId, inline text): the StringIds value of textId, else the inline text."""
    label = inline.copy()
    has_id = text_ids >= 0
    if has_id.any():
        resolved = export.strings(text_ids[has_id])
        unknown = np.array([v is None for v in resolved.tolist()], dtype=bool)
        label[has_id] = np.where(unknown, label[has_id], resolved)
    return label


def _nvtx_domain_names(export: Export, keep: np.ndarray | None, domains: np.ndarray, pair: np.ndarray,
                       label: np.ndarray, dom_names: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Where the export creates NVTX domains (eventType 75 rows): the ranges' domainId and
    process, and the domain rows' start, read by one more query in the same scan order.
    Returns (name code per range, names)."""
    cols = export.columns(NVTX)
    dom_id = "coalesce(domainId, -1)" if "domainId" in cols else "-1"
    start, dom_id_rows, gtid = export.sql_ints(f"start, {dom_id}, coalesce(globalTid, -1)", NVTX, "", 3)
    if keep is not None:
        if len(start) != len(keep):
            return None
        start, dom_id_rows, gtid = start[keep], dom_id_rows[keep], gtid[keep]
    if len(start) != len(pair):
        return None
    ranges = ~domains
    pid = pid_of(gtid)
    d = {"domainId": dom_id_rows[ranges], "pid": pid[ranges]}
    dom = {"start": start[domains], "domainId": dom_id_rows[domains], "pid": pid[domains],
           "name": dom_names[pair[domains]]}
    del start, dom_id_rows, gtid, pid
    return _with_domains(d, dom, pair[ranges], label, layout)


def nvtx_sum(export: Export, layout: str = NEW) -> Table:
    """NVTX push/pop and start/end ranges per (name, style)."""
    return _nvtx_summary(export, NVTX_PUSHPOP + NVTX_STARTEND, layout, style=True)


def nvtx_pushpop_sum(export: Export, layout: str = NEW) -> Table:
    """NVTX push/pop ranges per name."""
    return _nvtx_summary(export, NVTX_PUSHPOP, layout, style=False)


def nvtx_startend_sum(export: Export, layout: str = NEW) -> Table:
    """NVTX start/end ranges per name."""
    return _nvtx_summary(export, NVTX_STARTEND, layout, style=False)


def cuda_kern_exec_sum(export: Export, layout: str = OLD, variant: str = "demangled") -> Table:
    """Kernel launch → execution per (PID, TID, device, API, kernel): total, API, queue and kernel time."""
    _need(export, RUNTIME, "CUDA API data")
    k = kernels(export, ("deviceId", "correlationId", "globalPid"), variant)
    rt = export.table(RUNTIME)
    r = export.ints(sa.select(rt.c.start, rt.c.end, rt.c.correlationId, rt.c.globalTid, rt.c.nameId))
    kf = pd.DataFrame({"kstart": k["start"], "kend": k["end"], "dev": k["deviceId"], "kname": k["nameId"],
                       "corr": k["correlationId"], "proc": k["globalPid"]})
    rf = pd.DataFrame({"rstart": r["start"], "rend": r["end"], "corr": r["correlationId"],
                       "proc": process_of(r["globalTid"]), "gtid": r["globalTid"], "rname": r["nameId"]})
    j = kf.merge(rf, on=["corr", "proc"], how="inner")
    api = (j["rend"] - j["rstart"]).to_numpy()
    que = (j["kstart"] - j["rend"]).to_numpy()
    kern = (j["kend"] - j["kstart"]).to_numpy()
    tot = (np.maximum(j["rend"], j["kend"]) - j["rstart"]).to_numpy()
    pid = (j["gtid"].to_numpy() >> 24) & 0xFFFFFF
    tid = j["gtid"].to_numpy() & 0xFFFFFF
    api_names = clean_api_name(export.strings(j["rname"].to_numpy()))
    kern_names = export.strings(j["kname"].to_numpy())
    codes, (upid, utid, udev, uapi, ukern) = group_codes(pid, tid, j["dev"].to_numpy(), api_names, kern_names)
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
        cols[f"{prefix}Avg (ns)"] = _nullable(sqlite_round1(g.avg), empty)
        cols[f"{prefix}Med (ns)"] = _nullable(sqlite_round1(g.med), empty)
        cols[f"{prefix}Min (ns)"] = _nullable(g.min, empty)
        cols[f"{prefix}Max (ns)"] = _nullable(g.max, empty)
        cols[f"{prefix}StdDev (ns)"] = sqlite_round1(g.std)
        fmts += ["f1", "f1", "i", "i", "f1"]
    cols["API Name"] = uapi
    cols["Kernel Name"] = ukern
    # ORDER BY 6 DESC: the rounded average total time (groups with equal rounded averages keep GROUP BY order)
    return frame(cols, fmts + ["s", "s"], by_total(sqlite_round1(gt.avg)), null=_null(layout))


def _nullable(values: np.ndarray, null: np.ndarray) -> np.ndarray:
    out = np.asarray(values, dtype=object)
    out[null] = None
    return out


def cuda_gpu_trace(export: Export, layout: str = NEW, variant: str = "demangled") -> Table:
    """One row per kernel, memcpy and memset, by start time. nsys's report needs the GPU table:
    without TARGET_INFO_GPU it fails and writes nothing (2022.4 and 2025.3.1 alike)."""
    _need(export, "TARGET_INFO_GPU", "GPU description (TARGET_INFO_GPU) for the GPU trace")
    parts = []
    gpu_names = _gpu_names(export)
    kinds = mem_kind_labels(export, layout)
    green = layout != OLD
    if export.has(KERNEL):
        extra: tuple[str, ...] = ("correlationId", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread",
                 "staticSharedMemory", "dynamicSharedMemory", "deviceId", "contextId", "streamId")
        extra += ("greenContextId",) if green and "greenContextId" in export.columns(KERNEL) else ()
        k = kernels(export, extra, variant)
        if layout == OLD:
            name_ids = export.ints(sa.select(export.table(KERNEL).c.demangledName))["demangledName"]
        else:
            name_ids = k["nameId"]
        f = pd.DataFrame({"start": k["start"], "dur": k["end"] - k["start"], "corr": k["correlationId"],
                          "gx": k["gridX"], "gy": k["gridY"], "gz": k["gridZ"], "bx": k["blockX"],
                          "by": k["blockY"], "bz": k["blockZ"], "regs": k["registersPerThread"],
                          "smem": k["staticSharedMemory"] / 1e6, "dmem": k["dynamicSharedMemory"] / 1e6,
                          "dev": k["deviceId"], "ctx": k["contextId"], "strm": k["streamId"],
                          "green": k.get("greenContextId", np.zeros(len(k["start"]), dtype=np.int64)),
                          "name": export.strings(name_ids)})
        parts.append(f.astype({c: object for c in ("gx", "gy", "gz", "bx", "by", "bz", "regs", "smem", "dmem")}))
    for table, is_copy in ((MEMCPY, True), (MEMSET, False)):
        if not export.has(table):
            continue
        t = export.table(table)
        present = export.columns(table)
        sel = [t.c.start, t.c.end, t.c.correlationId, t.c.bytes, t.c.deviceId, t.c.contextId, t.c.streamId]
        sel += [t.c.greenContextId if green and "greenContextId" in present else sa.literal(0).label("greenContextId")]
        sel += [t.c.copyKind, t.c.srcKind, t.c.dstKind] if is_copy else [t.c.memKind if "memKind" in present
                                                                          else sa.literal(-1).label("memKind")]
        m = export.ints(sa.select(*sel))
        dur = m["end"] - m["start"]
        # SQL bytes * (1000000000 / duration): integer, turning REAL where the product overflows int64
        per_s = np.where(dur > 0, 1_000_000_000 // np.maximum(dur, 1), 0)
        as_real = m["bytes"].astype(np.float64) * per_s
        with np.errstate(over="ignore"):
            thru = np.where(np.abs(as_real) >= 2.0 ** 63, as_real, (m["bytes"] * per_s).astype(np.float64)) / 1e6
        if is_copy:
            labels = memcpy_labels(export, layout)
            names = np.array([labels.get(c) for c in m["copyKind"]], dtype=object)
            src = np.array([kinds.get(c) for c in m["srcKind"]], dtype=object)
            dst = np.array([kinds.get(c) for c in m["dstKind"]], dtype=object)
        else:
            names = np.full(len(dur), MEMSET_LABEL, dtype=object)
            src = np.array([kinds.get(c) for c in m["memKind"]], dtype=object)
            dst = np.full(len(dur), None, dtype=object)
        parts.append(pd.DataFrame({"start": m["start"], "dur": dur, "corr": m["correlationId"],
                                   "bytes": m["bytes"] / 1e6, "thru": thru, "src": src, "dst": dst,
                                   "dev": m["deviceId"], "ctx": m["contextId"], "strm": m["streamId"],
                                   "green": m["greenContextId"], "name": names}))
    if not parts:
        raise MissingData("no GPU trace data")
    f = pd.concat(parts, ignore_index=True).sort_values("start", kind="stable").reset_index(drop=True)
    dev = f["dev"].to_numpy(np.int64)
    device = np.array([f"{gpu_names.get(int(i))} ({int(i)})" if gpu_names.get(int(i)) is not None else None
                       for i in dev], dtype=object) if gpu_names else np.full(len(f), None, dtype=object)
    null = _null(layout)
    empty = "" if layout == OLD else None
    thru = f["thru"].astype(object).where(f["thru"].notna(), empty) if "thru" in f else np.full(len(f), empty)
    cols: dict[str, Any] = {"Start (ns)": f["start"], "Duration (ns)": f["dur"], "CorrId": f["corr"]}
    for c, h in (("gx", "GrdX"), ("gy", "GrdY"), ("gz", "GrdZ"), ("bx", "BlkX"), ("by", "BlkY"), ("bz", "BlkZ"),
                 ("regs", "Reg/Trd"), ("smem", "StcSMem (MB)"), ("dmem", "DymSMem (MB)"), ("bytes", "Bytes (MB)")):
        cols[h] = _object_column(f, c)
    # nsys 2022.4 heads it "Throughput (MBps)", nsys 2025.3.1 "Throughput (MB/s)"
    cols["Throughput (MBps)" if layout == OLD else "Throughput (MB/s)"] = np.asarray(thru, dtype=object)
    cols["SrcMemKd"] = _object_column(f, "src")
    cols["DstMemKd"] = _object_column(f, "dst")
    cols["Device"] = device
    cols["Ctx"] = f["ctx"]
    fmts = ["i", "i", "i", "i", "i", "i", "i", "i", "i", "i", "f3", "f3", "f3", "f3", "s", "s", "s", "i"]
    if green:
        gc = f["green"].to_numpy(np.int64).astype(object)
        gc[f["green"].to_numpy(np.int64) <= 0] = None
        cols["GreenCtx"] = gc
        fmts.append("i")
    cols["Strm"] = f["strm"]
    cols["Name"] = f["name"]
    return frame({k: np.asarray(v, dtype=object) if not isinstance(v, pd.Series) else v.to_numpy()
                  for k, v in cols.items()}, fmts + ["i", "s"], null=null)


def _object_column(f: pd.DataFrame, col: str) -> np.ndarray:
    """Column `col` of `f` as objects with NULL for missing values (absent column: all NULL)."""
    if col not in f:
        return np.full(len(f), None, dtype=object)
    s = f[col].astype(object)
    return s.where(s.notna(), None).to_numpy(dtype=object)


def _gpu_names(export: Export) -> dict[int, str]:
    if not export.has("TARGET_INFO_GPU"):
        return {}
    t = export.table("TARGET_INFO_GPU")
    return {int(i): str(n) for i, n in export.rows(sa.select(t.c.id, t.c.name))}


# ---------------------------------------------------------------------------------------
# registry and CSV


Report = Callable[[Export], Table]


def _with(func: Callable[..., Table], layout: str) -> Report:
    def run(export: Export) -> Table:
        return func(export, layout)
    run.__doc__ = func.__doc__
    run.__wrapped__ = func  # type: ignore[attr-defined]
    return run


def _trace_report(name: str) -> Callable[..., Table]:
    """Report `name` of hpcprof.analysis.nsys.traces (imported when run, as it imports this module)."""
    def run(export: Export, layout: str = OLD) -> Table:
        from hpcprof.analysis.nsys import traces
        return getattr(traces, name)(export, layout)
    run.__doc__ = f"See hpcprof.analysis.nsys.traces.{name}."
    return run


cuda_api_trace = _trace_report("cuda_api_trace")
cuda_kern_exec_trace = _trace_report("cuda_kern_exec_trace")

REPORTS: dict[str, Report] = {
    "cuda_gpu_kern_sum": _with(cuda_gpu_kern_sum, NEW),
    "cuda_gpu_kern_gb_sum": _with(cuda_gpu_kern_gb_sum, NEW),
    "cuda_api_sum": _with(cuda_api_sum, NEW),
    "cuda_gpu_mem_time_sum": _with(cuda_gpu_mem_time_sum, NEW),
    "cuda_gpu_mem_size_sum": _with(cuda_gpu_mem_size_sum, NEW),
    "cuda_gpu_sum": _with(cuda_gpu_sum, NEW),
    "nvtx_sum": _with(nvtx_sum, NEW),
    "nvtx_pushpop_sum": _with(nvtx_pushpop_sum, NEW),
    "nvtx_startend_sum": _with(nvtx_startend_sum, NEW),
    "osrt_sum": _with(osrt_sum, NEW),
    "cuda_gpu_trace": _with(cuda_gpu_trace, NEW),
    # nsys 2022.4 names and layouts
    "gpukernsum": _with(cuda_gpu_kern_gb_sum, OLD),
    "cudaapisum": _with(cuda_api_sum, OLD),
    "gpumemtimesum": _with(cuda_gpu_mem_time_sum, OLD),
    "gpumemsizesum": _with(cuda_gpu_mem_size_sum, OLD),
    "gpusum": _with(cuda_gpu_sum, OLD),
    "nvtxsum": _with(nvtx_sum, OLD),
    "nvtxppsum": _with(nvtx_pushpop_sum, OLD),
    "nvtxsesum": _with(nvtx_startend_sum, OLD),
    "osrtsum": _with(osrt_sum, OLD),
    "gputrace": _with(cuda_gpu_trace, OLD),
    "kernexecsum": _with(cuda_kern_exec_sum, OLD),
    "cudaapitrace": _with(cuda_api_trace, OLD),
    "apigpusum": _with(cuda_api_gpu_sum, OLD),
    "kernexectrace": _with(cuda_kern_exec_trace, OLD),
}
# the tables each report reads (to start the largest reports first)
_TABLES = {cuda_gpu_kern_sum: (KERNEL,), cuda_gpu_kern_gb_sum: (KERNEL,), cuda_api_sum: (RUNTIME,),
           cuda_gpu_mem_time_sum: (MEMCPY, MEMSET), cuda_gpu_mem_size_sum: (MEMCPY, MEMSET),
           cuda_gpu_sum: (KERNEL, MEMCPY, MEMSET), nvtx_sum: (NVTX,), nvtx_pushpop_sum: (NVTX,),
           nvtx_startend_sum: (NVTX,), osrt_sum: (OSRT,), cuda_gpu_trace: (KERNEL, MEMCPY, MEMSET),
           cuda_kern_exec_sum: (KERNEL, RUNTIME), cuda_api_trace: (RUNTIME,),
           cuda_api_gpu_sum: (RUNTIME, KERNEL, MEMCPY, MEMSET),
           cuda_kern_exec_trace: (KERNEL, RUNTIME)}
REPORT_TABLES: dict[str, tuple[str, ...]] = {name: _TABLES[report.__wrapped__]  # type: ignore[attr-defined]
                                             for name, report in REPORTS.items()}
SUMMARY_REPORTS = ("cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
                   "nvtx_sum", "osrt_sum")


def run_table(export: Export, name: str) -> Table:
    """Report `name` (current or nsys 2022.4 spelling) on `export`."""
    if name not in REPORTS:
        raise NsysInputError(f"unknown report {name!r}; known: {', '.join(REPORTS)}")
    return REPORTS[name](export)


def run_report(export: Export, name: str) -> pd.DataFrame:
    """Report `name` on `export` as a DataFrame."""
    return run_table(export, name).to_frame()


def run_reports(export: Export, names: list[str], workers: int | None = None,
                frames: bool = True) -> list[pd.DataFrame | Table | Exception]:
    """Reports `names` on `export`, computed concurrently (the column reads and sorts release
    the GIL); each entry is the DataFrame (a Table with `frames=False`) or the
    MissingData/NsysInputError it raised."""
    run = run_report if frames else run_table
    workers = workers or max(1, min(len(names), os.cpu_count() or 1))
    sizes = {t: export.size(t) for t in {t for n in names for t in REPORT_TABLES.get(n, ())}}
    weight = {n: sum(sizes[t] for t in REPORT_TABLES.get(n, ())) for n in names}
    with ThreadPoolExecutor(workers) as pool:                  # the largest first: the pool stays busy
        started = {n: pool.submit(run, export, n) for n in sorted(set(names), key=lambda n: -weight[n])}
        futures = [started[n] for n in names]
    out: list[pd.DataFrame | Table | Exception] = []
    for future in futures:
        exc = future.exception()
        if exc is not None and not isinstance(exc, (MissingData, NsysInputError)):
            raise exc
        out.append(exc if exc is not None else future.result())
    return out


CELL_FORMATS = {"i": ("%d", np.int64), "f1": ("%.1f", np.float64), "f3": ("%.3f", np.float64)}


def _cells(values: np.ndarray, fmt: str, null: str) -> list[str]:
    """One column as CSV cell strings."""
    values = np.asarray(values, dtype=object)
    isnull = np.fromiter((v is None or (isinstance(v, float) and v != v) for v in values.tolist()), bool, len(values))
    out = np.full(len(values), null, dtype=object)
    blank = np.array([isinstance(v, str) and v == "" for v in values], dtype=bool)
    out[blank] = ""
    ok = ~isnull & ~blank
    if ok.any():
        v = values[ok]
        if fmt in CELL_FORMATS:                 # Python's % per value (what np.char.mod does, slower)
            spec, dtype = CELL_FORMATS[fmt]
            out[ok] = [spec % x for x in v.astype(dtype).tolist()]
        else:
            out[ok] = v.astype(str)
    return out.tolist()


def write_csv(report: Table | pd.DataFrame, out: TextIO) -> None:
    """Write a report as `nsys stats --format csv` does (header, cells, minimal quoting); a
    report with no rows is an empty file, as nsys 2022.4 and 2025 write it."""
    table = report if isinstance(report, Table) else Table.from_frame(report)
    if not len(table):
        return
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.columns)
    cols = [_cells(values, f, table.null) for values, f in zip(table.columns.values(), table.formats, strict=False)]
    writer.writerows(zip(*cols, strict=False))
