"""A fourth profiler, added the way a package adds one: a rocprof-like tracer (`fakeroc`, a program
writing one CSV of kernel name, start and end per rank) with its collector and headline metrics,
registered by one entry point of the group `hpcprof.profilers` (hpcprof.profilers says how).

The files the tool touches, all here in tests/ (none of hpcprof's own; the test checks it):
  1. tests/plugins/fakeroc            the program (an executable, Python's standard library only)
  2. tests/plugins/fakeroc.py         its Profiler entry, its ToolCollector and its headline metrics
  3. tests/test_profiler_extension.py this test, which installs the registration: one line of an
                                      entry_points.txt, in a package's metadata on PYTHONPATH
With it installed, a 2-rank job of the local site (real mpiexec) is rendered with the tool's
launch, runs under it, is collected by its collector into its tables, and gets its headline
metric and top kernels; the job-start checks and `hpcprof doctor` probe its program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof

REPO = Path(__file__).resolve().parents[1]
PLUGIN = Path(__file__).parent / "plugins"
#: the registration: one entry point
ENTRY_POINT = "fakeroc = fakeroc:PROFILER"
#: each rank marks two kernels three times (a GEMM, an NCCL all-reduce), flushing every line
PROGRAM = """
import time
for step in range(3):
    for kernel, seconds in (("gemm_kernel", 0.02), ("ncclDevKernel_AllReduce_Sum_f32", 0.01)):
        print("fakeroc: begin", kernel, flush=True)
        time.sleep(seconds)
        print("fakeroc: end", kernel, flush=True)
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a Python where the package `fakeroc-plugin` is installed: its metadata
    (the entry point) and its module on PYTHONPATH."""
    site = tmp_path_factory.mktemp("site-packages")
    info = site / "fakeroc_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeroc-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[hpcprof.profilers]\n{ENTRY_POINT}\n")
    return {"PYTHONPATH": os.pathsep.join([str(site), str(PLUGIN), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("experiment") / "exp.yaml"
    path.write_text(json.dumps({"name": "roc", "workload": {"kind": "command", "argv": [sys.executable, "-c", PROGRAM]},
                                "resources": {"nodes": 1, "ranks_per_node": 2}, "profile": {"tool": "fakeroc"}}))
    return path


@pytest.fixture(scope="module")
def collected(installed: dict[str, str], experiment: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run of the experiment on the local site, submitted, waited for and collected."""
    cwd = tmp_path_factory.mktemp("runs")
    submitted = hpcprof("submit", str(experiment), "--site", "local", "--wait", cwd=cwd, env=installed, check=True)
    said = submitted.stdout + submitted.stderr
    assert f"fakeroc: fakeroc 1.0 ({PLUGIN / 'fakeroc'})" in said              # the local site's check at submit
    assert f"hpcprof: fakeroc fakeroc 1.0 ({PLUGIN / 'fakeroc'})" in said      # the job's check at its start
    [run] = [p.parent for p in (cwd / "hpcprof-runs").glob("roc/*/config.json")]
    done = hpcprof("collect", cwd=cwd, env=installed, check=True)
    assert "fakeroc: 12 kernel(s) on 2 rank(s)" in done.stdout + done.stderr     # its cross-rank step's note
    return run


def test_the_tool_is_one_entry_point_and_no_file_of_hpcprof() -> None:
    named = {str(p.relative_to(REPO)) for top in ("hpcprof", "templates", "site_configs", "tests")
             for p in (REPO / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts
             and b"fakeroc" in p.read_bytes()}
    assert named == {"tests/plugins/fakeroc", "tests/plugins/fakeroc.py", "tests/test_profiler_extension.py"}
    assert (REPO / "pyproject.toml").read_text().count("fakeroc") == 0


def test_without_its_package_the_tool_is_unknown(experiment: Path, tmp_path: Path) -> None:
    result = hpcprof("render", str(experiment), "--site", "local", "-o", str(tmp_path / "job"), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "field 'profile.tool': 'fakeroc' is not one of: 'nsys', 'ncu', 'torch', 'none'"), result.stderr


def test_the_rank_wrapper_starts_its_program(installed: dict[str, str], experiment: Path, tmp_path: Path) -> None:
    hpcprof("render", str(experiment), "--site", "local", "-o", str(tmp_path / "job"), cwd=tmp_path, env=installed,
            check=True)
    wrapper = (tmp_path / "job" / "rank_wrapper.sh").read_text()
    assert f'  exec {PLUGIN / "fakeroc"} -o "$HPCPROF_PROFILE_DIR/rank${{hp_rank}}" "$@"\n' in wrapper
    assert "export HPCPROF_PROFILE_TOOL=fakeroc" in wrapper
    job = (tmp_path / "job" / "job.sh").read_text()
    assert f"hp_tool=$(command -v {PLUGIN / 'fakeroc'})" in job     # the job-start check of its program
    assert json.loads((tmp_path / "job" / "config.json").read_text())["profile_extension"] == ".csv"


def test_a_two_rank_run_under_it_is_collected_into_its_tables(collected: Path) -> None:
    import pandas as pd

    from hpcprof.run.results import read_headline, read_table

    traces = {rank: pd.read_csv(collected / "profiles" / "fakeroc" / f"rank{rank}.csv") for rank in (0, 1)}
    assert [len(t) for t in traces.values()] == [6, 6]
    kernels = read_table(collected, "fakeroc_kernels")
    assert len(kernels) == 12 and sorted(kernels["rank"].unique()) == [0, 1]
    sums = read_table(collected, "fakeroc_kernel_sum").set_index(["rank", "name"])["total_ns"]
    by_hand = {(rank, name): int((t["end_ns"] - t["start_ns"])[t["kernel"] == name].sum())
               for rank, t in traces.items() for name in set(t["kernel"])}
    assert sums.to_dict() == by_hand
    # three sleeps of 20 ms, as fakeroc timed them: when it read each mark from the pipe, so a begin read late on a
    # loaded machine shortens a range (56.8 ms for the three seen in a bare-clone run): half of it at least
    assert by_hand[(0, "gemm_kernel")] >= 3 * 10_000_000

    headline = read_headline(collected)
    assert headline is not None
    metrics = {name: (value, unit) for name, value, unit in headline.metrics}
    total_ms = sum(by_hand.values()) / 2 / 1e6               # per rank, mean over the two
    assert metrics["gpu.total"][1] == "ms" and metrics["gpu.total"][0] == pytest.approx(total_ms)
    assert metrics["gpu.gemm"][0] == pytest.approx(sum(v for (_, n), v in by_hand.items() if n == "gemm_kernel") / 2e6)
    assert "gpu.nccl.AllReduce" in metrics
    top = headline.top_kernels_per_rank[0]
    assert top[0] == "gemm_kernel" and top[2] == "gemm"
    assert top[1] == pytest.approx(sum(v for (_, n), v in by_hand.items() if n == "gemm_kernel") / 2e6)   # per rank


def test_the_report_shows_its_headline(collected: Path, installed: dict[str, str]) -> None:
    shown = hpcprof("report", "--workdir", str(collected.parents[1]), env=installed, check=True).stdout
    assert "gpu.total" in shown and "gemm_kernel" in shown


@pytest.mark.slow
def test_doctor_probes_its_program(installed: dict[str, str], tmp_path: Path) -> None:
    done = hpcprof("doctor", "--site", "local", "--format", "json", cwd=tmp_path, env=installed)
    rows = {row["check"]: row for row in json.loads(done.stdout)}
    assert [name for name in rows if name in ("nsys", "ncu", "fakeroc")][-1] == "fakeroc"
    assert rows["fakeroc"]["found"].startswith("fakeroc 1.0 (")
    assert subprocess.run([str(PLUGIN / "fakeroc"), "--version"], capture_output=True, text=True,
                          check=True).stdout == "fakeroc 1.0\n"
