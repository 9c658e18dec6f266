"""Seeded nsys exports derived from the real fixtures, for differential tests against `nsys stats`.

`derive(seed, fixtures, dest)` copies one of the real exports and rewrites its activity so that
the cases where rounding and ordering rules show are common: durations drawn from narrow ranges
(ties between groups, `.x5` averages) at magnitudes from 1 ns to 10^8 ns, memcpy/memset sizes,
kernels spread over several devices and streams, tables cut to one row or emptied, NVTX ranges
nested inside each other. Only Python's `random.Random(seed)` and sqlite3 are used, so a seed
gives the same export on any machine (the GPU machine regenerates them to make nsys 2025 gold).

    python tests/differential/nsys_exports.py FIXTURES_DIR DEST_DIR FIRST_SEED COUNT
"""

from __future__ import annotations

import lzma
import random
import shutil
import sqlite3
import sys
from pathlib import Path

# real exports (paths under the fixtures' nsys/ folder) covering nsys 2022-2026 schemas
BASES = ["h200_seqpar_bf16/rank0", "fuser_report1_nsys2024.6.2", "h200_campaign/ddp_ws1_rank0",
         "nsysai_mock", "h200_campaign/seqpar_fp32_p2_rank1", "nsysai_h100_2gpu_1s"]
ACTIVITY = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS", "OSRT_API"]
MAX_ROWS = 400             # keep each export small: hundreds of them run in CI


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


def _cut(con: sqlite3.Connection, table: str, rng: random.Random) -> None:
    """Keep at most MAX_ROWS rows; sometimes one row only, sometimes none (empty groups/tables)."""
    n = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    keep = min(n, MAX_ROWS)
    roll = rng.random()
    if roll < 0.05:
        keep = 0
    elif roll < 0.12:
        keep = min(n, 1)
    elif n > keep or roll < 0.4:
        keep = rng.randint(min(n, 1), keep) if keep else 0
    if keep < n:
        rowids = [r[0] for r in con.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
        drop = rng.sample(rowids, n - keep)
        con.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(r,) for r in drop])


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


def derive(seed: int, fixtures: Path, dest: Path) -> Path:
    """Write the export of `seed` into `dest` (a folder); returns its path."""
    rng = random.Random(seed)
    base = BASES[seed % len(BASES)]
    cache = dest / ".bases"
    cache.mkdir(parents=True, exist_ok=True)
    out = dest / f"gen{seed:05d}.sqlite"
    shutil.copyfile(_base_file(fixtures, base, cache), out)
    con = sqlite3.connect(out)
    try:
        present = _tables(con)
        for table in ACTIVITY:
            if table not in present:
                continue
            _cut(con, table, rng)
            if rng.random() < 0.9:
                _rewrite_durations(con, table, rng)
            if table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                         "CUPTI_ACTIVITY_KIND_MEMSET") and rng.random() < 0.5:
                _spread_devices_and_streams(con, table, rng)
            if table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET") and rng.random() < 0.7:
                _resize(con, table, rng)
        con.commit()
    finally:
        con.close()
    return out


def main() -> None:
    fixtures, dest, first, count = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    dest.mkdir(parents=True, exist_ok=True)
    for seed in range(first, first + count):
        derive(seed, fixtures, dest)


if __name__ == "__main__":
    main()
