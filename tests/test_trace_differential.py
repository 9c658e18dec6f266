"""hpcprof's trace analyses against HTA 0.5.0 itself, CSV bytes (`to_csv(index=False)`) compared, on
generated Kineto trace sets (tests/differential/kineto_gen.py): ranks, streams, overlapping kernels,
NCCL kernels overlapping long compute kernels (a third of the sets), whole-µs and fractional-µs
timestamps, launches without kernels and kernels without launches, flow and metadata events.
HPCPROF_HTA_DIFF_N sets the number of trace sets (default 200)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from differential.hta_diff import analyses, compare

pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore")]  # HTA 0.5.0's pandas deprecation warnings


def test_differential_vs_hta_0_5_0(record_counts) -> None:
    n = int(os.environ.get("HPCPROF_HTA_DIFF_N", "200"))
    compared, identical, failed, diffs = compare(range(n))
    record_counts(f"HTA 0.5.0: {compared} analyses' CSV bytes compared over {n} generated trace sets, {identical} "
                  f"identical, {failed} not compared (HTA's own assertion failed)")
    assert compared >= 6 * n
    assert not diffs, "\n".join(diffs[:20])


@pytest.mark.parametrize("name", ["h200_ddp_gpt2", "h200_seqpar_bf16", "trace_filter", "ns_resolution_trace",
                                  "nccl_parser_config"])
def test_real_traces_vs_hta_0_5_0(fixtures_dir: Path, name: str) -> None:
    """The analyses on the real Kineto traces (torch 2.11 on H200, DDP with comm/compute overlap,
    and HTA's own test traces) against HTA 0.5.0 run on the same files, CSV bytes compared."""
    logging.disable(logging.WARNING)
    diffs = {analysis: check() for analysis, check in analyses(fixtures_dir / "hta" / name).items()}
    assert diffs == dict.fromkeys(diffs), diffs
