"""`hpcprof collect` of ncu CSVs and torch.profiler traces file by file through the workers (as
nsys): the same tables as the whole-run collectors, and one damaged file named, the run partial
(exit 3), the other files collected."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from hpcprof_cli import hpcprof

from hpcprof.run.results import read_table
from hpcprof.tools.ncu.analysis.metrics import metrics_table
from hpcprof.tools.torch.analysis.analyses import all_analyses
from hpcprof.tools.torch.analysis.load import load_traces

pytestmark = pytest.mark.slow

EXPERIMENT = 'name: t\nworkload:\n  kind: command\n  argv: ["true"]\nresources:\n  nodes: 1\n  ranks_per_node: 1\n'


def tool_run(cwd: Path, tool: str, files: dict[str, Path]) -> Path:
    """A finished local run turned into a `tool` run holding `files` (name in the run -> fixture)."""
    (cwd / "exp.yaml").write_text(EXPERIMENT)
    result = hpcprof("submit", "exp.yaml", "--site", "local", "--wait", cwd=cwd)
    assert result.returncode == 0, result.stderr
    [run] = [p.parent for p in (cwd / "hpcprof-runs").glob("t/*/config.json")]
    config = json.loads((run / "config.json").read_text())
    config["experiment"]["profile"]["tool"] = tool
    config["world_size"] = 3                        # the ranks 0-2 the tests give files of
    (run / "config.json").write_text(json.dumps(config))
    (run / "profiles" / tool).mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        shutil.copy(source, run / "profiles" / tool / name)
    return run


def good_files(run: Path, tool: str) -> dict[Path, int]:
    """The run's profile files (rank from the file name)."""
    return {f: int(f.name[4]) for f in sorted((run / "profiles" / tool).iterdir())}


def test_ncu_per_file_equals_whole_run_and_isolates_a_bad_file(tmp_path: Path, fixtures_dir: Path) -> None:
    run = tool_run(tmp_path, "ncu", {"rank0.csv": fixtures_dir / "ncu/gold_ncu_2022.3/indexspaces_7dc4fa5_details.csv",
                                     "rank1.log": fixtures_dir / "ncu/superbench_cublaslt_ncu_b200.log"})
    expected, errors = metrics_table(list(good_files(run, "ncu")), ranks=good_files(run, "ncu"))   # all files at once
    assert not errors
    (run / "profiles/ncu/rank2.csv").write_bytes(b"\x00\xff" * 64)   # a binary file where a CSV should be
    result = hpcprof("collect", "--workers", "2", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if "skipped" in line and "rank2.csv" in line]
    got = read_table(run, "ncu_metrics")
    assert sorted(got["rank"].unique()) == [0, 1]
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)


def test_torch_per_file_equals_whole_run_and_isolates_a_bad_file(tmp_path: Path, fixtures_dir: Path) -> None:
    traces = fixtures_dir / "hta/trace_filter"
    run = tool_run(tmp_path, "torch", {"rank0.json.gz": traces / "sampled_rank-0.json.gz",
                                       "rank1.json.gz": traces / "sampled_rank-1.json.gz"})
    traces, errors = load_traces(list(good_files(run, "torch")), rank_of=good_files(run, "torch"))
    assert not errors
    expected = all_analyses(traces)                                          # all ranks at once
    (run / "profiles/torch/rank2.json.gz").write_bytes(gzip.compress(b'{"traceEvents": ['))  # cut short
    result = hpcprof("collect", "--workers", "2", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if "skipped" in line and "rank2.json.gz" in line]
    assert set(expected) == {"temporal", "overlap", "idle", "launch", "kernels", "kernel_types"}
    for name, table in expected.items():
        got = read_table(run, f"torch_{name}")
        assert set(got["rank"]) == {0, 1}, name
        pd.testing.assert_frame_equal(got, table.frame(), check_dtype=False)
