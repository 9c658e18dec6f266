"""The NVTX ranges of an nsys export and their names (one naming rule: schema.nvtx_name): the
ranges the analyses of an export share (process_ranges, read once per export and layout, several
exports in one pass: read_process_ranges), the reports' general read (nvtx_ranges) and the NVTX
summary's packed read (nvtx_groups_packed).

Speed: NVTX text is dictionary-encoded per batch in Arrow and only distinct texts become Python
strings; the numpy steps run once over the rows of all the exports read together. Where the
packed read does not apply (a value out of range, an unterminated NVTX range) the caller falls
back to nvtx_ranges.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hpcprof.core.lazy import LazyModule
from hpcprof.tools.nsys.stats.arrays import one_of
from hpcprof.tools.nsys.stats.arrow import TextCodes, numpy_of
from hpcprof.tools.nsys.stats.db import BATCH_ROWS, PID_BITS, PID_MASK, Export, pid_of
from hpcprof.tools.nsys.stats.loaders import need
from hpcprof.tools.nsys.stats.numerics import (
    DUR,
    PACK_BITS,
    PACK_KEYS,
    PACK_MASK,
    Groups,
    factorize_sorted,
    group_codes,
)
from hpcprof.tools.nsys.stats.schema import (
    NVTX,
    NVTX_DOMAIN_CREATE,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    MissingData,
    NsysInputError,
    nvtx_domain_name,
    nvtx_name,
)

if TYPE_CHECKING:
    import pandas as pd
else:   # the summary reports and their CSV need no pandas (0.2-0.5 s of start-up): imported when used
    pd = LazyModule("pandas")


def nvtx_ranges(export: Export, event_types: tuple[int, ...], layout: str,
                with_times: bool = False) -> tuple[pd.DataFrame, np.ndarray]:
    """nvtx_range_columns' ranges as a frame, and the names."""
    columns, names = nvtx_range_columns(export, event_types, layout, with_times)
    return pd.DataFrame(columns), names


def nvtx_range_columns(export: Export, event_types: tuple[int, ...], layout: str,
                       with_times: bool = False) -> NvtxRanges:
    """NVTX ranges of `event_types` and their distinct names, from one scan of NVTX_EVENTS.

    Returns (ranges, names): ranges (numpy columns) has duration (unterminated ranges end at the last
    NVTX timestamp), eventType, `name` (index into `names`) and, `with_times`, start,
    end and globalTid. Range text is the StringIds value of textId, else the inline
    text; with a domain (eventType 75 row of the same process) it becomes
    `domain:text`. The new layout always writes `domain:text`, with an empty domain
    for the default one."""
    [got] = nvtx_range_columns_of([export], event_types, (layout,), with_times)[layout]
    if isinstance(got, Exception):
        raise got
    return got


#: an export's NVTX ranges as nvtx_range_columns gives them: (columns, names)
NvtxRanges = tuple[dict[str, np.ndarray], np.ndarray]
#: the NVTX ranges the analyses of an export share (process_ranges): push/pop and start/end
PROCESS_RANGE_TYPES = NVTX_PUSHPOP + NVTX_STARTEND


def process_ranges(export: Export, layout: str) -> NvtxRanges:
    """The push/pop and start/end NVTX ranges of `export` with their times, named as `layout`
    names them (nvtx_range_columns): read once per export and layout (its memo), shared by the
    analyses (window, phases, critical path) and the NVTX summary, which never change the
    columns in place."""
    return cast(NvtxRanges, export.memo(_ranges_key(layout), lambda: nvtx_range_columns(
        export, PROCESS_RANGE_TYPES, layout, with_times=True)))


def read_process_ranges(exports: Sequence[Export], layouts: Sequence[str]) -> None:
    """process_ranges of `exports` in `layouts`, those not read yet read together
    (nvtx_range_columns_of: one read of each export, numpy's steps once for all of them and, but
    for the names, for all layouts; each result the one it gives alone); an export whose read
    fails is left for process_ranges to raise."""
    todo = [e for e in exports if e.has(NVTX) and not all(e.memoized(_ranges_key(lay)) for lay in layouts)]
    if len(todo) * len(layouts) < 2:
        return
    for layout, got in nvtx_range_columns_of(todo, PROCESS_RANGE_TYPES, layouts, with_times=True).items():
        for export, ranges in zip(todo, got, strict=True):
            if not isinstance(ranges, Exception):
                _keep(export, _ranges_key(layout), ranges)


def _ranges_key(layout: str) -> str:
    """The key of process_ranges in `layout` in an export's memo."""
    return f"process ranges {layout}"


def _keep(export: Export, key: str, value: object) -> None:
    export.memo(key, lambda: value)


#: the columns of NVTX_EVENTS the ranges are read from, in the read's order (the text last)
NVTX_READ = ("start", "end", "eventType", "globalTid", "textId", "domainId")
#: the names of an export with no range rows
NO_NAMES = np.empty(0, dtype=object)


def nvtx_range_columns_of(exports: Sequence[Export], event_types: tuple[int, ...], layouts: Sequence[str],
                          with_times: bool = False) -> dict[str, list[NvtxRanges | MissingData | NsysInputError]]:
    """nvtx_range_columns of each export in each of `layouts` (by layout, a list in export order),
    or the MissingData/NsysInputError its read raised: each export read on its own, the numpy
    steps done once over the rows of all (a per-rank export has a few dozen ranges, and numpy's
    cost per call is most of the time) and, but for the names, once for all layouts; each
    export's columns and names those it gives alone (its codes numbered as if read alone). The
    layouts' columns but `name` are the same arrays."""
    codes = TextCodes()
    rows = _NvtxRows(len(exports), event_types, with_times)
    failed: dict[int, MissingData | NsysInputError] = {}
    for at, export in enumerate(exports):
        try:
            need(export, NVTX, "NV Tools Extension (NVTX) data")
            cols = export.columns(NVTX)
            # plain SQL, NULL as -1 (text: NUL): no SQLAlchemy statement to build and compile per export
            select = [f'coalesce("{c}", -1)' if c in cols or c not in ("textId", "domainId") else "-1" for c in NVTX_READ]
            select.append('coalesce("text", char(0))' if "text" in cols else "char(0)")
            for batch in export.sql_batches(f'SELECT {", ".join(select)} FROM "{NVTX}"', NVTX):
                if text := [c for i, c in enumerate(NVTX_READ) if not pa.types.is_integer(batch.column(i).type)]:
                    raise NsysInputError(f"{export.path}: {NVTX}.{text[0]} holds values that are not integers: "
                                         "the export is damaged")
                rows.add(at, batch, codes)
        except (MissingData, NsysInputError) as exc:
            failed[at] = exc
    d, dom = rows.finish()
    texts = codes.values()
    pairs = _nvtx_pairs(d, dom, texts)
    for at, export in enumerate(exports):                # StringIds first, the inline text second
        chosen = pairs.of(at)
        chosen = chosen[pairs.text_id[chosen] >= 0]
        if at in failed or not len(chosen):
            continue
        try:
            resolved = export.strings(pairs.text_id[chosen])
        except NsysInputError as exc:
            failed[at] = exc
            continue
        pairs.label[chosen] = np.where(pd.isna(resolved), pairs.label[chosen], resolved)
    n_ranges = len(d["duration"])
    one = len(exports) == 1                       # one export (a large one, as the CLI reads): no per-row look-ups
    has_domains = np.zeros(len(exports) + 1, dtype=bool)
    has_domains[dom["e"]] = True
    with_domains = has_domains[d["e"]] if not one else slice(None) if has_domains[0] else slice(0)
    last = rows.last[d["e"]] if not one else rows.last[0]
    duration = d["duration"]
    unterminated = duration < 0
    duration[unterminated] = (last[unterminated] if not one else last) + 1 + duration[unterminated]
    times = {"start": d["start"], "end": np.where(d["end"] < 0, last, d["end"]), "globalTid": d["globalTid"]} \
        if with_times else {}
    bounds = np.searchsorted(d["e"], np.arange(len(exports) + 1)).tolist()
    out: dict[str, list[NvtxRanges | MissingData | NsysInputError]] = {}
    for layout in layouts:
        name_code = pairs.local[pairs.code[:n_ranges]] if not one else pairs.code[:n_ranges].copy()  # codes by first use
        names_of: dict[int, np.ndarray] = {}
        for at in range(len(exports)):
            if not has_domains[at] and at not in failed:
                mine = pairs.of(at)
                names_of[at] = range_names_of(np.full(len(mine), None, dtype=object), pairs.label[mine], layout)
        if len(dom["e"]):
            dom["name"] = np.array([nvtx_domain_name(inline, lab, layout) for inline, lab in
                                    zip(texts[dom["text"]], pairs.label[pairs.code[n_ranges:]], strict=True)] + [None],
                                   dtype=object)[:-1]
            codes_with, names_with = _with_domains(d, dom, with_domains, pairs, layout, one)
            name_code[with_domains] = codes_with
            names_of |= {at: names for at, names in names_with.items() if at not in failed}
        columns = {"duration": duration, "eventType": d["eventType"], "name": name_code, **times}
        out[layout] = [failed[at] if at in failed else
                       ({n: v[bounds[at]:bounds[at + 1]] for n, v in columns.items()}, names_of.get(at, NO_NAMES))
                       for at in range(len(exports))]
    return out


class _NvtxRows:
    """The range and domain-creation rows of NVTX reads (each row tagged `e`, its export's
    position), processed in chunks of at least BATCH_ROWS rows (a large export's batches one by
    one, the batches of small ones together); `last`: each export's last NVTX timestamp. The
    ranges' start, end and globalTid are kept `with_times` only."""

    def __init__(self, exports: int, event_types: tuple[int, ...], with_times: bool) -> None:
        self.event_types = event_types
        self.pending: list[tuple[int, pa.RecordBatch, np.ndarray]] = []
        self.pending_rows = 0
        self.last = np.zeros(exports + 1, dtype=np.int64)
        self.ranges: dict[str, list[np.ndarray]] = {n: [] for n in (*RANGE_COLUMNS, *with_times * RANGE_TIMES, "e")}
        self.domains: dict[str, list[np.ndarray]] = {n: [] for n in (*DOMAIN_COLUMNS, "e")}

    def add(self, at: int, batch: pa.RecordBatch, codes: TextCodes) -> None:
        """A batch of export `at` (its text coded now: a failed read leaves no half-coded rows)."""
        self.pending.append((at, batch, codes.encode(batch.column(6))))
        self.pending_rows += batch.num_rows
        if self.pending_rows >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        batches, self.pending, self.pending_rows = self.pending, [], 0
        a = {n: np.concatenate([b.column(i).to_numpy().astype(np.int64, copy=False) for _, b, _ in batches])
             for i, n in enumerate(NVTX_READ)}
        a["e"] = np.repeat(np.array([at for at, _, _ in batches], dtype=np.int64), [b.num_rows for _, b, _ in batches])
        a["text"] = np.concatenate([text for _, _, text in batches])
        segments = np.flatnonzero(np.concatenate(([True], a["e"][1:] != a["e"][:-1])))
        exports = a["e"][segments]              # the last timestamp is over all events, marks included
        self.last[exports] = np.maximum(self.last[exports], np.maximum.reduceat(np.maximum(a["start"], a["end"]),
                                                                                segments))
        a["pid"] = pid_of(a["globalTid"])
        # end - start, or -(start + 1) for an unterminated range (its end is known after the scan)
        a["duration"] = np.where(a["end"] >= 0, a["end"] - a["start"], -a["start"] - 1)
        for keep, into in ((one_of(a["eventType"], self.event_types), self.ranges),
                           (a["eventType"] == NVTX_DOMAIN_CREATE, self.domains)):
            for n in into:
                into[n].append(a[n][keep].astype(NVTX_DTYPES.get(n, np.int64)))

    def finish(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The range rows and the domain rows, each in export order, then read order."""
        self._flush()
        return ({n: _concat(v, NVTX_DTYPES.get(n, np.int64)) for n, v in self.ranges.items()},
                {n: _concat(v, NVTX_DTYPES.get(n, np.int64)) for n, v in self.domains.items()})


RANGE_COLUMNS = ("duration", "eventType", "textId", "text", "domainId", "pid")
RANGE_TIMES = ("start", "end", "globalTid")
DOMAIN_COLUMNS = ("start", "domainId", "pid", "textId", "text")


class _Pairs:
    """The distinct (export, textId, text) of the range rows then the domain rows: `code` of each
    row (range rows first), numbered by first use over all rows; per code its `export`, its
    `local` number (its export's codes numbered by first use in that export's range rows then
    domain rows: the codes it gives alone), `text_id` and `label` (the inline text until
    StringIds resolves it). No sort over the rows: two hash passes."""

    def __init__(self, code: np.ndarray, export: np.ndarray, text_id: np.ndarray, label: np.ndarray) -> None:
        self.code, self.export, self.text_id, self.label = code, export, text_id, label
        self.by_export = np.argsort(export, kind="stable")             # each export's codes, in first use
        self.sorted_export = export[self.by_export]
        self.local = np.empty(len(export), dtype=np.int64)
        self.local[self.by_export] = np.arange(len(export)) - np.searchsorted(self.sorted_export, self.sorted_export)

    def of(self, at: int) -> np.ndarray:
        """The codes of export `at`, in its local order."""
        lo, hi = np.searchsorted(self.sorted_export, [at, at + 1]).tolist()
        return self.by_export[lo:hi]


def _nvtx_pairs(d: dict[str, np.ndarray], dom: dict[str, np.ndarray], texts: np.ndarray) -> _Pairs:
    width = len(texts) + 1
    text_pair, text_pairs = pd.factorize(np.concatenate((d["textId"], dom["textId"])).astype(np.int64) * width
                                         + np.concatenate((d["text"], dom["text"])))
    text_pairs = np.asarray(text_pairs, dtype=np.int64)
    e = np.concatenate((d["e"], dom["e"]))
    if e.max(initial=0) == 0:                                          # one export: its codes as they are
        code, of_pair, export = text_pair, np.arange(len(text_pairs)), np.zeros(len(text_pairs), dtype=np.int64)
    else:         # with the export: first use over all rows is, per export, first use in its ranges, then domains
        code, keys = pd.factorize(e * len(text_pairs) + text_pair)
        keys = np.asarray(keys, dtype=np.int64)
        of_pair, export = keys % len(text_pairs), keys // len(text_pairs)
    text_id, text = text_pairs[of_pair] // width, text_pairs[of_pair] % width
    label = texts[text] if len(texts) else np.full(len(text), None, dtype=object)
    return _Pairs(np.asarray(code, dtype=np.int64), export, text_id, label)


def _with_domains(d: dict[str, np.ndarray], dom: dict[str, np.ndarray], rows: np.ndarray | slice, pairs: _Pairs,
                  layout: str, one: bool) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Name codes of the range rows `rows` (those of exports with domain rows), each export's
    numbered from 0 as alone, and each such export's names `domain:label`, the domain being the
    first eventType 75 row (by start) with the range's domainId in the range's process (2022.4
    names it by its inline text, newer nsys by its StringIds value or text). `dom` holds the
    domain rows' e, start, domainId, pid and name. Only the domain rows are sorted: a range row
    is looked up among them (`one`: all rows are of one export, the export left out of keys)."""
    def key(rows_of: dict[str, np.ndarray], picked: np.ndarray | slice) -> np.ndarray:
        return (rows_of["domainId"][picked].astype(np.int64) << 32) | rows_of["pid"][picked].astype(np.int64)

    def look_up(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Each key's position in `sorted_keys`, -1 where it is not there."""
        at = np.searchsorted(sorted_keys, keys)
        found = at < len(sorted_keys)
        found[found] = sorted_keys[at[found]] == keys[found]
        return np.where(found, at, -1)

    by_start = np.lexsort((dom["start"], dom["e"]))                    # per export, by start; stable
    dom_key = key(dom, slice(None))
    if one:                                                            # (domain, process) as the key
        domain_keys, first = np.unique(dom_key[by_start], return_index=True)   # the first row of each
        dom_of_row = look_up(domain_keys, key(d, rows))
    else:                                                              # with the export in front
        distinct = np.unique(dom_key)
        per_export = len(distinct) + 1
        domain_keys, first = np.unique((dom["e"] * per_export + look_up(distinct, dom_key))[by_start],
                                       return_index=True)
        in_distinct = look_up(distinct, key(d, rows))   # -1 (no such domain): per_export - 1 in its export, no key
        dom_of_row = look_up(domain_keys, d["e"][rows] * per_export + in_distinct)
    domain_names = np.asarray(dom["name"], dtype=object)[by_start][first]
    width = len(pairs.label) + 1
    combo, combos = factorize_sorted(dom_of_row * width + pairs.code[:len(d["e"])][rows])
    combos = np.asarray(combos, dtype=np.int64)
    export = pairs.export[combos % width]
    by_export = np.argsort(export, kind="stable")                     # each export's combos, in their order
    local = np.empty(len(combos), dtype=np.int64)
    local[by_export] = np.arange(len(combos)) - np.searchsorted(export[by_export], export[by_export])
    names = range_names_of(np.concatenate((domain_names, np.array([None], dtype=object)))[combos // width],
                           pairs.label[combos % width], layout)[by_export]
    _, present = factorize_sorted(export)   # the exports present (np.unique's first use imports numpy.ma: 12 ms)
    bounds = np.searchsorted(export[by_export], present, "right").tolist()
    return combo if one else local[combo], dict(zip(present.tolist(), np.split(names, bounds[:-1]) if len(present)
                                                     else [], strict=True))


NVTX_DTYPES = {"eventType": np.int16, "textId": np.int32, "domainId": np.int32, "text": np.int32, "pid": np.int32}


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def range_names_of(domains: np.ndarray, labels: np.ndarray, layout: str) -> np.ndarray:
    """schema.nvtx_name of each (domain name, label)."""
    return np.array([nvtx_name(d, lab, layout) for d, lab in zip(domains.tolist(), labels.tolist(), strict=True)]
                    + [None], dtype=object)[:-1]


NVTX_TYPE_SHIFT = 56                 # eventType << 56 | duration, one int64 per range
DOMAIN_START_OFFSET = 1 << 55        # added to a domain row's start (before the session: negative) in its value
NVTX_NO_END = (1 << NVTX_TYPE_SHIFT) - 1
_TEXT_ID = re.compile(r"\x01(-?[0-9]+)\x02(.*)", re.DOTALL)


#: the NVTX rows looked at for a domain-creation row before the packed read (nsys writes them as
#: the process starts): a whole-table probe costs an export without domains a scan (1.9 M rows: 0.2 s)
DOMAIN_PROBE_ROWS = 1 << 16


def nvtx_groups_packed(export: Export, event_types: tuple[int, ...], layout: str, style: bool,
                       named: bool | None = None) -> tuple[np.ndarray, Groups, np.ndarray] | None:
    """The NVTX summary's groups from one scan of two columns: `eventType << 56 | duration`
    and the range's text, "\x01textId\x02text" where it has a textId; where the export creates
    NVTX domains (eventType 75 rows), a third, `domainId << 24 | pid`, and a domain row's start
    in place of its duration, so that ranges are named by their domain in the same scan. SQLite's
    expressions cost per row as much as the columns moved, so the SQL stays this small. Each
    batch is taken apart by the thread that read it (_PackedBatch: its text dictionary-encoded in
    C, its rows checked and split, the batch released); the batch dictionaries are merged once at
    the end and only the distinct texts become Python strings, and each range row is written once
    more, into the packed array (1.91 M rows: the steps after the read 190 -> 40 ms of CPU in a
    fresh process, most of it the first touches of the arrays they no longer make). Whether the
    export creates domains (`named`) is probed in its first DOMAIN_PROBE_ROWS rows; a domain row
    the read finds past them has it read again with the domain key. Returns (keys name rank * 2 +
    style, groups, names in GROUP BY order), or None where this does not apply (an unterminated
    range, a negative duration or one of 2^41 ns or more, a domain row without a start, a domainId
    of 2^39 or more): nvtx_ranges then does it."""
    need(export, NVTX, "NV Tools Extension (NVTX) data")
    cols = export.columns(NVTX)
    text = "coalesce(text, char(0))" if "text" in cols else "char(0)"
    if "textId" in cols:
        text = f"CASE WHEN textId IS NULL THEN {text} ELSE char(1) || textId || char(2) || {text} END"
    if named is None:
        named = bool(export.sql_rows(f"SELECT 1 FROM (SELECT eventType FROM {NVTX} LIMIT {DOMAIN_PROBE_ROWS}) "
                                     f"WHERE eventType = {NVTX_DOMAIN_CREATE} LIMIT 1"))
    if named:   # a domain row's start (+ DOMAIN_START_OFFSET) where its duration would be (NO_END: none in range)
        value = (f"(eventType << {NVTX_TYPE_SHIFT}) | CASE WHEN eventType = {NVTX_DOMAIN_CREATE} THEN CASE WHEN "
                 f"start BETWEEN {-DOMAIN_START_OFFSET} AND {DOMAIN_START_OFFSET - 2} THEN start + {DOMAIN_START_OFFSET} "
                 f"ELSE {NVTX_NO_END} END ELSE coalesce({DUR}, {NVTX_NO_END}) END")
        key = f"({'coalesce(domainId, -1)' if 'domainId' in cols else '-1'} << {PID_BITS}) | " \
              f"((coalesce(globalTid, -1) >> {PID_BITS}) & {PID_MASK})"
        if "domainId" in cols:   # NULL where the shift would lose bits
            key = f"CASE WHEN domainId IS NULL OR domainId BETWEEN {-(1 << 39)} AND {(1 << 39) - 1} THEN {key} END"
        key = f", {key}"
    else:
        value, key = f"(eventType << {NVTX_TYPE_SHIFT}) | coalesce({DUR}, {NVTX_NO_END})", ""
    parts = export.map_batches(f"{text}, {value}{key}", NVTX, "",      # no WHERE: filtering costs SQLite more
                               lambda batch: _PackedBatch(batch, event_types, style, named))
    if not parts or any(p.unusable for p in parts):
        return None
    if not named and any(p.creates_domains for p in parts):   # a domain row past the probe: read with the key
        del parts
        return nvtx_groups_packed(export, event_types, layout, style, named=True)
    # one dictionary for all batches' texts (C, hashing); each batch's codes mapped onto it
    merged = pc.dictionary_encode(pa.concat_arrays([p.texts for p in parts]))
    to_global = numpy_of(merged.indices)
    bounds = np.cumsum([0] + [len(p.texts) for p in parts]).tolist()
    text_ids, inline = [], []
    for value_text in merged.dictionary.to_pylist():
        m = _TEXT_ID.fullmatch(value_text) if value_text.startswith("\x01") else None
        text_ids.append(int(m.group(1)) if m else -1)
        rest = m.group(2) if m else value_text
        inline.append(None if rest == "\x00" else rest)
    del merged
    inline_text = np.array(inline + [None], dtype=object)[:-1]
    label = _nvtx_labels(export, np.array(text_ids, dtype=np.int64), inline_text)
    if any(len(p.domain_codes) for p in parts):
        dom_names = np.array([nvtx_domain_name(inline, lab, layout) for inline, lab in
                              zip(inline_text.tolist(), label.tolist(), strict=True)] + [None], dtype=object)[:-1]
        keys = np.concatenate([p.keys for p in parts])
        domain_keys = np.concatenate([p.domain_keys for p in parts])
        n_ranges, n_domains = len(keys), len(domain_keys)
        one = _Pairs(_gathered(to_global, bounds, [p.codes for p in parts]), np.zeros(len(label), dtype=np.int64),
                     np.full(len(label), -1, dtype=np.int64), label)
        code, by_export = _with_domains(
            {"domainId": keys >> PID_BITS, "pid": keys & PID_MASK, "e": np.zeros(n_ranges, dtype=np.int64)},
            {"start": np.concatenate([p.domain_starts for p in parts]), "domainId": domain_keys >> PID_BITS,
             "pid": domain_keys & PID_MASK, "e": np.zeros(n_domains, dtype=np.int64),
             "name": dom_names[_gathered(to_global, bounds, [p.domain_codes for p in parts])]},
            slice(None), one, layout, True)
        names = by_export.get(0, NO_NAMES)
        del keys, domain_keys
    else:       # each batch's codes straight to name ranks, through its slice of to_global (below)
        code, names = None, range_names_of(np.full(len(label), None, dtype=object), label, layout)
    name_rank, (sorted_names,) = group_codes(names)
    if len(sorted_names) * 2 > PACK_KEYS:
        return None
    # per range row, in read order: name rank << 42 | its values (the StartEnd bit, the duration)
    v = np.empty(sum(len(p.values) for p in parts), dtype=np.int64)
    at = 0
    for p, lo, hi in zip(parts, bounds, bounds[1:], strict=False):
        rows = v[at:at + len(p.values)]
        if code is None:
            # mode "clip": the default mode ("raise") copies `out` into a buffer first and writes it
            # back (the codes are in range): reading fresh pages maps the zero page, and the write
            # back then faults each page again and flushes it from the other CPUs' TLBs
            np.take(name_rank[to_global[lo:hi]] << (PACK_BITS + 1), p.codes, out=rows, mode="clip")
        else:
            np.left_shift(name_rank[code[at:at + len(rows)]], PACK_BITS + 1, out=rows)
        rows |= p.values
        at += len(rows)
    del parts, code
    ukey, g = Groups.from_packed(v)
    return ukey, g, sorted_names


def _gathered(to_global: np.ndarray, bounds: list[int], codes: list[np.ndarray]) -> np.ndarray:
    """Each batch's `codes` (into its own dictionary, the batch's slice of `to_global`) as codes
    into the merged dictionary, all batches in one array."""
    out = np.empty(sum(len(c) for c in codes), dtype=to_global.dtype)
    at = 0
    for lo, hi, c in zip(bounds, bounds[1:], codes, strict=False):
        np.take(to_global[lo:hi], c, out=out[at:at + len(c)], mode="clip")     # (see nvtx_groups_packed)
        at += len(c)
    return out


class _PackedBatch:
    """One batch of nvtx_groups_packed's read, taken apart by the thread that read it (numpy and
    Arrow release the GIL: the other thread reads meanwhile), keeping none of the batch's buffers
    (its text alone is ~2 MB). `texts`: the batch's distinct texts (in C, by hashing); its range
    rows (of `event_types`): `codes` (into `texts`), `values` (duration, | 1 << PACK_BITS for a
    start/end range with `style`) and, `named`, `keys`; its domain rows (eventType 75):
    `domain_codes`, `domain_starts` and `domain_keys`. `unusable`: a row the packed read does not
    apply to (see nvtx_groups_packed); `creates_domains`: a domain row in a read without the key."""

    def __init__(self, batch: pa.RecordBatch, event_types: tuple[int, ...], style: bool, named: bool) -> None:
        empty = np.empty(0, dtype=np.int64)
        self.unusable = self.creates_domains = False
        self.keys = self.domain_keys = self.domain_starts = empty
        self.domain_codes = self.codes = np.empty(0, dtype=np.int32)
        self.values = empty
        encoded = pc.dictionary_encode(pc.cast(batch.column(0), pa.string()))
        self.texts = encoded.dictionary
        if not batch.num_rows:
            return
        key = batch.column(2) if named else None
        if batch.column(1).null_count or (key is not None and key.null_count):   # a NULL key: a domainId out of range
            self.unusable = True
            return
        packed = numpy_of(batch.column(1))
        lo, hi = int(packed.min()), int(packed.max())
        if lo < 0:
            self.unusable = True
            return
        kind = lo >> NVTX_TYPE_SHIFT
        ranges: np.ndarray | slice
        domains: np.ndarray | slice
        startend: np.ndarray | slice
        if kind == hi >> NVTX_TYPE_SHIFT:      # one event type (the usual batch): no test per row (30 batches 55 -> 48 ms)
            ranges, domains, startend = (slice(None) if kind in types else slice(0)
                                         for types in (event_types, (NVTX_DOMAIN_CREATE,), NVTX_STARTEND))
        else:
            etype = packed >> NVTX_TYPE_SHIFT
            ranges, domains = one_of(etype, event_types), etype == NVTX_DOMAIN_CREATE
            startend = one_of(etype[ranges], NVTX_STARTEND)
        codes = numpy_of(encoded.indices)
        self.codes = codes[ranges]
        self.values = packed[ranges] & NVTX_NO_END
        if self.values.max(initial=0) > PACK_MASK:
            self.unusable = True
            return
        if style:
            self.values[startend] |= 1 << PACK_BITS
        if key is not None:                       # copies: a view would keep the whole batch alive
            self.keys = np.array(numpy_of(key)[ranges])
        domain_rows = packed[domains]
        if not len(domain_rows):
            return
        if not named:
            self.creates_domains = True
            return
        self.domain_codes = codes[domains]
        self.domain_starts = domain_rows & NVTX_NO_END
        if (self.domain_starts == NVTX_NO_END).any():        # a domain row without a start in range
            self.unusable = True
            return
        self.domain_starts -= DOMAIN_START_OFFSET
        self.domain_keys = np.array(numpy_of(key)[domains])


def _nvtx_labels(export: Export, text_ids: np.ndarray, inline: np.ndarray) -> np.ndarray:
    """Label of each (textId, inline text): the StringIds value of textId, else the inline text."""
    label = inline.copy()
    has_id = text_ids >= 0
    if has_id.any():
        resolved = export.strings(text_ids[has_id])
        unknown = np.array([v is None for v in resolved.tolist()], dtype=bool)
        label[has_id] = np.where(unknown, label[has_id], resolved)
    return label
