"""`nsys analyze`'s expert-system rules on an nsys SQLite export, with nsys's findings, rows and CSV.

Two layouts, chosen by the rule's name as each nsys version spells it: the 2025 names (RULES:
cuda_memcpy_async, ...) give nsys 2025.3.1's output, nsys 2022.4's hyphen names (RULES_2022:
cuda-async-memcpy, ...) give 2022.4's (nsys 2025 no longer lists the hyphen names, nsys 2022.4
knows only them). The six rules (each one declared per layout: its name, the tables and columns
it needs with the message nsys prints when one is missing, its columns, how it finds its rows):

- cuda_memcpy_async: memcpys from/to pageable memory (srcKind or dstKind 0) launched by a
  `cudaMemcpy%Async%` call (matched on the correlation id alone, as nsys does).
- cuda_memcpy_sync: memcpys launched by a `cudaMemcpy%` call without `Async`, except host-to-device
  copies of at most 64,000 bytes and copies within one device.
- cuda_memset_sync: memsets of pinned (1) or managed (4) memory launched by a `cudaMemset%` call
  without `async`.
- cuda_api_sync: every `cudaDeviceSynchronize%` / `cudaStreamSynchronize%` call.
- gpu_gaps: per process and device, the idle gaps between GPU operations (kernels, memcpys,
  memsets with start > 0, plus CUDA profiling overhead inside the device's span) longer than
  `gap` ms (default 500).
- gpu_time_util: per process and device, the span from the first operation's start to the last
  one's end cut into `chunks` (default 30) chunks of ceil(span / chunks) ns; chunks whose summed
  operation time is under `threshold` % (default 50) are listed, consecutive ones merged with
  their size-weighted mean rounded to 0.1.

What nsys 2022.4's SQL does is reproduced, quirks included (each one seen to matter in the
differential test against nsys itself): the four CUDA rules list rows by duration descending, at
most `rows` (default 50), ties in the order of nsys's SQLite join plan (memcpys in table order
with their calls by name id, or the calls first when the memcpys are indexed by correlation id;
memsets: the calls first). gpu_gaps lists the `rows` longest gaps, ties by start, then process
and device (the LIMIT inside nsys's gap view does not cut the rows its window query sees).
gpu_time_util merges the chunks of one index that no operation touches on several devices into
one, kept for the first device (nsys groups them under a NULL device), takes the first `rows`
merged ranges in (group, device, process) order, then orders them by utilisation and duration;
the context id of a device is that of its first operation with the latest end. Utilisation is
rounded as nsys 2022.4's SQLite 3.36 rounds. A start/end window keeps the rows overlapping it,
except the runtime calls the memcpy/memset rules join (nsys reads those unfiltered).

nsys 2025.3.1 differs; seen to matter in its 1,440 CSVs (tests/fixtures/nsys/rules_gold_2025.3.1.tar.xz):
the memcpy/memset rules add a `Green Context ID` column (greenContextId, empty when 0) after
`Context ID`; its SQLite always scans the runtime calls first for the memcpy rules (ties: calls in
table order, each one's memcpys in table order); gpu_time_util keeps each device's untouched
chunks for that device (no NULL-device merging). Taken from its rule scripts, not distinguished by
that gold: memory kinds named from the export's ENUM_CUDA_MEM_KIND; the memcpy/memset rules
skipped with nsys's message when StringIds, ENUM_CUDA_MEM_KIND or the greenContextId column is
missing; an NVTX range that is not found names the export; utilisation rounded exactly (half away
from zero, as nsys 2025's `nsys stats` rounds, stats.py). Its options beyond 2022.4's, as its scripts
read them and seen identical in 3,120 more CSVs (rules_options_gold_2025.3.1.tar.xz): `nvtx=NAME/N`
takes the N-th range of that name (from 0, by start); `process=`/`thread=` exist for cuda_api_sync
only (the other rules refuse them) and keep the calls of that process/thread id; a negative `rows`
is no limit (SQLite's LIMIT -1, also in 2022.4).
"""

from __future__ import annotations

import csv
import math
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from hpcprof.tools.nsys.stats.numerics import round1
from hpcprof.tools.nsys.stats.schema import (
    GPU_TABLES,
    MEMCPY,
    MEMSET,
    OLD,
    OLD_MEM_KINDS,
    RUNTIME,
    NsysInputError,
    check_sqlite_file,
)


class Options(NamedTuple):
    """The rules' arguments (nsys's `rows`, `gap`, `threshold`, `chunks`, `start`, `end`, `nvtx`,
    and 2025's `process`, `thread`)."""

    rows: int = 50                 # a negative number: no limit (SQLite's LIMIT -1)
    gap_ms: int = 500
    threshold: int = 50
    chunks: int = 30
    start: int | None = None       # the time window (ns): rows overlapping [start, end) only
    end: int | None = None
    nvtx: str | None = None        # an NVTX range `text[@domain]` (2025: `.../N`, its N-th): its times and thread/process
    process: int | None = None     # only this process id (2025's process=)
    thread: int | None = None      # only this thread id, in the tables with threads (2025's thread=)
    nvtx_tid: int | None = None    # the globalTid of the NVTX range (set by with_nvtx_range)

    def first(self, rows: list[Any]) -> list[Any]:
        """The first `rows` of `rows` (all of them for a negative limit)."""
        return rows if self.rows < 0 else rows[:self.rows]

    def window(self, alias: str, ids: str) -> str:
        """SQL keeping the rows of `alias` that overlap the window, as nsys filters its tables
        (start inside, end inside, or spanning it; with an NVTX range also its thread for a
        push/pop range, its process otherwise; with process/thread those ids), through the
        table's `ids` column (globalTid or globalPid); TRUE without."""
        if self.start is None and self.end is None and self.nvtx_tid is None and self.process is None \
                and self.thread is None:
            return "1"
        lo, hi = self.start or 0, 0x7FFFFFFFFFFFFFFF if self.end is None else self.end
        s, e = f"{alias}.start", f'{alias}."end"'
        sql = f"(({s} >= {lo} AND {s} < {hi}) OR ({e} >= {lo} AND {e} < {hi}) OR ({s} < {lo} AND {e} >= {hi}))"
        if self.process is not None:
            sql += f" AND ({alias}.{ids} >> 24) & 16777215 = {self.process}"
        if self.thread is not None and ids == "globalTid":
            sql += f" AND {alias}.globalTid & 16777215 = {self.thread}"
        if self.nvtx_tid is not None:
            pushpop = (self.nvtx_tid >> 24 & 0xFFFFFF) != (self.nvtx_tid & 0xFFFFFF)
            sql += f" AND {alias}.globalTid = {self.nvtx_tid}" if ids == "globalTid" and pushpop else \
                f" AND {alias}.{ids} >> 24 = {self.nvtx_tid >> 24}"
        return f"({sql})"


NEW_LAYOUT = "2025.3.1"


def _nvtx_name_and_index(nvtx: str, layout: str) -> tuple[str, int]:
    """nsys 2025 reads `name/N` (N >= 0, after the last slash) as the N-th range of that name;
    anything else, and every name in 2022.4, is the whole name and its first range."""
    name, slash, number = nvtx.rpartition("/")
    if layout != OLD and slash and number.strip().lstrip("+").isdigit():
        return name, int(number)
    return nvtx, 0


def with_nvtx_range(conn: sqlite3.Connection, opts: Options, shown_path: str, layout: str) -> Options | Skipped:
    """`opts` with the window of its NVTX range (the earliest push/pop or start/end range whose
    text, with `@domain` outside the default domain, is `opts.nvtx`, or the N-th for `name/N`;
    explicit start/end win), or Skipped with nsys's message when there is none."""
    if opts.nvtx is None:
        return opts
    name, index = _nvtx_name_and_index(opts.nvtx, layout)
    row = None
    if "NVTX_EVENTS" in _tables(conn):
        cols = {r[1] for r in conn.execute("PRAGMA table_info(NVTX_EVENTS)")}
        text = "coalesce(n.text, s.value)" if "textId" in cols else "n.text"
        strings = "LEFT JOIN StringIds AS s ON s.id = n.textId" if "textId" in cols else ""
        row = conn.execute(
            f'SELECT n.start, n."end", n.globalTid FROM NVTX_EVENTS AS n '
            f"LEFT JOIN (SELECT domainId, globalTid, text FROM NVTX_EVENTS WHERE eventType = 75) AS d "
            f"ON n.domainId = d.domainId AND n.globalTid >> 24 = d.globalTid >> 24 {strings} "
            f"WHERE n.eventType IN (59, 60, 70, 71) AND {text} || coalesce('@' || d.text, '') = ? "
            f"ORDER BY 1 LIMIT 1 OFFSET ?", (name, index)).fetchone()
    if row is None:
        where = "" if layout == OLD else f" in {shown_path}"
        return Skipped(f"NVTX range '{opts.nvtx}' could not be found{where}.")
    return opts._replace(start=row[0] if opts.start is None else opts.start,
                         end=row[1] if opts.end is None else opts.end, nvtx_tid=row[2])


Finder = Callable[[sqlite3.Connection, Options, str], list[tuple[Any, ...]]]


class Rule(NamedTuple):
    """One rule of one layout: `needs` lists (tables, message): the rule is skipped with the
    message (nsys's, {DBFILE} = the export) when none of the tables exists; `need_columns` lists
    (table, column, message) checked after them. `find` gets the layout."""

    name: str
    title: str
    layout: str
    needs: list[tuple[tuple[str, ...], str]]
    columns: list[str]
    find: Finder
    need_columns: tuple[tuple[str, str, str], ...] = ()


class Skipped(NamedTuple):
    """A rule nsys skips on this export, with its message."""

    message: str


_UNANALYZED = "{DBFILE} could not be analyzed because it does not contain the required "
NEEDS_RUNTIME = ((RUNTIME,), _UNANALYZED + "CUDA data. Does the application use CUDA runtime APIs?")
NEEDS_MEMCPY = ((MEMCPY,), _UNANALYZED + "CUDA data. Does the application use CUDA memcpy APIs?")
NEEDS_MEMSET = ((MEMSET,), _UNANALYZED + "CUDA data. Does the application use CUDA memset APIs?")
NEEDS_GPU = (GPU_TABLES, _UNANALYZED + "data. Does the application launch GPU operations?")
MEM_KIND_ENUM = "ENUM_CUDA_MEM_KIND"
#: nsys 2025's extra checks of the memcpy/memset rules: before the CUDA tables / after them
NEEDS_STRINGS = (("StringIds",), "{DBFILE} file does not contain StringIds table.")
NEEDS_MEM_KINDS = ((MEM_KIND_ENUM,), "{DBFILE} does not contain ENUM_CUDA_MEM_KIND table.")
_NO_GREEN = ("{DBFILE} could not be analyzed due to missing 'greenContextId'."
             " Please re-export the report file with a recent version of Nsight Systems.")
PROFILER_OVERHEAD = "PROFILER_OVERHEAD"
#: the PROFILER_OVERHEAD names nsys counts as GPU time in gpu_gaps / gpu_time_util
CUDA_OVERHEADS = ("CUDA profiling data flush overhead", "CUDA profiling stop overhead", "CUDA profiling overhead")

MEMCPY_COLUMNS = ["Duration (ns)", "Start (ns)", "Src Kind", "Dst Kind", "Bytes (MB)", "PID", "Device ID",
                  "Context ID", "Stream ID", "API Name"]
MEMSET_COLUMNS = ["Duration (ns)", "Start (ns)", "Memory Kind", "Bytes (MB)", "PID", "Device ID", "Context ID",
                  "Stream ID", "API Name"]


def with_green_context(columns: list[str]) -> list[str]:
    """nsys 2025's columns: `Green Context ID` after `Context ID`."""
    at = columns.index("Context ID") + 1
    return [*columns[:at], "Green Context ID", *columns[at:]]


# ---------------------------------------------------------------------------------------
# the four CUDA API rules: one join of the operation with its runtime call, longest first


def _indexed_by_correlation(conn: sqlite3.Connection, table: str) -> bool:
    """Whether an index of `table` starts with correlationId (nsys's SQLite then scans the runtime
    calls and looks the memcpys up; with no index it scans the memcpys. For memsets, whose
    filter is on memKind, it scans the calls either way)."""
    for (index,) in conn.execute(f"SELECT name FROM pragma_index_list('{table}')"):
        first = conn.execute("SELECT name FROM pragma_index_info(?) WHERE seqno = 0", (index,)).fetchone()
        if first and first[0] == "correlationId":
            return True
    return False


def _calls_first(conn: sqlite3.Connection, layout: str) -> bool:
    """Whether nsys's SQLite joins the memcpys to the runtime calls (scanned first): 2022.4's when
    the memcpys are indexed by correlation id, 2025.3.1's always (an automatic index on them)."""
    return layout != OLD or _indexed_by_correlation(conn, MEMCPY)


def _api_ops(conn: sqlite3.Connection, table: str, columns: str, op_filter: str, api_filter: str,
             opts: Options, calls_first: bool) -> list[tuple[Any, ...]]:
    """Operations of `table` passing `op_filter` joined with every runtime call of the same
    correlation id whose name passes `api_filter`; longest first, ties in the order nsys's
    SQLite plan yields them: operations in table order, each one's calls in table order, or with
    `calls_first` the calls in table order, each one's operations in table order."""
    names = dict(conn.execute(f"SELECT id, value FROM StringIds AS api WHERE {api_filter}"))
    calls = [(corr, name_id) for corr, name_id in      # all calls: nsys does not cut them to the window
             conn.execute(f"SELECT correlationId, nameId FROM {RUNTIME} WHERE nameId IN "
                          f"(SELECT id FROM StringIds AS api WHERE {api_filter}) ORDER BY rowid")]
    ops = conn.execute(f'SELECT op.correlationId, op."end" - op.start, op.start, {columns} FROM {table} AS op '
                       f'WHERE ({op_filter}) AND {opts.window("op", "globalPid")} ORDER BY rowid').fetchall()
    if calls_first:
        ops_of: dict[int, list[tuple[Any, ...]]] = {}
        for op in ops:
            ops_of.setdefault(op[0], []).append(op[1:])
        joined = [(*op, names[name_id]) for corr, name_id in calls for op in ops_of.get(corr, [])]
    else:             # SQLite's automatic index on the calls: (correlationId, nameId, rowid) order
        ids_of: dict[int, list[int]] = {}
        for corr, name_id in calls:
            ids_of.setdefault(corr, []).append(name_id)
        joined = [(*op[1:], names[name_id]) for op in ops for name_id in sorted(ids_of.get(op[0], []))]
    return _longest_first(joined, opts)


def _longest_first(rows: list[tuple[Any, ...]], opts: Options) -> list[tuple[Any, ...]]:
    """ORDER BY duration DESC LIMIT rows as SQLite does it: stable, NULL durations last."""
    return opts.first(sorted(rows, key=lambda r: (r[0] is None, -(r[0] or 0))))


def _with_kind_names(conn: sqlite3.Connection, layout: str, rows: list[tuple[Any, ...]],
                     kind_columns: Iterable[int]) -> list[tuple[Any, ...]]:
    """Memory kind ids replaced by nsys's names: 2022.4's own, 2025's from the export's enum."""
    names = OLD_MEM_KINDS if layout == OLD else dict(conn.execute(f"SELECT id, label FROM {MEM_KIND_ENUM}"))
    out = []
    for row in rows:
        cells = list(row)
        for i in kind_columns:
            cells[i] = names.get(cells[i])
        out.append(tuple(cells))
    return out


def _op_ids(layout: str) -> str:
    """The operation's PID, device, context (2025: and green context), stream columns."""
    green = "" if layout == OLD else "NULLIF(op.greenContextId, 0), "
    return f"(op.globalPid >> 24) & 16777215, op.deviceId, op.contextId, {green}op.streamId"


def memcpy_async(conn: sqlite3.Connection, opts: Options, layout: str) -> list[tuple[Any, ...]]:
    """Async memcpys that touch pageable memory (they run synchronously)."""
    rows = _api_ops(conn, MEMCPY, f"op.srcKind, op.dstKind, op.bytes, {_op_ids(layout)}",
                    "op.srcKind = 0 OR op.dstKind = 0", "api.value LIKE 'cudaMemcpy%Async%'", opts,
                    _calls_first(conn, layout))
    return _with_kind_names(conn, layout, rows, (2, 3))


def memcpy_sync(conn: sqlite3.Connection, opts: Options, layout: str) -> list[tuple[Any, ...]]:
    """Synchronous memcpys, but small host-to-device ones and those within one device."""
    rows = _api_ops(conn, MEMCPY, f"op.srcKind, op.dstKind, op.bytes, {_op_ids(layout)}",
                    "NOT (op.bytes <= 64000 AND op.copyKind = 1) "
                    "AND NOT (op.srcDeviceId IS NOT NULL AND op.srcDeviceId = op.dstDeviceId)",
                    "api.value LIKE 'cudaMemcpy%' AND api.value NOT LIKE '%Async%'", opts,
                    _calls_first(conn, layout))
    return _with_kind_names(conn, layout, rows, (2, 3))


def memset_sync(conn: sqlite3.Connection, opts: Options, layout: str) -> list[tuple[Any, ...]]:
    """Synchronous memsets of pinned or managed memory."""
    rows = _api_ops(conn, MEMSET, f"op.memKind, op.bytes, {_op_ids(layout)}", "op.memKind IN (1, 4)",
                    "api.value LIKE 'cudaMemset%' AND api.value NOT LIKE '%async%'", opts, True)
    return _with_kind_names(conn, layout, rows, (2,))


def api_sync(conn: sqlite3.Connection, opts: Options, layout: str) -> list[tuple[Any, ...]]:
    """Device and stream synchronisation calls, longest first (ties in table order)."""
    names = dict(conn.execute("SELECT id, value FROM StringIds WHERE value LIKE 'cudaDeviceSynchronize%' "
                              "OR value LIKE 'cudaStreamSynchronize%'"))
    found = [(dur, start, gtid >> 24 & 0xFFFFFF, gtid & 0xFFFFFF, names[name_id]) for dur, start, gtid, name_id in
             conn.execute(f'SELECT "end" - start, start, globalTid, nameId FROM {RUNTIME} AS call '
                          f'WHERE nameId IN ({",".join(map(str, names)) or "NULL"}) '
                          f'AND {opts.window("call", "globalTid")} ORDER BY rowid')]
    return _longest_first(found, opts)


# ---------------------------------------------------------------------------------------
# the two GPU time rules: operations per (process, device)


class Op(NamedTuple):
    start: int
    end: int
    global_id: int
    context: int


Device = tuple[int, int]     # (pid, deviceId)


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _latest(ops: list[Op]) -> Op:
    """The first operation with the latest end (the row SQLite's max() leaves its columns from)."""
    best = ops[0]
    for op in ops[1:]:
        if op.end > best.end:
            best = op
    return best


def gpu_ops(conn: sqlite3.Connection, opts: Options) -> dict[Device, list[Op]]:
    """GPU operations (start > 0, overlapping the window) per (pid, device), in table order
    (kernels, memcpys, memsets), preceded by the process's CUDA profiling overheads (overlapping
    the window) that lie strictly inside the device's span (with the device's context)."""
    present = _tables(conn)
    ops: dict[Device, list[Op]] = {}
    for table in (t for t in GPU_TABLES if t in present):
        for start, end, gpid, device, context in conn.execute(
                f'SELECT start, "end", globalPid, deviceId, contextId FROM {table} AS op '
                f'WHERE start > 0 AND {opts.window("op", "globalPid")} ORDER BY rowid'):
            ops.setdefault((gpid >> 24 & 0xFFFFFF, device), []).append(Op(start, end, gpid, context))
    if PROFILER_OVERHEAD not in present or not ops:
        return ops
    marks = ",".join("?" * len(CUDA_OVERHEADS))
    overheads = conn.execute(
        f'SELECT po.start, po."end", (po.globalTid >> 24) & 16777215 FROM {PROFILER_OVERHEAD} AS po '
        f'JOIN StringIds AS s ON s.id = po.nameId WHERE s.value IN ({marks}) AND {opts.window("po", "globalTid")}',
        CUDA_OVERHEADS).fetchall()
    for key, device_ops in ops.items():
        first, last = min(op.start for op in device_ops), max(op.end for op in device_ops)
        owner = _latest(device_ops)
        inside = [Op(start, end, owner.global_id, owner.context) for start, end, pid in overheads
                  if pid == key[0] and start > first and end < last]
        ops[key] = inside + device_ops
    return ops


def gaps(conn: sqlite3.Connection, opts: Options, layout: str) -> list[tuple[Any, ...]]:
    """Idle gaps over `gap_ms` per (pid, device): the k-th end (ends sorted) to the (k+1)-th start
    (starts sorted) where the first is earlier."""
    threshold = opts.gap_ms * 1_000_000
    found = []
    for (pid, device), ops in sorted(gpu_ops(conn, opts).items()):
        starts = sorted(op.start for op in ops)
        ends = sorted(ops, key=lambda op: op.end)          # stable: table order among equal ends
        for op, next_start in zip(ends, starts[1:], strict=False):
            if next_start - op.end > threshold and op.end < next_start:
                found.append((next_start - op.end, op.end, pid, device, op.context))
    found = opts.first(sorted(found, key=lambda g: (-g[0], g[1])))
    return [(i, *g) for i, g in enumerate(found, start=1)]


class Chunk(NamedTuple):
    number: int
    start: float
    end: float | int
    busy: float               # % of the chunk covered by operations (summed over concurrent ones)
    device: Device
    context: int


def _chunks(device: Device, ops: list[Op], opts: Options) -> list[tuple[Chunk, bool]]:
    """The device's chunks with their busy %, and whether any operation touches them. Each
    operation is tried against the chunks its integer position says it may touch (one more on
    each side), with the chunk bounds SQLite computes (floats)."""
    first, last = min(op.start for op in ops), max(op.end for op in ops)
    size = float(math.ceil(float(last - first) / opts.chunks))        # SQLite's ceil(): a float
    bounds: dict[int, tuple[float, float | int]] = {}
    for index in range(opts.chunks):
        start = index * size + first
        end = min(start + size, last)
        if start < end:
            bounds[index] = (start, end)
    busy = dict.fromkeys(bounds, 0.0)
    touched: set[int] = set()
    step = max(int(size), 1)
    for op in ops:
        for index in range(max((op.start - first) // step - 1, 0), min((op.end - first) // step + 2, opts.chunks)):
            if index in bounds and op.start < bounds[index][1] and op.end > bounds[index][0]:
                start, end = bounds[index]
                busy[index] += float(min(op.end, end) - max(op.start, start))
                touched.add(index)
    context = _latest(ops).context
    return [(Chunk(index, start, end, busy[index] / (end - start) * 100, device, context), index in touched)
            for index, (start, end) in bounds.items()]


def time_util(conn: sqlite3.Connection, opts: Options, layout: str) -> list[tuple[Any, ...]]:
    """Chunks under `threshold` % busy, consecutive ones merged (see the module docstring;
    2022.4 merges the untouched chunks of one index over devices, 2025 keeps them per device)."""
    per_device = sorted(gpu_ops(conn, opts).items(), key=lambda kv: (kv[0][1], kv[0][0]))   # (device, pid)
    low: list[Chunk] = []
    untouched: dict[int, Chunk] = {}                 # chunk index -> the first device's untouched chunk
    for device, ops in per_device:
        for chunk, touched in _chunks(device, ops, opts):
            if touched or layout != OLD:
                if chunk.busy < opts.threshold:
                    low.append(chunk)
            else:
                untouched.setdefault(chunk.number, chunk)
    if opts.threshold > 0:
        low += untouched.values()
    ranges: dict[tuple[int, int, int], list[Chunk]] = {}
    by_device: dict[Device, list[Chunk]] = {}
    for chunk in low:
        by_device.setdefault(chunk.device, []).append(chunk)
    for device in sorted(by_device):
        for rank, chunk in enumerate(sorted(by_device[device], key=lambda c: c.number), start=1):
            ranges.setdefault((chunk.number - rank, device[1], device[0]), []).append(chunk)
    merged = []
    for key in opts.first(sorted(ranges)):
        chunks = ranges[key]
        weighted = total = 0.0
        for c in chunks:
            weighted += (c.end - c.start) * c.busy
            total += c.end - c.start
        start, end = chunks[0].start, max(c.end for c in chunks)
        merged.append((round1(weighted / total, layout), end - start, start, key[2], key[1], chunks[0].context))
    merged = opts.first(sorted(merged, key=lambda m: (m[0], m[1])))
    return [(i, *m) for i, m in enumerate(merged, start=1)]


#: (2025 name, 2022.4 name, title, tables needed, columns in 2022.4's layout, finder)
_RULE_TABLE: list[tuple[str, str, str, list[tuple[tuple[str, ...], str]], list[str], Finder]] = [
    ("cuda_memcpy_async", "cuda-async-memcpy", "CUDA Async Memcpy with Pageable Memory",
     [NEEDS_RUNTIME, NEEDS_MEMCPY], MEMCPY_COLUMNS, memcpy_async),
    ("cuda_memcpy_sync", "cuda-sync-memcpy", "CUDA Synchronous Memcpy",
     [NEEDS_RUNTIME, NEEDS_MEMCPY], MEMCPY_COLUMNS, memcpy_sync),
    ("cuda_memset_sync", "cuda-sync-memset", "CUDA Synchronous Memset",
     [NEEDS_RUNTIME, NEEDS_MEMSET], MEMSET_COLUMNS, memset_sync),
    ("cuda_api_sync", "cuda-sync-api", "CUDA Synchronization APIs",
     [NEEDS_RUNTIME], ["Duration (ns)", "Start (ns)", "PID", "TID", "API Name"], api_sync),
    ("gpu_gaps", "gpu-starv", "GPU Gaps",
     [NEEDS_GPU], ["Row#", "Duration (ns)", "Start (ns)", "PID", "Device ID", "Context ID"], gaps),
    ("gpu_time_util", "gpu-low-util", "GPU Time Utilization",
     [NEEDS_GPU], ["Row#", "In-Use (%)", "Duration (ns)", "Start (ns)", "PID", "Device ID", "Context ID"],
     time_util),
]


def _rule_2025(name: str, title: str, needs: list[tuple[tuple[str, ...], str]], columns: list[str],
               find: Finder) -> Rule:
    """The nsys 2025.3.1 form of a rule: the memcpy/memset rules also need StringIds, the memory
    kind enum and the greenContextId column, and show it."""
    table = next((need[0][0] for need in needs if need in (NEEDS_MEMCPY, NEEDS_MEMSET)), None)
    if table is None:
        return Rule(name, title, NEW_LAYOUT, needs, columns, find)
    return Rule(name, title, NEW_LAYOUT, [NEEDS_STRINGS, *needs, NEEDS_MEM_KINDS], with_green_context(columns),
                find, ((table, "greenContextId", _NO_GREEN),))


#: nsys 2025.3.1's rules by their names
RULES = {name: _rule_2025(name, title, needs, columns, find) for name, _, title, needs, columns, find in _RULE_TABLE}
#: the rules that take process= and thread= (nsys 2025.3.1 refuses them for the others)
TAKE_PROCESS_AND_THREAD = ("cuda_api_sync",)
#: nsys 2022.4's rules by their names
RULES_2022 = {old: Rule(old, title, OLD, needs, columns, find) for _, old, title, needs, columns, find in _RULE_TABLE}


def open_export(path: Path) -> sqlite3.Connection:
    """The export opened read-only; NsysInputError when it is not a readable SQLite file."""
    check_sqlite_file(path)
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise NsysInputError(f"{path}: unreadable SQLite file ({exc})") from None
    return conn


def run_rule(conn: sqlite3.Connection, rule: Rule, opts: Options, shown_path: str) -> list[tuple[Any, ...]] | Skipped:
    """The rule's rows, or Skipped with nsys's message when the export lacks its tables."""
    present = _tables(conn)
    for tables, message in rule.needs:
        if not any(t in present for t in tables):
            return Skipped(message.format(DBFILE=shown_path))
    for table, column, message in rule.need_columns:
        if not conn.execute("SELECT 1 FROM pragma_table_info(?) WHERE name = ?", (table, column)).fetchone():
            return Skipped(message.format(DBFILE=shown_path))
    try:
        resolved = with_nvtx_range(conn, opts, shown_path, rule.layout)
        return resolved if isinstance(resolved, Skipped) else rule.find(conn, resolved, rule.layout)
    except sqlite3.Error as exc:
        raise NsysInputError(f"{shown_path}: SQLite error in {rule.name} ({exc})") from None
    except (TypeError, ValueError) as exc:      # text, or a fraction, where nsys writes integer times
        raise NsysInputError(f"{shown_path}: {rule.name}: values of an unexpected type ({exc}): the export is "
                             "damaged") from None


def _cell(value: Any) -> str:
    """A cell as nsys writes it: times in whole ns (gpu_time_util's are SQLite floats), NULL empty."""
    if isinstance(value, float):
        return str(int(value))
    return "" if value is None else str(value)


#: nsys's default units: sizes in MB (10^6 bytes) with three decimals, utilisation with one
CELL_FORMATS: dict[str, Callable[[Any], str]] = {
    "Bytes (MB)": lambda v: "" if v is None else f"{v / 1e6:.3f}",
    "In-Use (%)": lambda v: f"{v:.1f}",
}


def write_csv(rule: Rule, rows: list[tuple[Any, ...]], out: TextIO) -> None:
    """The rule's rows as `nsys analyze --format csv` writes them (nothing when there are none)."""
    if not rows:
        return
    from hpcprof.core.safe_text import csv_cell

    terminal = out.isatty()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(rule.columns)
    formats = [CELL_FORMATS.get(c, _cell) for c in rule.columns]
    writer.writerows([csv_cell(fmt(v), terminal) for fmt, v in zip(formats, row, strict=True)] for row in rows)


