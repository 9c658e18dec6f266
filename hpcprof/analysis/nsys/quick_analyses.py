"""`hpcprof nsys nccl|overlap|gaps --format csv` of one small rank export with the standard library:
the quick lane of those commands (`hpcprof.__main__` hands it the command line first, as it hands
`nsys stats`'s to stats_command), where importing numpy and pandas costs twenty times the
analysis. It computes what distributed.py computes, step by step in the same order (the activity
of activity.load_activity; merge_intervals, covered and intersection of arrays.py as loops), and
writes the CSV pandas writes (floats as repr, NULL empty); tests/test_nsys_quick_analyses.py holds
the two to the same bytes on every fixture export. Any export it is not sure of (no GPU activity,
a read that fails, a value that is not an integer) goes back to click's command unchanged, before
anything is written.
"""

from __future__ import annotations

import os
import sys
from bisect import bisect_left

from hpcprof.analysis.nccl import collective_of, nccl_name
from hpcprof.analysis.nsys.quick_argv import split_argv
from hpcprof.analysis.nsys_stats.schema import KERNEL, MEMCPY, MEMSET, NsysInputError
from hpcprof.analysis.nsys_stats.stats import SMALL_EXPORT_BYTES

TYPE_CHECKING = False          # typing's constant without importing typing (the quick lane's start-up)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TextIO

    from hpcprof.analysis.nsys_stats.small import SmallExport

    #: one GPU operation: start, end, device, stream, pid, is a kernel, name, short name, rank
    Op = tuple[int, int, int, int, int, bool, str | None, str | None, int]

ANALYSES = ("nccl", "overlap", "gaps")
NCCL_COLUMNS = ["scope", "rank", "collective", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "slowest_rank",
                "slowest_total_ns"]
OVERLAP_COLUMNS = ["rank", "device", "compute_ns", "comm_ns", "overlap_ns", "overlap_pct", "idle_ns", "span_ns"]
GAP_COLUMNS = ["rank", "pid", "device", "start_ns", "end_ns", "duration_ns", "before", "after"]
OP_COLUMNS = ("start", "end", "deviceId", "streamId", "globalPid")


class NotSure(Exception):
    """The export is one the quick lane leaves to click's command (which reports what is wrong)."""


def _ints(rows: list[tuple]) -> list[tuple]:
    if any(type(v) is not int for row in rows for v in row):
        raise NotSure
    return rows


def load_ops(export: SmallExport) -> list[Op]:
    """The kernels, memcpys and memsets of the export (activity._file_ops: NULL and missing optional
    kernel columns as -1, short name else the demangled name), each with its rank (the file name's,
    else one per process in pid order), by rank then start (stable)."""
    have = export.columns(KERNEL)
    ops: list[list] = []
    if export.has(KERNEL):
        extra = ", ".join(f'coalesce("{c}", -1)' if c in have else "-1"
                          for c in ("deviceId", "streamId", "globalPid", "shortName"))
        rows = _ints(export.query(f'SELECT coalesce("start", -1), coalesce("end", -1), coalesce("demangledName", -1), '
                                  f"{extra} FROM {KERNEL}"))
        names = export.strings({r[2] for r in rows} | {r[6] if r[6] >= 0 else r[2] for r in rows})
        ops += [[s, e, dev, stream, gpid, True, names.get(name), names.get(short if short >= 0 else name)]
                for s, e, name, dev, stream, gpid, short in rows]
    for table, label in ((MEMCPY, "[CUDA memcpy]"), (MEMSET, "[CUDA memset]")):
        if export.has(table):
            rows = _ints(export.query("SELECT " + ", ".join(f'coalesce("{c}", -1)' for c in OP_COLUMNS)
                                      + f', coalesce("correlationId", -1) FROM "{table}"'))
            ops += [[s, e, dev, stream, gpid, False, label, label] for s, e, dev, stream, gpid, _ in rows]
    if not ops:
        raise NotSure                     # no GPU activity: the command says so
    from hpcprof.ranks import rank_from_filename

    rank = rank_from_filename(str(export.path))
    pid_rank = {} if rank is not None else {p: r for r, p in enumerate(sorted({(op[4] >> 24) & 0xFFFFFF for op in ops}))}
    out = [(s, e, dev, stream, (gpid >> 24) & 0xFFFFFF, kernel, name, short,
            rank if rank is not None else pid_rank[(gpid >> 24) & 0xFFFFFF])
           for s, e, dev, stream, gpid, kernel, name, short in ops]
    return sorted(out, key=lambda op: (op[8], op[0]))


def _groups(ops: list[Op], key: Callable[[Op], tuple]) -> list[list[Op]]:
    """The ops by `key`, keys sorted, each group in the ops' order (group_starts)."""
    found: dict[tuple, list[Op]] = {}
    for op in ops:
        found.setdefault(key(op), []).append(op)
    return [found[k] for k in sorted(found)]


def _comm(op: Op) -> bool:
    return op[5] and (nccl_name(op[7]) or nccl_name(op[6]))


def _round1(x: float) -> float:
    """x rounded to tenths as numpy rounds (pandas' Series.round): rint(10x) / 10."""
    return float(round(x * 10.0)) / 10.0


def nccl(ops: list[Op]) -> list[tuple]:
    """distributed.nccl_summary: per rank and collective, then per collective across ranks."""
    per: list[tuple[int, str, int, int, int, int]] = []     # rank, collective, count, total, min, max
    for group in _groups([op for op in ops if _comm(op)], lambda op: (op[8], collective_of(op[7], op[6]))):
        durations = [op[1] - op[0] for op in group]
        per.append((group[0][8], collective_of(group[0][7], group[0][6]), len(durations), sum(durations),
                    min(durations), max(durations)))
    out: list[tuple] = [("rank", rank, kind, count, total, _round1(float(total) / float(count)), low, high, None, None)
                        for rank, kind, count, total, low, high in per]       # numpy's int64 division: as float64
    for kind in sorted({row[1] for row in per}):
        rows = [row for row in per if row[1] == kind]
        slow = max(rows, key=lambda row: row[3])           # the first of the largest totals, as idxmax
        count, total = sum(row[2] for row in rows), sum(row[3] for row in rows)
        out.append(("all", None, kind, count, total, _round1(total / count), min(row[4] for row in rows),
                    max(row[5] for row in rows), slow[0], slow[3]))
    return out


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """arrays.merge_intervals: by start (stable), a new segment where a start passes every end
    before it, each segment ending at the largest end in it."""
    out: list[list[int]] = []
    reach = None
    for s, e in sorted(intervals, key=lambda i: i[0]):
        if reach is None or s > reach:
            out.append([s, e])
        else:
            out[-1][1] = max(out[-1][1], e)
        reach = e if reach is None else max(reach, e)
    return [(s, e) for s, e in out]


def _length(segments: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in segments)


def _intersection(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """arrays.intersection: a sweep over both unions' ends, in their order (stable)."""
    if not a or not b:
        return 0
    events = ([(s, 1, 0) for s, _ in a] + [(e, -1, 0) for _, e in a] + [(s, 0, 1) for s, _ in b]
              + [(e, 0, -1) for _, e in b])
    events.sort(key=lambda ev: ev[0])
    total = in_a = in_b = 0
    for (t, da, db), nxt in zip(events, events[1:]):   # noqa: B905  (one fewer: the gaps between events)
        in_a += da
        in_b += db
        if in_a > 0 and in_b > 0:
            total += nxt[0] - t
    return total


def overlap(ops: list[Op]) -> list[tuple]:
    """distributed.overlap_columns: per rank and device."""
    out = []
    for group in _groups(ops, lambda op: (op[8], op[2])):
        comm = _merged([(op[0], op[1]) for op in group if _comm(op)])
        compute = _merged([(op[0], op[1]) for op in group if op[5] and not _comm(op)])
        comm_ns, compute_ns = _length(comm), _length(compute)
        both = _intersection(compute, comm)
        busy = _length(_merged([(op[0], op[1]) for op in group]))
        span = max(op[1] for op in group) - min(op[0] for op in group)
        out.append((group[0][8], group[0][2], compute_ns, comm_ns, both,
                    round(100.0 * both / comm_ns, 2) if comm_ns else 0.0, span - busy, span))
    return out


def _overhead(export: SmallExport) -> dict[int, tuple[list[int], list[int]]]:
    """distributed._overhead of one export: per pid, the PROFILER_OVERHEAD starts (sorted) and the
    running maximum of their ends."""
    if not export.has("PROFILER_OVERHEAD"):
        return {}
    rows = _ints(export.query('SELECT coalesce("start", -1), coalesce("end", -1), coalesce("globalTid", -1) '
                              "FROM PROFILER_OVERHEAD"))
    out: dict[int, tuple[list[int], list[int]]] = {}
    for pid in sorted({(r[2] >> 24) & 0xFFFFFF for r in rows}):
        mine = sorted((r for r in rows if (r[2] >> 24) & 0xFFFFFF == pid), key=lambda r: r[0])
        ends, reach = [], None
        for r in mine:
            reach = r[1] if reach is None else max(reach, r[1])
            ends.append(reach)
        out[pid] = ([r[0] for r in mine], ends)
    return out


def gaps(ops: list[Op], export: SmallExport, threshold_ns: int) -> list[tuple]:
    """distributed.gap_columns: idle gaps longer than `threshold_ns` per process and device, those
    holding profiler overhead of the process left out."""
    overhead: dict[int, tuple[list[int], list[int]]] | None = None
    out = []
    for group in _groups(ops, lambda op: (op[8], op[4], op[2])):
        group = sorted(group, key=lambda op: op[0])
        reach: list[int] = []
        last: list[int] = []
        for i, op in enumerate(group):
            reach.append(op[1] if not reach else max(reach[-1], op[1]))
            last.append(max(last[-1] if last else 0, i if op[1] == reach[-1] else 0))
        for i in range(len(group) - 1):
            start, end = reach[i], group[i + 1][0]
            if end - start <= threshold_ns:
                continue
            if overhead is None:
                overhead = _overhead(export)
            starts, ends = overhead.get(group[0][4], ([], []))
            before = bisect_left(starts, end)
            if before > 0 and ends[before - 1] > start:
                continue
            out.append((group[0][8], group[0][4], group[0][2], start, end, end - start, group[last[i]][7],
                        group[i + 1][7]))
    return out


def csv_text(columns: list[str], rows: list[tuple]) -> str:
    """The rows as pandas' to_csv writes them (no index): floats as repr, None empty, csv's quoting."""
    from hpcprof.analysis.nsys_stats.table import quoted

    lines = [",".join(quoted(columns))]
    lines += [",".join(quoted(["" if v is None else v if isinstance(v, str) else repr(v) for v in row]))
              for row in rows]
    return "\n".join(lines) + "\n"


def quick_args(command: str, argv: list[str]) -> tuple[str, str | None, float | None] | None:
    """(file, output, threshold in ms) of `hpcprof nsys COMMAND ARGV` when the quick lane runs it:
    one small .sqlite file, `--format csv`, `--window capture` (the whole capture: the measured window's
    rules, NVTX ranges and the steps found in the kernels, are click's), at most `-o FILE` (and gaps'
    `--threshold-ms`), each once; None for any other command line (click's then)."""
    options = {"--format": "format", "-o": "output", "--output": "output", "--window": "window"}
    if command == "gaps":
        options["--threshold-ms"] = "threshold"
    found = split_argv(argv, options)
    if found is None:
        return None
    files, given = found
    threshold = None
    if "threshold" in given:
        try:
            threshold = float(given["threshold"])
        except ValueError:
            return None
        if not 0 <= threshold <= 1e9:                 # and not NaN (FiniteRange's bounds)
            return None
    if len(files) != 1 or given.get("format") != "csv" or files[0].endswith(".nsys-rep"):
        return None
    if given.get("window") != "capture":   # the measured window (--window auto, the default, or nvtx:NAME): click's
        return None

    if not os.path.isfile(files[0]) or os.stat(files[0]).st_size > SMALL_EXPORT_BYTES:
        return None
    return files[0], given.get("output"), threshold


def quick_run(command: str, path: str, output: str | None, threshold_ms: float | None) -> int | None:
    """Run `hpcprof nsys COMMAND --format csv PATH [-o OUTPUT]` as click's command would; None, with
    nothing written, where the export is one to leave to it."""
    from hpcprof.analysis.nsys_stats.small import SmallExport

    threshold_ms = 500.0 if threshold_ms is None else threshold_ms
    try:
        export = SmallExport(path)
        try:
            if "StringIds" not in export.tables:
                return None
            ops = load_ops(export)
            if command == "nccl":
                columns, rows = NCCL_COLUMNS, nccl(ops)
            elif command == "overlap":
                columns, rows = OVERLAP_COLUMNS, overlap(ops)
            else:
                columns, rows = GAP_COLUMNS, gaps(ops, export, int(threshold_ms * 1_000_000))
        finally:
            export.close()
    except (NotSure, NsysInputError):
        return None
    if command == "gaps" and not rows:
        sys.stderr.write(f"gaps: no GPU idle gap over {threshold_ms:g} ms in 1 file(s) in the window capture (a lower "
                         "--threshold-ms shows shorter ones)\n")
        sys.stderr.flush()
    text = csv_text(columns, rows)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    from pathlib import Path

    from hpcprof.atomic import write_text_stream

    def put(fh: TextIO) -> None:
        fh.write(text)

    written = write_text_stream(Path(output), put, inputs=[Path(path)])
    sys.stderr.write(f"wrote {written}\n")
    return 0
