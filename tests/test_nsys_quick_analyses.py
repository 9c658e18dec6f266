"""The quick lane of `hpcprof nsys nccl|overlap|gaps --format csv` (quick_analyses.py: the standard
library, one small export) writes what click's command writes (numpy and pandas): the same bytes,
messages and exit status on every fixture export and on generated ones (ties, nested NVTX ranges,
several devices and streams), gaps with thresholds that find some; and what it is not sure of it
leaves to click, having written nothing."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcprof.analysis.nsys import quick_analyses
from hpcprof.analysis.nsys.stats_command import quick
from hpcprof.cli import main

sys.path.insert(0, str(Path(__file__).parent / "differential"))
from nsys_exports import TIE_SEEDS, derive  # noqa: E402

#: (command, options) compared on every export
CAPTURE = ["--window", "capture"]     # the quick lane's window (the measured window's rules are click's)
CASES = [("nccl", CAPTURE), ("overlap", ["--window=capture"]), ("gaps", CAPTURE),
         ("gaps", [*CAPTURE, "--threshold-ms", "0"]), ("gaps", [*CAPTURE, "--threshold-ms", "0.05"]),
         ("gaps", [*CAPTURE, "--threshold-ms=2"])]


def _quick(command: str, args: list[str]) -> tuple[int | None, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = quick(command, args)
    return code, out.getvalue(), err.getvalue()


def _click(command: str, args: list[str]) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["nsys", command, *args])
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture(scope="module")
def exports(fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Every fixture export up to 32 MB and 16 generated ones (plain and with ties)."""
    work = tmp_path_factory.mktemp("generated")
    found = sorted(p for p in fixtures_dir.rglob("*.sqlite") if p.stat().st_size <= quick_analyses.SMALL_EXPORT_BYTES)
    return found + [derive(seed, fixtures_dir, work) for seed in [*range(8), *range(TIE_SEEDS, TIE_SEEDS + 8)]]


@pytest.mark.slow
def test_the_quick_lane_writes_what_the_command_writes(exports: list[Path]) -> None:
    ran = 0
    gaps_found = 0
    for export in exports:
        for command, options in CASES:
            args = [str(export), "--format", "csv", *options]
            code, out, err = _quick(command, args)
            if code is None:
                assert out == err == "", export          # left to click with nothing written
                continue
            ran += 1
            assert (code, out, err) == _click(command, args), (export, command, options)
            gaps_found += command == "gaps" and out.count("\n") > 1
    assert ran >= 0.8 * len(exports) * len(CASES)
    assert gaps_found >= 10                             # the gap rows themselves were compared


def test_an_output_file_is_written_as_the_command_writes_it(exports: list[Path], tmp_path: Path) -> None:
    export = next(e for e in exports if "h200_seqpar_bf16" in str(e))
    for lane in ("quick", "click"):
        args = [str(export), "--format", "csv", *CAPTURE, "-o", str(tmp_path / f"{lane}.csv")]
        code, _, err = _quick("nccl", args) if lane == "quick" else _click("nccl", args)
        assert code == 0 and f"wrote {tmp_path / lane}.csv" in err
    assert (tmp_path / "quick.csv").read_bytes() == (tmp_path / "click.csv").read_bytes()
    assert b"AllGather" in (tmp_path / "quick.csv").read_bytes()


def test_what_the_quick_lane_is_not_sure_of_goes_to_click(fixtures_dir: Path, tmp_path: Path) -> None:
    """No GPU activity, not SQLite, several files, other formats and options, the measured window
    (--window auto, the default, or nvtx:NAME): click's (the messages and exit status its command gives)."""
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database")
    no_gpu = fixtures_dir / "echo" / "quirks" / "slowdown_results.sqlite"
    rank = str(fixtures_dir / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite")
    for command, args in [("nccl", [str(text), "--format", "csv"]), ("overlap", [str(no_gpu), "--format", "csv"]),
                          ("nccl", [rank, rank, "--format", "csv"]), ("gaps", [rank]),
                          ("gaps", [rank, "--format", "csv", "--threshold-ms", "-1"]),
                          ("overlap", [rank, "--format", "csv", "--rank-map", "x=1"]),
                          ("nccl", [rank, "--format", "csv"]), ("gaps", [rank, "--format", "csv", "--window", "nvtx:timed"])]:
        assert _quick(command, args) == (None, "", ""), (command, args)


def test_the_quick_lane_imports_neither_click_nor_numpy(fixtures_dir: Path) -> None:
    probe = ("import sys; from hpcprof.__main__ import main\n"
             "try:\n    main()\nfinally:\n"
             "    print('HEAVY', sorted(m for m in ('click', 'numpy', 'pandas', 'pyarrow', 'typing', 'pathlib') "
             "if m in sys.modules), file=sys.stderr)")
    export = fixtures_dir / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite"
    res = subprocess.run([sys.executable, "-c", probe, "nsys", "overlap", "--format", "csv", "--window", "capture", str(export)],
                         capture_output=True, text=True)
    assert res.returncode == 0 and "HEAVY []" in res.stderr and res.stdout.startswith("rank,device,compute_ns")
