"""`hpcprof ncu metrics` and the ncu collector: output formats, .ncu-rep through ncu, bad input."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from hpcprof.cli import main
from hpcprof.tools.ncu.analysis.collect import analyse_file
from hpcprof.tools.ncu.analysis.echo import RULE_HPCPROF
from hpcprof.tools.ncu.analysis.metrics import ECHO_COLUMNS
from hpcprof.tools.ncu.analysis.parse import NcuInputError

GOLD = "ncu/gold_ncu_2022.3"
REP = "ncu/indexspaces_74de19f.ncu-rep"
LAYOUT_LINE = f"hpcprof ncu metrics: layout: {RULE_HPCPROF}"


def fake_ncu(tmp_path: Path, fixtures_dir: Path, exit_code: int = 0) -> Path:
    """An `ncu` that answers `--import X --csv --page details|raw` (and `--page details
    --print-kernel-base function`, Echo's kshortname export) with the gold exports of X."""
    exe = tmp_path / "bin" / "ncu"
    exe.parent.mkdir(exist_ok=True)
    gold = fixtures_dir / GOLD
    exe.write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/ncu_calls.txt
if [ {exit_code} -ne 0 ]; then echo "==ERROR== Could not open report file '$2'."; exit {exit_code}; fi
name=$(basename "$2" .ncu-rep)
case "$*" in
  *"--print-kernel-base function"*) cat {gold}/${{name}}_kshortname.csv ;;
  *"--page details"*) cat {gold}/${{name}}_details.csv ;;
  *"--page raw"*) cat {gold}/${{name}}_raw.csv ;;
esac
""")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, ["ncu", "metrics", *args], env=env)


def test_csv_output(fixtures_dir: Path) -> None:
    result = run(str(fixtures_dir / GOLD / "indexspaces_7dc4fa5_details.csv"), "--format", "csv")
    assert result.exit_code == 0, result.output
    df = pd.read_csv(io.StringIO(result.stdout))
    assert list(df.columns) == ECHO_COLUMNS
    assert df["Compute throughput"].tolist() == [17.89, 23.98, 24.76, 24.09, 49.77]
    assert df["L2 hit rate"].tolist() == [100.12, 100.04, 100.04, 100.08, 75.89]
    assert df["SM"].isna().all()


def test_json_output_with_metric(fixtures_dir: Path) -> None:
    result = run(str(fixtures_dir / "ncu/superbench_cublaslt_ncu_b200.log"), "--format", "json",
                 "--metric", "GPU Speed Of Light Throughput/Duration", "--metric", "Occupancy/Block Limit SM")
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    assert row["DRAM throughput"] == 0.74 and row["SM"] == 152 and row["L1 hit rate"] is None
    assert row["GPU Speed Of Light Throughput/Duration [ns]"] == 406240
    assert row["Occupancy/Block Limit SM [block]"] == 32


def test_table_output_several_ranks(fixtures_dir: Path, tmp_path: Path) -> None:
    for rank, name in enumerate(["indexspaces_74de19f_details.csv", "indexspaces_7dc4fa5_details.csv"]):
        shutil.copy(fixtures_dir / GOLD / name, tmp_path / f"kernels.rank{rank}.csv")
    result = run(str(tmp_path / "kernels.rank0.csv"), str(tmp_path / "kernels.rank1.csv"))
    assert result.exit_code == 0, result.output
    assert "rank" in result.stdout and "julia_frb_5885" in result.stdout
    csv_out = run(str(tmp_path / "kernels.rank0.csv"), str(tmp_path / "kernels.rank1.csv"), "--format", "csv")
    assert pd.read_csv(io.StringIO(csv_out.stdout))["rank"].tolist() == [0, 0, 1, 1, 1, 1, 1]


def test_bad_files_reported_others_processed(fixtures_dir: Path, tmp_path: Path) -> None:
    details = (fixtures_dir / GOLD / "indexspaces_74de19f_details.csv").read_text()
    files = {"empty.csv": "", "truncated.csv": details[:7000], "other.csv": "step,loss\n1,0.5\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    good = fixtures_dir / "ncu/superbench_cublaslt_ncu_b200.log"
    result = run(*(str(tmp_path / n) for n in files), str(good), "--format", "csv")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines[:3] == [
        f"hpcprof ncu metrics: {tmp_path / 'empty.csv'}: empty file",
        f"hpcprof ncu metrics: {tmp_path / 'truncated.csv'}: truncated (the last line is incomplete)",
        f"hpcprof ncu metrics: {tmp_path / 'other.csv'}: not ncu --csv output (no header line with "
        "\"ID\" and \"Kernel Name\")",
    ]
    assert lines[3:5] == [f"hpcprof ncu metrics: column '{c} hit rate' is empty: profile with --section "
                          "MemoryWorkloadAnalysis" for c in ("L1", "L2")]
    assert lines[5:] == [LAYOUT_LINE, "Error: 3 problem(s) with the input; see above"]
    df = pd.read_csv(io.StringIO(result.stdout))
    assert df["file"].tolist() == [good.name] and df["DRAM throughput"].tolist() == [0.74]


def test_bad_metric_spec_is_a_usage_error(fixtures_dir: Path) -> None:
    result = run(str(fixtures_dir / "ncu/superbench_cublaslt_ncu_b200.log"), "--metric", "Duration")
    assert result.exit_code == 2 and "Section Name/Metric Name" in result.stderr


def test_ncu_rep_without_ncu(fixtures_dir: Path, tmp_path: Path) -> None:
    result = run(str(fixtures_dir / REP), env={"PATH": str(tmp_path)})
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        f"hpcprof ncu metrics: {fixtures_dir / REP}: reading a .ncu-rep needs Nsight Compute's ncu "
        f"(ncu is not on PATH); pass --ncu PATH, or export it: ncu --import {fixtures_dir / REP} "
        "--csv --page details > indexspaces_74de19f_details.csv")
    missing = run(str(fixtures_dir / REP), "--ncu", str(tmp_path / "nope"))
    assert f"({str(tmp_path / 'nope')!r} is not an executable)" in missing.stderr


@pytest.mark.slow
def test_ncu_rep_through_ncu(fixtures_dir: Path, tmp_path: Path) -> None:
    """Details and raw pages are exported; the raw page fills SM, which 2022 details lack."""
    exe, rep = fake_ncu(tmp_path, fixtures_dir), fixtures_dir / REP
    result = run(str(rep), "--ncu", str(exe), "--format", "csv", "--metric", "gpu__time_duration.sum")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ncu_calls.txt").read_text().splitlines() == [
        f"--import {rep} --csv --page details", f"--import {rep} --csv --page raw"]
    df = pd.read_csv(io.StringIO(result.stdout))
    assert df["SM"].tolist() == [84, 84]
    assert df["Compute throughput"].tolist() == [17.56, 66.27]          # details win over raw
    assert df["gpu__time_duration.sum [ns]"].tolist() == [459456, 8974464]
    path = f"{exe.parent}{os.pathsep}{os.environ['PATH']}"
    on_path = run(str(rep), "--format", "csv", env={"PATH": path})
    assert on_path.exit_code == 0
    assert on_path.stdout == run(str(rep), "--ncu", str(exe), "--format", "csv").stdout


def test_ncu_rep_ncu_fails(fixtures_dir: Path, tmp_path: Path) -> None:
    exe = fake_ncu(tmp_path, fixtures_dir, exit_code=1)
    result = run(str(fixtures_dir / REP), "--ncu", str(exe))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        f"hpcprof ncu metrics: {fixtures_dir / REP}: ncu --import failed (exit 1): "
        f"==ERROR== Could not open report file '{fixtures_dir / REP}'.")


def test_collect_ncu_per_file(fixtures_dir: Path, tmp_path: Path) -> None:
    """`hpcprof collect`'s per-file ncu analysis: Echo's table with rank and file columns; a .ncu-rep
    without a usable ncu is an error naming the file (collect then skips it, the run partial)."""
    files = {fixtures_dir / "ncu/superbench_cublaslt_ncu_b200.log": 3, fixtures_dir / GOLD / "indexspaces_7dc4fa5_details.csv": 1}
    df = pd.concat([analyse_file(path, rank, ncu=str(tmp_path / "no-ncu"))["metrics"] for path, rank in files.items()],
                   ignore_index=True)
    assert list(df.columns) == ["rank", "file", *ECHO_COLUMNS]
    assert df["rank"].tolist() == [3, 1, 1, 1, 1, 1]
    assert df["DRAM throughput"].tolist() == [0.74, 90.63, 42.36, 49.38, 43.17, 67.20]
    with pytest.raises(NcuInputError, match="reading a .ncu-rep"):
        analyse_file(fixtures_dir / REP, 0, ncu=str(tmp_path / "no-ncu"))


@pytest.mark.slow
def test_collect_ncu_rep_with_tool_path(fixtures_dir: Path, tmp_path: Path) -> None:
    df = analyse_file(fixtures_dir / REP, 5, ncu=str(fake_ncu(tmp_path, fixtures_dir)))["metrics"]
    assert df[["rank", "ID", "Kernel Name", "SM"]].values.tolist() == \
        [[5, 0, "julia__5_6739", 84], [5, 1, "julia_bb_4477", 84]]


def test_collect_ncu_nothing_readable(tmp_path: Path) -> None:
    (tmp_path / "x_rank0.csv").write_text("")
    with pytest.raises(NcuInputError, match="empty file"):
        analyse_file(tmp_path / "x_rank0.csv", 0)


def test_empty_columns_name_their_section(fixtures_dir: Path) -> None:
    """A profile without LaunchStats / MemoryWorkloadAnalysis: the empty Echo columns are named
    with the section each needs (stderr for csv/json, the title for the table); exit 0."""
    superbench = str(fixtures_dir / "ncu/superbench_cublaslt_ncu_b200.log")
    result = run(superbench, "--format", "csv")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "hpcprof ncu metrics: column 'L1 hit rate' is empty: profile with --section MemoryWorkloadAnalysis",
        "hpcprof ncu metrics: column 'L2 hit rate' is empty: profile with --section MemoryWorkloadAnalysis",
        LAYOUT_LINE]
    table = run(superbench)
    assert table.exit_code == 0 and table.stderr.splitlines() == [LAYOUT_LINE]
    assert "'L1 hit rate' is empty: profile with --section MemoryWorkloadAnalysis" in table.stdout
    full = run(str(fixtures_dir / GOLD / "indexspaces_7dc4fa5_details.csv"), "--format", "csv")
    assert full.stderr.splitlines() == [
        "hpcprof ncu metrics: column 'SM' is empty: profile with --section LaunchStats", LAYOUT_LINE]


def test_default_sections_fill_echo_table() -> None:
    """With neither `set` nor `sections`, hpcprof asks ncu for every section Echo's table needs;
    a user's own choice is passed through unchanged."""
    from hpcprof.tools.ncu.analysis.metrics import ECHO_SECTION_IDS, ECHO_SOURCES
    from hpcprof.tools.ncu.profiler import NcuOptions

    argv = NcuOptions().argv()
    asked = {argv[i + 1] for i, a in enumerate(argv) if a == "--section"}
    assert set(ECHO_SECTION_IDS) == set(ECHO_SOURCES)
    assert asked == set(ECHO_SECTION_IDS.values())
    assert "--section" not in NcuOptions(set="basic").argv()
    assert NcuOptions(sections=["Occupancy"]).argv().count("--section") == 1


def test_output_file_equals_stdout(fixtures_dir: Path, tmp_path: Path) -> None:
    """-o writes what stdout would show (hpcprof's layout as Echo's)."""
    details = str(fixtures_dir / GOLD / "indexspaces_7dc4fa5_details.csv")
    names = str(fixtures_dir / GOLD / "indexspaces_7dc4fa5_kshortname.csv")
    for args in (["--format", "csv"], ["--layout", "echo", "--kshortname", names]):
        shown = run(details, *args)
        written = run(details, *args, "-o", str(tmp_path / "out.csv"))
        assert shown.exit_code == written.exit_code == 0, written.output
        assert (tmp_path / "out.csv").read_text() == shown.stdout and written.stdout == ""
