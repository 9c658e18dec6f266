"""`compare` with repetitions and a baseline on real H200 runs (the seqpar workload results of
tests/fixtures/gpu/run1 and run2, laid out as rendered, collected runs): 95 % confidence
intervals checked by hand, a verdict of "no significant change" for two runs of one configuration,
clear verdicts for different ones, and the exit status of --fail-if-slower."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from hpcprof_cli import hpcprof
from test_compare_stats import integrated_cdf
from test_report_html import gpu_sweep

pytestmark = pytest.mark.slow

SEQPAR = "run{}/seqpar/{}"
#: precision x ranks per node (1, 2), 2 repetitions each: the runs of one configuration in run1
SWEEP_2X2 = ("{workload.args.precision: [float32, bfloat16], resources.ranks_per_node: [1, 2]}",
             [SEQPAR.format(1, n) for n in ("base_float32_p1", "nsys_float32_p1", "base_float32_p2", "nsys_float32_p2",
                                            "base_bfloat16_p1", "nsys_bfloat16_p1", "base_bfloat16_p2",
                                            "base2_bfloat16_p2")])
#: precision on 1 rank, 4 repetitions each (two from the session of run1, two from run2's)
SWEEP_REP4 = ("{workload.args.precision: [float32, bfloat16], resources.ranks_per_node: [1]}",
              [SEQPAR.format(r, n) for r, n in ((1, "base_float32_p1"), (1, "nsys_float32_p1"),
                                                (2, "repeat1_float32_p1"), (2, "repeat2_float32_p1"),
                                                (1, "base_bfloat16_p1"), (1, "nsys_bfloat16_p1"),
                                                (2, "repeat1_bfloat16_p1"), (2, "repeat2_bfloat16_p1"))])
#: two runs of the same configuration (bfloat16 on 2 ranks), one point each
SAME = ("{workload.args.precision: [bfloat16], resources.ranks_per_node: [2]}",
        [SEQPAR.format(1, "base_bfloat16_p2")], [SEQPAR.format(1, "base2_bfloat16_p2")])
ITER = "iteration.mean [ms]"


@pytest.fixture(scope="module")
def runs(repo: Path, gpu_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One workdir with the three sweeps (ids S2X2, SREP4, SAME1, SAME2)."""
    tmp = tmp_path_factory.mktemp("verdicts")
    gpu_sweep(repo, gpu_data, tmp, SWEEP_2X2[0], 2, SWEEP_2X2[1], "20261121-000010-a2x2aa")
    gpu_sweep(repo, gpu_data, tmp, SWEEP_REP4[0], 4, SWEEP_REP4[1], "20261121-000011-aep4aa")
    gpu_sweep(repo, gpu_data, tmp, SAME[0], 1, SAME[1], "20261121-000012-a5a1aa")
    return gpu_sweep(repo, gpu_data, tmp, SAME[0], 1, SAME[2], "20261121-000013-a5a2aa")


def iteration_times(gpu_data: Path, name: str) -> list[float]:
    """Independent of hpcprof: each iteration's time from the workload's JSON, mean over ranks."""
    rows = pd.DataFrame(json.loads((gpu_data / name / "seqpar.json").read_text())["iterations"])
    return list(rows[rows["phase"] == "iteration"].groupby("iteration")["time_ms"].mean())


def compare_json(runs: Path, *args: str) -> list[dict]:
    res = hpcprof("compare", *args, "--format", "json", "--workdir", str(runs), cwd=runs)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def welch_by_hand(a: list[float], b: list[float]) -> float:
    """Two-sided p of Welch's test, with the t CDF integrated numerically (not stats.py's)."""
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    t = (ma - mb) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return 2 * (1 - integrated_cdf(abs(t), df))


def test_two_runs_of_one_configuration_no_significant_change(gpu_data: Path, runs: Path) -> None:
    rows = compare_json(runs, "20261121-000012-a5a1aa-p000", "20261121-000013-a5a2aa-p000",
                        "--baseline", "20261121-000012-a5a1aa-p000")
    first, second = iteration_times(gpu_data, SAME[1][0]), iteration_times(gpu_data, SAME[2][0])
    assert rows[0]["verdict"] == "baseline"
    assert rows[1]["verdict"] == "no significant change"
    assert "over iterations (100 vs 100" in rows[1]["test"]
    assert rows[1]["change_pct"] == pytest.approx(100 * (sum(second) / sum(first) - 1), rel=1e-6)
    assert rows[1]["p_value"] == pytest.approx(welch_by_hand(second, first), abs=1e-6)
    assert rows[1]["p_value"] > 0.05


def test_confidence_intervals_and_repetition_test_by_hand(gpu_data: Path, runs: Path) -> None:
    rows = compare_json(runs, "20261121-000011-aep4aa", "--baseline", "20261121-000011-aep4aa-p000")
    for row, names in zip(rows, (SWEEP_REP4[1][:4], SWEEP_REP4[1][4:]), strict=True):
        means = [sum(t) / len(t) for t in (iteration_times(gpu_data, n) for n in names)]
        mean = sum(means) / 4
        sd = math.sqrt(sum((m - mean) ** 2 for m in means) / 3)
        assert row["n"] == 4 and row[ITER] == pytest.approx(mean)
        assert row[f"{ITER} ci95"] == pytest.approx(3.182446 * sd / math.sqrt(4), rel=1e-5)  # t_{.975,3} by table
    fp32 = [sum(t) / len(t) for t in (iteration_times(gpu_data, n) for n in SWEEP_REP4[1][:4])]
    bf16 = [sum(t) / len(t) for t in (iteration_times(gpu_data, n) for n in SWEEP_REP4[1][4:])]
    assert rows[1]["test"] == "Welch t-test over repetitions' means (4 vs 4)"
    assert rows[1]["p_value"] == pytest.approx(welch_by_hand(bf16, fp32), abs=1e-6)
    assert rows[1]["verdict"] == "faster" and rows[1]["change_pct"] < -90


def test_fail_if_slower_gates_on_significant_slowdowns(runs: Path, tmp_path: Path) -> None:
    sweep, bf16_2 = "20261121-000010-a2x2aa", "20261121-000010-a2x2aa-p006"
    out = tmp_path / "gate.csv"
    slow = hpcprof("compare", sweep, "--baseline", bf16_2, "--fail-if-slower", "5", "--format", "csv",
                   "-o", str(out), "--workdir", str(runs), cwd=runs)
    assert slow.returncode == 1, slow.stderr
    assert "float32, 1" in slow.stderr and "bfloat16, 1" in slow.stderr and "+2066" in slow.stderr
    table = pd.read_csv(out)                 # the output is written before the gate
    assert list(table["verdict"]) == ["slower", "slower", "slower", "baseline"]
    assert {"change_pct", "p_value", "test", f"{ITER} ci95"} <= set(table.columns)
    big = hpcprof("compare", sweep, "--baseline", bf16_2, "--fail-if-slower", "3000", "--workdir", str(runs), cwd=runs)
    assert big.returncode == 0, big.stderr
    faster = hpcprof("compare", sweep, "--baseline", f"{sweep}-p000", "--fail-if-slower", "0", "--workdir", str(runs),
                     cwd=runs)
    assert faster.returncode == 0 and "no point significantly slower" in faster.stderr
    assert "verdict" in faster.stdout and "faster" in faster.stdout
    missing = hpcprof("compare", sweep, "--fail-if-slower", "5", "--workdir", str(runs), cwd=runs)
    assert missing.returncode == 2 and "--baseline" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
