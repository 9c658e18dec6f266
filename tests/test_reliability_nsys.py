"""Reliability: the nsys cross-rank analyses on a damaged export (random bytes written into a
real export): one line names the bad file, the good file's results are still printed, exit 2."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof

SOURCE = "nsysai_h100_2gpu_1s.sqlite"


@pytest.fixture(scope="module", params=[10, 30])
def damaged(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Path:
    """rank0.sqlite (good) and rank1.sqlite (64 KiB of random bytes at PARAM % of the file)."""
    directory = tmp_path_factory.mktemp(f"damaged{request.param}")
    shutil.copyfile(fixtures_dir / "nsys" / SOURCE, directory / "rank0.sqlite")
    bad = directory / "rank1.sqlite"
    shutil.copyfile(fixtures_dir / "nsys" / SOURCE, bad)
    size = bad.stat().st_size
    with bad.open("r+b") as fh:
        fh.seek(size * request.param // 100)
        fh.write(random.Random(request.param).randbytes(65536))
    return directory


@pytest.mark.slow
@pytest.mark.parametrize("analysis", ["nccl", "overlap", "gaps", "phases"])
def test_cross_rank_analysis_keeps_the_good_file(analysis: str, damaged: Path) -> None:
    result = hpcprof("nsys", analysis, "--format", "json", "rank0.sqlite", "rank1.sqlite", cwd=damaged)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    bad_lines = [line for line in result.stderr.splitlines() if line.startswith("hpcprof nsys:")]
    assert bad_lines and all("rank1.sqlite" in line for line in bad_lines), result.stderr
    rows = json.loads(result.stdout)
    alone = json.loads(hpcprof("nsys", analysis, "--format", "json", "rank0.sqlite", cwd=damaged).stdout)
    assert [r for r in rows if r.get("rank", 0) == 0] == [r for r in alone if r.get("rank", 0) == 0]
    assert all(r.get("rank", 0) != 1 for r in rows)


def test_slowdown_with_a_damaged_rank(damaged: Path) -> None:
    result = hpcprof("nsys", "slowdown", "--baseline", "rank0.sqlite", "--distributed", "rank0.sqlite",
                     "--distributed", "rank1.sqlite", "--format", "json", cwd=damaged)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2 and "rank1.sqlite" in result.stderr
    assert json.loads(result.stdout), "the good rank's slowdown is missing"
