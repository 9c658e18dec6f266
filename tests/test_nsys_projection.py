"""nsys 2025's rtree_scale (the coordinates of its NVTX projection R*Tree) against the values nsys
2025.3.1's own SQLite gave on the GPU machine (benchmarks/gpu/results/rtree_scale_probe.txt)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from hpcprof.tools.nsys.stats.projection import rtree_scale

PROBE = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "results" / "rtree_scale_probe.txt"


def test_rtree_scale_equals_nsys_2025_sqlite() -> None:
    rows = list(csv.DictReader(line for line in PROBE.read_text().splitlines() if not line.startswith("#")))
    assert len(rows) == 350
    for row in rows:
        low, high, t = int(row["mn"]), int(row["mx"]), int(row["t"])
        assert rtree_scale(np.array([t], dtype=np.int64), low, high) == [float(row["scaled"])], row
