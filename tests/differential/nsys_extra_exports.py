"""Seeded nsys exports with unified memory, OpenMP and MPI tables, for differential tests of
`nsys stats`'s um_*, openmp_sum and mpi_event_* reports (nsys 2022.4: umcpupagefaults,
unifiedmemory, unifiedmemorytotals, openmpevtsum).

`derive_extra(seed, fixtures, dest)` starts from nsys_exports.derive (a real export with its
activity rewritten; its output for a seed is unchanged) and adds, each table sometimes missing
or empty, with the columns of nsys 2025's export schema:

- CUDA_UM_CPU_PAGE_FAULT_EVENTS / CUDA_UM_GPU_PAGE_FAULT_EVENTS over a few virtual addresses,
  faults spread evenly over (instruction, source file, source line) groups (equal counts; string
  ids numbered in another order than their text), and memcpys turned into unified memory
  migrations (copyKind 11 HtoD, 12 DtoH) of those and other addresses with equal sizes and
  durations (equal throughputs), zero durations (nsys divides by zero: NULL) and durations over
  1 s (integer division gives 0);
- OPENMP_EVENT_KIND_* tables (created in a random order) whose names have equal totals within a
  table; totals of different tables differ (nsys unions the tables in Python set order, which
  changes from run to run, so a tie across tables has no fixed order);
- MPI_RANKS and the MPI_P2P / MPI_START_WAIT / MPI_OTHER / MPI_COLLECTIVES event tables: equal
  totals within and across the four sources, equal start times within and across tables, zero
  durations, threads without a rank.

Only `random.Random` and sqlite3 are used, so a seed gives the same export on any machine.

    python tests/differential/nsys_extra_exports.py FIXTURES_DIR DEST_DIR FIRST_SEED COUNT
"""

from __future__ import annotations

import random
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from nsys_exports import derive, open_generated, write_exports  # noqa: E402

FIRST_SEED = 3000          # this generator's seeds: 3000 .. (other generators use 0.., 1000..)
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
UM_CPU = "CUDA_UM_CPU_PAGE_FAULT_EVENTS"
UM_GPU = "CUDA_UM_GPU_PAGE_FAULT_EVENTS"
OMP_KINDS = ["THREAD", "PARALLEL", "SYNC_REGION_WAIT", "SYNC_REGION", "TASK", "WORKSHARE", "MUTEX_WAIT",
             "MASTER", "REDUCTION", "DISPATCH", "CRITICAL_SECTION"]
OMP_NAMES = ["omp_parallel", "omp_barrier", "omp_task", "omp_loop", "omp_critical", "omp_master",
             "omp_reduction", "omp_thread"]
MPI_NAMES = {"MPI_P2P_EVENTS": ["MPI_Send", "MPI_Recv", "MPI_Isend", "MPI_Irecv", "MPI_Sendrecv"],
             "MPI_START_WAIT_EVENTS": ["MPI_Wait", "MPI_Waitall", "MPI_Start"],
             "MPI_OTHER_EVENTS": ["MPI_Init", "MPI_Comm_rank", "MPI_Finalize", "MPI_Barrier"],
             "MPI_COLLECTIVES_EVENTS": ["MPI_Allreduce", "MPI_Bcast", "MPI_Barrier", "MPI_Allgather"]}
SCHEMA = {
    UM_CPU: "start INTEGER NOT NULL, globalPid INTEGER NOT NULL, address INTEGER NOT NULL, originalFaultPc INTEGER, "
            "CpuInstruction INTEGER NOT NULL, module INTEGER NOT NULL, unresolvedFaultPc INTEGER, "
            "sourceFile INTEGER, sourceLine INTEGER",
    UM_GPU: 'start INTEGER NOT NULL, "end" INTEGER NOT NULL, globalPid INTEGER NOT NULL, deviceId INTEGER NOT NULL, '
            "address INTEGER NOT NULL, numberOfPageFaults INTEGER NOT NULL, faultAccessType INTEGER NOT NULL",
    "OMP": 'start INTEGER NOT NULL, "end" INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, '
           "correlationId INTEGER, nameId INTEGER NOT NULL, eventKind INTEGER",
    "MPI_RANKS": "globalTid INTEGER NOT NULL, rank INTEGER NOT NULL",
    "MPI_P2P_EVENTS": 'start INTEGER NOT NULL, "end" INTEGER, globalTid INTEGER, textId INTEGER, commHandle INTEGER, '
                      "tag INTEGER, remoteRank INTEGER, size INTEGER, requestHandle INTEGER",
    "MPI_COLLECTIVES_EVENTS": 'start INTEGER NOT NULL, "end" INTEGER, globalTid INTEGER, textId INTEGER, '
                              "commHandle INTEGER, rootRank INTEGER, size INTEGER, recvSize INTEGER, "
                              "requestHandle INTEGER",
    "MPI_START_WAIT_EVENTS": 'start INTEGER NOT NULL, "end" INTEGER, globalTid INTEGER, textId INTEGER, '
                             "requestHandle INTEGER",
    "MPI_OTHER_EVENTS": 'start INTEGER NOT NULL, "end" INTEGER, globalTid INTEGER, textId INTEGER',
}


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


class _Strings:
    """New StringIds rows, numbered in a shuffled order (id order differs from text order)."""

    def __init__(self, con: sqlite3.Connection, rng: random.Random) -> None:
        self.con, self.rng = con, rng
        self.next = (con.execute("SELECT max(id) FROM StringIds").fetchone()[0] or 0) + 1
        self.ids: dict[str, int] = {}

    def add(self, texts: list[str]) -> list[int]:
        """Ids of `texts` (new ones inserted in a random order)."""
        new = [t for t in dict.fromkeys(texts) if t not in self.ids]
        self.rng.shuffle(new)
        for text in new:
            self.ids[text] = self.next
            self.con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (self.next, text))
            self.next += 1
        return [self.ids[t] for t in texts]


def _even(n: int, k: int, rng: random.Random) -> list[int]:
    """Slot 0..k-1 of n rows: round-robin after a shuffle (equal counts, ± 1)."""
    slots = [i % k for i in range(n)]
    rng.shuffle(slots)
    return slots


def _pattern(rng: random.Random, zero: bool = True) -> list[int]:
    """A few durations (ns) that every slot repeats: equal totals for equal counts."""
    magnitude = int(10 ** rng.uniform(0, 7))
    out = [magnitude + rng.randint(0, 3) for _ in range(rng.choice([1, 1, 2, 3]))]
    if zero and rng.random() < 0.1:
        out = [0] + out[1:]
    return out


def _rows(rng: random.Random) -> int:
    """How many rows a table gets: none sometimes, one sometimes, else up to a few hundred."""
    return rng.choice([0, 1, 2, 3, 4, 6, 8, 12, 24, 60, 120, 300])


def _create(con: sqlite3.Connection, table: str, schema_key: str | None = None) -> None:
    con.execute(f"CREATE TABLE {table} ({SCHEMA[schema_key or table]})")


def _unified_memory(con: sqlite3.Connection, rng: random.Random, strings: _Strings, t0: int) -> None:
    """UM page fault tables and unified memory migrations (see the module docstring)."""
    base = 0x7F0000000000 + rng.randint(0, 4095) * 0x200000
    pool = sorted({base + rng.randint(0, 63) * 0x200000 for _ in range(rng.choice([1, 2, 3, 6, 9, 14]))}
                  | ({rng.choice([0, 4096])} if rng.random() < 0.1 else set()))
    pid = rng.choice([1, 2]) << 24 | rng.randint(100, 99999)
    if rng.random() < 0.85:
        _create(con, UM_CPU)
        n = _rows(rng)
        instrs = strings.add([rng.choice(["0x%x" % (0x55D000000000 + rng.randint(0, 1 << 20)),
                                          f"kernel_fill+0x{rng.randint(0, 255):x}", "memset", "main"])
                              for _ in range(rng.randint(1, 4))])
        files = [None] + strings.add(["/src/app.cu", "/src/data.cpp", "app.c"][:rng.randint(1, 3)])
        groups = [(rng.choice(instrs), rng.choice(files) if rng.random() < 0.7 else None,
                   rng.choice([None, 7, 42, 1000]) if rng.random() < 0.6 else None)
                  for _ in range(rng.randint(1, 5))]
        module = strings.add(["/usr/lib/libapp.so"])[0]
        rows = []
        for s in _even(n, len(groups), rng):
            instr, file, line = groups[s]
            rows.append((t0 + rng.randint(0, 10**9), pid, rng.choice(pool), rng.randint(0, 1 << 40), instr,
                         module, 0, file, line))
        con.executemany(f"INSERT INTO {UM_CPU} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    if rng.random() < 0.85:
        _create(con, UM_GPU)
        faults = rng.choice([[1], [1, 2], [3], [1, 5, 2]])
        rows = []
        for k in range(_rows(rng)):
            start = t0 + rng.randint(0, 10**9)
            rows.append((start, start + rng.randint(0, 5000), pid, rng.randint(0, 1), rng.choice(pool),
                         faults[k % len(faults)], rng.randint(0, 3)))
        con.executemany(f"INSERT INTO {UM_GPU} VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    if MEMCPY not in _tables(con) or rng.random() < 0.15:
        return
    rowids = [r[0] for r in con.execute(f"SELECT rowid FROM {MEMCPY} ORDER BY rowid")]
    if not rowids:
        return
    migrating = rng.sample(rowids, rng.randint(1, len(rowids)) if rng.random() < 0.5 else 1 + len(rowids) // 2)
    addresses = pool + [base + (64 + k) * 0x200000 for k in range(rng.randint(0, 2))]   # some with no faults
    size = rng.choice([4096, 65536, 1 << 21])
    slow = rng.random() < 0.1                            # one address's migrations over 1 s in all
    durations = [d * (10**6 if slow else 1) for d in _pattern(rng)]
    updates = []
    for k, (rowid, s) in enumerate(zip(sorted(migrating), _even(len(migrating), 2 * len(addresses), rng),
                                       strict=True)):
        address = addresses[s // 2] if rng.random() > 0.03 else None
        start = t0 + rng.randint(0, 10**9)
        updates.append((11 + s % 2, address, size, start, start + durations[k % len(durations)], rowid))
    con.executemany(f'UPDATE {MEMCPY} SET copyKind = ?, virtualAddress = ?, bytes = ?, start = ?, "end" = ? '
                    "WHERE rowid = ?", updates)


def _openmp(con: sqlite3.Connection, rng: random.Random, strings: _Strings, t0: int) -> None:
    """OPENMP_EVENT_KIND_* tables: equal totals within a table, distinct totals across tables."""
    kinds = rng.sample(OMP_KINDS, rng.randint(1, 5))
    names = strings.add(rng.sample(OMP_NAMES, rng.randint(2, 5)))
    tid = 1 << 24 | rng.randint(100, 9999)
    totals: set[int] = set()                           # (table, name) totals so far
    for kind in kinds:
        table = f"OPENMP_EVENT_KIND_{kind}"
        _create(con, table, "OMP")
        mine = rng.sample(names, rng.randint(1, len(names)))
        pattern = _pattern(rng)
        slots = _even(_rows(rng), len(mine), rng)
        seen = [0] * len(mine)
        durations = []
        for s in slots:
            durations.append(pattern[seen[s] % len(pattern)])
            seen[s] += 1
        mine_totals = {s: sum(d for d, t in zip(durations, slots, strict=True) if t == s) for s in set(slots)}
        while set(mine_totals.values()) & totals:         # a tie across tables: lengthen this table's rows
            durations = [d + 1 for d in durations]
            mine_totals = {s: sum(d for d, t in zip(durations, slots, strict=True) if t == s) for s in set(slots)}
        totals |= set(mine_totals.values())
        rows = []
        for s, dur in zip(slots, durations, strict=True):
            start = t0 + rng.randint(0, 10**9)
            rows.append((start, start + dur, 75, tid, None, mine[s], OMP_KINDS.index(kind) + 1))
        con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?, ?, ?, ?, ?)", rows)


def _mpi(con: sqlite3.Connection, rng: random.Random, strings: _Strings, t0: int) -> None:
    """MPI_RANKS and the four MPI event tables."""
    threads = [(rng.choice([0, 1 << 48]) | (rng.randint(100, 99999) << 24) | rng.randint(100, 99999))
               for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.9:
        _create(con, "MPI_RANKS")
        ranks = [(gtid, r) for r, gtid in enumerate(threads) if rng.random() < 0.9]
        if ranks and rng.random() < 0.05:
            ranks.append((ranks[0][0], len(threads) + 3))          # one thread with two ranks
        con.executemany("INSERT INTO MPI_RANKS VALUES (?, ?)", ranks)
    quantum = rng.choice([1, 1000, 10**6, 10**8])
    pattern = _pattern(rng)
    tables = [t for t in MPI_NAMES if rng.random() < 0.7]
    rng.shuffle(tables)
    for table in tables:
        _create(con, table)
        names = strings.add(rng.sample(MPI_NAMES[table], rng.randint(1, len(MPI_NAMES[table]))))
        n = _rows(rng)
        rows = []
        for k, s in enumerate(_even(n, len(names), rng)):
            start = t0 + rng.randint(0, 10**9) // quantum * quantum
            end = start + pattern[k // len(names) % len(pattern)]
            gtid = rng.choice(threads)
            if table == "MPI_P2P_EVENTS":
                extra = (rng.randint(1, 3), rng.choice([0, 7, 99]), rng.randint(0, 3),
                         rng.choice([0, 8, 4096, 1 << 20]), rng.randint(1, 9))
            elif table == "MPI_COLLECTIVES_EVENTS":
                extra = (rng.randint(1, 3), rng.choice([None, 0, 1]), rng.choice([None, 8, 4096]),
                         rng.choice([None, 8, 1 << 20]), None)
            elif table == "MPI_START_WAIT_EVENTS":
                extra = (rng.randint(1, 9),)
            else:
                extra = ()
            rows.append((start, end, gtid, names[s], *extra))
        if rows:
            con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)


def derive_extra(seed: int, fixtures: Path, dest: Path) -> Path:
    """Write the export of `seed` (nsys_exports.derive's, plus the tables above) into `dest`."""
    out = derive(seed, fixtures, dest)
    rng = random.Random(seed * 7919 + 3)
    con = open_generated(out)
    try:
        strings = _Strings(con, rng)
        t0 = con.execute("SELECT coalesce(min(start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] \
            if "CUPTI_ACTIVITY_KIND_KERNEL" in _tables(con) else 0
        parts = [_unified_memory, _openmp, _mpi]
        rng.shuffle(parts)                                   # tables created in different orders
        for part in parts:
            if rng.random() < 0.85:
                part(con, rng, strings, t0)
        con.commit()
    finally:
        con.close()
    return out


if __name__ == "__main__":
    write_exports(derive_extra, sys.argv[1:])
