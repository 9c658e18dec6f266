"""The standard-library engine of `hpcprof nsys stats` (small.py): the same bytes as the columnar
engine and as nsys's gold, chosen by `--engine auto` for CSV of small exports, and a start-up path
that imports neither pandas, numpy, pyarrow nor SQLAlchemy. (Against nsys itself on generated
exports: tests/test_differential_nsys.py, both engines.) Each report is declared once, for both
engines (stats.SPECS)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hpcprof.analysis.nsys_stats import numerics
from hpcprof.analysis.nsys_stats.stats import PYTHON_REPORTS, SPECS, implementation
from hpcprof.cli import main

SIX = "gpukernsum,cudaapisum,gpumemtimesum,gpumemsizesum,nvtxsum,osrtsum"
SIX_NEW = "cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum,cuda_gpu_mem_size_sum,nvtx_sum,osrt_sum"
SEVEN_NEW = SIX_NEW + ",cuda_gpu_kern_gb_sum"      # the NEW gb_sum's gold: tests/test_nsys_stats.py FRESH


def _stats(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["nsys", "stats", *args])
    return res.exit_code, res.stdout, res.stderr


def _exports(fixtures_dir: Path) -> list[Path]:
    return sorted((fixtures_dir / "nsys").rglob("*.sqlite"))


def test_every_report_is_declared_once_with_implementations_that_exist() -> None:
    names = [n for spec in SPECS for n in spec.names]
    assert len(names) == len(set(names)) == 44          # 24 current names, 20 of nsys 2022.4
    for spec in SPECS:
        assert callable(implementation(spec.columnar))
        assert spec.python is None or callable(implementation(spec.python))
    assert sorted(PYTHON_REPORTS) == sorted(SIX.split(",") + SEVEN_NEW.split(","))


@pytest.mark.slow
@pytest.mark.parametrize("reports", [SIX, SEVEN_NEW])
def test_both_engines_write_the_same_bytes_on_every_fixture(fixtures_dir: Path, reports: str) -> None:
    exports = _exports(fixtures_dir)
    assert len(exports) >= 10
    for export in exports:
        python = _stats(str(export), "-r", reports, "--format", "csv", "--engine", "python")
        columnar = _stats(str(export), "-r", reports, "--format", "csv", "--engine", "columnar")
        assert python[0] == columnar[0], (export, python[2], columnar[2])
        assert python[1] == columnar[1], export
        assert python[2] == columnar[2], export           # the same "skipped" lines
        assert python[1].count("Time (%)") + python[1].count("Total (MB)") >= 2


def test_python_engine_matches_the_nsys_gold(fixtures_dir: Path) -> None:
    run = fixtures_dir / "nsys" / "h200_seqpar_bf16"
    for report in SIX_NEW.split(","):
        code, out, _ = _stats(str(run / "rank0.sqlite"), "-r", report, "--format", "csv", "--engine", "python")
        assert code == 0
        assert out == (run / f"rank0_{report}.csv").read_text(), report
    nsys = fixtures_dir / "nsys"
    for export in ("ddp_ws2_rank1", "seqpar_bf16_p4_rank3"):
        code, out, _ = _stats(str(nsys / "h200_campaign" / f"{export}.sqlite"), "-r", "cuda_gpu_kern_gb_sum",
                              "--format", "csv", "--engine", "python")
        assert code == 0
        assert out == (nsys / "gold_nsys_stats_2025.3.1" / f"{export}_cuda_gpu_kern_gb_sum.csv").read_text(), export


def test_rounding_emulations_agree_with_the_columnar_ones() -> None:
    rng = np.random.default_rng(7)
    values = np.concatenate((rng.integers(0, 10**12, 3000) / rng.integers(1, 10**4, 3000),
                             np.arange(0, 3000) + 0.05, np.arange(0, 3000) / 4, [239194.65, 8921.25, 1.75, 0.0,
                                                                                   -2.25, math.nan, 1e15 + 0.25]))
    old = numerics.sqlite_round1_array(values)
    new = numerics.exact_round1_array(values)
    for x, o, n in zip(values.tolist(), old.tolist(), new.tolist(), strict=True):
        for mine, theirs in ((numerics.sqlite_round1(x), o), (numerics.exact_round1(x), n)):
            assert mine == theirs or (math.isnan(mine) and math.isnan(theirs)), x


def test_sqlite_round1_takes_floats_only_where_they_cannot_decide_a_tie() -> None:
    """sqlite_round1's float shortcut against the exact long-double emulation (sqlite_tenths) on values
    at, one and two ulps either side of every x.x5 up to 10^4 (where the shortcut must step aside),
    random ones, and large and tiny magnitudes."""
    rng = np.random.default_rng(45)
    near = np.arange(0, 100_000) / 10 + 0.05
    values = np.concatenate((near, np.nextafter(near, 0), np.nextafter(near, np.inf),
                             np.nextafter(np.nextafter(near, 0), 0), rng.integers(0, 10**13, 20_000) / 20,
                             rng.integers(0, 10**12, 20_000) / rng.integers(1, 10**4, 20_000),
                             [0.0, 5e-324, 2.0**52 + 0.5, 1e15 + 0.25, 1e15 - 0.25, 1e20, 1e300]))
    for x in values.tolist():
        want = math.copysign(1.0, x) * (float(numerics.sqlite_tenths(abs(x))) / 10.0) + 0.0 if x else 0.0
        assert numerics.sqlite_round1(x) == want == numerics.sqlite_round1(-x) * -1 + 0.0, x


def test_the_csv_cells_are_quoted_as_the_csv_module_quotes_them() -> None:
    """table.write_csv quotes by hand (the csv module imports re): the bytes of csv.writer on cells
    with commas, quotes, newlines, tabs, semicolons, spaces and empty text, in one to five columns
    (text a spreadsheet takes for a formula neutralised by safe_text.csv_cell on both sides)."""
    import csv
    import io
    import random

    from hpcprof.analysis.nsys_stats.table import Table, write_csv
    from hpcprof.safe_text import csv_cell

    rng = random.Random(45)
    pieces = ["a", ",", '"', "\n", " ", "é", "\t", ";", "'", "\\", "0", ""]
    for columns in (1, 2, 5):
        for _ in range(200):
            def text() -> str:
                return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
            names = [f"c{i}{text()}" for i in range(columns)]
            rows = [tuple(text() if rng.random() < 0.7 else rng.choice([None, rng.randint(-5, 10**6)])
                          for _ in range(columns)) for _ in range(rng.randint(1, 4))]
            mine = io.StringIO()
            write_csv(Table.from_rows(names, ["s"] * columns, rows, "None"), mine)
            theirs = io.StringIO()
            writer = csv.writer(theirs, lineterminator="\n")
            writer.writerow(names)
            writer.writerows([[csv_cell("None" if v is None else str(v)) for v in row] for row in rows])
            assert mine.getvalue() == theirs.getvalue(), (names, rows)


def test_the_csv_writer_knows_every_start_the_csv_cell_rule_changes() -> None:
    """write_csv imports safe_text.csv_cell only where a cell needs it: its own list of risky first
    characters is the rule's."""
    from hpcprof.analysis.nsys_stats.table import RISKY_START
    from hpcprof.safe_text import FORMULA_START

    assert set(RISKY_START) == set(FORMULA_START)


def test_exact_round1_is_the_decimal_rounding_of_the_binary_value() -> None:
    """nsys 2025's rounding (the float's exact binary expansion rounded half away from zero, to
    tenths), as Decimal computes it, on random values, every true tie (odd quarters), values one
    ulp either side of x.x5, negatives, and large and tiny magnitudes."""
    from decimal import ROUND_HALF_UP, Decimal

    rng = np.random.default_rng(21)
    near = np.arange(0, 20_000) / 10 + 0.05
    values = np.concatenate((rng.integers(0, 10**13, 20_000) / rng.integers(1, 10**5, 20_000),
                             rng.standard_normal(5_000) * 1e-3, np.arange(-20_000, 20_000) / 4,
                             near, np.nextafter(near, 0), np.nextafter(near, np.inf),
                             [2.0**52 + 0.5, 2.0**53, 1e20, -0.0, 5e-324]))
    for x in values.tolist():
        want = float(Decimal(x).quantize(Decimal("0.1"), ROUND_HALF_UP))
        got = numerics.exact_round1(x)
        assert got == want and math.copysign(1, got) == math.copysign(1, want), x
    assert math.isnan(numerics.exact_round1(math.nan))


@pytest.mark.slow
def test_auto_picks_python_for_small_csv_and_columnar_otherwise(fixtures_dir: Path) -> None:
    export = fixtures_dir / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite"
    probe = ("import sys; from hpcprof.cli import main; "
             "main(sys.argv[1:], standalone_mode=False); "
             "print('HEAVY', sorted(m for m in ('pandas', 'numpy', 'pyarrow', 'sqlalchemy') if m in sys.modules), "
             "file=sys.stderr)")
    csv = subprocess.run([sys.executable, "-c", probe, "nsys", "stats", "-r", SEVEN_NEW, "--format", "csv",
                          str(export)], capture_output=True, text=True, check=True)
    assert "HEAVY []" in csv.stderr
    table = subprocess.run([sys.executable, "-c", probe, "nsys", "stats", "-r", "cuda_gpu_kern_sum", str(export)],
                           capture_output=True, text=True, check=True)
    assert "'pandas'" in table.stderr and "ncclDevKernel" in table.stdout
    trace = subprocess.run([sys.executable, "-c", probe, "nsys", "stats", "-r", "cuda_gpu_trace", "--format", "csv",
                            str(export)], capture_output=True, text=True, check=True)
    # the columnar engine (numpy) writes the trace, without pandas (its tables are numpy columns)
    assert "'numpy'" in trace.stderr and "'pandas'" not in trace.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["-r", "cuda_gpu_trace", "--format", "csv"], "--engine python writes --format csv of"),
    (["-r", "cuda_gpu_kern_sum", "--format", "json"], "--engine python writes --format csv of"),
])
def test_python_engine_refuses_what_it_does_not_do(fixtures_dir: Path, args: list[str], message: str) -> None:
    export = fixtures_dir / "nsys" / "nsysai_mock.sqlite"
    code, out, err = _stats(str(export), *args, "--engine", "python")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and out == ""


def test_python_engine_names_a_damaged_file_and_goes_on(fixtures_dir: Path, tmp_path: Path) -> None:
    good = fixtures_dir / "nsys" / "nsysai_mock.sqlite"
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(good.read_bytes()[:50_000])
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database")
    code, out, err = _stats(str(truncated), str(good), str(text), "-r", "cuda_gpu_kern_sum", "--format", "csv",
                            "--engine", "python")
    assert code == 2
    assert "truncated.sqlite: truncated SQLite file" in err and "notes.sqlite: not an SQLite database" in err
    assert "2 of 3 input file(s) could not be processed" in err
    assert "reduce_kernel" in out and "Traceback" not in err
