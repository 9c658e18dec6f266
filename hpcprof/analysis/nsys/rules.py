"""`nsys analyze`'s expert-system rules on an nsys SQLite export, with nsys's findings, rows and CSV.

Six rules, each declared once in RULES (its nsys 2025 name, its nsys 2022.4 name, the tables it
needs with the message nsys prints when one is missing, its columns and how it finds its rows):

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
"""

from __future__ import annotations

import csv
import math
import sqlite3
import sys
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import click

from hpcprof.analysis.nsys.numerics import sqlite_round1
from hpcprof.analysis.nsys.schema import (
    GPU_TABLES,
    MEMCPY,
    MEMSET,
    OLD_MEM_KINDS,
    RUNTIME,
    NsysInputError,
    check_sqlite_file,
)
from hpcprof.cli_options import files_argument
from hpcprof.errors import UserError


class Options(NamedTuple):
    """The rules' arguments (nsys's `rows`, `gap`, `threshold`, `chunks`)."""

    rows: int = 50
    gap_ms: int = 500
    threshold: int = 50
    chunks: int = 30
    start: int | None = None       # the time window (ns): rows overlapping [start, end) only
    end: int | None = None
    nvtx: str | None = None        # an NVTX range `text[@domain]`: its times, its thread/process
    thread: int | None = None      # the globalTid of that range (set by with_nvtx_range)

    def window(self, alias: str, ids: str) -> str:
        """SQL keeping the rows of `alias` that overlap the window, as nsys filters its tables
        (start inside, end inside, or spanning it; with an NVTX range also its thread for a
        push/pop range, its process otherwise, through the table's `ids` column); TRUE without."""
        if self.start is None and self.end is None and self.thread is None:
            return "1"
        lo, hi = self.start or 0, 0x7FFFFFFFFFFFFFFF if self.end is None else self.end
        s, e = f"{alias}.start", f'{alias}."end"'
        sql = f"(({s} >= {lo} AND {s} < {hi}) OR ({e} >= {lo} AND {e} < {hi}) OR ({s} < {lo} AND {e} >= {hi}))"
        if self.thread is not None:
            pushpop = (self.thread >> 24 & 0xFFFFFF) != (self.thread & 0xFFFFFF)
            same = f"{alias}.globalTid = {self.thread}" if ids == "globalTid" and pushpop else \
                f"{alias}.{ids} >> 24 = {self.thread >> 24}"
            sql = f"({sql} AND {same})"
        return sql


def with_nvtx_range(conn: sqlite3.Connection, opts: Options) -> Options | Skipped:
    """`opts` with the window of its NVTX range (the earliest push/pop or start/end range whose
    text, with `@domain` outside the default domain, is `opts.nvtx`; explicit start/end win), or
    Skipped with nsys's message when there is none."""
    if opts.nvtx is None:
        return opts
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
            f"ORDER BY 1 LIMIT 1", (opts.nvtx,)).fetchone()
    if row is None:
        return Skipped(f"NVTX range '{opts.nvtx}' could not be found.")
    return opts._replace(start=row[0] if opts.start is None else opts.start,
                         end=row[1] if opts.end is None else opts.end, thread=row[2])


class Rule(NamedTuple):
    """One rule: `needs` lists (tables, message): the rule is skipped with the message (nsys's,
    {DBFILE} = the export) when none of the tables exists."""

    name: str
    old_name: str
    title: str
    needs: list[tuple[tuple[str, ...], str]]
    columns: list[str]
    find: Callable[[sqlite3.Connection, Options], list[tuple[Any, ...]]]


class Skipped(NamedTuple):
    """A rule nsys skips on this export, with its message."""

    message: str


_UNANALYZED = "{DBFILE} could not be analyzed because it does not contain the required "
NEEDS_RUNTIME = ((RUNTIME,), _UNANALYZED + "CUDA data. Does the application use CUDA runtime APIs?")
NEEDS_MEMCPY = ((MEMCPY,), _UNANALYZED + "CUDA data. Does the application use CUDA memcpy APIs?")
NEEDS_MEMSET = ((MEMSET,), _UNANALYZED + "CUDA data. Does the application use CUDA memset APIs?")
NEEDS_GPU = (GPU_TABLES, _UNANALYZED + "data. Does the application launch GPU operations?")
PROFILER_OVERHEAD = "PROFILER_OVERHEAD"
#: the PROFILER_OVERHEAD names nsys counts as GPU time in gpu_gaps / gpu_time_util
CUDA_OVERHEADS = ("CUDA profiling data flush overhead", "CUDA profiling stop overhead", "CUDA profiling overhead")

MEMCPY_COLUMNS = ["Duration (ns)", "Start (ns)", "Src Kind", "Dst Kind", "Bytes (MB)", "PID", "Device ID",
                  "Context ID", "Stream ID", "API Name"]


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


def _api_ops(conn: sqlite3.Connection, table: str, columns: str, op_filter: str, api_filter: str,
             rows: int, calls_first: bool, window: str) -> list[tuple[Any, ...]]:
    """Operations of `table` passing `op_filter` joined with every runtime call of the same
    correlation id whose name passes `api_filter`; longest first, ties in the order nsys's
    SQLite plan yields them: operations in table order, each one's calls in table order, or with
    `calls_first` the calls in table order, each one's operations in table order."""
    names = dict(conn.execute(f"SELECT id, value FROM StringIds AS api WHERE {api_filter}"))
    calls = [(corr, name_id) for corr, name_id in      # all calls: nsys does not cut them to the window
             conn.execute(f"SELECT correlationId, nameId FROM {RUNTIME} WHERE nameId IN "
                          f"(SELECT id FROM StringIds AS api WHERE {api_filter}) ORDER BY rowid")]
    ops = conn.execute(f'SELECT op.correlationId, op."end" - op.start, op.start, {columns} FROM {table} AS op '
                       f"WHERE ({op_filter}) AND {window} ORDER BY rowid").fetchall()
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
    return _longest_first(joined, rows)


def _longest_first(rows: list[tuple[Any, ...]], limit: int) -> list[tuple[Any, ...]]:
    """ORDER BY duration DESC LIMIT n as SQLite does it: stable, NULL durations last."""
    return sorted(rows, key=lambda r: (r[0] is None, -(r[0] or 0)))[:limit]


def _with_kind_names(rows: list[tuple[Any, ...]], kind_columns: Iterable[int]) -> list[tuple[Any, ...]]:
    """Memory kind ids replaced by nsys's names."""
    out = []
    for row in rows:
        cells = list(row)
        for i in kind_columns:
            cells[i] = OLD_MEM_KINDS.get(cells[i])
        out.append(tuple(cells))
    return out


_OP_IDS = "(op.globalPid >> 24) & 16777215, op.deviceId, op.contextId, op.streamId"


def memcpy_async(conn: sqlite3.Connection, opts: Options) -> list[tuple[Any, ...]]:
    """Async memcpys that touch pageable memory (they run synchronously)."""
    rows = _api_ops(conn, MEMCPY, f"op.srcKind, op.dstKind, op.bytes, {_OP_IDS}",
                    "op.srcKind = 0 OR op.dstKind = 0", "api.value LIKE 'cudaMemcpy%Async%'", opts.rows,
                    _indexed_by_correlation(conn, MEMCPY), opts.window("op", "globalPid"))
    return _with_kind_names(rows, (2, 3))


def memcpy_sync(conn: sqlite3.Connection, opts: Options) -> list[tuple[Any, ...]]:
    """Synchronous memcpys, but small host-to-device ones and those within one device."""
    rows = _api_ops(conn, MEMCPY, f"op.srcKind, op.dstKind, op.bytes, {_OP_IDS}",
                    "NOT (op.bytes <= 64000 AND op.copyKind = 1) "
                    "AND NOT (op.srcDeviceId IS NOT NULL AND op.srcDeviceId = op.dstDeviceId)",
                    "api.value LIKE 'cudaMemcpy%' AND api.value NOT LIKE '%Async%'", opts.rows,
                    _indexed_by_correlation(conn, MEMCPY), opts.window("op", "globalPid"))
    return _with_kind_names(rows, (2, 3))


def memset_sync(conn: sqlite3.Connection, opts: Options) -> list[tuple[Any, ...]]:
    """Synchronous memsets of pinned or managed memory."""
    rows = _api_ops(conn, MEMSET, f"op.memKind, op.bytes, {_OP_IDS}", "op.memKind IN (1, 4)",
                    "api.value LIKE 'cudaMemset%' AND api.value NOT LIKE '%async%'", opts.rows, True,
                    opts.window("op", "globalPid"))
    return _with_kind_names(rows, (2,))


def api_sync(conn: sqlite3.Connection, opts: Options) -> list[tuple[Any, ...]]:
    """Device and stream synchronisation calls, longest first (ties in table order)."""
    names = dict(conn.execute("SELECT id, value FROM StringIds WHERE value LIKE 'cudaDeviceSynchronize%' "
                              "OR value LIKE 'cudaStreamSynchronize%'"))
    found = [(dur, start, gtid >> 24 & 0xFFFFFF, gtid & 0xFFFFFF, names[name_id]) for dur, start, gtid, name_id in
             conn.execute(f'SELECT "end" - start, start, globalTid, nameId FROM {RUNTIME} AS call '
                          f'WHERE nameId IN ({",".join(map(str, names)) or "NULL"}) '
                          f'AND {opts.window("call", "globalTid")} ORDER BY rowid')]
    return _longest_first(found, opts.rows)


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


def gaps(conn: sqlite3.Connection, opts: Options) -> list[tuple[Any, ...]]:
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
    found = sorted(found, key=lambda g: (-g[0], g[1]))[:opts.rows]
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


def time_util(conn: sqlite3.Connection, opts: Options) -> list[tuple[Any, ...]]:
    """Chunks under `threshold` % busy, consecutive ones merged (see the module docstring)."""
    per_device = sorted(gpu_ops(conn, opts).items(), key=lambda kv: (kv[0][1], kv[0][0]))   # (device, pid)
    low: list[Chunk] = []
    untouched: dict[int, Chunk] = {}                 # chunk index -> the first device's untouched chunk
    for device, ops in per_device:
        for chunk, touched in _chunks(device, ops, opts):
            if touched:
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
    for key in sorted(ranges)[:opts.rows]:
        chunks = ranges[key]
        weighted = total = 0.0
        for c in chunks:
            weighted += (c.end - c.start) * c.busy
            total += c.end - c.start
        start, end = chunks[0].start, max(c.end for c in chunks)
        merged.append((sqlite_round1(weighted / total), end - start, start, key[2], key[1], chunks[0].context))
    merged = sorted(merged, key=lambda m: (m[0], m[1]))[:opts.rows]
    return [(i, *m) for i, m in enumerate(merged, start=1)]


RULES = {rule.name: rule for rule in [
    Rule("cuda_memcpy_async", "cuda-async-memcpy", "CUDA Async Memcpy with Pageable Memory",
         [NEEDS_RUNTIME, NEEDS_MEMCPY], MEMCPY_COLUMNS, memcpy_async),
    Rule("cuda_memcpy_sync", "cuda-sync-memcpy", "CUDA Synchronous Memcpy",
         [NEEDS_RUNTIME, NEEDS_MEMCPY], MEMCPY_COLUMNS, memcpy_sync),
    Rule("cuda_memset_sync", "cuda-sync-memset", "CUDA Synchronous Memset",
         [NEEDS_RUNTIME, NEEDS_MEMSET],
         ["Duration (ns)", "Start (ns)", "Memory Kind", "Bytes (MB)", "PID", "Device ID", "Context ID",
          "Stream ID", "API Name"], memset_sync),
    Rule("cuda_api_sync", "cuda-sync-api", "CUDA Synchronization APIs",
         [NEEDS_RUNTIME], ["Duration (ns)", "Start (ns)", "PID", "TID", "API Name"], api_sync),
    Rule("gpu_gaps", "gpu-starv", "GPU Gaps",
         [NEEDS_GPU], ["Row#", "Duration (ns)", "Start (ns)", "PID", "Device ID", "Context ID"], gaps),
    Rule("gpu_time_util", "gpu-low-util", "GPU Time Utilization",
         [NEEDS_GPU], ["Row#", "In-Use (%)", "Duration (ns)", "Start (ns)", "PID", "Device ID", "Context ID"],
         time_util),
]}
OLD_NAMES = {rule.old_name: rule.name for rule in RULES.values()}


def rule_named(name: str) -> Rule:
    """The rule of a current or nsys 2022.4 name."""
    rule = RULES.get(OLD_NAMES.get(name, name))
    if rule is None:
        raise click.BadParameter(f"unknown rule {name!r}; known: {', '.join(RULES)} "
                                 f"(or nsys 2022.4's {', '.join(OLD_NAMES)})", param_hint="'--rule'")
    return rule


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
    try:
        resolved = with_nvtx_range(conn, opts)
        return resolved if isinstance(resolved, Skipped) else rule.find(conn, resolved)
    except sqlite3.Error as exc:
        raise NsysInputError(f"{shown_path}: SQLite error in {rule.name} ({exc})") from None


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
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(rule.columns)
    formats = [CELL_FORMATS.get(c, _cell) for c in rule.columns]
    writer.writerows([fmt(v) for fmt, v in zip(formats, row, strict=True)] for row in rows)


@click.command("analyze")
@files_argument
@click.option("--rule", "-r", "rule_names", default=",".join(RULES), show_default=True,
              help="Rule name(s), comma separated (nsys 2022.4 names such as gpu-starv work too).")
@click.option("--rows", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many rows per rule.")
@click.option("--gap", "gap_ms", type=click.IntRange(min=0), default=500, show_default=True,
              help="gpu_gaps: report idle gaps longer than this many ms.")
@click.option("--threshold", type=click.IntRange(0, 100), default=50, show_default=True,
              help="gpu_time_util: report chunks less busy than this %.")
@click.option("--chunks", type=click.IntRange(1, 1000), default=30, show_default=True,
              help="gpu_time_util: chunks per process and device.")
@click.option("--start", "window_start", type=click.IntRange(min=0), default=None,
              help="Only operations/calls overlapping [START, END) ns (nsys's start=).")
@click.option("--end", "window_end", type=click.IntRange(min=0), default=None, help="End of that window (ns).")
@click.option("--nvtx", default=None, metavar="RANGE[@DOMAIN]",
              help="Only what overlaps the first NVTX range of this name (and its thread or process).")
@click.option("--output", "-o", "prefix", default=None,
              help="Write PREFIX_<rule>.csv (PREFIX_<file>_<rule>.csv for several files) instead of stdout.")
def analyze_cmd(files: tuple[Path, ...], rule_names: str, rows: int, gap_ms: int, threshold: int, chunks: int,
                window_start: int | None, window_end: int | None, nvtx: str | None, prefix: str | None) -> None:
    """`nsys analyze` rules (CSV): the same findings, rows and bytes as nsys's `--format csv`. A rule
    whose tables the export lacks is skipped with nsys's message (exit 0)."""
    rules = [rule_named(n.strip()) for n in rule_names.split(",") if n.strip()]
    if window_start is not None and window_end is not None and window_start > window_end:
        raise UserError(f"--start {window_start} is after --end {window_end}: give a start before the end")
    opts = Options(rows, gap_ms, threshold, chunks, window_start, window_end, nvtx)
    blocks, failures = len(files) * len(rules), 0
    for path in files:
        try:
            conn = open_export(path)
        except NsysInputError as exc:
            click.echo(f"hpcprof nsys: {exc}", err=True)
            failures += 1
            continue
        with conn:
            try:
                results = [(rule, run_rule(conn, rule, opts, str(path))) for rule in rules]
            except NsysInputError as exc:
                click.echo(f"hpcprof nsys: {exc}", err=True)
                failures += 1
                continue
        conn.close()
        for rule, found in results:
            if isinstance(found, Skipped):
                click.echo(f"SKIPPED: {found.message}", err=True)
                continue
            if not found:
                click.echo(f"{path}: {rule.name} ({rule.title}): no findings", err=True)
            if prefix is not None:
                _write_file(rule, found, Path(f"{prefix}_{path.stem}" if len(files) > 1 else prefix), path)
                continue
            if blocks > 1 and found:
                click.echo(f"# {path} {rule.name}")
            write_csv(rule, found, sys.stdout)
            if blocks > 1 and found:
                click.echo("")
    if failures:
        raise UserError(f"{failures} of {len(files)} input file(s) could not be analysed (see messages above)")


def _write_file(rule: Rule, rows: list[tuple[Any, ...]], stem: Path, source: Path) -> None:
    from hpcprof.atomic import write_text_stream

    target = write_text_stream(Path(f"{stem}_{rule.name}.csv"), lambda fh: write_csv(rule, rows, fh), inputs=[source])
    click.echo(f"wrote {target}", err=True)
