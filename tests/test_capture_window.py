"""Capture windows that work: a command workload under an nsys capture range
must say that it opens it; a profiled rank whose nsys recorded nothing makes the collect partial
(exit 3), named with its cause, and `status` shows it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hpcprof_cli import hpcprof

from hpcprof.run.ranks import rank_from_filename
from hpcprof.run.record import read_record
from hpcprof.tools.nsys.analysis.collect import NsysCollector
from hpcprof.tools.nsys.profiler import NsysOptions

#: The CLI runs this checkout and finds no site files outside it.
CLI_ENV = {"HPCPROF_SITE_PATH": "", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}

COMMAND = {"name": "cw", "workload": {"kind": "command", "argv": ["true"]},
           "resources": {"nodes": 1, "ranks_per_node": 2},
           "profile": {"tool": "nsys", "nsys": {"capture_range": "cudaProfilerApi"}}}


def render(tmp_path: Path, experiment: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(experiment))
    return hpcprof("render", "exp.yaml", "-o", str(tmp_path / "out"), cwd=tmp_path, env=CLI_ENV)


def test_command_under_a_capture_range_must_open_it(tmp_path: Path) -> None:
    """Without the optimizer step hook (profile.window.auto: false), a command must say it opens the range."""
    result = render(tmp_path, {**COMMAND, "profile": {**COMMAND["profile"], "window": {"auto": False}}})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert "field 'profile.window.opened_by_program'" in result.stderr
    assert "capture_range cudaProfilerApi" in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("experiment", [
    {**COMMAND, "profile": {**COMMAND["profile"], "window": {"opened_by_program": True, "nvtx": "train_step"}}},
    {**COMMAND, "workload": {"kind": "seqpar", "args": {"sequence_length": 8, "hidden_dim": 8}}},
    {**COMMAND, "profile": {"tool": "nsys"}},
    COMMAND,
], ids=["command-that-opens-it", "seqpar-opens-it", "no-capture-range", "the-step-hook-opens-it"])
def test_renders_when_something_opens_the_range(tmp_path: Path, experiment: dict[str, Any]) -> None:
    result = render(tmp_path, experiment)
    assert result.returncode == 0, result.stderr


def test_nvtx_capture_sees_unregistered_strings() -> None:
    """torch.cuda.nvtx pushes unregistered strings, which nsys's NVTX capture skips by default."""
    argv = NsysOptions(capture_range="nvtx", nvtx_capture="timed").argv()
    assert "--capture-range=nvtx" in argv and "--nvtx-capture=timed" in argv
    assert "--env-var=NSYS_NVTX_PROFILER_REGISTER_ONLY=0" in argv
    assert not any(a.startswith("--env-var") for a in NsysOptions(capture_range="cudaProfilerApi").argv())


def rank_set_line(run: Path) -> str | None:
    """What collect says of the run's nsys rank set (NsysCollector.check_ranks): None when complete."""
    files = {str(p): rank_from_filename(p) for p in (run / "profiles" / "nsys").iterdir()}
    record = read_record(run / "config.json")
    return NsysCollector().check_ranks(run, record, {p: r for p, r in files.items() if r is not None})[1]


def finished_run(tmp_path: Path) -> Path:
    """A finished 2-rank local run, made an nsys run with capture range cudaProfilerApi."""
    experiment = {**COMMAND, "profile": {"tool": "none"}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(experiment))
    result = hpcprof("submit", "exp.yaml", "--site", "local", "--wait", cwd=tmp_path, env=CLI_ENV)
    assert result.returncode == 0, result.stderr
    run = next((tmp_path / "hpcprof-runs").glob("cw/*/config.json")).parent
    config = json.loads((run / "config.json").read_text())
    config["experiment"]["profile"] = {**config["experiment"]["profile"], "tool": "nsys"}
    config["experiment"]["profile"]["nsys"]["capture_range"] = "cudaProfilerApi"
    (run / "config.json").write_text(json.dumps(config))
    (run / "profiles" / "nsys").mkdir(parents=True, exist_ok=True)
    return run


@pytest.mark.slow
def test_a_rank_that_recorded_nothing_makes_the_collect_partial(tmp_path: Path, fixtures_dir: Path) -> None:
    run = finished_run(tmp_path)
    shutil.copy(fixtures_dir / "nsys/h200_seqpar_bf16/rank0.sqlite", run / "profiles/nsys/rank0.sqlite")
    with open(run / "logs/rank1.log", "a") as log:   # what nsys prints when the range never opened
        log.write("Collecting data...\nNo reports were generated\n")
    assert rank_set_line(run) == (
        "nsys: rank 1: nsys recorded nothing: the capture range never opened: the step hook saw no optimizer steps, "
        "the window opens after step 5 (profile.window.skip_steps) (logs/rank1.log: No reports were generated)")

    result = hpcprof("collect", cwd=tmp_path, env=CLI_ENV)
    assert result.returncode == 3, result.stderr
    # the line naming the rank (not a timing line such as "cross-rank 1.54 s" that the load can print)
    lines = [line for line in result.stderr.splitlines() if "rank 1:" in line]
    assert len(lines) == 1 and "the capture range never opened" in lines[0] and run.name in lines[0]
    status = json.loads(hpcprof("status", "--format", "json", cwd=tmp_path, env=CLI_ENV).stdout)
    assert status[0]["collected"].startswith("partial: nsys: rank 1: nsys recorded nothing")

    shutil.copy(fixtures_dir / "nsys/h200_seqpar_bf16/rank1.sqlite", run / "profiles/nsys/rank1.sqlite")
    assert rank_set_line(run) is None
    config = json.loads((run / "config.json").read_text())
    config["experiment"]["profile"]["ranks"] = [0]         # a rank not selected is not expected
    (run / "config.json").write_text(json.dumps(config))
    (run / "profiles/nsys/rank1.sqlite").unlink()
    assert rank_set_line(run) is None
    (run / "logs/rank0.log").unlink()
    (run / "profiles/nsys/rank0.sqlite").unlink()
    assert rank_set_line(run) == \
        "nsys: rank 0: no nsys profile and no rank log (logs/rank0.log): the rank never started"
