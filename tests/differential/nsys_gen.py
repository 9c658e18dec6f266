"""Seeded nsys exports derived from the real fixture exports, for differential tests.

Independent of hpcprof: it only rewrites SQLite rows. Each seed picks a base export, keeps a
random subset of each event table (so groups become empty or single-row), redraws durations
from a narrow range at a magnitude between 1 ns and 1e8 ns (ties and .x5 averages are common),
moves kernels and memory operations over several devices and streams, folds kernel names onto a
few so groups are shared, and redraws memcpy sizes and kinds.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

#: base exports under the fixtures' nsys/ directory
BASES = ["nsysai_mock.sqlite", "fuser_report1_nsys2024.6.2.sqlite", "fuser_report1_nsys2025.1.1.sqlite",
         "h200_seqpar_bf16/rank0.sqlite", "h200_seqpar_bf16/rank1.sqlite", "nsysai_h100_2gpu_1s.sqlite",
         "nsysai_mfu_2gpu_before.sqlite", "h200_campaign/ddp_ws2_rank1.sqlite",
         "h200_campaign/seqpar_bf16_p4_rank3.sqlite"]
EVENT_TABLES = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
                "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS", "OSRT_API"]
MAX_ROWS = 400                     # rows kept per table at most: small files, fast tools


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _durations(rng: random.Random, n: int) -> list[int]:
    """n durations from a narrow range at a random magnitude (1 ns .. 1e8 ns)."""
    base = max(1, int(10 ** rng.uniform(0, 8)))
    spread = rng.choice([0, 1, 2, 3, 5, 10, max(1, base // 100)])
    return [base + rng.randint(0, spread) for _ in range(n)]


def _subsample(db: sqlite3.Connection, rng: random.Random, table: str) -> None:
    n = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    keep = rng.choice([0, 1, 2, 3, 7, 20, 60, MAX_ROWS, MAX_ROWS]) if rng.random() < 0.9 else MAX_ROWS
    if keep == 0 and rng.random() < 0.5:
        keep = 1
    if n > keep:
        rowids = [r[0] for r in db.execute(f"SELECT rowid FROM {table}")]
        drop = rng.sample(rowids, n - keep)
        db.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(r,) for r in drop])


def _redraw(db: sqlite3.Connection, rng: random.Random, table: str) -> None:
    """New end = start + duration for every row with an end (NVTX marks keep their NULL end)."""
    rows = [r[0] for r in db.execute(f'SELECT rowid FROM {table} WHERE "end" IS NOT NULL')]
    for part in range(rng.choice([1, 2, 3])):       # a few duration populations per table
        chunk = rows[part::3] if part else rows
        durs = _durations(rng, len(chunk))
        db.executemany(f'UPDATE {table} SET "end" = start + ? WHERE rowid = ?', zip(durs, chunk))


def _scatter(db: sqlite3.Connection, rng: random.Random, table: str, devices: list[int]) -> None:
    """Several devices and streams."""
    streams = rng.sample([7, 13, 14, 21, 22], rng.randint(1, 3))
    rows = [r[0] for r in db.execute(f"SELECT rowid FROM {table}")]
    db.executemany(f"UPDATE {table} SET deviceId = ?, streamId = ? WHERE rowid = ?",
                   [(rng.choice(devices), rng.choice(streams), r) for r in rows])


def generate(fixtures: Path, seed: int, out: Path) -> Path:
    """Write export number `seed` to `out` (a .sqlite path) and return it."""
    rng = random.Random(seed)
    shutil.copyfile(fixtures / "nsys" / BASES[seed % len(BASES)], out)
    out.chmod(0o644)
    db = sqlite3.connect(out)
    try:
        tables = _tables(db)
        devices = [0]
        if "TARGET_INFO_GPU" in tables:
            devices = sorted({r[0] for r in db.execute("SELECT id FROM TARGET_INFO_GPU")}) or [0]
        for table in EVENT_TABLES:
            if table not in tables:
                continue
            _subsample(db, rng, table)
            _redraw(db, rng, table)
            if table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                         "CUPTI_ACTIVITY_KIND_MEMSET") and rng.random() < 0.6:
                _scatter(db, rng, table, devices)
        if "CUPTI_ACTIVITY_KIND_KERNEL" in tables and rng.random() < 0.5:
            names = [r[0] for r in db.execute("SELECT DISTINCT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL")]
            few = names[:rng.randint(1, 3)]
            for (rowid,) in db.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall():
                name = rng.choice(few)
                db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = ?, shortName = ?, "
                           "gridX = ?, blockX = ? WHERE rowid = ?",
                           (name, name, rng.choice([1, 2, 108]), rng.choice([128, 256]), rowid))
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
            sizes = rng.choice([[1, 2], [4, 1000, 1 << 20], [3, 5, 7, 1 << 30], [rng.randint(1, 1 << 34)]])
            for (rowid,) in db.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchall():
                db.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = ?, copyKind = ? WHERE rowid = ?",
                           (rng.choice(sizes), rng.choice([1, 2, 8, 10]), rowid))
        db.commit()
    finally:
        db.close()
    return out


def fixtures_tree() -> Path:
    """The unpacked fixtures: $HPCPROF_FIXTURES, else tests/fixtures unpacked to a temp dir."""
    import os

    if os.environ.get("HPCPROF_FIXTURES"):
        return Path(os.environ["HPCPROF_FIXTURES"])
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fixture_files import materialize

    return materialize(Path(tempfile.mkdtemp(prefix="hpcprof-fixtures-")))


def main() -> None:
    """`python3 tests/differential/nsys_gen.py OUT FIRST COUNT`: write OUT/gen<seed>.sqlite."""
    out, first, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    fixtures = fixtures_tree()
    for seed in range(first, first + count):
        generate(fixtures, seed, out / f"gen{seed}.sqlite")


if __name__ == "__main__":
    main()
