"""The collectives of an nsys export with their sizes, for the bus bandwidth table (hpcprof.analysis.busbw).

NCCL pushes one NVTX range per call (`ncclAllReduce`, `ncclAllGather`, ... in its `NCCL` domain)
with an extended payload whose layout the export keeps in NVTX_PAYLOAD_SCHEMAS and
NVTX_PAYLOAD_SCHEMA_ENTRIES: `NCCL communicator ID` and `Message size [bytes]` at their offsets
(`ncclCommInitRank*`'s: `No. of ranks`). The payload bytes are in NVTX_EVENTS.binaryData only in
an export made with `nsys export --include-blobs=true` (newer nsys than 2022.4, which has no such
option; hpcprof's own export passes it where the site's nsys has it); without them every NCCL kernel's size is unknown and the
table says so. Each NCCL kernel is matched to the range it was launched from: the CUDA call that
launched it (same process and correlation id) starts inside the range, on the range's thread. A
kernel launched outside its call's range (at `ncclGroupEnd` of a group) has no size.

NCCL's size is one rank's part for AllGather (sendcount) and ReduceScatter (recvcount): × the
communicator's ranks gives nccl-tests' size (the whole buffer), as for the other collectives.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from hpcprof.analysis import busbw
from hpcprof.analysis.nccl import collective_kind
from hpcprof.run.results import arrow_table, to_arrow
from hpcprof.tools.nsys.analysis.activity import launch_calls, per_distinct
from hpcprof.tools.nsys.analysis.distributed import Activity
from hpcprof.tools.nsys.stats.db import Export

NVTX = "NVTX_EVENTS"
SIZE_ENTRY, COMM_ENTRY, RANKS_ENTRY = "Message size [bytes]", "NCCL communicator ID", "No. of ranks"
#: why a rank's NCCL kernels have no size
NO_BLOBS = ("{n} NCCL kernels without a size: the export has no NVTX payloads (binaryData empty: export the "
            "report with `nsys export --include-blobs=true`, where the site's nsys has that option)")
NO_RANGES = ("{n} NCCL kernels without a size: the export has no NCCL NVTX ranges (trace nvtx, and NCCL with "
             "NVTX: NCCL_NVTX_DISABLE unset)")
UNMATCHED = "{n} NCCL kernels without a size: launched outside an NCCL NVTX range with a payload"
NO_RANKS = ("{n} NCCL kernels without a size: AllGather's and ReduceScatter's NVTX size is one rank's part and "
            "the communicator's ranks are unknown (its ncclCommInitRank range is not in the capture)")
#: the communicator of a range whose payload is not in the export
NO_COMM = np.uint64(2**64 - 1)
#: the columns of one export's NCCL ranges (nccl_ranges) and their types
RANGE_COLUMNS = {"gtid": np.int64, "start": np.int64, "end": np.int64, "kind": object, "group": object,
                 "n": np.float64, "bytes": np.float64, "no_ranks": bool}
#: the NCCL ranges of an export that has none (never changed: their arrays are empty)
NO_RANGE_ROWS = {name: np.zeros(0, dtype=dtype) for name, dtype in RANGE_COLUMNS.items()}
#: one export's NCCL ranges (RANGE_COLUMNS) and why their sizes are unknown ("")
Ranges = tuple[dict[str, np.ndarray], str]


def without_payloads(path: Path) -> bool:
    """Whether the export at `path` has NCCL NVTX ranges but none of their payloads (an export made
    without `--include-blobs`); False where it cannot be read (its analysis says why)."""
    try:
        with Export(path) as export:
            if not export.has(NVTX):
                return False
            nccl = f"domainId IN (SELECT domainId FROM {NVTX} WHERE eventType = 75 AND text = 'NCCL')"
            ranges = export.sql_rows(f"SELECT 1 FROM {NVTX} WHERE {nccl} AND eventType != 75 LIMIT 1")
            return bool(ranges) and ("binaryData" not in export.columns(NVTX) or not export.sql_rows(
                f"SELECT 1 FROM {NVTX} WHERE {nccl} AND binaryData IS NOT NULL LIMIT 1"))
    except Exception:           # an unreadable export: its analysis names the fault
        return False


def payload_bytes(value: object) -> bytes | None:
    """NVTX_EVENTS.binaryData as bytes (a BLOB as stored; TEXT taken as its hex digits); None: none."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    try:
        return bytes.fromhex(str(value))
    except ValueError:
        return None


def payloads(blob: bytes | None) -> list[tuple[int, bytes]]:
    """The (schema id, payload) of each payload in an NVTX_EVENTS.binaryData blob, as nsys writes it:
    a little-endian u64 count, then per payload its schema id, size and offset in the blob (u64
    each), then the payloads; none where the blob is not laid out so."""
    if blob is None or len(blob) < 8:
        return []
    count = struct.unpack_from("<Q", blob, 0)[0]
    if not 0 < count <= (len(blob) - 8) // 24:
        return []
    out = []
    for i in range(count):
        schema, size, offset = struct.unpack_from("<QQQ", blob, 8 + 24 * i)
        if offset + size > len(blob):
            return []
        out.append((int(schema), blob[offset:offset + size]))
    return out


def _field(payload: bytes, offset: int | None, size: int) -> int | None:
    """The little-endian unsigned integer of `size` bytes at `offset` of `payload`, None where it is not there."""
    if offset is None or offset + size > len(payload):
        return None
    return int(struct.unpack_from("<Q" if size == 8 else "<I", payload, offset)[0])


def _schemas(export: Export, domain: int) -> dict[int, dict[str, int]]:
    """The offset of each entry of each payload schema of `domain` (by schema id)."""
    if not export.has("NVTX_PAYLOAD_SCHEMA_ENTRIES"):
        return {}
    out: dict[int, dict[str, int]] = {}
    for schema, name, offset in export.sql_rows(
            "SELECT schemaId, name, COALESCE(offset, 0) FROM NVTX_PAYLOAD_SCHEMA_ENTRIES "
            f"WHERE domainId = {int(domain)}"):
        out.setdefault(int(schema), {})[str(name)] = int(offset)
    return out


def _entries(blob: bytes | None, schemas: dict[int, dict[str, int]]) -> dict[str, int]:
    """The communicator, size and ranks a range's payloads carry (RANKS_ENTRY 4 bytes, the others 8)."""
    out: dict[str, int] = {}
    for schema, payload in payloads(blob):
        for entry, offset in schemas.get(schema, {}).items():
            width = 4 if entry == RANKS_ENTRY else 8
            if entry in (COMM_ENTRY, SIZE_ENTRY, RANKS_ENTRY) and (value := _field(payload, offset, width)) is not None:
                out[entry] = value
    return out


def nccl_ranges(export: Export) -> Ranges:
    """The NCCL NVTX ranges of one export, in thread and start order, with their collective, their
    communicator as `group` (None where the payload is not in the export), its ranks `n`
    (ncclCommInitRank*'s payload; NaN: unknown), their `bytes` (nccl-tests' size: NVTX's × n for
    AllGather and ReduceScatter; NaN where unknown) and `no_ranks` (unknown for want of n); and why
    sizes are unknown (""). One read of the ranges; each name looked at once; a row's payload parsed
    only where it has one (its domain's schema read once)."""
    if not export.has(NVTX):
        return NO_RANGE_ROWS, NO_RANGES
    blob = "e.binaryData" if "binaryData" in export.columns(NVTX) else "NULL"
    text = "COALESCE(e.text, s.value)" if export.has("StringIds") else "e.text"
    join = "LEFT JOIN StringIds s ON s.id = e.textId" if export.has("StringIds") else ""
    rows = export.sql_rows(
        f"SELECT e.globalTid, e.start, e.end, {text}, {blob}, e.domainId FROM {NVTX} e {join} WHERE e.domainId IN "
        f"(SELECT domainId FROM {NVTX} WHERE eventType = 75 AND text = 'NCCL') AND e.end IS NOT NULL "
        "ORDER BY e.globalTid, e.start")
    kinds = {name: busbw.collective_type(name) for name in {row[3] for row in rows}}
    schemas: dict[int, dict[int, dict[str, int]]] = {}
    ranks: dict[object, int] = {}
    entries: dict[int, dict[str, int]] = {}         # of the rows with a payload
    blobs = 0
    for i in [i for i, row in enumerate(rows) if row[4] is not None]:
        _, _, _, name, raw, domain = rows[i]
        data = payload_bytes(raw)
        blobs += data is not None
        if domain not in schemas:
            schemas[domain] = _schemas(export, domain)
        found = entries[i] = _entries(data, schemas[domain])
        if str(name).startswith("ncclCommInit") and COMM_ENTRY in found and found.get(RANKS_ENTRY):
            ranks[found[COMM_ENTRY]] = found[RANKS_ENTRY]
    kept = [i for i, row in enumerate(rows) if kinds[row[3]] not in (None, "Barrier")]    # ncclCommInit*: None
    if not kept:
        return NO_RANGE_ROWS, NO_RANGES
    given = [entries.get(i, {}) for i in kept]
    comm = [g.get(COMM_ENTRY, NO_COMM) for g in given]
    kind = [kinds[rows[i][3]] for i in kept]
    n = np.array([ranks.get(c, math.nan) for c in comm], dtype=np.float64)
    size = np.array([g.get(SIZE_ENTRY, math.nan) for g in given], dtype=np.float64)
    part = np.array([k in ("AllGather", "ReduceScatter") for k in kind])
    with_comm = np.array([c != NO_COMM for c in comm])
    gtid, start, end = np.array([rows[i][:3] for i in kept], dtype=np.int64).T
    return ({"gtid": gtid, "start": start, "end": end, "kind": np.array(kind, dtype=object),
             "group": np.array([f"comm {c:#x}" if has else None for c, has in zip(comm, with_comm.tolist(), strict=True)],
                               dtype=object),
             "n": n, "bytes": np.where(part, size * n, size), "no_ranks": part & with_comm & np.isnan(n)},
            "" if blobs else NO_BLOBS)


def _containing(ranges: dict[str, np.ndarray], file: np.ndarray, gtid: np.ndarray, start: np.ndarray) -> np.ndarray:
    """For each launch (file, thread, start), the range of the same file and thread that starts last
    at or before it (`ranges` sorted by file, thread and start), where that range has not ended
    before it; -1 where none. One stable sort of the ranges and the launches together: a launch
    comes after the ranges of its key, so the ranges before it end with the one sought."""
    if not len(ranges["start"]):
        return np.full(len(start), -1)
    count = len(ranges["start"])
    order = np.lexsort((np.repeat([0, 1], [count, len(start)]), np.concatenate((ranges["start"], start)),
                        np.concatenate((ranges["gtid"], gtid)), np.concatenate((ranges["file"], file))))
    launch = order >= count
    last = np.empty(len(start), dtype=np.int64)
    last[order[launch] - count] = (np.cumsum(~launch) - 1)[launch]     # the ranges before it, less one
    j = np.maximum(last, 0)
    inside = (last >= 0) & (ranges["file"][j] == file) & (ranges["gtid"][j] == gtid) & (start <= ranges["end"][j])
    return np.where(inside, last, -1)


def instances(act: Activity) -> tuple[dict[str, np.ndarray], dict[int, str]]:
    """One entry per NCCL kernel of `act` as numpy columns (busbw.INSTANCE_COLUMNS: sizes from the NVTX
    range it was launched from, all kernels matched at once), and per rank why some have no size
    (the reason of its last kernel without one)."""
    ops = np.flatnonzero(act.column("comm") & act.column("kernel"))
    got = [nccl_ranges(export) for export in act.exports.values()]
    ranges = {name: np.concatenate([NO_RANGE_ROWS[name], *(cols[name] for cols, _ in got)]) for name in RANGE_COLUMNS}
    ranges["file"] = np.repeat(np.arange(len(got)), [len(cols["start"]) for cols, _ in got])
    position = {str(path): i for i, path in enumerate(act.exports)}
    file = per_distinct(act.column("file")[ops], lambda f: position.get(str(f), -1), np.int64)
    call = launch_calls(act)[ops]
    match = np.full(len(ops), -1)
    launched = np.flatnonzero((call >= 0) & (file >= 0))
    match[launched] = _containing(ranges, file[launched], act.call("gtid")[call[launched]],
                                  act.call("start")[call[launched]])
    hit, j = np.flatnonzero(match >= 0), match[match >= 0]
    kind = per_distinct(act.column("name")[ops], lambda n: busbw.collective_type(collective_kind(n)) or "other")
    group, n, nbytes, no_ranks = (np.full(len(ops), None, dtype=object), np.full(len(ops), np.nan),
                                  np.full(len(ops), np.nan), np.zeros(len(ops), dtype=bool))
    for values, name in ((kind, "kind"), (group, "group"), (n, "n"), (nbytes, "bytes"), (no_ranks, "no_ranks")):
        values[hit] = ranges[name][j]
    rank = act.column("rank")[ops].astype(np.int64)
    unsized = np.isnan(nbytes)
    reason = np.array([said for _, said in got] + [NO_RANGES], dtype=object)[file[unsized]]     # -1: not read
    why = np.where(reason != "", reason, np.where(no_ranks[unsized], NO_RANKS, UNMATCHED))
    last = dict(zip(rank[unsized].tolist(), why.tolist(), strict=True))    # each rank's last, in first order
    ranks, counts = np.unique(rank[unsized], return_counts=True)
    count = dict(zip(ranks.tolist(), counts.tolist(), strict=True))
    return ({"rank": rank, "group": group, "group_size": n, "collective": kind,
             "dtype": np.full(len(ops), None, dtype=object), "bytes": nbytes,
             "start_ns": act.column("start")[ops].astype(np.int64), "end_ns": act.column("end")[ops].astype(np.int64)},
            {r: text.format(n=count[r]) for r, text in last.items()})


def busbw_table(act: Activity, bounds: dict[str, np.ndarray]) -> pa.Table:
    """The per-rank rows of nsys_busbw, as the Arrow table collect writes (to_arrow of its frame, made
    without the frame where it has rows)."""
    columns = _rank_columns(act, bounds)
    return arrow_table(columns) if len(columns["rank"]) else to_arrow(busbw.frame_of(columns), pandas_metadata=False)


def rank_busbw(act: Activity, bounds: dict[str, np.ndarray]) -> pd.DataFrame:
    """The per-rank rows of nsys_busbw as a frame (`hpcprof nsys nccl --busbw`)."""
    return busbw.frame_of(_rank_columns(act, bounds))


def _rank_columns(act: Activity, bounds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each rank's NCCL kernels inside its measured window (`bounds`: window.Window.bounds' rank,
    window, start_ns, end_ns) per communicator, collective and size bucket (busbw.rank_columns)."""
    inst, notes = instances(act)
    ranks = bounds["rank"].tolist()
    row_of = {r: i for i, r in enumerate(ranks)}
    row = per_distinct(inst["rank"], lambda r: row_of.get(r, -1), np.int64)      # -1: no window
    known = row >= 0
    lo, hi = np.full(len(row), np.inf), np.full(len(row), -np.inf)
    lo[known], hi[known] = np.asarray(bounds["start_ns"])[row[known]], np.asarray(bounds["end_ns"])[row[known]]
    mid = (inst["start_ns"].astype(np.float64) + inst["end_ns"].astype(np.float64)) / 2
    inside = (mid >= lo) & (mid <= hi)
    windows = {r: str(label) for r, label in zip(ranks, bounds["window"].tolist(), strict=True)}
    return busbw.rank_columns({name: values[inside] for name, values in inst.items()}, windows, notes)
