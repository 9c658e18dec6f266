"""`hpcprof report --html` checked in a real headless Chromium: no console errors, every figure
drawn, a PNG screenshot written. The GPU runs of tests/fixtures/gpu laid out as run directories
rendered by `hpcprof render` and collected by the real `collect`: GPT-2 DDP (run3: nsys at world
size 1 and 2, torch.profiler at 2, Echo's slowdown included), and H200 seqpar runs under nsys and
ncu and as a sweep. The real local CPU sweep's page is checked by test_report.py on its campaign.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from html import unescape
from pathlib import Path

import pandas as pd
import pytest
from hpcprof_cli import hpcprof

from hpcprof.campaign.store import Store, database_url
from hpcprof.run.results import read_table

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000"]
MAX_FIGURES = 24


def chromium() -> str:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("chromium not installed (tests/services/chromium.sh installs it)")
    return exe


def load_in_chromium(html: Path, screenshot: Path) -> tuple[str, list[str]]:
    """(DOM after the scripts ran, console messages), and a 1400-wide screenshot of the page: one
    Chromium does both."""
    with tempfile.TemporaryDirectory(prefix="hpcprof-chromium-") as profile:
        dump = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1400,2400",
                               f"--screenshot={screenshot}", "--dump-dom", html.as_uri()],
                              capture_output=True, text=True, timeout=120, check=False)
    console = [line for line in dump.stderr.splitlines() if ":CONSOLE" in line]
    return dump.stdout, console


def drawn_figures(dom: str) -> tuple[int, int]:
    """(figures in the page, figures whose div holds a rendered plotly SVG with drawn marks:
    bar or marker points, pie slices or lines)."""
    declared = int(re.search(r"data-figures=\"(\d+)\"", dom).group(1))
    parts = re.split(r'<div id="fig\d+"', dom)[1:]
    drawn = sum(1 for p in parts if 'class="main-svg"' in p and re.search(r'class="(point|slice|js-line)[ "]', p))
    return declared, drawn


def findings(html: Path) -> list[str]:
    """The sentences of the report's findings section, as text."""
    section = re.search(r"<section id='findings'>(.*?)</section>", html.read_text(), re.DOTALL).group(1)
    return [unescape(re.sub(r"<[^>]+>", "", li)) for li in re.findall(r"<li>(.*?)</li>", section, re.DOTALL)]


def figure_count(html: Path) -> int:
    """Figures in the page: plotly divs, and the count the page declares (they must agree)."""
    text = html.read_text()
    declared = int(re.search(r"data-figures='(\d+)'", text).group(1))
    assert declared == len(re.findall(r'<div id="fig\d+"', text))
    return declared


def check_html(html: Path, screenshot: Path, at_least: int) -> None:
    dom, console = load_in_chromium(html, screenshot)
    assert console == [], console
    declared, drawn = drawn_figures(dom)
    assert at_least <= declared <= MAX_FIGURES and drawn == declared, (declared, drawn)
    assert screenshot.stat().st_size > 20_000
    assert "cdn" not in html.read_text()[:2000].lower() and "<script src" not in html.read_text()
    if os.environ.get("HPCPROF_SCREENSHOTS"):
        shutil.copy(screenshot, Path(os.environ["HPCPROF_SCREENSHOTS"]) / screenshot.name)


def gpu_run(workdir: Path, rendered: Path, run_id: str, tool: str, profiles: dict[str, Path], result: Path) -> Path:
    """A run directory from `hpcprof render` output and a finished GPU run's profiles and results."""
    config = json.loads((rendered / "config.json").read_text())
    run = workdir / config["experiment"]["name"] / run_id
    (run / "profiles" / tool).mkdir(parents=True)
    (run / "results").mkdir()
    (run / "logs").mkdir()
    config["run_id"] = run_id
    (run / "config.json").write_text(json.dumps(config))
    for name, source in profiles.items():
        shutil.copy(source, run / "profiles" / tool / name)
    shutil.copy(result, run / "results" / result.name)
    (run / "status").write_text("start=1763760000\nexit_code=0\nend=1763760090\n")
    (run / "submission.json").write_text(json.dumps({"scheduler": "local", "job_id": f"local-fg-{run_id}"}))
    (run / "DONE").write_text("")
    store = Store(database_url(workdir))  # recorded as submit does (one sweep row per run here)
    if not store.has_run(run_id):
        point = config["sweep_point"]
        row = {"run_id": run_id, "point_index": point["index"], "params": point["params"],
               "experiment": config["experiment"]["name"], "site": config["site"]["name"], "run_dir": str(run),
               "world_size": config["world_size"], "profile_tool": tool}
        store.add_sweep(run_id, row["experiment"], row["site"], config["experiment"].get("sweep", {}), [row])
    return run


@pytest.mark.slow   # Chromium
def test_html_report_of_gpu_ddp_runs_with_echo_slowdown(repo: Path, gpu_data: Path, tmp_path: Path) -> None:
    data = gpu_data / "run3"
    hpcprof("render", str(repo / "examples" / "ddp_slowdown.yaml"), "--site", "polaris", "--set", "resources.account=PROJECT", "-o", "r", cwd=tmp_path, check=True)
    hpcprof("render", str(repo / "examples" / "ddp_slowdown.yaml"), "--site", "polaris", "--set", "resources.account=PROJECT", "-o", "t",
            "--set", "sweep={}", "--set", "profile.tool=torch", "--set", "resources.ranks_per_node=2",
            "--set", "workload.args.world_size=2", cwd=tmp_path, check=True)
    work = tmp_path / "runs"
    for p, ws in ((0, 1), (1, 2)):
        gpu_run(work, tmp_path / "r" / f"p00{p}", f"20261121-000000-ec40ec-p00{p}", "nsys",
                {f"rank{r}.sqlite": data / "nsys" / f"ddp_gpt2_p{ws}_rank{r}.sqlite" for r in range(ws)},
                data / "ddp" / f"nsys_p{ws}" / "ddp_steps.json")
    gpu_run(work, tmp_path / "t", "20261121-000001-70c470", "torch",
            {f"rank{r}.pt.trace.json.gz": data / "torch" / f"rank{r}.pt.trace.json.gz" for r in (0, 1)},
            data / "ddp" / "torch_p2" / "ddp_steps.json")
    hpcprof("collect", "--workdir", str(work), cwd=tmp_path, check=True)

    slow = read_table(next(work.glob("*/*-p001")), "echo_slowdown")
    matched = slow[slow["status"] == "matched"]
    assert len(matched) > 400 and sorted(matched["rank"].unique()) == [0, 1]
    assert (matched.loc[matched["overlap_ratio"] == 0, "slowdown"] == 0).all()

    out = hpcprof("compare", "20261121-000000-ec40ec", "--format", "csv", "--workdir", str(work), cwd=tmp_path, check=True).stdout
    cmp = pd.read_csv(pd.io.common.StringIO(out))
    assert list(cmp["world_size"]) == [1, 2]
    assert pd.isna(cmp.loc[0, "slowdown.median []"]) and pd.notna(cmp.loc[1, "slowdown.median []"])
    assert cmp.loc[1, "gpu.nccl.AllReduce [ms]"] > 0 and (cmp["gpu.gemm [ms]"] > 0).all()
    kern = read_table(next(work.glob("*/*-p001")), "nsys_cuda_gpu_kern_sum")   # per rank: mean over the 2 ranks
    assert cmp.loc[1, "gpu.total [ms]"] == pytest.approx(kern["Total Time (ns)"].sum() / 1e6 / 2)
    parts = [c for c in cmp.columns if c.startswith("gpu.") and c.endswith(" [ms]") and c != "gpu.total [ms]"]
    assert cmp.loc[1, parts].sum() == pytest.approx(cmp.loc[1, "gpu.total [ms]"])

    html = tmp_path / "gpu.html"
    hpcprof("report", "20261121-000000-ec40ec", "20261121-000001-70c470", "--html", str(html),
            "--workdir", str(work), cwd=tmp_path, check=True)
    text = html.read_text()
    for title in ("kernel slowdown distribution", "temporal breakdown per rank", "kernel launch delay",
                  "GPU idle gaps", "GPU time by kernel category per rank", "NCCL collectives per type and rank"):
        assert title in text, title
    steps = [pd.DataFrame(json.loads((data / "ddp" / f"nsys_p{ws}" / "ddp_steps.json").read_text())["steps"])
             for ws in (1, 2)]   # the scaling view's step: the median of every counted step of every rank
    t1, t2 = (float(df.loc[(df["phase"] == "step") & df["counted"] & ~df["window"], "time_ms"].median())
              for df in steps)
    said = "\n".join(findings(html))   # ddp scales weakly: 2 ranks do twice the work in about the same time
    assert f"speed-up {2 * t1 / t2:.2f}x (ideal 2.00x), parallel efficiency" in said and "weak scaling" in said
    check_html(html, tmp_path / "gpu_ddp.png", at_least=15)


@pytest.mark.slow   # Chromium
def test_html_report_of_an_h200_seqpar_run_against_peaks(repo: Path, gpu_data: Path, fixtures_dir: Path,
                                                          tmp_path: Path) -> None:
    """nsys profiles of the H200 bf16 fixture and the workload results of an H200 bf16 2-rank run
    of tests/fixtures/gpu/run1 (two runs of the same configuration), collected and drawn."""
    hpcprof("render", str(repo / "examples" / "seqpar_polaris.yaml"), "--site", "polaris", "--set", "resources.account=PROJECT", "-o", "s",
            "--set", "sweep={}", "--set", "resources.nodes=1", "--set", "resources.ranks_per_node=2",
            "--set", "profile.ranks=all", cwd=tmp_path, check=True)
    work = tmp_path / "runs"
    gpu_run(work, tmp_path / "s", "20261121-000002-5e9a00", "nsys",
            {f"rank{r}.sqlite": fixtures_dir / "nsys" / "h200_seqpar_bf16" / f"rank{r}.sqlite" for r in (0, 1)},
            gpu_data / "run1" / "seqpar" / "nsys_bfloat16_p2" / "seqpar.json")
    hpcprof("collect", "--workdir", str(work), cwd=tmp_path, check=True)
    html = tmp_path / "seqpar.html"
    hpcprof("report", "--html", str(html), "--workdir", str(work), cwd=tmp_path, check=True)
    said = "\n".join(findings(html))
    assert "of the H200 SXM bfloat16 dense peak (989.5 TFLOP/s)" in said
    assert "of the H200 SXM NVLink per direction (450.0 GB/s)" in said
    assert "one iteration on every rank" in html.read_text()
    check_html(html, tmp_path / "h200_seqpar.png", at_least=8)


@pytest.mark.slow   # Chromium
def test_html_report_of_an_h200_ncu_run_shows_speed_of_light(repo: Path, gpu_data: Path, tmp_path: Path) -> None:
    """The ncu run of tests/fixtures/gpu/run1 (rank 0's details CSV and the run's seqpar.json)."""
    data = gpu_data / "run1"
    hpcprof("render", str(repo / "examples" / "seqpar_polaris.yaml"), "--site", "polaris", "--set", "resources.account=PROJECT", "-o", "n",
            "--set", "sweep={}", "--set", "resources.nodes=1", "--set", "resources.ranks_per_node=2",
            "--set", "profile.tool=ncu", "--set", "profile.ranks=[0]", cwd=tmp_path, check=True)
    work = tmp_path / "runs"
    gpu_run(work, tmp_path / "n", "20261121-000003-9c0000", "ncu",
            {"rank0.csv": data / "ncu" / "ncu_bfloat16_p2_rank0_details.csv"},
            data / "seqpar" / "ncu_bfloat16_p2" / "seqpar.json")
    hpcprof("collect", "--workdir", str(work), cwd=tmp_path, check=True)
    html = tmp_path / "ncu.html"
    hpcprof("report", "--html", str(html), "--workdir", str(work), cwd=tmp_path, check=True)
    assert "ncu speed of light (Echo metrics)" in html.read_text()
    check_html(html, tmp_path / "h200_ncu.png", at_least=4)


def gpu_sweep(repo: Path, gpu_data: Path, tmp_path: Path, sweep: str, repeat: int, results: list[str], sweep_id: str,
              site: tuple[str, ...] = ("--site", "polaris", "--set", "resources.account=PROJECT")) -> Path:
    """A collected sweep of seqpar runs without a profile (tool none) from the H200 workload results
    of tests/fixtures/gpu (`results`: one `runN/seqpar/NAME` per rendered point, in point order);
    returns the workdir."""
    out = tmp_path / f"render-{sweep_id}"
    hpcprof("render", str(repo / "examples" / "seqpar_polaris.yaml"), *site, "-o", str(out),
            "--set", "resources.nodes=1", "--set", "profile.tool=none", "--set", f"sweep={sweep}",
            "--set", f"repeat={repeat}", cwd=tmp_path, check=True)
    work = tmp_path / "runs"
    data = gpu_data
    for index, name in enumerate(results):  # a sweep of one point renders into `out` itself
        rendered = out / f"p{index:03d}" if len(results) > 1 else out
        gpu_run(work, rendered, f"{sweep_id}-p{index:03d}", "none", {}, data / name / "seqpar.json")
    hpcprof("collect", "--workdir", str(work), cwd=tmp_path, check=True)
    return work


SWEEP_2X2 = ("{workload.args.precision: [float32, bfloat16], resources.ranks_per_node: [1, 2]}",
             [f"run1/seqpar/{n}" for n in ("base_float32_p1", "nsys_float32_p1", "base_float32_p2", "nsys_float32_p2",
                                           "base_bfloat16_p1", "nsys_bfloat16_p1", "base_bfloat16_p2",
                                           "base2_bfloat16_p2")])


def seqpar_mean(gpu_data: Path, name: str, column: str = "mean_ms", phase: str = "iteration") -> float:
    """A phase's figure from the workload's own JSON (independent of collect and report)."""
    phases = pd.DataFrame(json.loads((gpu_data / name / "seqpar.json").read_text())["phases"])
    return float(phases.loc[phases["phase"] == phase, column].iloc[0])


def seqpar_median(gpu_data: Path, name: str) -> float:
    """The median of every iteration of every rank in the workload's own JSON (the scaling view's step)."""
    rows = pd.DataFrame(json.loads((gpu_data / name / "seqpar.json").read_text())["iterations"])
    return float(rows.loc[rows["phase"] == "iteration", "time_ms"].median())


@pytest.mark.slow   # Chromium
def test_html_report_of_an_h200_sweep_explains_it(repo: Path, gpu_data: Path, tmp_path: Path) -> None:
    """precision x ranks (1, 2) x 2 repetitions of H200 runs: findings with numbers checked against
    the workload's JSON, scaling, % of peak, and at most 24 figures for the 8 runs."""
    work = gpu_sweep(repo, gpu_data, tmp_path, SWEEP_2X2[0], 2, SWEEP_2X2[1], "20261121-000020-a2x2aa")
    html = tmp_path / "sweep.html"
    hpcprof("report", "20261121-000020-a2x2aa", "--html", str(html), "--workdir", str(work), cwd=tmp_path, check=True)
    said = "\n".join(findings(html))
    names = SWEEP_2X2[1]
    t_fp32 = [(seqpar_median(gpu_data, names[i]) + seqpar_median(gpu_data, names[i + 1])) / 2 for i in (0, 2)]
    assert f"precision=float32: 2 ranks against precision=float32, ranks_per_node=1: speed-up " \
           f"{t_fp32[0] / t_fp32[1]:.2f}x (ideal 2.00x)" in said and "strong scaling" in said
    tflops = (seqpar_mean(gpu_data, names[6], "tflops", "matmul1") + seqpar_mean(gpu_data, names[7], "tflops", "matmul1")) / 2
    assert f"matmul1 {tflops:,.1f} TFLOP/s = {100 * tflops / 989.5:.2f} % of the H200 SXM bfloat16 dense peak" in said
    assert "precision=bfloat16, ranks_per_node=2 against precision=float32, ranks_per_node=1 (baseline)" in said
    assert "faster (Welch t-test over iterations (200 vs 200" in said
    text = html.read_text()
    assert "hpc-datasheet-sc23-h200" in text            # each peak says where it comes from
    for section in ("breakdown", "repetitions", "scaling", "peaks", "iterations", "appendix"):
        assert f"<section id='{section}'>" in text, section
    assert 8 <= figure_count(html) <= MAX_FIGURES
    check_html(html, tmp_path / "h200_sweep.png", at_least=8)


@pytest.mark.slow
def test_site_peaks_override_the_known_gpus(repo: Path, gpu_data: Path, tmp_path: Path) -> None:
    """A site file's `peaks:` replaces the table's figures it gives and says so; bad peaks exit 2."""
    site = (repo / "site_configs" / "polaris.yaml").read_text()
    (tmp_path / "site.yaml").write_text(site + "peaks:\n  tflops: {bfloat16: 1000}\n  nvlink_GBps: 400\n"
                                        "  source: measured by the site's acceptance tests\n")
    work = gpu_sweep(repo, gpu_data, tmp_path, "{workload.args.precision: [bfloat16], resources.ranks_per_node: [2]}", 1,
                     [SWEEP_2X2[1][6]], "20261121-000021-a5a1aa", site=("--site-file", str(tmp_path / "site.yaml"), "--set", "resources.account=PROJECT"))
    html = tmp_path / "site.html"
    hpcprof("report", "--html", str(html), "--workdir", str(work), cwd=tmp_path, check=True)
    said = "\n".join(findings(html))
    tflops = seqpar_mean(gpu_data, SWEEP_2X2[1][6], "tflops", "matmul1")
    assert f"matmul1 {tflops:,.1f} TFLOP/s = {tflops / 10:.2f} % of the H200 SXM bfloat16 dense peak (1,000.0" in said
    assert "of the H200 SXM NVLink per direction (400.0 GB/s)" in said
    assert "site polaris: measured by the site&#x27;s acceptance tests" in html.read_text()
    (tmp_path / "bad.yaml").write_text(site + "peaks:\n  tflops: {bfloat16: -1}\n")
    res = subprocess.run([sys.executable, "-m", "hpcprof", "render", str(repo / "examples" / "seqpar_polaris.yaml"),
                          "--site-file", str(tmp_path / "bad.yaml"), "--set", "resources.account=PROJECT", "-o", "bad"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 2 and "peaks" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "bad").exists()
