"""Seeded nsys exports derived from the real fixtures, for differential tests against `nsys stats`.

`derive(seed, fixtures, dest)` copies one of the real exports and rewrites its activity so that
the cases where rounding and ordering rules show are common: durations drawn from narrow ranges
(ties between groups, `.x5` averages) at magnitudes from 1 ns to 10^8 ns, memcpy/memset sizes,
kernels spread over several devices and streams, tables cut to one row or emptied, NVTX ranges
nested inside each other. Only Python's `random.Random(seed)` and sqlite3 are used, so a seed
gives the same export on any machine (the GPU machine regenerates them to make nsys 2025 gold).

Seeds from TIE_SEEDS on also get exact ties (`_make_ties`), for every report with an ORDER BY:
kernels of one name spread evenly over grid/block variants (grids past 9999 too, where the
text "%4d" order and the numeric order differ) with the same durations, so their totals,
counts and names are equal; several names, API calls, OS calls, memory operation kinds and NVTX
ranges with equal totals; the same spread over devices and streams; equal start times within
and across the kernel, memcpy and memset tables. Seeds below TIE_SEEDS are made as before (their
nsys 2025.3.1 gold is committed).

Seeds from PROJECTION_SEEDS on also get NVTX ranges that enclose GPU launches (`_project_ranges`),
for the reports that project NVTX ranges onto the GPU (nvtx_gpu_proj_sum/_trace, nvtx_kern_sum):
most GPU operations are relinked to a CUDA API call of their process, and trees of push/pop and
start/end ranges are laid over the launching threads' calls: a child enclosing exactly its
parent's launches (equal projected start and duration), names repeated across levels and
siblings, ranges at a call's exact bounds and one nanosecond short of them, ranges enclosing no
launch, ranges ending on another thread, and a named domain.

    python tests/differential/nsys_exports.py FIXTURES_DIR DEST_DIR FIRST_SEED COUNT
"""

from __future__ import annotations

import lzma
import random
import shutil
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

# real exports (paths under the fixtures' nsys/ folder) covering nsys 2022-2026 schemas
BASES = ["h200_seqpar_bf16/rank0", "fuser_report1_nsys2024.6.2", "h200_campaign/ddp_ws1_rank0",
         "nsysai_mock", "h200_campaign/seqpar_fp32_p2_rank1", "nsysai_h100_2gpu_1s"]
ACTIVITY = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS", "OSRT_API"]
MAX_ROWS = 400             # keep each export small: hundreds of them run in CI
TIE_SEEDS = 1000           # seeds from here on get exact ties (`_make_ties`)
PROJECTION_SEEDS = 2000    # seeds from here on get NVTX ranges enclosing GPU launches (`_project_ranges`)
RANGE_NAMES = ["step", "forward", "backward", "optimizer", "layer", "allreduce"]
GRIDS = [(1, 1, 1), (3, 1, 1), (64, 2, 1), (2048, 1, 1), (9999, 1, 1), (13000, 1, 1), (41472, 1, 1),
         (100000, 1, 1), (2, 10000, 1), (2, 9, 1), (18, 36, 1), (18, 72, 1)]
BLOCKS = [(128, 1, 1), (256, 1, 1), (1024, 1, 1), (32, 4, 1), (32, 32, 1), (64, 1, 1)]


def _base_file(fixtures: Path, name: str, cache: Path) -> Path:
    """The base export as a plain SQLite file (unpacked once into `cache`)."""
    plain = fixtures / "nsys" / f"{name}.sqlite"
    if plain.exists():
        return plain
    out = cache / (name.replace("/", "__") + ".sqlite")
    if not out.exists():
        with lzma.open(fixtures / "nsys" / f"{name}.sqlite.xz") as src, open(out.with_suffix(".part"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        out.with_suffix(".part").replace(out)
    return out


def open_generated(path: Path) -> sqlite3.Connection:
    """A connection to a generated export being written: no rollback journal and no syncs (a
    file the generator leaves half-written is thrown away; the rows written are the same)."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA temp_store = MEMORY")
    return con


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _duration_sampler(rng: random.Random):
    """Durations from a narrow range at a random magnitude (1 ns .. 1e8 ns): ties are common."""
    magnitude = int(10 ** rng.uniform(0, 8))
    width = rng.choice([0, 1, 2, 3, 5, 10, max(1, magnitude // 100)])
    return lambda: magnitude + rng.randint(0, width)


def _rewrite_durations(con: sqlite3.Connection, table: str, rng: random.Random) -> None:
    """New end = start + a sampled duration; NVTX instant marks (end NULL) stay marks; a few
    NVTX ranges are nested inside the range before them."""
    draw = _duration_sampler(rng)
    rows = con.execute(f'SELECT rowid, start, "end" FROM {table} ORDER BY start, rowid').fetchall()
    updates, previous = [], None
    for rowid, start, end in rows:
        if end is None:
            continue
        if table == "NVTX_EVENTS" and previous is not None and rng.random() < 0.2:
            p_start, p_end = previous            # nest inside the previous range
            if p_end - p_start > 2:
                start = rng.randint(p_start, p_end - 2)
                updates.append((start, min(p_end, start + draw()), rowid))
                continue
        new_end = start + draw()
        updates.append((start, new_end, rowid))
        previous = (start, new_end)
    con.executemany(f'UPDATE {table} SET start = ?, "end" = ? WHERE rowid = ?', updates)


def rows_to_keep(n: int, rng: random.Random, at_least: int) -> int:
    """How many of a table's `n` rows a cut keeps: at most MAX_ROWS; sometimes one row only,
    sometimes none (empty groups/tables), but `at_least` rows where the table has them."""
    keep = min(n, MAX_ROWS)
    roll = rng.random()
    if roll < 0.05:
        keep = min(n, at_least)
    elif roll < 0.12:
        keep = min(n, 1)
    elif n > keep or roll < 0.4:
        keep = rng.randint(min(n, max(1, at_least)), keep) if keep else 0
    return keep


def _cut(con: sqlite3.Connection, table: str, rng: random.Random, at_least: int = 0) -> None:
    """Keep `rows_to_keep` rows of `table`, a random sample of them."""
    n = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    keep = rows_to_keep(n, rng, at_least)
    if keep < n:
        first, last = con.execute(f"SELECT (SELECT min(rowid) FROM {table}), (SELECT max(rowid) FROM {table})").fetchone()
        assert last - first + 1 == n, f"{table}: rowids with gaps"      # the base's, as nsys numbers them
        rowids = range(first, last + 1)                  # sampled as the list of them would be
        drop = rng.sample(rowids, n - keep)
        _keep_only(con, table, sorted(set(rowids).difference(drop)))


def _keep_only(con: sqlite3.Connection, table: str, rowids: list[int]) -> None:
    """Leave only the rows `rowids` in `table`, each with its rowid and values: the kept rows are
    set aside, the table emptied in one step and the rows put back (deleting most of a large
    table row by row costs a B-tree update per row)."""
    cols = ", ".join(f'"{r[1]}"' for r in con.execute(f"PRAGMA table_info({table})"))
    con.execute(f"CREATE TEMP TABLE kept AS SELECT rowid AS kept_rowid, {cols} FROM {table} "
                f"WHERE rowid IN ({', '.join(map(str, rowids))})")
    con.execute(f"DELETE FROM {table}")
    con.execute(f"INSERT INTO {table} (rowid, {cols}) SELECT kept_rowid, {cols} FROM kept ORDER BY kept_rowid")
    con.execute("DROP TABLE temp.kept")


def _spread_devices_and_streams(con: sqlite3.Connection, table: str, rng: random.Random) -> None:
    """Kernels and memory operations over up to three known devices and four streams."""
    devices = {r[0] for r in con.execute(f"SELECT DISTINCT deviceId FROM {table}")}
    if "TARGET_INFO_GPU" in _tables(con):
        devices |= {r[0] for r in con.execute("SELECT id FROM TARGET_INFO_GPU")}
    devices = sorted(devices)
    streams = sorted({r[0] for r in con.execute(f"SELECT DISTINCT streamId FROM {table}")}) or [7]
    streams = sorted({*streams, *(max(streams) + k for k in range(1, rng.randint(1, 4)))})
    rows = [r[0] for r in con.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
    con.executemany(f"UPDATE {table} SET deviceId = ?, streamId = ? WHERE rowid = ?",
                    [(rng.choice(devices[:3]) if devices else 0, rng.choice(streams), r) for r in rows])


def _resize(con: sqlite3.Connection, table: str, rng: random.Random) -> None:
    """Memory operation sizes from a few powers of two and odd sizes (equal-size groups)."""
    sizes = [rng.choice([1, 3, 512, 4096, 65536, 1 << 20, 123457, 1 << 30]) for _ in range(rng.randint(1, 4))]
    rows = [r[0] for r in con.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
    con.executemany(f"UPDATE {table} SET bytes = ? WHERE rowid = ?", [(rng.choice(sizes), r) for r in rows])


def _even(rows: list[int], k: int, rng: random.Random) -> list[int]:
    """Slot 0..k-1 of each row: round-robin after a shuffle, so every slot gets the same count
    (± 1) and the rows of a slot are spread over the table."""
    order = rows[:]
    rng.shuffle(order)
    slot = {r: i % k for i, r in enumerate(order)}
    return [slot[r] for r in rows]


def _tied_durations(slots: list[int], k: int, rng: random.Random) -> list[int]:
    """Durations such that the n-th row of every slot gets the same value: equal multisets per
    slot (equal total, count, mean, median, StdDev) when the slots have equal counts."""
    pattern = [int(10 ** rng.uniform(0, 7)) + rng.randint(0, 3) for _ in range(rng.choice([1, 1, 2, 3]))]
    seen = [0] * k
    out = []
    for s in slots:
        out.append(pattern[seen[s] % len(pattern)])
        seen[s] += 1
    return out


def _retime(con: sqlite3.Connection, table: str, rowids: list[int], durations: list[int],
            rng: random.Random, quantum: int) -> None:
    """end = start + duration; with `quantum` > 0 starts are rounded down to multiples of it
    (rows then share start times)."""
    starts = dict(con.execute(f"SELECT rowid, start FROM {table}"))
    updates = []
    for rowid, dur in zip(rowids, durations, strict=False):
        start = starts[rowid] // quantum * quantum if quantum else starts[rowid]
        updates.append((start, start + dur, rowid))
    con.executemany(f'UPDATE {table} SET start = ?, "end" = ? WHERE rowid = ?', updates)


def _make_ties(con: sqlite3.Connection, rng: random.Random) -> None:
    """Exact ties for every report's ORDER BY (see the module docstring)."""
    present = _tables(con)
    quantum = rng.choice([0, 0, 1000, 100_000, 10_000_000])
    kernel = "CUPTI_ACTIVITY_KIND_KERNEL"
    if kernel in present:
        rows = [r[0] for r in con.execute(f"SELECT rowid FROM {kernel} ORDER BY rowid")]
        names = sorted({r[0] for r in con.execute(f"SELECT demangledName FROM {kernel}")})
        if rows and names:
            names = rng.sample(names, min(len(names), rng.randint(1, 3)))
            variants = [(rng.choice(GRIDS), rng.choice(BLOCKS)) for _ in range(rng.randint(1, 4))]
            k = len(names) * len(variants)
            slots = _even(rows, k, rng)
            devices = sorted({r[0] for r in con.execute(f"SELECT DISTINCT deviceId FROM {kernel}")}
                             | ({r[0] for r in con.execute("SELECT id FROM TARGET_INFO_GPU")}
                                if "TARGET_INFO_GPU" in present else set()))
            spread = rng.random() < 0.5          # slots over devices and streams too
            updates = []
            for rowid, s in zip(rows, slots, strict=False):
                (gx, gy, gz), (bx, by, bz) = variants[s % len(variants)]
                device = devices[s % len(devices)] if spread and devices else None
                stream = s % 3 + 7 if spread else None
                updates.append((names[s // len(variants)], gx, gy, gz, bx, by, bz, device, stream, rowid))
            con.executemany(f"UPDATE {kernel} SET demangledName = ?, gridX = ?, gridY = ?, gridZ = ?, blockX = ?, "
                            "blockY = ?, blockZ = ?, deviceId = coalesce(?, deviceId), "
                            "streamId = coalesce(?, streamId) WHERE rowid = ?", updates)
            _retime(con, kernel, rows, _tied_durations(slots, k, rng), rng, quantum)
    for table, key in (("CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind"), ("CUPTI_ACTIVITY_KIND_MEMSET", None)):
        if table not in present:
            continue
        rows = [r[0] for r in con.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
        if not rows:
            continue
        kinds = rng.sample([1, 2, 8, 10], rng.randint(1, 3)) if key else [0]
        slots = _even(rows, len(kinds), rng)
        size = rng.choice([1, 4096, 1 << 20, 123457])
        if key:
            con.executemany(f"UPDATE {table} SET {key} = ?, bytes = ? WHERE rowid = ?",
                            [(kinds[s], size, r) for r, s in zip(rows, slots, strict=False)])
        else:
            con.execute(f"UPDATE {table} SET bytes = ?", (size,))
        _retime(con, table, rows, _tied_durations(slots, len(kinds), rng), rng, quantum)
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "OSRT_API"):
        if table not in present:
            continue
        rows = [r[0] for r in con.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
        names = sorted({r[0] for r in con.execute(f"SELECT nameId FROM {table}")})
        if not rows or not names or rng.random() < 0.3:
            continue
        names = rng.sample(names, min(len(names), rng.randint(2, 4)))
        slots = _even(rows, len(names), rng)
        con.executemany(f"UPDATE {table} SET nameId = ? WHERE rowid = ?", [(names[s], r) for r, s in zip(rows, slots, strict=False)])
        _retime(con, table, rows, _tied_durations(slots, len(names), rng), rng, 0)
    if "NVTX_EVENTS" in present and rng.random() < 0.7:
        cols = {r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
        text_id = "textId" if "textId" in cols else "NULL"
        rows = con.execute(f'SELECT rowid, text, {text_id} FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71) '
                           'AND "end" IS NOT NULL ORDER BY rowid').fetchall()
        labels = sorted({(r[1], r[2]) for r in rows}, key=repr)
        if rows and labels:
            labels = rng.sample(labels, min(len(labels), rng.randint(1, 3)))
            slots = _even([r[0] for r in rows], len(labels), rng)
            set_id = ", textId = ?" if text_id == "textId" else ""
            con.executemany(f"UPDATE NVTX_EVENTS SET text = ?{set_id} WHERE rowid = ?",
                            [(labels[s][0], *((labels[s][1],) if set_id else ()), r[0]) for r, s in zip(rows, slots, strict=False)])
            _retime(con, "NVTX_EVENTS", [r[0] for r in rows], _tied_durations(slots, len(labels), rng), rng, 0)


def _relink_launches(con: sqlite3.Connection, rng: random.Random) -> list[tuple[int, int, int]]:
    """Give most GPU operations the correlation id (and process) of a CUDA API call, a few calls
    two operations; returns the launching calls as (start, end, globalTid)."""
    calls = con.execute('SELECT correlationId, globalTid, start, "end" FROM CUPTI_ACTIVITY_KIND_RUNTIME '
                        'ORDER BY rowid').fetchall()
    if not calls:
        return []
    present = _tables(con)
    launched: dict[int, tuple[int, int, int]] = {}
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table not in present:
            continue
        rows = [r[0] for r in con.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
        updates = []
        for rowid in rows:
            if rng.random() < 0.15:
                continue
            corr, gtid, start, end = calls[rng.randrange(len(calls))]
            launched[corr] = (start, end, gtid)
            updates.append((corr, gtid & 0xFFFFFFFFFF000000, rowid))
        con.executemany(f"UPDATE {table} SET correlationId = ?, globalPid = ? WHERE rowid = ?", updates)
    return sorted(launched.values())


def _project_ranges(con: sqlite3.Connection, rng: random.Random) -> None:
    """NVTX ranges enclosing GPU launches (see the module docstring)."""
    present = _tables(con)
    if not {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME"} <= present:
        return
    by_thread: dict[int, list[tuple[int, int]]] = {}
    for start, end, gtid in _relink_launches(con, rng):
        by_thread.setdefault(gtid, []).append((start, end))
    domain = rng.choice([0, 0, 7])
    string_id = con.execute("SELECT coalesce(max(id), 0) + 1 FROM StringIds").fetchone()[0]
    rows: list[tuple] = []

    def add(start: int, end: int | None, gtid: int, depth: int, end_tid: int | None = None) -> None:
        nonlocal string_id
        name = rng.choice(RANGE_NAMES[:3] if depth else RANGE_NAMES)
        text, text_id = name, None
        if rng.random() < 0.3:            # a registered string: the name in StringIds
            con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (string_id, name))
            text, text_id, string_id = None, string_id, string_id + 1
        event_type = 59 if rng.random() < 0.75 else 60
        rows.append((start, end, event_type, text, gtid, end_tid, text_id, domain if rng.random() < 0.6 else 0))

    def tree(calls: list[tuple[int, int]], gtid: int, depth: int) -> int:
        """Ranges over `calls` (sorted), children first; returns the padding this level used."""
        pad = 0
        if depth < 3 and len(calls) > 1 and rng.random() < 0.7:
            cuts = sorted(rng.sample(range(1, len(calls)), min(len(calls) - 1, rng.randint(1, 2))))
            for a, b in zip([0, *cuts], [*cuts, len(calls)], strict=True):
                pad = max(pad, tree(calls[a:b], gtid, depth + 1) + 1)
        elif depth < 3 and rng.random() < 0.3:       # a child with exactly this range's launches
            pad = tree(calls, gtid, depth + 1) + 1 + rng.choice([0, 0, 5])
        start, end = calls[0][0] - pad, max(e for _, e in calls) + pad
        if pad == 0 and rng.random() < 0.2:
            end -= 1                                  # one nanosecond short of the last call
        add(start, end, gtid, depth)
        return pad

    for gtid, calls in sorted(by_thread.items())[:2]:
        calls.sort()
        block = rng.randint(1, 12)
        for i in range(0, min(len(calls), 120), block):
            if rng.random() < 0.85:
                tree(calls[i:i + block], gtid, 0)
        gap = calls[-1][1] + 10
        add(gap, gap + 100, gtid, 0)                            # encloses no launch
        add(calls[0][0] - 3, calls[-1][1] + 3, gtid, 0, end_tid=gtid + 1)   # ends on another thread
    if not rows:
        return
    if domain:
        first = min(r[0] for r in rows) - 1000
        con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (?, 75, ?, ?, ?)",
                    (first, "torch", rows[0][4], domain))
    con.executemany('INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, endGlobalTid, textId, '
                    "domainId) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)


def derive(seed: int, fixtures: Path, dest: Path) -> Path:
    """Write the export of `seed` into `dest` (a folder); returns its path."""
    rng = random.Random(seed)
    base = BASES[seed % len(BASES)]
    cache = dest / ".bases"
    cache.mkdir(parents=True, exist_ok=True)
    out = dest / f"gen{seed:05d}.sqlite"
    shutil.copyfile(_base_file(fixtures, base, cache), out)
    con = open_generated(out)
    try:
        present = _tables(con)
        for table in ACTIVITY:
            if table not in present:
                continue
            # an export with ties keeps a kernel (one without GPU activity is refused, not reported)
            _cut(con, table, rng, 1 if seed >= TIE_SEEDS and table == "CUPTI_ACTIVITY_KIND_KERNEL" else 0)
            if rng.random() < 0.9:
                _rewrite_durations(con, table, rng)
            if table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                         "CUPTI_ACTIVITY_KIND_MEMSET") and rng.random() < 0.5:
                _spread_devices_and_streams(con, table, rng)
            if table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET") and rng.random() < 0.7:
                _resize(con, table, rng)
        if seed >= TIE_SEEDS:
            _make_ties(con, rng)
        if seed >= PROJECTION_SEEDS:
            _project_ranges(con, rng)
        con.commit()
    finally:
        con.close()
    return out


def write_exports(derive_one: Callable[[int, Path, Path], Path], argv: list[str]) -> None:
    """The generators' command line: FIXTURES_DIR DEST_DIR FIRST_SEED COUNT -> the exports of those seeds."""
    fixtures, dest, first, count = Path(argv[0]), Path(argv[1]), int(argv[2]), int(argv[3])
    dest.mkdir(parents=True, exist_ok=True)
    for seed in range(first, first + count):
        derive_one(seed, fixtures, dest)


if __name__ == "__main__":
    write_exports(derive, sys.argv[1:])
