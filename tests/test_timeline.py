"""The NVTX timeline of one iteration per rank (the report's Gantt chart) on the H200 seqpar fixture."""

from __future__ import annotations

from pathlib import Path

from hpcprof.analysis.nsys import distributed as dist
from hpcprof.analysis.nsys.db import Export
from hpcprof.analysis.nsys.timeline import iteration_timeline


def test_middle_iteration_of_every_rank_with_its_phases(fixtures_dir: Path) -> None:
    run = fixtures_dir / "nsys" / "h200_seqpar_bf16"
    exports = [Export(run / f"rank{r}.sqlite") for r in (0, 1)]
    try:
        t = iteration_timeline(dist.load_activity(exports))
    finally:
        for e in exports:
            e.close()
    for rank in (0, 1):
        r = t[t["rank"] == rank]
        # step0..step4: the middle one, then its phases in order, all inside it
        assert list(r["range"]) == ["step2", "allgather", "NCCL:ncclAllGather", "matmul1", "matmul2",
                                    "reduce_scatter", "NCCL:ncclReduceScatter"]
        assert r["start_ms"].iloc[0] == 0 and (r["start_ms"] >= 0).all()
        assert (r["end_ms"] <= r["end_ms"].iloc[0]).all() and (r["end_ms"] > r["start_ms"]).all()
