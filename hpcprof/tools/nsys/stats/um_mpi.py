"""The columnar engine's unified memory, OpenMP and MPI reports: um_cpu_page_faults_sum, um_sum,
um_total_sum, openmp_sum (nsys 2022.4: umcpupagefaults, unifiedmemory, unifiedmemorytotals,
openmpevtsum), mpi_event_sum and mpi_event_trace (2022.4 has no MPI report). Each is a function
`(export, layout) -> Table` with the columns, NULLs and row order of nsys's SQL:

- GROUP BY gives groups in key order (NULL first); ORDER BY sorts stably, so rows with equal
  sort keys keep that group order (numerics.by_total);
- a compound query (UNION ALL) keeps its arms in order; its ORDER BY sorts each arm and merges
  them, the first arm first on ties: a stable sort of the concatenation;
- um_sum's throughput is SQL integer arithmetic, bytes · (1000000000 / Σ duration) with the
  division truncated and NULL where Σ duration is 0; the rows are cut to the first 10
  (`um_sum:rows=N` is not offered); multi-argument min()/max() are NULL when one argument is;
- openmp_sum unions the OPENMP_EVENT_KIND_* tables in the order of a Python set of names
  (nsysstats' `search_tables`), which changes from run to run: ties of totals across tables have
  no fixed order in nsys; here the tables go in name order;
- addresses print as nsys prints `addr_uint` (0x..., upper case hex), sizes in MB (10^6 B).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.nsys.stats.loaders import memcpy_columns, nullable_ints
from hpcprof.tools.nsys.stats.numerics import DUR, Groups, by_total, exact_sum, group_codes, round1_array
from hpcprof.tools.nsys.stats.schema import MEMCPY, OLD, UM_CPU, UM_GPU, MissingData
from hpcprof.tools.nsys.stats.table import SUMMARY_COLS, SUMMARY_FMT, Table, make_table, null_text

OPENMP_PREFIX = "OPENMP_EVENT_KIND_"
#: the MPI event tables in the order nsys unions them, with the source name it gives each
MPI_SOURCES = (("MPI_P2P_EVENTS", "p2p"), ("MPI_START_WAIT_EVENTS", "start-wait"),
               ("MPI_OTHER_EVENTS", "other"), ("MPI_COLLECTIVES_EVENTS", "collectives"))
MPI_TABLES = tuple(t for t, _ in MPI_SOURCES)
UM_HTOD, UM_DTOH = 11, 12           # copyKind of unified memory migrations
INT64_MAX = (1 << 63) - 1


def _nullable(values: np.ndarray, null: np.ndarray) -> np.ndarray:
    """`values` as objects with None where `null`."""
    out = values.astype(object)
    out[null] = None
    return out


def _objects(values: list[Any]) -> np.ndarray:
    """A list as an object array (None stays None)."""
    return np.array(values + [None], dtype=object)[:-1]


def _addresses(values: list[Any]) -> np.ndarray:
    """Addresses as nsys prints `addr_uint`: 0x... in upper case hex, NULL as None."""
    return _objects([None if v is None else f"0x{int(v):X}" for v in values])


def _mb(values: list[Any]) -> np.ndarray:
    """Byte counts in MB (10^6 B), NULL as None."""
    return _objects([None if v is None else v / 1e6 for v in values])


# ---------------------------------------------------------------------------------------
# unified memory


def um_cpu_page_faults_sum(export: Export, layout: str) -> Table:
    """CPU page faults per faulting instruction (2022.4) or per (instruction, source file, source
    line) (2025), by count descending, ties in group order."""
    new = layout != OLD
    cols = ["CpuInstruction"] + (["sourceFile", "sourceLine"] if new else [])
    d = nullable_ints(export, UM_CPU, cols) if new else _cpu_faults(export)
    keys = [np.where(d[c + "?"], -1, d[c]) for c in cols]      # NULL first, as SQLite groups
    codes, uniq = group_codes(*keys)
    count = np.bincount(codes, minlength=len(uniq[0])).astype(np.int64)
    out: dict[str, Any] = {"CPU Page Faults": count,
                           "CPU Instruction Address": export.strings(uniq[0].astype(np.int64))}
    formats = ["i", "s"]
    if new:
        out["Source File"] = export.strings(uniq[1].astype(np.int64))
        out["Source Line"] = _nullable(uniq[2].astype(np.int64), uniq[2] == -1)
        formats += ["s", "i"]
    return make_table(out, formats, by_total(count), null=null_text(layout))


Sums = dict[int | None, tuple[int, int]]
Migration = tuple[int | None, int | None, int | None, int | float | None]   # address, HtoD, DtoH, throughput


def _cpu_faults(export: Export) -> dict[str, np.ndarray]:
    """The CPU page faults' address and instruction (loaders.nullable_ints), one scan for nsys
    2022.4's default set: its CPU page fault report and both unified-memory reports (a 400 k-fault
    table read once, not twice: 0.21 s of the reads' 1.4 s on the memcpy/UM-heavy shape)."""
    return export.memo("um cpu faults", lambda: nullable_ints(export, UM_CPU, ["address", "CpuInstruction"]))


def _um_columns(export: Export) -> dict[str | int, dict[str, np.ndarray]]:
    """What both unified-memory reports read, once per export (each table scanned once): the CPU
    page faults' addresses (_cpu_faults), the GPU page faults' addresses and counts, and the
    migrations of each copyKind (11 HtoD, 12 DtoH, _migrations), each column with its NULL mask
    (loaders.nullable_ints: NULL as 0)."""
    return export.memo("unified memory", lambda: {
        UM_CPU: _cpu_faults(export), UM_GPU: nullable_ints(export, UM_GPU, ["address", "numberOfPageFaults"]),
        **_migrations(export)})


def _migrations(export: Export) -> dict[int, dict[str, np.ndarray]]:
    """The migrations' address, bytes and duration ("dur") per copyKind (HtoD, DtoH), in table
    order, from the memory summaries' read of every memcpy (loaders.memcpy_columns; a NULL
    duration counts 0, as SQL's sum() skips it), or read alone where that read has no addresses."""
    m = memcpy_columns(export)
    if "virtualAddress" not in m:
        m = nullable_ints(export, MEMCPY, {"copyKind": '"copyKind"', "virtualAddress": '"virtualAddress"',
                                           "bytes": '"bytes"', "dur": DUR}, f"copyKind IN ({UM_HTOD}, {UM_DTOH})")
    kinds = {kind: m["copyKind"] == kind for kind in (UM_HTOD, UM_DTOH)}     # (a NULL copyKind reads 0)
    return {kind: {c: m[c][rows] for c in ("virtualAddress", "virtualAddress?", "bytes", "dur")}
            for kind, rows in kinds.items()}


def _by_address(d: dict[str, np.ndarray], value: str | None, address: str = "address", durations: bool = False) -> Sums:
    """Per address (NULL as None) of rows `d` (nullable_ints's), in SQLite's group order: (count
    or Σ value, Σ duration where `durations`, else 0)."""
    key = np.where(d[address + "?"], -1, d[address])          # addresses are never negative
    codes, (uniq,) = group_codes(key)
    amount = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(amount, codes, 1 if value is None else d[value])
    dur = np.zeros(len(uniq), dtype=np.int64)
    if durations:
        np.add.at(dur, codes, d["dur"])
    return {None if a == -1 else a: (s, t) for a, s, t in zip(uniq.tolist(), amount.tolist(), dur.tolist(),
                                                               strict=True)}


def _throughput(d2h: tuple[int, int] | None, h2d: tuple[int, int] | None) -> int | float | None:
    """(ifnull(D2H,0) + ifnull(H2D,0)) * (1000000000 / (ifnull(d2h dur,0) + ifnull(h2d dur,0))) as
    SQLite computes it: integer division truncated toward 0, NULL on division by 0, REAL past int64."""
    size = (d2h[0] if d2h else 0) + (h2d[0] if h2d else 0)
    dur = (d2h[1] if d2h else 0) + (h2d[1] if h2d else 0)
    if dur == 0:
        return None
    per_s = abs(1_000_000_000) // abs(dur) * (1 if dur > 0 else -1)
    product = size * per_s
    return float(size) * float(per_s) if abs(product) > INT64_MAX else product


def um_sum(export: Export, layout: str) -> Table:
    """Per virtual address: HtoD and DtoH migration sizes, CPU and GPU page faults, migration
    throughput; by throughput descending (NULL last), the first 10 rows."""
    um = _um_columns(export)
    cpu = _by_address(um[UM_CPU], None)
    gpu = _by_address(um[UM_GPU], "numberOfPageFaults")
    d2h = _by_address(um[UM_DTOH], "bytes", "virtualAddress", durations=True)
    h2d = _by_address(um[UM_HTOD], "bytes", "virtualAddress", durations=True)
    # PageFaults: the CPU addresses (with GPU faults where the address has them), then GPU-only ones
    faults: list[tuple[int | None, int | None, int | None]] = [
        (a, n, gpu[a][0] if a in gpu else None) for a, (n, _) in cpu.items()]
    faults += [(a, None, n) for a, (n, _) in gpu.items() if a not in cpu]
    # Migrations: the DtoH addresses (a NULL address joins nothing), then the HtoD-only ones
    moves: list[Migration] = [(a, h2d[a][0] if a is not None and a in h2d else None, pair[0],
                               _throughput(pair, h2d.get(a) if a is not None else None)) for a, pair in d2h.items()]
    moves += [(a, pair[0], None, _throughput(None, pair)) for a, pair in h2d.items() if a is None or a not in d2h]
    move_of = {m[0]: m for m in moves if m[0] is not None}
    fault_addresses = {a for a, _, _ in faults}
    rows: list[tuple[Any, ...]] = []
    for a, cpu_n, gpu_n in faults:                            # PageFaults LEFT JOIN Migrations
        _, h, d, t = move_of.get(a, (a, None, None, None)) if a is not None else (a, None, None, None)
        rows.append((a, h, d, cpu_n, gpu_n, t))
    rows += [(a, h, d, None, None, t) for a, h, d, t in moves  # Migrations without page faults
             if a is None or a not in fault_addresses]
    rows = sorted(rows, key=lambda r: (r[5] is None, -(r[5] or 0)))[:10]
    c = [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(6)]
    unit = "MBps" if layout == OLD else "MB/s"
    cols = {"Virtual Address": _addresses(c[0]), "HtoD Migration size (MB)": _mb(c[1]),
            "DtoH Migration size (MB)": _mb(c[2]), "CPU Page Faults": _objects(c[3]),
            " GPU Page Faults": _objects(c[4]), f"Migration Throughput ({unit})": _mb(c[5])}
    return make_table(cols, ["s", "f3", "f3", "i", "i", "f3"], null=null_text(layout))


def um_total_sum(export: Export, layout: str) -> Table:
    """One row: total HtoD and DtoH migration sizes, total CPU and GPU page faults, and the lowest
    and highest address of the four (NULL when one of them has none)."""
    um = _um_columns(export)
    cpu, g = um[UM_CPU]["address"], um[UM_GPU]
    lows: list[int | None] = []
    highs: list[int | None] = []
    totals: dict[int, int | None] = {}
    for kind in (UM_HTOD, UM_DTOH):
        m = um[kind]
        known = m["virtualAddress"][~m["virtualAddress?"]]
        totals[kind] = exact_sum(m["bytes"]) if len(m["bytes"]) else None
        lows.append(int(known.min()) if len(known) else None)
        highs.append(int(known.max()) if len(known) else None)
    for addresses in (cpu, g["address"]):
        lows.append(int(addresses.min()) if len(addresses) else None)
        highs.append(int(addresses.max()) if len(addresses) else None)
    known_lows = [v for v in lows if v is not None]       # SQL min(a, b, ...) is NULL if one is
    known_highs = [v for v in highs if v is not None]
    low = min(known_lows) if len(known_lows) == len(lows) else None
    high = max(known_highs) if len(known_highs) == len(highs) else None
    gpu_total = exact_sum(g["numberOfPageFaults"]) if len(g["address"]) else None
    cols = {"Total HtoD Migration Size (MB)": _mb([totals[UM_HTOD]]),
            "Total DtoH Migration Size (MB)": _mb([totals[UM_DTOH]]),
            "Total CPU Page Faults": np.array([len(cpu)], dtype=np.int64),
            "Total GPU PageFaults": np.array([gpu_total], dtype=object),
            "Minimum Virtual Address": _addresses([low]), "Maximum Virtual Address": _addresses([high])}
    return make_table(cols, ["f3", "f3", "i", "i", "s", "s"], null=null_text(layout))


# ---------------------------------------------------------------------------------------
# OpenMP and MPI summaries


def _summary(export: Export, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], count_label: str,
             labels: dict[str, Any], layout: str) -> tuple[dict[str, Any], Groups, np.ndarray]:
    """The eight summary columns over groups (part, name id) of the parts' (name ids, durations,
    part index): groups numbered part by part, ids ascending within a part (NULL first); Time %
    over all groups. Returns (columns, groups, name id of each group)."""
    ids = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, dtype=np.int64)
    durations = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, dtype=np.int64)
    part = np.concatenate([p[2] for p in parts]) if parts else np.empty(0, dtype=np.int64)
    codes, (part_u, ids_u) = group_codes(part, ids) if len(ids) else (ids, [ids, ids])
    g = Groups(codes, durations, len(ids_u))
    grand = float(g.total.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = round1_array(g.total.astype(np.float64) * 100.0 / grand, layout)
    cols = g.summary(count_label, layout)
    cols["Time (%)"] = ratio
    labels_of = {k: v(part_u.astype(np.int64)) for k, v in labels.items()}
    return cols | labels_of | {"Name": export.strings(ids_u.astype(np.int64))}, g, ids_u


def openmp_sum(export: Export, layout: str) -> Table:
    """OpenMP events per (event table, name): the summary columns and the name."""
    tables = sorted(t for t in export.table_names if t.startswith(OPENMP_PREFIX) and len(t) > len(OPENMP_PREFIX))
    if not tables:
        raise MissingData("no OpenMP event data")
    parts = []
    for i, table in enumerate(tables):
        d = nullable_ints(export, table, ["nameId", "start", "end"])
        parts.append((np.where(d["nameId?"], -1, d["nameId"]), d["end"] - d["start"],
                      np.full(len(d["start"]), i, dtype=np.int64)))
    cols, g, _ = _summary(export, parts, "Count", {}, layout)
    return make_table(cols, SUMMARY_FMT + ["s"], by_total(g.total), null=null_text(layout))


def _mpi_events(export: Export, extra: list[str]) -> list[tuple[str, dict[str, np.ndarray]]]:
    """(source name, columns) of each MPI event table the export has, in nsys's union order
    (stats.py has checked that there is one)."""
    return [(source, nullable_ints(export, table, ["start", "end", "globalTid", "textId",
                                           *(c for c in extra if c in export.columns(table))]))
            for table, source in MPI_SOURCES if export.has(table)]


def mpi_event_sum(export: Export, layout: str) -> Table:
    """MPI events per (source, name): the summary columns, the source and the name; groups in
    (source name, name id) order."""
    by_rank = np.array(sorted(s for _, s in MPI_SOURCES), dtype=object)     # sources in text order
    order = {source: rank for rank, source in enumerate(by_rank.tolist())}
    parts = [(np.where(d["textId?"], -1, d["textId"]), d["end"] - d["start"],
              np.full(len(d["start"]), order[source], dtype=np.int64)) for source, d in _mpi_events(export, [])]
    cols, g, _ = _summary(export, parts, "Instances", {"Source": lambda ranks: by_rank[ranks]}, layout)
    cols = {k: cols[k] for k in [c.format(count="Instances") for c in SUMMARY_COLS] + ["Source", "Name"]}
    return make_table(cols, SUMMARY_FMT + ["s", "s"], by_total(g.total), null=null_text(layout))


def mpi_event_trace(export: Export, layout: str) -> Table:
    """One row per MPI event (a thread with several ranks: one row per rank, in MPI_RANKS order),
    by start time, ties in table order (p2p, start-wait, other, collectives, each in row order)."""
    import pandas as pd

    def column(d: dict[str, np.ndarray], name: str, n: int) -> pd.arrays.IntegerArray:
        if name not in d:
            return pd.array([None] * n, dtype="Int64")
        return pd.arrays.IntegerArray(d[name], d[name + "?"].copy())

    # which of a table's columns fill Tag, PeerRank, RootRank, Size, CollSendSize, CollRecvSize
    fills = {"p2p": ("tag", "remoteRank", "", "size", "", ""),
             "collectives": ("", "", "rootRank", "", "size", "recvSize")}
    names = ("tag", "peer", "root", "size", "send", "recv")
    frames = []
    for source, d in _mpi_events(export, ["size", "tag", "remoteRank", "rootRank", "recvSize"]):
        n = len(d["start"])
        cols = {"start": d["start"], "end": column(d, "end", n), "gtid": column(d, "globalTid", n),
                "text": np.where(d["textId?"], -1, d["textId"])}
        cols |= {k: column(d, c, n) for k, c in zip(names, fills.get(source, ("",) * 6), strict=True)}
        frames.append(pd.DataFrame(cols))
    events = pd.concat(frames, ignore_index=True)
    r = nullable_ints(export, "MPI_RANKS", ["globalTid", "rank"])
    ranks = pd.DataFrame({"gtid": pd.array(r["globalTid"], dtype="Int64"), "rank": pd.array(r["rank"], dtype="Int64")})
    j = events.merge(ranks, on="gtid", how="left", sort=False)        # LEFT JOIN: events in union order
    j = j.sort_values("start", kind="stable", ignore_index=True)
    gtid = j["gtid"]

    def out(series: pd.Series) -> np.ndarray:
        return series.astype(object).where(series.notna(), None).to_numpy(dtype=object)

    mb = {k: out(j[k].astype("Float64") / 1e6) for k in ("size", "send", "recv")}
    cols = {"Start (ns)": j["start"].to_numpy(), "End (ns)": out(j["end"]), "Duration (ns)": out(j["end"] - j["start"]),
            "Event": export.strings(j["text"].to_numpy(np.int64)), "Pid": out((gtid // (1 << 24)) % (1 << 24)),
            "Tid": out(gtid % (1 << 24)), "Tag": out(j["tag"]), "Rank": out(j["rank"]), "PeerRank": out(j["peer"]),
            "RootRank": out(j["root"]), "Size (MB)": mb["size"], "CollSendSize (MB)": mb["send"],
            "CollRecvSize (MB)": mb["recv"]}
    return make_table(cols, ["i"] * 3 + ["s"] + ["i"] * 6 + ["f3"] * 3, null=null_text(layout))
