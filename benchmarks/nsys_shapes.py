"""Large nsys exports of four shapes, made from committed exports by repeating some of their tables'
rows in time (benchmarks/nsys_stats_speed.py, goal 2): each copy of a row shifted by the
source's activity span (and its correlation id by the largest one, so launches still pair with
their kernels).

- kernel-heavy: the DDP rank export's kernels (gpu/run3 ddp_gpt2_p2_rank0) x 4,000, the rest once;
- CUDA-API-heavy: all of that export's activity x 2,000 (1.07 M kernels, 4.23 M CUDA API calls);
- NVTX-heavy: a trainer's NVTX ranges (nsys/nsysai_mfu_2gpu_before: 19 k ranges, layer by layer) x 100;
- memcpy/UM-heavy: the memcpys (x 10,000, unified-memory migrations among them), memsets (x 5,000)
  and unified-memory CPU and GPU page faults (x 200,000) of a generated export
  (tests/differential/nsys_extra_exports.py, seed 3002: the DDP export with UM and OpenMP tables added).

    python benchmarks/nsys_shapes.py DEST_DIR [SHAPE ...]
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "differential"), str(REPO)]
from fixture_files import materialize  # noqa: E402  (the repository's fixtures, unpacked)

KERNEL, RUNTIME = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY, MEMSET = "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
UM_CPU, UM_GPU = "CUDA_UM_CPU_PAGE_FAULT_EVENTS", "CUDA_UM_GPU_PAGE_FAULT_EVENTS"
ACTIVITY = [KERNEL, RUNTIME, MEMCPY, MEMSET, "NVTX_EVENTS", "OSRT_API", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"]
FIXTURES = REPO / ".fixtures"
DDP = Path("gpu/run3/nsys/ddp_gpt2_p2_rank0.sqlite")
#: shape -> (source export under the fixtures, or "extra:SEED"; {table: copies})
SHAPES: dict[str, tuple[str, dict[str, int]]] = {
    "kernel-heavy": (str(DDP), {KERNEL: 4000}),
    "CUDA-API-heavy": (str(DDP), dict.fromkeys(ACTIVITY, 2000)),
    "NVTX-heavy": ("nsys/nsysai_mfu_2gpu_before.sqlite", {"NVTX_EVENTS": 100}),
    "memcpy/UM-heavy": ("extra:3002", {MEMCPY: 10000, MEMSET: 5000, UM_CPU: 200_000, UM_GPU: 200_000}),
}


def source_of(spec: str, work: Path) -> Path:
    """The source export of a shape (fixtures unpacked under the repository's .fixtures)."""
    fixtures = materialize(FIXTURES)
    if spec.startswith("extra:"):
        from nsys_extra_exports import derive_extra

        (work / "extra").mkdir(parents=True, exist_ok=True)
        return derive_extra(int(spec.split(":")[1]), fixtures, work / "extra")
    return fixtures / spec


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


def build(source: Path, copies: dict[str, int], out: Path) -> dict[str, int]:
    """Copy `source` to `out`, each table of `copies` holding its rows that many times (shifted in
    time by the activity's span); returns every activity table's rows."""
    shutil.copy(source, out)
    out.chmod(0o644)
    con = sqlite3.connect(out)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    timed = [t for t in {*ACTIVITY, *copies} if t in tables]
    bounds = [con.execute(f"SELECT min(start), max(coalesce({'end' if 'end' in _columns(con, t) else 'start'}, start)) "
                          f"FROM {t}").fetchone() for t in timed]
    lo = min(b[0] for b in bounds if b[0] is not None)
    hi = max(b[1] for b in bounds if b[1] is not None)
    span = hi - lo + 1000
    corr = max((con.execute(f"SELECT max(correlationId) FROM {t}").fetchone()[0] or 0
                for t in timed if "correlationId" in _columns(con, t)), default=0) + 1
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    for table, n in copies.items():
        if table not in tables or n <= 1:
            continue
        con.execute("DROP TABLE IF EXISTS temp.k")
        con.execute(f"CREATE TEMP TABLE k AS WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s "
                    f"WHERE i < {n - 1}) SELECT i FROM s")
        cols = _columns(con, table)
        shifted = [f"o.{c} + k.i * {span}" if c in ("start", "end") else f"o.{c} + k.i * {corr}"
                   if c == "correlationId" else f"o.{c}" for c in cols]
        quoted = ", ".join(f'"{c}"' for c in cols)
        con.execute(f"CREATE TEMP TABLE o AS SELECT * FROM main.{table}")
        con.execute(f"INSERT INTO main.{table} ({quoted}) SELECT {', '.join(shifted)} FROM o, k")
        con.execute("DROP TABLE o")
        con.commit()
    counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in sorted(timed)}
    con.close()
    return counts


def make(shape: str, work: Path) -> tuple[Path, dict[str, int]]:
    """The export of `shape` under `work` (built once: kept while its source and copies are the same)."""
    spec, copies = SHAPES[shape]
    work.mkdir(parents=True, exist_ok=True)
    source = source_of(spec, work)
    out = work / f"{shape.replace('/', '-')}.sqlite"
    stamp = out.with_suffix(".built")
    key = f"{source} {source.stat().st_size} {sorted(copies.items())}"
    if not out.exists() or not stamp.exists() or stamp.read_text() != key:
        counts = build(source, copies, out)
        stamp.write_text(key)
    else:
        con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
        present = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in sorted({*ACTIVITY, *copies} & present)}
        con.close()
    return out, counts


if __name__ == "__main__":
    dest = Path(sys.argv[1])
    dest.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:] or list(SHAPES):
        path, rows = make(name, dest)
        print(f"{name}: {path} ({path.stat().st_size / 2**20:.0f} MiB) " + ", ".join(f"{t} {n:,}" for t, n in rows.items()))
