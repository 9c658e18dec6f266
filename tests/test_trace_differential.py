"""hpcprof's five trace analyses against HTA 0.5.0 itself on generated Kineto trace sets
(tests/differential/kineto_gen.py): ranks, streams, overlapping kernels, NCCL kernels, whole-µs
and fractional-µs timestamps, launches without kernels and kernels without launches.
HPCPROF_HTA_DIFF_N sets the number of trace sets (default 200)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from differential.hta_diff import analyses, compare

pytestmark = pytest.mark.filterwarnings("ignore")  # HTA 0.5.0's pandas deprecation warnings


def test_differential_vs_hta_0_5_0(record_counts) -> None:
    n = int(os.environ.get("HPCPROF_HTA_DIFF_N", "200"))
    compared, identical, failed, diffs = compare(range(n))
    record_counts(f"HTA 0.5.0: {compared} analyses compared over {n} generated trace sets, {identical} identical, "
                  f"{failed} not compared (HTA's own assertion failed)")
    assert compared >= 4 * n
    assert not diffs, "\n".join(diffs[:20])


@pytest.mark.parametrize("name", ["h200_ddp_gpt2", "h200_seqpar_bf16", "trace_filter", "ns_resolution_trace",
                                  "nccl_parser_config"])
def test_real_traces_vs_hta_0_5_0(fixtures_dir: Path, name: str) -> None:
    """The five analyses on the real Kineto traces (torch 2.11 on H200, and HTA's own test traces)
    against HTA 0.5.0 run on the same files."""
    logging.disable(logging.WARNING)
    diffs = {analysis: check() for analysis, check in analyses(fixtures_dir / "hta" / name).items()}
    assert diffs == dict.fromkeys(diffs), diffs
