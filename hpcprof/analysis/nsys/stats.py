"""`nsys stats` reports recomputed from an export: same columns, rounding and row order.

Each report is a function `Export -> DataFrame`. The DataFrame carries its CSV
cell formats in `df.attrs["formats"]` (one per column: "i" integer, "f1" one
decimal, "f3" three decimals, "s" text, NULL shown as `df.attrs["null"]`), which
`write_csv` uses to print exactly what `nsys stats --format csv` prints.

Two layouts exist: the old report names (gpukernsum, cudaapisum, ...) give nsys
2022.4's columns and labels; the current names (cuda_gpu_kern_sum, ...) give
those of nsys 2024-2025 (kernel summary by name only with tie-breaks,
`[CUDA memcpy Host-to-Device]` labels, `domain:range` NVTX names).

Numbers follow nsys's SQL: Total = Σ(end-start); Avg/Med/StdDev rounded to one
decimal as the SQLite inside that nsys rounds (3.36's long-double printf for
2022.4, the 16-significant-digit decimal rounding of newer SQLite for 2025);
StdDev is the sample standard deviation (0 for fewer than 2 values);
Time % = round(100·total/Σtotal, 1); rows sorted by total, descending, ties in
GROUP BY order (the key order SQLite's sorter leaves them in).
"""

from __future__ import annotations

import csv
import os
from concurrent.futures import ThreadPoolExecutor
from decimal import ROUND_HALF_UP, Decimal
from typing import Callable, TextIO

import numpy as np
import pandas as pd
import pyarrow as pa
import sqlalchemy as sa

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
    pid_of,
    process_of,
)

OLD, NEW = "2022.4", "2025.3"

# nsys 2022.4's hard-coded memcpy labels (copyKind -> name); newer nsys uses ENUM_CUDA_MEMCPY_OPER.label
OLD_MEMCPY_LABELS = {
    0: "[CUDA memcpy Unknown]", 1: "[CUDA memcpy HtoD]", 2: "[CUDA memcpy DtoH]",
    3: "[CUDA memcpy HtoA]", 4: "[CUDA memcpy AtoH]", 5: "[CUDA memcpy AtoA]",
    6: "[CUDA memcpy AtoD]", 7: "[CUDA memcpy DtoA]", 8: "[CUDA memcpy DtoD]",
    9: "[CUDA memcpy HtoH]", 10: "[CUDA memcpy PtoP]",
    11: "[CUDA Unified Memory memcpy HtoD]", 12: "[CUDA Unified Memory memcpy DtoH]",
    13: "[CUDA Unified Memory memcpy DtoD]",
}
OLD_MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
                 5: "Device Static", 6: "Managed Static", 7: "Unknown"}
MEMSET_LABEL = "[CUDA memset]"
OSRT_EVENT_CLASS = 27

SUMMARY_COLS = ["Time (%)", "Total Time (ns)", "{count}", "Avg (ns)", "Med (ns)", "Min (ns)",
                "Max (ns)", "StdDev (ns)"]
SUMMARY_FMT = ["f1", "i", "i", "f1", "f1", "i", "i", "f1"]


class MissingData(Exception):
    """The export lacks the data a report needs (nsys prints SKIPPED for these)."""


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


def sqlite_round1_exact(x: np.ndarray) -> np.ndarray:
    """round(x, 1) as newer SQLite (nsys 2025) computes it: the value's 16 significant
    digits, rounded half away from zero at the first decimal."""
    tenth = Decimal("0.1")
    out = [np.nan if v != v else float(Decimal(f"{v:.15e}").quantize(tenth, ROUND_HALF_UP))
           for v in np.asarray(x, dtype=np.float64).tolist()]
    return np.asarray(out, dtype=np.float64)


def round1(x: np.ndarray, layout: str) -> np.ndarray:
    """round(x, 1) of the SQLite inside the nsys of `layout`."""
    return sqlite_round1(x) if layout == OLD else sqlite_round1_exact(x)


class Groups:
    """Sample statistics of `values` per group code (codes 0..n-1 in GROUP BY order)."""

    def __init__(self, codes: np.ndarray, values: np.ndarray, ngroups: int) -> None:
        if len(values) and ngroups < 2**22 and values.min() >= 0 and values.max() < 2**41:
            v = codes.astype(np.int64) << 41           # one int64 sort instead of a lexsort
            v |= values
            v.sort()
            v &= 2**41 - 1                              # groups are contiguous: counts give the bounds
        else:
            v = values[np.lexsort((values, codes))]
        self.count = np.bincount(codes, minlength=ngroups).astype(np.int64)
        starts = np.concatenate(([0], np.cumsum(self.count)[:-1]))
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
                del v
                dev -= np.repeat(self.avg[nonempty], n)
                dev *= dev
                ss = np.add.reduceat(dev, s)
                self.std[nonempty] = np.where(n > 1, np.sqrt(ss / np.maximum(n - 1, 1)), 0.0)

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
        return dict(zip(cols, vals))


def group_codes(*keys: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Codes of the distinct key tuples, numbered in sorted (SQLite GROUP BY) order.

    NULL (None) sorts first, as in SQLite. Returns (codes, unique values per key)."""
    sub_codes, uniques = [], []
    for key in keys:
        codes, uniq = pd.factorize(pd.Series(key, dtype=object if key.dtype == object else None),
                                   sort=True, use_na_sentinel=True)
        has_null = (codes < 0).any()
        codes = codes + 1 if has_null else codes
        uniq = np.asarray(uniq, dtype=object if key.dtype == object else None)
        uniques.append(np.concatenate(([None], uniq.astype(object))) if has_null else uniq)
        sub_codes.append(codes.astype(np.int64))
    if len(keys) == 1:
        return sub_codes[0], uniques
    dims = [len(u) for u in uniques]
    flat = np.ravel_multi_index(sub_codes, dims)
    used, codes = np.unique(flat, return_inverse=True)
    idx = np.unravel_index(used, dims)
    return codes.astype(np.int64), [u[i] for u, i in zip(uniques, idx)]


def frame(columns: dict[str, np.ndarray], formats: list[str], order: np.ndarray | None = None,
          null: str = "None") -> pd.DataFrame:
    """A report DataFrame (rows in `order`) carrying its CSV cell formats."""
    df = pd.DataFrame({k: (np.asarray(v, dtype=object) if np.asarray(v).dtype == object else np.asarray(v))
                       for k, v in columns.items()})
    if order is not None:
        df = df.iloc[order].reset_index(drop=True)
    df.attrs["formats"] = formats
    df.attrs["null"] = null
    return df


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
    names, values = [], []
    if export.has(MEMCPY):
        t = export.table(MEMCPY)
        col = (t.c.end - t.c.start) if value == "duration" else t.c.bytes
        d = export.ints(sa.select(t.c.copyKind, col.label("v")))
        labels = memcpy_labels(export, layout)
        keep = np.isin(d["copyKind"], list(labels))          # nsys inner-joins the label table
        names.append(np.array([labels[k] for k in d["copyKind"][keep]], dtype=object))
        values.append(d["v"][keep])
    if export.has(MEMSET):
        t = export.table(MEMSET)
        col = (t.c.end - t.c.start) if value == "duration" else t.c.bytes
        d = export.ints(sa.select(col.label("v")))
        names.append(np.full(len(d["v"]), MEMSET_LABEL, dtype=object))
        values.append(d["v"])
    if not names:
        raise MissingData("no GPU memory data")
    return np.concatenate(names), np.concatenate(values)


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
        for keep, out in ((np.isin(a["eventType"], event_types), ranges), (a["eventType"] == NVTX_DOMAIN_CREATE, domains)):
            for n in out:
                out[n].append(a[n][keep].astype(NVTX_DTYPES.get(n, np.int64)))
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
        name_code, range_names = _with_domains(d, dom, pair[:n_ranges], label, layout)
    else:
        name_code = pair[:n_ranges]
        range_names = label if layout == OLD else np.array([f":{lab or ''}" for lab in label], dtype=object)
    duration = d["duration"]
    duration[duration < 0] = last + 1 + duration[duration < 0]
    out = {"duration": duration, "eventType": d["eventType"], "name": name_code}
    if with_times:
        out |= {"start": d["start"], "end": np.where(d["end"] < 0, last, d["end"]), "globalTid": d["globalTid"]}
    return pd.DataFrame(out), range_names


NVTX_DTYPES = {"eventType": np.int16, "textId": np.int32, "domainId": np.int32, "text": np.int32, "pid": np.int32}


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def _with_domains(d: dict[str, np.ndarray], dom: pd.DataFrame, pair: np.ndarray, label: np.ndarray,
                  layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Range name codes and names `domain:label`, the domain being the first eventType 75
    row with the range's domainId in the range's process (2022.4 names it by its inline
    text, newer nsys by its StringIds value or text)."""
    dom = dom.sort_values("start", kind="stable").drop_duplicates(["domainId", "pid"]).reset_index(drop=True)
    key = pd.MultiIndex.from_arrays([dom["domainId"].to_numpy(np.int64), dom["pid"].to_numpy(np.int64)])
    dom_of_row = key.get_indexer(pd.MultiIndex.from_arrays([d["domainId"].astype(np.int64),
                                                            d["pid"].astype(np.int64)]))
    width = len(label) + 1
    combo, combos = pd.factorize(dom_of_row * width + pair)
    combos = np.asarray(combos, dtype=np.int64)
    dom_names = np.concatenate((dom["name"].to_numpy(dtype=object), [None]))[combos // width]
    labels = label[combos % width]
    if layout == OLD:
        names = [lab if dn is None else f"{dn}:{lab}" for dn, lab in zip(dom_names, labels)]
    else:
        names = [f"{dn or ''}:{lab or ''}" for dn, lab in zip(dom_names, labels)]
    return combo, np.array(names, dtype=object)


# ---------------------------------------------------------------------------------------
# reports


def _name_summary(export: Export, ids: np.ndarray, values: np.ndarray, count_label: str, name_label: str,
                  layout: str, clean: bool = False) -> pd.DataFrame:
    """Summary grouped by a StringIds id (SQLite groups by the id, not by the text)."""
    codes, (uniq,) = group_codes(ids)
    g = Groups(codes, values, len(uniq))
    names = export.strings(uniq.astype(np.int64))
    if clean:
        names = clean_api_name(names)
    cols = g.summary(count_label, layout) | {name_label: names}
    return frame(cols, SUMMARY_FMT + ["s"], by_total(g.total), null=_null(layout))


def _null(layout: str) -> str:
    return "None" if layout == OLD else ""


def cuda_api_sum(export: Export, layout: str = NEW) -> pd.DataFrame:
    """CUDA runtime and driver API calls per API name."""
    _need(export, RUNTIME, "CUDA trace data")
    t = export.table(RUNTIME)
    d = export.ints(sa.select(t.c.nameId, (t.c.end - t.c.start).label("dur")))
    return _name_summary(export, d["nameId"], d["dur"], "Num Calls", "Name", layout, clean=True)


def osrt_sum(export: Export, layout: str = NEW) -> pd.DataFrame:
    """OS runtime calls per function name."""
    _need(export, OSRT, "OS Runtime trace data")
    t = export.table(OSRT)
    d = export.ints(sa.select(t.c.nameId, (t.c.end - t.c.start).label("dur"))
                    .where(t.c.eventClass == OSRT_EVENT_CLASS))
    return _name_summary(export, d["nameId"], d["dur"], "Num Calls", "Name", layout)


def _grid_block(d: dict[str, np.ndarray], prefix: str) -> np.ndarray:
    xs, ys, zs = (d[f"{prefix}{a}"] for a in "XYZ")
    return np.char.mod("%4d", xs).astype(object) + " " + np.char.mod("%4d", ys) + " " + np.char.mod("%4d", zs)


def cuda_gpu_kern_gb_sum(export: Export, layout: str = NEW, variant: str = "demangled") -> pd.DataFrame:
    """Kernels per (name, grid, block): nsys 2022.4's `gpukernsum`, today's `cuda_gpu_kern_gb_sum`."""
    dims = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
    d = kernels(export, dims, variant)
    dur = d["end"] - d["start"]
    # group the dims first (few distinct), then (nameId, grid, block) with grid/block as text
    dcodes, dparts = group_codes(*(d[c] for c in dims))
    grid_u = _grid_block(dict(zip(dims, dparts)), "grid")
    block_u = _grid_block(dict(zip(dims, dparts)), "block")
    gcodes, (grid_s,) = group_codes(grid_u)
    bcodes, (block_s,) = group_codes(block_u)
    codes, (ids, gi, bi) = group_codes(d["nameId"], gcodes[dcodes], bcodes[dcodes])
    g = Groups(codes, dur, len(ids))
    names = export.strings(ids.astype(np.int64))
    cols = g.summary("Instances", layout) | {"GridXYZ": grid_s[gi.astype(np.int64)],
                                     "BlockXYZ": block_s[bi.astype(np.int64)], "Name": names}
    order = by_total(g.total) if layout == OLD else by_total(g.total, g.count, _rank(names))
    return frame(cols, SUMMARY_FMT + ["s", "s", "s"], order, null=_null(layout))


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


def cuda_gpu_kern_sum(export: Export, layout: str = NEW, variant: str = "demangled") -> pd.DataFrame:
    """Kernels per name (nsys 2024+ `cuda_gpu_kern_sum`)."""
    d = kernels(export, (), variant)
    codes, names = _kernel_name_codes(export, d["nameId"])
    g = Groups(codes, d["end"] - d["start"], len(names))
    cols = g.summary("Instances", layout) | {"Name": names}
    return frame(cols, SUMMARY_FMT + ["s"], by_total(g.total, g.count, np.arange(len(names))),
                 null=_null(layout))


def cuda_gpu_mem_time_sum(export: Export, layout: str = NEW) -> pd.DataFrame:
    """Memcpy and memset operations per kind: time."""
    names, dur = memops(export, layout, "duration")
    codes, (uniq,) = group_codes(names)
    g = Groups(codes, dur, len(uniq))
    cols = g.summary("Count", layout) | {"Operation": uniq}
    return frame(cols, SUMMARY_FMT + ["s"], by_total(g.total), null=_null(layout))


def cuda_gpu_mem_size_sum(export: Export, layout: str = NEW) -> pd.DataFrame:
    """Memcpy and memset operations per kind: bytes, shown in MB (10^6 bytes)."""
    names, size = memops(export, layout, "bytes")
    codes, (uniq,) = group_codes(names)
    g = Groups(codes, size, len(uniq))
    mb = 1e6
    cols = {"Total (MB)": g.total / mb, "Count": g.count, "Avg (MB)": g.avg / mb, "Med (MB)": g.med / mb,
            "Min (MB)": g.min / mb, "Max (MB)": g.max / mb, "StdDev (MB)": g.std / mb, "Operation": uniq}
    return frame(cols, ["f3", "i", "f3", "f3", "f3", "f3", "f3", "s"], by_total(g.total), null=_null(layout))


def cuda_gpu_sum(export: Export, layout: str = NEW, variant: str = "demangled") -> pd.DataFrame:
    """Kernels and memory operations together, per name, with a Category column."""
    names, values, cats = [], [], []
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
        raise MissingData("no GPU kernel/memory operations data")
    allnames = np.concatenate(names)
    allcats = np.concatenate(cats)
    codes, (uniq,) = group_codes(allnames)
    g = Groups(codes, np.concatenate(values), len(uniq))
    category = np.empty(len(uniq), dtype=object)
    category[codes] = allcats                       # SQLite reports a bare column from the last row
    cols = g.summary("Instances", layout) | {"Category": category, "Operation": uniq}
    return frame(cols, SUMMARY_FMT + ["s", "s"], by_total(g.total), null=_null(layout))


def _nvtx_summary(export: Export, event_types: tuple[int, ...], layout: str, style: bool) -> pd.DataFrame:
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


def nvtx_sum(export: Export, layout: str = NEW) -> pd.DataFrame:
    """NVTX push/pop and start/end ranges per (name, style)."""
    return _nvtx_summary(export, NVTX_PUSHPOP + NVTX_STARTEND, layout, style=True)


def nvtx_pushpop_sum(export: Export, layout: str = NEW) -> pd.DataFrame:
    """NVTX push/pop ranges per name."""
    return _nvtx_summary(export, NVTX_PUSHPOP, layout, style=False)


def nvtx_startend_sum(export: Export, layout: str = NEW) -> pd.DataFrame:
    """NVTX start/end ranges per name."""
    return _nvtx_summary(export, NVTX_STARTEND, layout, style=False)


def cuda_kern_exec_sum(export: Export, layout: str = OLD, variant: str = "demangled") -> pd.DataFrame:
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
    return frame(cols, fmts + ["s", "s"], by_total(gt.avg), null=_null(layout))


def _nullable(values: np.ndarray, null: np.ndarray) -> np.ndarray:
    out = np.asarray(values, dtype=object)
    out[null] = None
    return out


def cuda_gpu_trace(export: Export, layout: str = NEW, variant: str = "demangled") -> pd.DataFrame:
    """One row per kernel, memcpy and memset, by start time."""
    parts = []
    gpu_names = _gpu_names(export)
    kinds = mem_kind_labels(export, layout)
    green = layout != OLD
    if export.has(KERNEL):
        extra = ("correlationId", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread",
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
        cols = export.columns(table)
        sel = [t.c.start, t.c.end, t.c.correlationId, t.c.bytes, t.c.deviceId, t.c.contextId, t.c.streamId]
        sel += [t.c.greenContextId if green and "greenContextId" in cols else sa.literal(0).label("greenContextId")]
        sel += [t.c.copyKind, t.c.srcKind, t.c.dstKind] if is_copy else [t.c.memKind if "memKind" in cols
                                                                          else sa.literal(-1).label("memKind")]
        m = export.ints(sa.select(*sel))
        dur = m["end"] - m["start"]
        with np.errstate(divide="ignore"):
            thru = m["bytes"] * np.where(dur > 0, 1_000_000_000 // np.maximum(dur, 1), 0) / 1e6
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
    cols = {"Start (ns)": f["start"], "Duration (ns)": f["dur"], "CorrId": f["corr"]}
    for c, h in (("gx", "GrdX"), ("gy", "GrdY"), ("gz", "GrdZ"), ("bx", "BlkX"), ("by", "BlkY"), ("bz", "BlkZ"),
                 ("regs", "Reg/Trd"), ("smem", "StcSMem (MB)"), ("dmem", "DymSMem (MB)"), ("bytes", "Bytes (MB)")):
        cols[h] = _object_column(f, c)
    cols["Throughput (MBps)"] = np.asarray(thru, dtype=object)
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


Report = Callable[[Export], pd.DataFrame]


def _with(func: Callable[..., pd.DataFrame], layout: str) -> Report:
    def run(export: Export) -> pd.DataFrame:
        return func(export, layout)
    run.__doc__ = func.__doc__
    return run


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
}
SUMMARY_REPORTS = ("cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
                   "nvtx_sum", "osrt_sum")


def run_report(export: Export, name: str) -> pd.DataFrame:
    """Report `name` (current or nsys 2022.4 spelling) on `export`."""
    if name not in REPORTS:
        raise NsysInputError(f"unknown report {name!r}; known: {', '.join(REPORTS)}")
    return REPORTS[name](export)


def run_reports(export: Export, names: list[str], workers: int | None = None) -> list[pd.DataFrame | Exception]:
    """Reports `names` on `export`, computed concurrently (the column reads and sorts release
    the GIL); each entry is the DataFrame or the MissingData/NsysInputError it raised."""
    workers = workers or max(1, min(len(names), os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(run_report, export, name) for name in names]
    out: list[pd.DataFrame | Exception] = []
    for future in futures:
        exc = future.exception()
        if exc is not None and not isinstance(exc, (MissingData, NsysInputError)):
            raise exc
        out.append(exc if exc is not None else future.result())
    return out


def _cells(values: np.ndarray, fmt: str, null: str) -> list[str]:
    """One column as CSV cell strings."""
    values = np.asarray(values, dtype=object)
    isnull = pd.isna(pd.Series(values, dtype=object)).to_numpy()
    out = np.full(len(values), null, dtype=object)
    blank = np.array([isinstance(v, str) and v == "" for v in values], dtype=bool)
    out[blank] = ""
    ok = ~isnull & ~blank
    if ok.any():
        v = values[ok]
        if fmt == "i":
            out[ok] = np.char.mod("%d", v.astype(np.int64))
        elif fmt == "f1":
            out[ok] = np.char.mod("%.1f", v.astype(np.float64))
        elif fmt == "f3":
            out[ok] = np.char.mod("%.3f", v.astype(np.float64))
        else:
            out[ok] = v.astype(str)
    return out.tolist()


def write_csv(df: pd.DataFrame, out: TextIO) -> None:
    """Write a report as `nsys stats --format csv` does (header, cells, minimal quoting)."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(df.columns)
    formats = df.attrs.get("formats", ["s"] * len(df.columns))
    null = df.attrs.get("null", "")
    cols = [_cells(df[c].to_numpy(dtype=object), f, null) for c, f in zip(df.columns, formats)]
    writer.writerows(zip(*cols))
