"""`hpcprof ncu metrics --layout echo` against Echo's own kernel_metric/ncu_report_process.py, run here
unmodified on the same ncu exports (real ones and generated ones), compared byte for byte.

Echo's script runs under this interpreter's pandas, or under $HPCPROF_ECHO_PYTHON (e.g. a venv
with Echo's pinned pandas 2.2.0); $HPCPROF_NCU_ECHO_SEEDS sets the number of generated cases. Its
outputs on the first 200 generated cases are kept (tests/fixtures/ncu/generated_echo_ncu.json.xz,
`python -m tests.differential.ncu_exports --keep 200 OUT`): it runs here on every 8th (LIVE_EVERY),
whose output must equal the kept one, on any case beyond them and on all under another pandas.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from differential.ncu_exports import (
    ECHO_COMMIT,
    ECHO_SCRIPT_SHA256,
    KEPT,
    KEPT_CASES,
    LIVE_EVERY,
    case_sha256,
    kept_output,
    make_case,
    run_echo,
    script_sha256,
    write_case,
)
from test_ncu_cli import GOLD, fake_ncu

from hpcprof.cli import main
from hpcprof.tools.ncu.analysis.echo import ECHO_METRICS

ECHO_PYTHON = os.environ.get("HPCPROF_ECHO_PYTHON", sys.executable)
SEEDS = int(os.environ.get("HPCPROF_NCU_ECHO_SEEDS", "200"))
ECHO_MIRROR = Path("/work/.mirror/NetX-lab+Echo-slowdown/repo")
H200_DETAILS = "gpu/run1/ncu/ncu_bfloat16_p2_rank0_details.csv"


def echo_layout(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, ["ncu", "metrics", "--layout", "echo", *args], env=env)


def echo_folder(root: Path, details: Path, kshortname: Path) -> Path:
    """Echo's kernel_metric folder with the two exports in temp/ (as run.sh names them)."""
    folder = root / details.stem
    (folder / "temp").mkdir(parents=True)
    (folder / "output").mkdir()
    shutil.copy(details, folder / "temp/output_details.csv")
    shutil.copy(kshortname, folder / "temp/output_kshortname.csv")
    return folder


def test_vendored_script_is_echos() -> None:
    """The script run here is Echo's, byte for byte (the mirror's copy, where this machine has it)."""
    assert script_sha256() == ECHO_SCRIPT_SHA256
    if ECHO_MIRROR.is_dir():
        blob = subprocess.run(["git", f"--git-dir={ECHO_MIRROR}", "show",
                               f"{ECHO_COMMIT}:kernel_metric/ncu_report_process.py"],
                              capture_output=True, check=True).stdout
        assert blob == Path(__file__).with_name("differential").joinpath("ncu_report_process_echo.txt").read_bytes()


@pytest.mark.slow
def test_real_exports_identical(fixtures_dir: Path, tmp_path: Path, record_counts) -> None:
    """Real exports: the two A40 reports exported by ncu 2022.3 (details + kshortname, also read
    from the .ncu-rep through ncu), the H200 details page of ncu 2025 (its kernel names have no
    parameters, so the page is its own kshortname export), and every GPU gold folder
    `ncu/echo_*/` (benchmarks/gpu/echo_ncu.sh's output_details.csv, output_kshortname.csv and
    Echo's kernel_metric_output.csv made there), also against that committed output."""
    cases = {fixtures_dir / GOLD / f"indexspaces_{r}_details.csv": fixtures_dir / GOLD / f"indexspaces_{r}_kshortname.csv"
             for r in ("74de19f", "7dc4fa5")}
    cases[fixtures_dir / H200_DETAILS] = fixtures_dir / H200_DETAILS
    gold = sorted((fixtures_dir / "ncu").glob("echo_*/kernel_metric_output.csv"))
    cases.update({g.with_name("output_details.csv"): g.with_name("output_kshortname.csv") for g in gold})
    folders = {echo_folder(tmp_path / "echo" / str(n), d, k): (d, k) for n, (d, k) in enumerate(cases.items())}
    echo, _ = run_echo(list(folders), ECHO_PYTHON)
    identical = 0
    for folder, (details, names) in folders.items():
        result = echo_layout(str(details), "--kshortname", str(names))
        assert result.exit_code == 0, result.output
        assert result.stdout.encode() == echo[folder], details
        if details.parent.name.startswith("echo_"):
            assert result.stdout.encode() == details.with_name("kernel_metric_output.csv").read_bytes(), details
        identical += 1
    exe = fake_ncu(tmp_path, fixtures_dir)
    for n, rev in enumerate(("74de19f", "7dc4fa5")):
        rep = echo_layout(str(fixtures_dir / f"ncu/indexspaces_{rev}.ncu-rep"), "--ncu", str(exe))
        assert rep.exit_code == 0, rep.output
        assert rep.stdout.encode() == echo[tmp_path / "echo" / str(n) / f"indexspaces_{rev}_details"]
        identical += 1
    assert (tmp_path / "ncu_calls.txt").read_text().splitlines()[-2:] == [
        f"--import {fixtures_dir}/ncu/indexspaces_7dc4fa5.ncu-rep --csv --page details",
        f"--import {fixtures_dir}/ncu/indexspaces_7dc4fa5.ncu-rep --csv --page details --print-kernel-base function"]
    record_counts(f"Echo ncu_report_process.py vs ncu metrics --layout echo, real ncu exports (2 ncu 2022.3 A40 "
                  f"reports as CSV and as .ncu-rep, 1 ncu 2025 H200 details page, {len(gold)} GPU gold folder(s) "
                  f"ncu/echo_*): {identical} of {len(folders) + 2} identical")


def test_echo_values_are_the_printed_ones(fixtures_dir: Path) -> None:
    """Checked against the exports themselves: Echo's cells are the details page's text; ncu 2022
    names ("Compute (SM) [%]", "Memory [%]", no "# SMs") leave three columns empty, which
    hpcprof's own layout fills (its numbers equal the printed text)."""
    details = fixtures_dir / GOLD / "indexspaces_7dc4fa5_details.csv"
    out = echo_layout(str(details), "--kshortname", str(fixtures_dir / GOLD / "indexspaces_7dc4fa5_kshortname.csv"))
    lines = out.stdout.splitlines()
    assert lines[0] == "ID,Kernel Name," + ",".join(ECHO_METRICS)
    assert lines[1:] == ["0,julia__5_11155,,,,90.63,66.78,100,0,100.12", "1,julia__5_11236,,,,42.36,38.56,100,0,100.04",
                         "2,julia__5_11236,,,,49.38,38.03,100,0,100.04", "3,julia__5_11155,,,,43.17,38.36,100,0,100.08",
                         "4,julia_frb_5885,,,,67.20,50.06,50,1.41,75.89"]
    assert out.stderr.splitlines()[-1].endswith(
        "5 row(s) of 5 kernel ID(s) in the details page and 5 in the kshortname export, 0 dropped; empty: Compute "
        "throughput, SM, Memory throughput (no value under Echo's section/metric name in the details page)")
    ours = CliRunner().invoke(main, ["ncu", "metrics", str(details), "--format", "csv"])
    own = pd.read_csv(pd.io.common.StringIO(ours.stdout))
    assert own["DRAM throughput"].tolist() == [90.63, 42.36, 49.38, 43.17, 67.20]
    assert own["Compute throughput"].notna().all()
    h200 = echo_layout(str(fixtures_dir / H200_DETAILS), "--kshortname", str(fixtures_dir / H200_DETAILS))
    first = h200.stdout.splitlines()[1].split(",")
    assert first[:4] == ["0", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "95.04", "132"]
    assert first[4:6] == ["72.81", "15.97"] and first[6:8] == ["14.68", "18.75"]  # SOL's Memory Throughput, not MWA's Gbyte/s


@pytest.mark.slow
def test_generated_differential(fixtures_dir: Path, tmp_path: Path, record_counts) -> None:
    """Echo's script and --layout echo on the same generated exports: identical bytes, or both fail.
    Echo's outputs on the first KEPT_CASES cases are kept: the script runs here on every LIVE_EVERY-th
    case, whose output must equal the kept one, on any case beyond them, and on all where $HPCPROF_ECHO_PYTHON
    has another pandas than the kept outputs' (a case costs Echo's script 0.1 s of CPU)."""
    kept = json.loads((fixtures_dir / "ncu" / KEPT).read_text())
    assert kept["script"] == ECHO_SCRIPT_SHA256 and len(kept["cases"]) == KEPT_CASES
    folders = {}
    for seed in range(SEEDS):
        case = make_case(seed)
        folders[tmp_path / f"seed{seed}"] = (seed, case)
        write_case(tmp_path / f"seed{seed}", case)
    live = [f for f, (seed, _) in folders.items() if seed % LIVE_EVERY == 0 or str(seed) not in kept["cases"]]
    echo, version = run_echo(live, ECHO_PYTHON)
    if version != kept["pandas"]:        # the kept outputs are another pandas': the script runs on every case
        echo.update(run_echo([f for f in folders if f not in echo], ECHO_PYTHON)[0])
    identical, differing, modes, checked, stale = 0, [], Counter(), 0, []
    for folder, (seed, case) in folders.items():
        record = kept["cases"].get(str(seed)) if version == kept["pandas"] else None
        if record is not None and record["input"] != case_sha256(case):
            stale.append(f"{folder.name}: the kept output was made from other exports")
            continue
        if record is not None and folder in echo:
            checked += 1
            if echo[folder] != kept_output(record):
                stale.append(f"{folder.name}: Echo's script's output here is not the kept one")
        expected = echo[folder] if record is None or folder in echo else kept_output(record)
        result = echo_layout(str(folder / "temp/output_details.csv"), "--kshortname",
                             str(folder / "temp/output_kshortname.csv"), "-o", str(folder / "hpcprof.csv"))
        if isinstance(expected, str):  # Echo's script raised: hpcprof refuses in one line
            same = result.exit_code == 2 and len(result.stderr.splitlines()) == 1
        else:
            same = result.exit_code == 0 and (folder / "hpcprof.csv").read_bytes() == expected
        identical += same
        modes[case.mode] += 1
        if not same:
            differing.append(f"{folder.name}: {result.stderr.strip()[:300]}")
    record_counts(f"Echo ncu_report_process.py (pandas {version}; run here on {len(echo)} cases, its kept outputs "
                  f"for the others) vs ncu metrics --layout echo (pandas {pd.__version__}): {SEEDS} generated export "
                  f"pairs ({modes['text']} text, {modes['float']} all-number, {modes['int']} all-integer Metric Value "
                  f"columns), {identical} identical; {checked} of Echo's outputs written here against its kept ones, "
                  f"{checked - len(stale)} identical")
    assert SEEDS >= 100 or "HPCPROF_NCU_ECHO_SEEDS" in os.environ
    assert not stale, ("Echo's outputs differ from the kept ones (remake them: python -m "
                       "tests.differential.ncu_exports --keep 200 OUT):\n" + "\n".join(stale[:5]))
    assert version != kept["pandas"] or checked == len(range(0, min(SEEDS, KEPT_CASES), LIVE_EVERY))
    assert not differing, "\n".join(differing[:5])


@pytest.mark.parametrize(("args", "message"), [
    (["D"], "--layout echo also needs Echo's second export: --kshortname FILE"),
    (["D", "D", "--kshortname", "K"], "--layout echo: give one FILE (Echo's script reads one report), not 2"),
    (["D", "--kshortname", "K", "--metric", "Occupancy/Block Limit SM"], "drop --metric or use --layout hpcprof"),
    (["D", "--kshortname", "K", "--format", "json"], "--layout echo writes Echo's CSV; drop --format json"),
    (["HEADER", "--kshortname", "K"], "{HEADER}: no kernel rows after the header"),
    (["D", "--kshortname", "BINARY"], "{BINARY}: not ncu --csv output (binary or not UTF-8)"),
    (["D", "--kshortname", "OTHER"], "{OTHER}: no 'ID', 'Kernel Name' column; not a kshortname CSV export"),
    (["D", "--kshortname", "NOPE"], "{NOPE}: no such file"),
])
def test_bad_input_is_one_line(fixtures_dir: Path, tmp_path: Path, args: list[str], message: str) -> None:
    details = fixtures_dir / GOLD / "indexspaces_74de19f_details.csv"
    files = {"D": details, "K": fixtures_dir / GOLD / "indexspaces_74de19f_kshortname.csv",
             "HEADER": tmp_path / "HEADER", "BINARY": tmp_path / "BINARY", "OTHER": tmp_path / "OTHER",
             "NOPE": tmp_path / "NOPE"}
    files["HEADER"].write_text(details.read_text().splitlines()[0] + "\n")
    files["BINARY"].write_bytes(b"\xff\xfe\x00ID\x00")
    files["OTHER"].write_text("step,loss\n1,0.5\n")
    out = tmp_path / "out.csv"
    result = echo_layout(*(str(files.get(a, a)) for a in args), "-o", str(out))
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: ") and message.format(**files) in line
    assert not out.exists()


def test_kshortname_needs_layout_echo(fixtures_dir: Path) -> None:
    details = str(fixtures_dir / GOLD / "indexspaces_74de19f_details.csv")
    result = CliRunner().invoke(main, ["ncu", "metrics", details, "--kshortname", details])
    assert result.exit_code == 2 and "--kshortname is read by --layout echo only" in result.stderr


def test_dropped_kernels_are_counted(fixtures_dir: Path, tmp_path: Path) -> None:
    """IDs the kshortname export lacks are dropped by Echo's inner join; the rule line counts them."""
    names = (fixtures_dir / GOLD / "indexspaces_7dc4fa5_kshortname.csv").read_text().splitlines(keepends=True)
    short = tmp_path / "short.csv"
    short.write_text("".join(line for line in names if not line.startswith(('"1"', '"3"'))))
    result = echo_layout(str(fixtures_dir / GOLD / "indexspaces_7dc4fa5_details.csv"), "--kshortname", str(short))
    assert result.exit_code == 0, result.output
    assert [line.split(",")[0] for line in result.stdout.splitlines()[1:]] == ["0", "2", "4"]
    assert "3 row(s) of 5 kernel ID(s) in the details page and 3 in the kshortname export, 2 dropped" in result.stderr
