"""AMD TraceLens' NcclAnalyser on the committed Kineto traces: its per-collective sizes, algbw and
busbw, the gold of tests/test_busbw.py (hpcprof's torch_busbw against it).

    PYTHONPATH=/tmp/tl python tests/differential/tracelens_busbw.py [OUT.csv]

TraceLens from its source (github AMD-AGI/TraceLens, the commit in tests/fixtures/SOURCES.md):
`pip install --no-deps --target /tmp/tl <its checkout>` and `pip install --target /tmp/tl tqdm orjson
tabulate PyYAML` (what its package's __init__ imports beside pandas). One row per collective
matched across the ranks (TraceLens' `build_df_nccl_implicit_sync_cat(detailed=True)`: by process
group and order), with each rank's kernel duration (µs); TraceLens' MB are 2^20 bytes and its GB/s
2^30 bytes/s; its comm_latency is the fastest rank's kernel duration (µs).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
#: the Kineto fixtures (2 ranks each) TraceLens is run on
TRACES = ("h200_ddp_gpt2", "h200_ddp_gpt2_bf16", "h200_seqpar_bf16")
GOLD = FIXTURES / "tracelens" / "busbw_gold.csv"
COLUMNS = ["fixture", "collective_id", "Process Group Name", "Collective name", "Group size", "dtype",
           "In msg nelems", "Out msg nelems", "Full msg size (MB)", "comm_latency", "algo bw (GB/s)",
           "bus bw (GB/s)", "rank_0_dur", "rank_1_dur"]


def tracelens_rows(fixture: str) -> Any:
    """TraceLens' per-collective frame of one fixture's two ranks (COLUMNS)."""
    import logging

    from TraceLens import NcclAnalyser

    logging.getLogger("TraceLens").setLevel(logging.ERROR)
    files = [str(FIXTURES / "hta" / fixture / f"rank{r}.pt.trace.json.gz") for r in (0, 1)]
    frame = NcclAnalyser(files, world_size=2).build_df_nccl_implicit_sync_cat(detailed=True,
                                                                              strict_metadata_check=False)
    frame.insert(0, "fixture", fixture)
    return frame[COLUMNS]


def main(out: Path = GOLD) -> None:
    import pandas as pd

    out.parent.mkdir(parents=True, exist_ok=True)
    pd.concat([tracelens_rows(f) for f in TRACES], ignore_index=True).to_csv(out, index=False)
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else GOLD)
