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

from hpcprof.analysis import busbw
from hpcprof.analysis.nccl import collective_kind
from hpcprof.analysis.nsys.activity import call_op_codes
from hpcprof.analysis.nsys.distributed import Activity
from hpcprof.analysis.nsys_stats.db import Export

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
#: the per-rank parts of one export: NCCL ranges (thread, start, end, name, bytes, communicator) and ranks per communicator
Ranges = tuple[dict[str, np.ndarray], dict[int, int], str]


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
    """The NCCL NVTX ranges of one export with their sizes (bytes NaN where the payload is not in the
    export), the ranks of each communicator (ncclCommInitRank*'s payload), and why sizes are unknown ("")."""
    empty = {"gtid": np.zeros(0, np.int64), "start": np.zeros(0, np.int64), "end": np.zeros(0, np.int64),
             "name": np.zeros(0, object), "bytes": np.zeros(0, np.float64), "comm": np.zeros(0, np.uint64)}
    if not export.has(NVTX):
        return empty, {}, NO_RANGES
    domains = [int(r[0]) for r in export.sql_rows(
        f"SELECT DISTINCT domainId FROM {NVTX} WHERE eventType = 75 AND text = 'NCCL' AND domainId IS NOT NULL")]
    if not domains:
        return empty, {}, NO_RANGES
    blob = "e.binaryData" if "binaryData" in export.columns(NVTX) else "NULL"
    text = "COALESCE(e.text, s.value)" if export.has("StringIds") else "e.text"
    join = "LEFT JOIN StringIds s ON s.id = e.textId" if export.has("StringIds") else ""
    rows = export.sql_rows(
        f"SELECT e.globalTid, e.start, e.end, {text}, {blob}, e.domainId FROM {NVTX} e {join} "
        f"WHERE e.domainId IN ({', '.join(map(str, domains))}) AND e.end IS NOT NULL ORDER BY e.globalTid, e.start")
    schemas = {d: _schemas(export, d) for d in domains}
    ranks: dict[int, int] = {}
    kept: list[tuple[int, int, int, str, float, int]] = []
    blobs = 0
    for gtid, start, end, name, raw, domain in rows:
        data = payload_bytes(raw)
        blobs += data is not None
        got = _entries(data, schemas[domain])
        comm = got.get(COMM_ENTRY)
        if str(name).startswith("ncclCommInit"):
            if comm is not None and got.get(RANKS_ENTRY):
                ranks[comm] = got[RANKS_ENTRY]
            continue
        if busbw.collective_type(name) in (None, "Barrier"):
            continue
        size = got.get(SIZE_ENTRY)
        kept.append((int(gtid), int(start), int(end), str(name), math.nan if size is None else float(size),
                     int(NO_COMM) if comm is None else comm))
    if not kept:
        return empty, ranks, NO_RANGES
    cols = list(zip(*kept, strict=True))
    out = {"gtid": np.array(cols[0], np.int64), "start": np.array(cols[1], np.int64),
           "end": np.array(cols[2], np.int64), "name": np.array(cols[3], object),
           "bytes": np.array(cols[4], np.float64), "comm": np.array(cols[5], np.uint64)}
    return out, ranks, "" if blobs else NO_BLOBS


def _thread_slices(gtid: np.ndarray) -> dict[int, tuple[int, int]]:
    """The [lo, hi) rows of each thread in ranges sorted by thread (nccl_ranges' order)."""
    values, first = np.unique(gtid, return_index=True)
    bounds = np.append(first, len(gtid)).tolist()
    return {int(v): (bounds[i], bounds[i + 1]) for i, v in enumerate(values.tolist())}


def instances(act: Activity) -> tuple[pd.DataFrame, dict[int, str]]:
    """One row per NCCL kernel of `act` (busbw.INSTANCE_COLUMNS: sizes from the NVTX range it was
    launched from), and per rank why some have no size."""
    comm = act.column("comm") & act.column("kernel")
    call_code, op_code = call_op_codes(act)
    codes, at = np.unique(call_code, return_index=True)       # each call code's first call
    first = dict(zip(codes.tolist(), at.tolist(), strict=True))
    gtid, call_start = act.call("gtid"), act.call("start")
    files, rank = act.column("file"), act.column("rank")
    start, end, names = act.column("start"), act.column("end"), act.column("name")
    ranges = {str(path): nccl_ranges(export) for path, export in act.exports.items()}
    threads = {file: _thread_slices(got[0]["gtid"]) for file, got in ranges.items()}
    rows: list[tuple[object, ...]] = []
    why: dict[int, str] = {}
    unmatched: dict[int, int] = {}
    for i in np.flatnonzero(comm).tolist():
        r, file = int(rank[i]), str(files[i])
        got, comm_ranks, reason = ranges.get(file, (None, {}, NO_RANGES))
        call = first.get(int(op_code[i]))
        kind = busbw.collective_type(collective_kind(names[i])) or "other"
        size, group, n = math.nan, None, None
        lo, hi = threads.get(file, {}).get(int(gtid[call]), (0, 0)) if call is not None else (0, 0)
        if got is not None and hi > lo:
            j = lo + int(np.searchsorted(got["start"][lo:hi], call_start[call], side="right")) - 1
            if j >= lo and call_start[call] <= got["end"][j]:
                kind = busbw.collective_type(got["name"][j]) or kind
                n = comm_ranks.get(int(got["comm"][j]))
                group = f"comm {int(got['comm'][j]):#x}" if got["comm"][j] != NO_COMM else None
                size = got["bytes"][j] * (n or math.nan) if kind in ("AllGather", "ReduceScatter") else got["bytes"][j]
        if size != size:
            unmatched[r] = unmatched.get(r, 0) + 1
            why[r] = reason or (NO_RANKS if group and n is None and kind in ("AllGather", "ReduceScatter")
                                else UNMATCHED)
        rows.append((r, group, n, kind, None, size, int(start[i]), int(end[i])))
    notes = {r: why[r].format(n=unmatched[r]) for r in why}
    return pd.DataFrame(rows, columns=busbw.INSTANCE_COLUMNS), notes


def busbw_table(act: Activity, bounds: dict[str, np.ndarray]) -> pd.DataFrame:
    """The per-rank rows of nsys_busbw: each rank's NCCL kernels inside its measured window
    (`bounds`: window.Window.bounds) per communicator, collective and size bucket."""
    inst, notes = instances(act)
    ranks = bounds["rank"].tolist()
    at = pd.Series(np.arange(len(ranks)), index=ranks).reindex(inst["rank"]).to_numpy()   # NaN: no window
    known = ~np.isnan(at)
    row = at[known].astype(np.int64)
    lo, hi = np.full(len(inst), np.inf), np.full(len(inst), -np.inf)
    lo[known], hi[known] = np.asarray(bounds["start_ns"])[row], np.asarray(bounds["end_ns"])[row]
    mid = (inst["start_ns"].to_numpy(np.float64) + inst["end_ns"].to_numpy(np.float64)) / 2
    windows = {r: str(label) for r, label in zip(ranks, bounds["window"].tolist(), strict=True)}
    return busbw.rank_table(inst[(mid >= lo) & (mid <= hi)], windows, notes)
