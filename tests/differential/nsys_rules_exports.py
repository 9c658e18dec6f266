"""Seeded nsys exports for differential tests of `nsys analyze`'s rules (tests/test_nsys_rules.py).

`derive_rules(seed, fixtures, dest)` starts from nsys_exports.derive (a real export with its
activity rewritten, exact ties from TIE_SEEDS on) and adds what the rules look for: memcpys from
and to pageable memory launched by cudaMemcpy / cudaMemcpyAsync / cudaMemcpy2D / cudaMemcpyPeer
calls (sizes around the 64,000-byte host-to-device cut, copies within one device and between
two, no device at all), memsets of pinned/managed/device memory launched by sync and async
calls, runtime calls renamed to cudaDeviceSynchronize / cudaStreamSynchronize with equal
durations, correlation ids shared by two processes' calls, GPU operations of some devices moved
later by 0.3-2 s (gaps over the 500 ms default, the same gap on several devices), CUDA profiling
overheads inside the devices' spans, an NVTX range stretched over most of the GPU span, and
tables dropped (the rules' SKIPPED cases). Only `random.Random(seed)` and sqlite3 are used.

    python tests/differential/nsys_rules_exports.py FIXTURES_DIR DEST_DIR FIRST_SEED COUNT

`option_sets(db)` gives the rule arguments each comparison runs on an export (the same for the test
and for the gold made on the GPU machine):

    python tests/differential/nsys_rules_exports.py --specs EXPORT SET    (nsys's -r specs, one per line)
"""

from __future__ import annotations

import random
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from nsys_exports import derive, open_generated, write_exports  # noqa: E402

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_APIS = ["cudaMemcpy_v3020", "cudaMemcpyAsync_v3020", "cudaMemcpy2D_v3020", "cudaMemcpy2DAsync_v3020",
               "cudaMemcpyPeer_v4000", "cudaMemcpyAsync_ptsz_v7000"]
MEMSET_APIS = ["cudaMemset_v3020", "cudaMemsetAsync_v3020", "cudaMemset2D_v3020", "cudaMemset2DAsync_v3020"]
SYNC_APIS = ["cudaDeviceSynchronize_v3020", "cudaStreamSynchronize_v3020", "cudaStreamSynchronize_ptsz_v7000"]
OVERHEADS = ["CUDA profiling overhead", "CUDA profiling data flush overhead", "CUDA profiling stop overhead",
             "CUPTI Buffer flush"]


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _string_ids(con: sqlite3.Connection, names: list[str]) -> dict[str, int]:
    """Ids of `names` in StringIds, added where missing."""
    ids = {}
    for name in names:
        row = con.execute("SELECT id FROM StringIds WHERE value = ?", (name,)).fetchone()
        if row is None:
            new_id = con.execute("SELECT coalesce(max(id), 0) + 1 FROM StringIds").fetchone()[0]
            con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (new_id, name))
            row = (new_id,)
        ids[name] = row[0]
    return ids


def _launch_calls(con: sqlite3.Connection, table: str, apis: dict[str, int], rng: random.Random) -> None:
    """Give each operation of `table` a runtime call of one of `apis` (the call it already has,
    renamed, or a new one an µs before it); a few get a second call with the same correlation id
    in another process."""
    cols = [r[1] for r in con.execute(f"PRAGMA table_info({RUNTIME})")]
    template = con.execute(f"SELECT * FROM {RUNTIME} LIMIT 1").fetchone()
    ops = con.execute(f'SELECT correlationId, start, globalPid FROM {table} ORDER BY rowid').fetchall()
    names = list(apis.values())
    for corr, start, gpid in ops:
        name = rng.choice(names)
        updated = con.execute(f"UPDATE {RUNTIME} SET nameId = ? WHERE correlationId = ?", (name, corr)).rowcount
        copies = (0 if updated else 1) + (rng.random() < 0.05)
        for k in range(copies):
            values = dict(zip(cols, template, strict=False)) if template else dict.fromkeys(cols, 0)
            values.update(start=start - 1000 - rng.randint(0, 5000), correlationId=corr, nameId=rng.choice(names),
                          globalTid=(gpid or 0) + (k + updated) * (1 << 24) + rng.randint(0, 3))
            values["end"] = values["start"] + rng.choice([800, 900, 1000])
            con.execute(f"INSERT INTO {RUNTIME} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                        [values[c] for c in cols])


def _memcpys(con: sqlite3.Connection, rng: random.Random) -> None:
    rows = [r[0] for r in con.execute(f"SELECT rowid FROM {MEMCPY}")]
    updates = []
    for rowid in rows:
        src_dev = rng.choice([None, 0, 1])
        dst_dev = src_dev if rng.random() < 0.3 else rng.choice([None, 0, 1])
        updates.append((rng.choice([0, 0, 1, 2, 4]), rng.choice([0, 1, 2, 4]), rng.choice([1, 1, 2, 8, 10]),
                        rng.choice([512, 64000, 64001, 65536, 1 << 20]), src_dev, dst_dev, rowid))
    con.executemany(f"UPDATE {MEMCPY} SET srcKind = ?, dstKind = ?, copyKind = ?, bytes = ?, srcDeviceId = ?, "
                    "dstDeviceId = ? WHERE rowid = ?", updates)


def _sync_calls(con: sqlite3.Connection, ids: dict[str, int], rng: random.Random) -> None:
    """Rename some runtime calls to synchronisation APIs, a few durations shared."""
    rows = [r[0] for r in con.execute(f"SELECT rowid FROM {RUNTIME} ORDER BY rowid")]
    chosen = rng.sample(rows, min(len(rows), rng.randint(0, 80)))
    durations = [rng.randint(1, 10 ** rng.randint(1, 7)) for _ in range(rng.randint(1, 5))]
    con.executemany(f'UPDATE {RUNTIME} SET nameId = ?, "end" = start + ? WHERE rowid = ?',
                    [(ids[rng.choice(SYNC_APIS)], rng.choice(durations), r) for r in chosen])


def _gaps(con: sqlite3.Connection, rng: random.Random) -> None:
    """Move the later part of some devices' operations 0.3-2 s later (the same shift for
    all of them, or per device)."""
    tables = [t for t in (KERNEL, MEMCPY, MEMSET) if t in _tables(con)]
    devices = sorted({r[0] for t in tables for r in con.execute(f"SELECT DISTINCT deviceId FROM {t}")})
    shift = rng.choice([300_000_000, 500_000_000, 500_000_001, 1_200_000_000, 2_000_000_000])
    for device in devices:
        if rng.random() < 0.3:
            continue
        starts = sorted(r[0] for t in tables for r in con.execute(f"SELECT start FROM {t} WHERE deviceId = ?", (device,)))
        if len(starts) < 2:
            continue
        cut = starts[rng.randint(1, len(starts) - 1)]
        move = shift if rng.random() < 0.6 else rng.choice([400_000_000, 700_000_000, 1_500_000_000])
        for t in tables:
            con.execute(f'UPDATE {t} SET start = start + ?, "end" = "end" + ? WHERE deviceId = ? AND start >= ?',
                        (move, move, device, cut))


def _overheads(con: sqlite3.Connection, rng: random.Random) -> None:
    """CUDA profiling overheads at random times inside the GPU span of the export's processes."""
    if "PROFILER_OVERHEAD" not in _tables(con) or KERNEL not in _tables(con):
        return
    span = con.execute(f'SELECT min(start), max("end"), min(globalPid) FROM {KERNEL}').fetchone()
    if span[0] is None:
        return
    ids = _string_ids(con, OVERHEADS)
    required = [r[1] for r in con.execute("PRAGMA table_info(PROFILER_OVERHEAD)")
                if r[3] and r[1] not in ("start", "end", "globalTid", "nameId")]   # NOT NULL: 0
    cols = ", ".join(['start', '"end"', "globalTid", "nameId", *required])
    rows = []
    for _ in range(rng.randint(1, 6)):
        start = rng.randint(span[0] - 1000, span[1])
        rows.append((start, start + rng.randint(1, 200_000_000), span[2] + rng.randint(0, 2), ids[rng.choice(OVERHEADS)],
                     *[0] * len(required)))
    con.executemany(f"INSERT INTO PROFILER_OVERHEAD ({cols}) VALUES ({', '.join('?' * (4 + len(required)))})", rows)


def _long_nvtx_range(con: sqlite3.Connection, rng: random.Random) -> None:
    """Stretch one NVTX range so that it is the first of its name and covers most of the GPU span
    (an nvtx= window with something inside)."""
    if "NVTX_EVENTS" not in _tables(con) or KERNEL not in _tables(con):
        return
    lo, hi = con.execute(f'SELECT min(start), max("end") FROM {KERNEL}').fetchone()
    rows = [r[0] for r in con.execute('SELECT rowid FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71) '
                                      'AND "end" IS NOT NULL ORDER BY rowid')]
    if lo is None or not rows:
        return
    first = con.execute("SELECT min(start) FROM NVTX_EVENTS").fetchone()[0]
    con.execute('UPDATE NVTX_EVENTS SET start = ?, "end" = ? WHERE rowid = ?',
                (min(lo, first) - 1, lo + int((hi - lo) * rng.uniform(0.3, 0.9)), rng.choice(rows)))


def derive_rules(seed: int, fixtures: Path, dest: Path) -> Path:
    """Write the rules export of `seed` into `dest`; returns its path."""
    out = derive(seed, fixtures, dest)
    rng = random.Random(seed * 7919 + 17)
    con = open_generated(out)
    try:
        present = _tables(con)
        ids = _string_ids(con, MEMCPY_APIS + MEMSET_APIS + SYNC_APIS)
        if RUNTIME in present:
            if MEMCPY in present:
                _memcpys(con, rng)
                _launch_calls(con, MEMCPY, {n: ids[n] for n in rng.sample(MEMCPY_APIS, rng.randint(1, 4))}, rng)
            if MEMSET in present:
                con.executemany(f"UPDATE {MEMSET} SET memKind = ? WHERE rowid = ?",
                                [(rng.choice([0, 1, 2, 4]), r[0]) for r in con.execute(f"SELECT rowid FROM {MEMSET}")])
                _launch_calls(con, MEMSET, {n: ids[n] for n in rng.sample(MEMSET_APIS, rng.randint(1, 3))}, rng)
            _sync_calls(con, ids, rng)
        if rng.random() < 0.6:
            _gaps(con, rng)
        if rng.random() < 0.4:
            _overheads(con, rng)
        if rng.random() < 0.7:
            _long_nvtx_range(con, rng)
        roll = rng.random()
        drop = [RUNTIME] if roll < 0.04 else [MEMSET] if roll < 0.08 else [KERNEL, MEMCPY, MEMSET] if roll < 0.1 else []
        for table in drop:
            con.execute(f"DROP TABLE IF EXISTS {table}")
        con.commit()
    finally:
        con.close()
    return out


#: the option sets compared with nsys 2022.4 (run in CI) and, all of them, with nsys 2025.3.1's gold
SETS_2022 = ("default", "tight", "window", "nvtx")
SETS_2025 = (*SETS_2022, "nvtx_second", "process", "thread")
WINDOW = (0.3, 0.7)           # the window set: the middle 40 % of the export's GPU span
RULES_2025 = ["cuda_memcpy_async", "cuda_memcpy_sync", "cuda_memset_sync", "cuda_api_sync", "gpu_gaps",
              "gpu_time_util"]
#: arguments that only some rules take (by either version's name); every other argument all rules take
ONLY_FOR = {"gap": ("gpu_gaps", "gpu-starv"), "threshold": ("gpu_time_util", "gpu-low-util"),
            "chunks": ("gpu_time_util", "gpu-low-util")}


def option_sets(db: Path) -> dict[str, dict[str, int | str]]:
    """nsys's rule arguments per option set for this export: nsys's defaults; rows=5 with gap=1,
    threshold=80, chunks=97; a start/end window over the middle of the GPU span with no row limit
    (rows=-1); the export's longest plainly named NVTX range (nvtx=); its second occurrence
    (nvtx=NAME/1, 2025 only); one process id (2025's process=; the exports' processes in turn by
    seed) and the thread with most synchronisation calls (thread=)."""
    with sqlite3.connect(db) as con:
        tables = _tables(con)
        spans = [con.execute(f'SELECT min(start), max("end") FROM {t}').fetchone()
                 for t in (KERNEL, MEMCPY) if t in tables]
        pids = sorted({row[0] for t in (KERNEL, MEMCPY, MEMSET) if t in tables
                       for row in con.execute(f"SELECT DISTINCT (globalPid >> 24) & 16777215 FROM {t}")})
        busiest = con.execute(
            f"SELECT call.globalTid & 16777215 FROM {RUNTIME} AS call JOIN StringIds AS s ON s.id = call.nameId "
            f"WHERE s.value LIKE '%Synchronize%' GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1").fetchone() \
            if RUNTIME in tables and "StringIds" in tables else None
    lo = min((s[0] for s in spans if s[0] is not None), default=0)
    hi = max((s[1] for s in spans if s[1] is not None), default=0)
    nvtx = _nvtx_name(db)
    seed = int("".join(ch for ch in db.stem if ch.isdigit()) or 0)
    return {"default": {}, "tight": {"gap": 1, "threshold": 80, "chunks": 97, "rows": 5},
            "window": {"start": int(lo + WINDOW[0] * (hi - lo)), "end": int(lo + WINDOW[1] * (hi - lo)), "rows": -1},
            "nvtx": {"nvtx": nvtx}, "nvtx_second": {"nvtx": f"{nvtx}/1"},
            "process": {"process": pids[seed % len(pids)] if pids else 1},
            "thread": {"thread": busiest[0] if busiest else 1}}


def _nvtx_name(db: Path) -> str:
    """`text[@domain]` of the export's NVTX push/pop or start/end range name with a plain name (one
    nsys's argument syntax passes) whose first range is the longest (so that rules find something
    inside it); a missing name where there is none."""
    with sqlite3.connect(db) as con:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchone():
            return "no_such_range"
        cols = {r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
        text = "coalesce(n.text, s.value)" if "textId" in cols else "n.text"
        join = "LEFT JOIN StringIds AS s ON s.id = n.textId" if "textId" in cols else ""
        ranges = con.execute(
            f"SELECT {text} || coalesce('@' || d.text, ''), n.start, n.\"end\" FROM NVTX_EVENTS AS n LEFT JOIN "
            f"(SELECT domainId, globalTid, text FROM NVTX_EVENTS WHERE eventType = 75) AS d ON n.domainId = "
            f"d.domainId AND n.globalTid >> 24 = d.globalTid >> 24 {join} WHERE n.eventType IN (59, 60, 70, 71) "
            f"AND n.\"end\" IS NOT NULL ORDER BY n.start").fetchall()
    first: dict[str, int] = {}
    for name, start, end in ranges:
        if name and name.replace("_", "").replace("@", "").replace(" ", "").isalnum():
            first.setdefault(name, end - start)
    return max(sorted(first), key=lambda n: first[n]) if first else "no_such_range"


def rule_spec(rule: str, args: dict[str, int | str]) -> str:
    """nsys's `-r` argument: the rule with the arguments it takes (`rule` alone for none)."""
    taken = [f"{key}={value}" for key, value in args.items() if rule in ONLY_FOR.get(key, (rule,))]
    return ":".join([rule, *taken])


def main() -> None:
    if sys.argv[1] == "--specs":
        args = option_sets(Path(sys.argv[2]))[sys.argv[3]]
        print("\n".join(rule_spec(rule, args) for rule in RULES_2025))
        return
    write_exports(derive_rules, sys.argv[1:])


if __name__ == "__main__":
    main()
