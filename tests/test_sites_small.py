"""Smaller behaviours: nsys stats tables print numbers as nsys does, nsys gaps says when no
gap is over the threshold, submit --array --dry-run shows the array script, collect does not
collect (nor reprint) runs collected after they ended, Echo's ignored global_config.json keys are
warned about, status shows sweep ids."""

from __future__ import annotations

import json
import lzma
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from hpcprof_cli import hpcprof

from hpcprof.cli import main

REPO = Path(__file__).resolve().parents[1]
#: The CLI runs this checkout, with no $HPCPROF_WORKDIR from the caller.
CLI_ENV = {"PYTHONPATH": str(REPO), "HPCPROF_WORKDIR": None}
H200 = REPO / "tests" / "fixtures" / "nsys" / "h200_seqpar_bf16"


@pytest.fixture
def export(tmp_path: Path) -> Path:
    path = tmp_path / "rank0.sqlite"
    with lzma.open(H200 / "rank0.sqlite.xz") as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def test_stats_table_prints_numbers_like_nsys(export: Path) -> None:
    """The first row of nsys 2025's own CSV for this export (7481829.0 avg, 37409145 total) in
    nsys's table style."""
    result = CliRunner().invoke(main, ["nsys", "stats", str(export), "-r", "cuda_gpu_kern_sum", "--format", "table"])
    assert result.exit_code == 0, result.output
    first = next(line for line in result.output.splitlines() if "ncclDevKernel_AllGather" in line)
    cells = [c.strip() for c in first.strip("│ ").split("│")]
    assert cells[:8] == ["85.9", "37,409,145", "5", "7,481,829.0", "196,159.0", "194,014", "36,624,959",
                         "16,291,505.1"]
    assert "e+06" not in result.output


def test_gaps_says_when_there_are_none(export: Path) -> None:
    result = CliRunner().invoke(main, ["nsys", "gaps", str(export), "--threshold-ms", "100000", "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert "gaps: no GPU idle gap over 100000 ms in 1 file(s)" in result.output


def test_array_dry_run_shows_the_array_script(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [
        "submit", str(REPO / "examples/seqpar_cpu.yaml"), "--site", "slurm-local", "--array", "--dry-run",
        "--set", "sweep={workload.args.iterations: [2, 4]}", "--workdir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    array = result.output[result.output.rindex("#!/bin/bash"):]       # printed after the points' job scripts
    assert array.count("hp_run=") == 2 and 'case "${SLURM_ARRAY_TASK_ID:-}" in' in array
    assert "#SBATCH --job-name=seqpar-cpu" in array
    assert not (tmp_path / "runs").exists()


def test_echo_tool_paths_are_warned_about(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["submit", str(REPO / "examples/ddp_slowdown.yaml"), "--site", "polaris",
                                       "--set", "resources.account=PROJECT", "--dry-run"])
    assert result.exit_code == 0, result.output
    for key, field in (("python_path", "paths.python"), ("nsys_path", "paths.nsys"), ("ncu_path", "paths.ncu")):
        assert f"global_config.json: {key} is ignored; hpcprof runs the site's {field}" in result.output


def collected_lines(result: subprocess.CompletedProcess[str]) -> int:
    return sum(line.startswith("collected ") for line in result.stderr.splitlines())


@pytest.mark.slow
def test_collect_skips_runs_collected_after_they_ended(tmp_path: Path) -> None:
    exp = REPO / "examples/command_hello.yaml"
    for _ in range(2):
        assert hpcprof("submit", str(exp), "--site", "local", "--wait", cwd=tmp_path, env=CLI_ENV).returncode == 0
    first = hpcprof("collect", cwd=tmp_path, env=CLI_ENV)
    assert first.returncode == 0, first.stderr
    assert collected_lines(first) == 2
    rows = json.loads(hpcprof("status", "--format", "json", cwd=tmp_path, env=CLI_ENV).stdout)
    assert all(row["sweep"] == row["run"] for row in rows)
    assert hpcprof("submit", str(exp), "--site", "local", "--wait", cwd=tmp_path, env=CLI_ENV).returncode == 0
    again = hpcprof("collect", cwd=tmp_path, env=CLI_ENV)
    assert again.returncode == 0, again.stderr
    assert "2 run(s) collected earlier and unchanged since: skipped" in again.stderr
    assert collected_lines(again) == 1                          # only the new run
    named = hpcprof("collect", rows[0]["run"], cwd=tmp_path, env=CLI_ENV)    # named: collected again
    assert named.returncode == 0 and f"collected {rows[0]['run']}" in named.stderr
