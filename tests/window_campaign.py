"""The committed 2x H200 window campaign (tests/fixtures/gpu/h200_window_campaign, provenance in
tests/fixtures/SOURCES.md) as a workdir collected by the real `collect`: what the report tests read.

Runs: window-seqpar (seqpar S=4608 H=9216, 50 timed iterations; float32 p000/p001, bfloat16
p002/p003), window-seqpar-nvtx, echo-slowdown (GPT-2 DDP at world size 1 and 2, Echo's one-step
cudaProfilerApi window) and window-never-opened.
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest
from fixture_files import STORED, materialize
from hpcprof_cli import hpcprof as run_cli

REPO = Path(__file__).resolve().parents[1]
SWEEP = "20261122-234202-18a6d5"
FP32 = (f"{SWEEP}-p000", f"{SWEEP}-p001")
BF16 = (f"{SWEEP}-p002", f"{SWEEP}-p003")
ECHO = "20261122-234316-b2f418"
ECHO_RUNS = (f"{ECHO}-p000", f"{ECHO}-p001")
NVTX_RUN = "20261122-234301-2b23fc"
NEVER_RUN = "20261122-234359-f820d7"


def hpcprof(*args: str, workdir: Path | None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`hpcprof ARGS --workdir WORKDIR` (ARGS alone for a command of files: None), run as a user would (any
    exit status)."""
    return run_cli(*args, workdir=workdir, cwd=REPO, env=env, timeout=600)


def collected_campaign(dest: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """(the campaign's workdir under `dest`, collected again here; that collect's result)."""
    workdir = materialize(dest / "w", STORED / "gpu" / "h200_window_campaign")
    with sqlite3.connect(workdir / "hpcprof.db") as db:
        db.execute("UPDATE runs SET collect_status = NULL, collect_note = NULL")
    return workdir, hpcprof("collect", "--workers", "2", workdir=workdir)


@pytest.fixture(scope="session")
def window_campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """collected_campaign's workdir and collect, once per session: its tests only read the workdir
    (reports, compares, `nsys` commands on its exports), and conftest keeps them in one xdist group."""
    return collected_campaign(tmp_path_factory.mktemp("window-campaign"))


def run_dir(workdir: Path, run: str) -> Path:
    return next(workdir.glob(f"*/{run}"))
