"""compare / report / logs on a real local CPU sweep (mpiexec from the mpich wheel, 2 ranks,
float32 vs bfloat16, 2 repetitions) and a failed run, the sweep's HTML page checked in headless
Chromium (test_report_html); bad input exits 2 and writes nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from hpcprof_cli import hpcprof
from test_report_html import MAX_FIGURES, check_html, figure_count, findings

pytestmark = pytest.mark.slow

EXPERIMENT = """name: seqpar-cmp
workload:
  kind: seqpar
  args: {sequence_length: 128, hidden_dim: 64, iterations: 4, warmup_iterations: 1, precision: float32}
resources: {nodes: 1, ranks_per_node: 2, walltime: "00:05:00"}
repeat: 2
sweep:
  workload.args.precision: [float32, bfloat16]
"""
FAILING = """name: fails
workload:
  kind: command
  argv: [bash, -c, 'echo "step $HPCPROF_RANK ok"; [ "$HPCPROF_RANK" = 1 ] && echo "rank 1 broke" && exit 3; exit 0']
resources: {nodes: 1, ranks_per_node: 2}
"""


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One real sweep (4 runs) collected, one failed run, one completed run not collected."""
    cwd = tmp_path_factory.mktemp("cmp")
    (cwd / "sweep.yaml").write_text(EXPERIMENT)
    (cwd / "fails.yaml").write_text(FAILING)
    hpcprof("submit", "sweep.yaml", "--site", "local", "--wait", cwd=cwd, check=True)
    hpcprof("collect", cwd=cwd, check=True)
    failed_submit = hpcprof("submit", "fails.yaml", "--site", "local", "--wait", cwd=cwd, check=False)
    ok_submit = hpcprof("submit", "fails.yaml", "--site", "local", "--wait", "--set", "workload.argv=[\"true\"]", cwd=cwd, check=True)
    runs = sorted(p.parent for p in (cwd / "hpcprof-runs" / "seqpar-cmp").glob("*/config.json"))
    # by what submit printed: two run ids made in the same second do not sort in submit order
    failed, uncollected = (re.search(r"submitted (\S+) as", r.stderr).group(1) for r in (failed_submit, ok_submit))
    return {"cwd": cwd, "runs": runs, "sweep": runs[0].name.rsplit("-p", 1)[0], "failed": failed,
            "uncollected": uncollected}


def test_repeat_makes_runs_per_point(campaign: dict) -> None:
    params = [json.loads((r / "config.json").read_text())["sweep_point"]["params"] for r in campaign["runs"]]
    assert params == [{"workload.args.precision": p, "repeat": r} for p in ("float32", "bfloat16") for r in (0, 1)]


def test_html_report_of_the_sweep(campaign: dict, tmp_path: Path) -> None:
    """4 runs (2 points x 2 repetitions): breakdown, repetitions, stragglers, jitter, a figure per
    point's first run; every figure drawn in Chromium."""
    html = tmp_path / "report.html"
    hpcprof("report", campaign["sweep"], "--html", str(html), cwd=campaign["cwd"], check=True)
    assert 6 <= figure_count(html) <= MAX_FIGURES
    said = "\n".join(findings(html))
    assert "precision=bfloat16 against precision=float32 (baseline)" in said and "2 repetitions" in said
    assert "no peak known for device 'cpu'" in said   # no GPU: no % of peak, and it says so
    check_html(html, tmp_path / "cpu_sweep.png", at_least=6)


def test_compare_folds_repetitions_into_mean_and_sd(campaign: dict) -> None:
    out = hpcprof("compare", campaign["sweep"], "--format", "csv", cwd=campaign["cwd"], check=True).stdout
    df = pd.read_csv(pd.io.common.StringIO(out))
    assert list(df["workload.args.precision"]) == ["float32", "bfloat16"] and list(df["n"]) == [2, 2]
    for i, precision_runs in enumerate((campaign["runs"][:2], campaign["runs"][2:])):
        per_run = []
        for run in precision_runs:  # independent: the rank means of the workload's own JSON rows
            rows = pd.DataFrame(json.loads((run / "results" / "seqpar.json").read_text())["iterations"])
            per_run.append(rows[rows["phase"] == "iteration"].groupby("rank")["time_ms"].mean().mean())
        assert df.loc[i, "iteration.mean [ms]"] == pytest.approx(sum(per_run) / 2)
        assert df.loc[i, "iteration.mean [ms] sd"] == pytest.approx(pd.Series(per_run).std())
        # 95 % CI half-width of 2 repetitions: t_{0.975, 1} = 12.706 (t table) * sd / sqrt(2)
        assert df.loc[i, "iteration.mean [ms] ci95"] == pytest.approx(12.7062 * pd.Series(per_run).std() / 2 ** 0.5,
                                                                      rel=1e-4)
    assert (df["phase.matmul1.tflops [TFLOP/s]"] > 0).all() and (df["phase.allgather.busbw [GB/s]"] > 0).all()


def test_compare_baseline_ratios_and_formats(campaign: dict, tmp_path: Path) -> None:
    base = campaign["runs"][0].name
    out = tmp_path / "cmp.json"
    hpcprof("compare", campaign["sweep"], "--baseline", base, "--format", "json", "-o", str(out), cwd=campaign["cwd"], check=True)
    rows = json.loads(out.read_text())
    assert rows[0]["iteration.mean [ms] /base"] == pytest.approx(1.0)
    mean = "iteration.mean [ms]"
    assert rows[1][f"{mean} /base"] == pytest.approx(rows[1][mean] / rows[0][mean])
    assert rows[0]["verdict"] == "baseline" and rows[1]["change_pct"] == pytest.approx(
        100 * (rows[1][mean] / rows[0][mean] - 1))
    assert rows[1]["verdict"] in ("faster", "slower", "no significant change")   # CPU noise decides which
    assert rows[1]["test"] == "Welch t-test over iterations (8 vs 8; fewer than 3 repetitions)"
    assert 0 <= rows[1]["p_value"] <= 1
    table = hpcprof("compare", *(r.name for r in campaign["runs"][:2]), cwd=campaign["cwd"], check=True).stdout
    assert "iteration.mean" in table and " ms" in table and "float32" in table


@pytest.mark.parametrize("args, needle", [
    (["nosuchrun"], "nosuchrun"),
    (["SWEEP", "FAILED"], "mixes workloads"),
    (["SWEEP", "--baseline", "UNCOLLECTED"], "--baseline"),
    (["UNCOLLECTED"], "hpcprof collect"),
])
def test_compare_bad_input_one_line_exit_2_nothing_written(campaign: dict, tmp_path: Path, args: list[str],
                                                           needle: str) -> None:
    names = {"SWEEP": campaign["sweep"], "FAILED": campaign["failed"], "UNCOLLECTED": campaign["uncollected"]}
    out = tmp_path / "out.csv"
    res = hpcprof("compare", *(names.get(a, a) for a in args), "-o", str(out), cwd=campaign["cwd"], check=False)
    assert res.returncode == 2 and needle in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


def test_report_headline_first_and_failed_run_with_log_tail(campaign: dict) -> None:
    res = hpcprof("report", campaign["sweep"], campaign["failed"], cwd=campaign["cwd"], check=True)
    text = res.stdout
    first = campaign["runs"][0].name
    assert text.index(first) < text.index("headline metrics") < text.index("iteration.mean")
    assert "workload.args.precision" in text and "bfloat16" in text and "TFLOP/s" in text
    assert "workload_seqpar.iterations" not in text                 # per-event tables only with --full
    comparison = text[text.index("comparison"):]                    # repetitions folded: mean ± sd, n = 2
    assert "±" in comparison and re.search(r"│ n\s+│\s+2 │\s+2 │", comparison)
    failed = text[text.index(campaign["failed"]):]
    assert "FAILED" in failed and "rank 1 broke" in failed and f"hpcprof logs {campaign['failed']}" in failed
    full = hpcprof("report", first, "--full", cwd=campaign["cwd"], check=True).stdout
    assert "workload_seqpar.iterations" in full


def test_report_shows_the_recorded_headline_as_plain_text(campaign: dict) -> None:
    """The headline collect recorded is what `report` shows; a kernel name is printed as it is
    (no rich markup, no emoji codes)."""
    from hpcprof.run.results import Headline, read_headline, write_headline

    run = campaign["runs"][0]
    recorded = read_headline(run)
    assert recorded is not None and [m for m, _, _ in recorded.metrics][:2] == ["iteration.mean", "iteration.median"]
    name = "void k<[bold]x[/bold]>(:smile:)"
    try:
        write_headline(run, Headline([("iteration.mean", 1234.5, "ms")], [(name, 2.5, "other")]))
        text = hpcprof("report", run.name, cwd=campaign["cwd"], check=True).stdout
        assert name in text and "1,234.5 ms" in text and "2.50 ms" in text
    finally:
        write_headline(run, recorded)


def test_html_of_a_failed_run_shows_its_failure(campaign: dict, tmp_path: Path) -> None:
    """The terminal report shows the failure; the HTML said "No collected run to explain"."""
    from test_report_html import findings

    html = tmp_path / "failed.html"
    hpcprof("report", campaign["failed"], "--html", str(html), cwd=campaign["cwd"], check=True)
    (said,) = findings(html)
    assert said.startswith(f"Run {campaign['failed']} FAILED: exit code 3") and f"hpcprof logs {campaign['failed']}" in said


def test_logs_prints_a_rank_log(campaign: dict) -> None:
    res = hpcprof("logs", campaign["failed"], "--rank", "1", cwd=campaign["cwd"], check=True)
    assert "rank 1 broke" in res.stdout
    bad = hpcprof("logs", campaign["failed"], "--rank", "7", cwd=campaign["cwd"], check=False)
    assert bad.returncode == 2 and "rank7.log" in bad.stderr and "rank1.log" in bad.stderr


def test_thousands_separators_and_units() -> None:
    from hpcprof.report.terminal import format_value, with_unit

    assert format_value(1234567.891) == "1,234,567.9"
    assert with_unit(12.3456, "ms") == "12.35 ms"
    assert with_unit(0.012345, "GB/s") == "0.0123 GB/s"
    assert format_value(3.0, "rank") == "3"


@pytest.mark.parametrize("name, category", [
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nn_align1>(T1::Params)", "gemm"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8", "gemm"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "nccl.AllGather"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "nccl.AllReduce"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "memset"),
])
def test_kernel_categories(name: str, category: str) -> None:
    from hpcprof.analysis.categories import kernel_category

    assert kernel_category(name) == category


@pytest.mark.parametrize("args, needle", [(["nosuchsweep"], "nosuchsweep"), (["SWEEP", "FAILED"], "mixes workloads")])
def test_html_bad_input_writes_nothing(campaign: dict, tmp_path: Path, args: list[str], needle: str) -> None:
    names = {"SWEEP": campaign["sweep"], "FAILED": campaign["failed"]}
    out = tmp_path / "r.html"
    res = hpcprof("report", *(names.get(a, a) for a in args), "--html", str(out), cwd=campaign["cwd"], check=False)
    assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("extra, needle", [("repeat: 0\n", "'repeat'"),
                                           ("sweep:\n  repeat: [1, 2]\n", "cannot sweep over 'repeat'")])
def test_bad_repeat_is_one_line_exit_2(tmp_path: Path, extra: str, needle: str) -> None:
    (tmp_path / "exp.yaml").write_text(EXPERIMENT.split("repeat:")[0] + extra)
    res = hpcprof("submit", "exp.yaml", "--site", "local", cwd=tmp_path, check=False)
    assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "hpcprof-runs").exists()
