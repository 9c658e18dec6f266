"""`hpcprof nsys slowdown`: globs and several files per option, Echo's layout as CSV and .xlsx, on
the GPT-2 DDP exports of tests/fixtures/gpu/run3 (world size 1 and 2)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from hpcprof.cli import main
from hpcprof.tools.nsys.analysis.echo import ECHO_COLUMNS


@pytest.fixture(scope="module")
def nsys_dir(gpu_data: Path) -> Path:
    return gpu_data / "run3" / "nsys"


def slowdown(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["nsys", "slowdown", *args])
    return res.exit_code, res.output


def test_shell_glob_and_quoted_glob_give_the_same_table(nsys_dir: Path, tmp_path: Path) -> None:
    base = str(nsys_dir / "ddp_gpt2_p1_rank0.sqlite")
    ranks = [str(nsys_dir / f"ddp_gpt2_p2_rank{r}.sqlite") for r in (0, 1)]
    code, out = slowdown("--baseline", base, "--distributed", *ranks, "--format", "csv", "-o", str(tmp_path / "a.csv"))
    assert code == 0, out
    code, out = slowdown("--baseline", str(nsys_dir / "ddp_gpt2_p1_rank*.sqlite"), "--distributed",
                         str(nsys_dir / "ddp_gpt2_p2_rank*.sqlite"), "--format", "csv", "-o", str(tmp_path / "b.csv"))
    assert code == 0, out
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    df = pd.read_csv(tmp_path / "a.csv")
    assert sorted(df["rank"].unique()) == [0, 1]


def test_echo_layout_csv_and_xlsx_per_device(nsys_dir: Path, tmp_path: Path) -> None:
    args = ["--baseline", str(nsys_dir / "ddp_gpt2_p1_rank0.sqlite"), "--distributed",
            str(nsys_dir / "ddp_gpt2_p2_rank*.sqlite"), "--layout", "echo"]
    assert slowdown(*args, "-o", str(tmp_path / "s.xlsx"))[0] == 0
    assert slowdown(*args, "-o", str(tmp_path / "s.csv"))[0] == 0
    assert slowdown(*args[:-2], "--format", "csv", "-o", str(tmp_path / "full.csv"))[0] == 0
    full = pd.read_csv(tmp_path / "full.csv")
    for device in (0, 1):                          # these torchrun ranks saw both GPUs: rank r on device r
        xlsx = pd.read_excel(tmp_path / f"s_rank{device}_device_{device}.xlsx", engine="openpyxl")
        csv = pd.read_csv(tmp_path / f"s_rank{device}_device_{device}.csv")
        assert list(xlsx.columns) == ECHO_COLUMNS and list(csv.columns) == ECHO_COLUMNS
        pd.testing.assert_frame_equal(xlsx, csv, check_dtype=False)
        mine = full[(full["device"] == device) & (full["status"] == "matched")]
        assert list(csv["id"]) == list(range(1, len(mine) + 1))
        assert list(csv["ground_truth"]) == list(mine["baseline_ns"])
        assert list(csv["duration"]) == list(mine["duration_ns"])
        assert csv["slowdown"].to_numpy() == pytest.approx(mine["slowdown"].to_numpy())


@pytest.mark.parametrize("args, needle", [
    (["--baseline", "nowhere/rank*.sqlite", "--distributed", "x.sqlite"], "--baseline"),
    (["--baseline", "{base}", "--distributed", "{base}", "--layout", "echo"], "-o FILE"),
    (["--baseline", "{base}", "--distributed", "{base}", "-o", "{out}"], "--layout echo"),
])
def test_bad_input_one_line_exit_2_nothing_written(nsys_dir: Path, tmp_path: Path, args: list[str],
                                                   needle: str) -> None:
    names = {"{base}": str(nsys_dir / "ddp_gpt2_p1_rank0.sqlite"), "{out}": str(tmp_path / "s.xlsx")}
    code, out = slowdown(*(names.get(a, a) for a in args))
    assert code == 2 and needle in out and len(out.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())
