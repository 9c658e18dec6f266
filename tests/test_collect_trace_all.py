"""`hpcprof trace all DIR`: traces loaded once, one output per analysis, the same tables as the
single commands and as collect (one code path)."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from hpcprof_cli import hpcprof

from hpcprof.cli import main

SINGLE = {"temporal": ["temporal"], "overlap": ["overlap"], "idle": ["idle"], "launch": ["launch"],
          "kernels": ["kernels"], "kernel_types": ["kernels", "--types", "--per-rank"]}


def test_trace_all_writes_one_file_per_analysis(tmp_path: Path, fixtures_dir: Path) -> None:
    traces = fixtures_dir / "hta" / "trace_filter"
    result = CliRunner().invoke(main, ["trace", "all", str(traces), "--format", "csv", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(f"{n}.csv" for n in SINGLE)
    for name, command in SINGLE.items():
        single = CliRunner().invoke(main, ["trace", *command, str(traces), "--format", "csv"])
        assert single.exit_code == 0
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / f"{name}.csv"), pd.read_csv(io.StringIO(single.stdout)))


@pytest.mark.slow
def test_trace_all_bad_input(tmp_path: Path, fixtures_dir: Path) -> None:
    traces = fixtures_dir / "hta" / "trace_filter"
    blocked = tmp_path / "file"
    blocked.write_text("")
    for args in (["--format", "table", "-o", str(tmp_path / "o")], ["--format", "csv", "-o", str(blocked / "o")]):
        result = hpcprof("trace", "all", str(traces), *args, timeout=120)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert "-o" in result.stderr.strip().splitlines()[-1]
    (tmp_path / "bad.json").write_text("{not json")
    result = hpcprof("trace", "all", str(tmp_path / "bad.json"), timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
