"""Reliability: bad input gives one line naming the problem, exit code 2, no traceback, and
nothing written (the CLI's one error type and top-level handler, the strict YAML loader, strict
models). Every case runs the real `hpcprof` in a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof
from reliability_util import experiment, ok, one_line_error

BASE = "name: t\nworkload:\n  kind: command\n  argv: [\"true\"]\n"

#: experiment text -> words the one-line error must hold
BAD_EXPERIMENTS = {
    "dup_key": (BASE + "name: u\n", "duplicate key 'name'"),
    "deep": ("x: " + "[" * 200 + "]" * 200 + "\n" + BASE, "nested deeper"),
    "bool_nodes": (BASE + "resources:\n  nodes: true\n", "resources.nodes"),
    "str_nodes": (BASE + "resources:\n  nodes: '2'\n", "resources.nodes"),
    "huge_nodes": (BASE + "resources:\n  nodes: 100000000000000000000\n", "resources.nodes"),
    "zero_walltime": (BASE + "resources:\n  walltime: '00:00:00'\n", "walltime"),
    "bad_walltime": (BASE + "resources:\n  walltime: '00:99:99'\n", "walltime"),
    "four_part_walltime": (BASE + "resources:\n  walltime: '1:00:00:00'\n", "walltime"),
    "empty_argv0": ("name: t\nworkload:\n  kind: command\n  argv: [\"\"]\n", "argv"),
    "nul_argv": ("name: t\nworkload:\n  kind: command\n  argv: [\"a\\0b\"]\n", "NUL"),
    "nul_env": (BASE + "env:\n  X: \"a\\0b\"\n", "NUL"),
    "rank_spaces": (BASE + "profile:\n  tool: nsys\n  ranks: '0, 1'\n", "profile.ranks"),
    "huge_sweep": (BASE + "sweep:\n  env.A: [" + ",".join(map(str, range(200))) + "]\n"
                   "  env.B: [" + ",".join(map(str, range(200))) + "]\n", "40000 points", "--max-points"),
}


@pytest.mark.parametrize("case", sorted(BAD_EXPERIMENTS))
def test_bad_experiment_is_one_line(case: str, tmp_path: Path) -> None:
    text, *words = BAD_EXPERIMENTS[case]
    path = tmp_path / "e.yaml"
    path.write_text(text)
    one_line_error(hpcprof("submit", str(path), "--site", "local", cwd=tmp_path), *words)
    assert not (tmp_path / "hpcprof-runs").exists()


def test_sweep_limit_can_be_raised(tmp_path: Path) -> None:
    path = experiment(tmp_path / "e.yaml", ["true"], "sweep:\n  env.A: [1, 2, 3]\n")
    one_line_error(hpcprof("render", str(path), "--max-points", "2", cwd=tmp_path), "--max-points")
    ok(hpcprof("render", str(path), "--max-points", "3", cwd=tmp_path))


def test_set_of_a_swept_key_is_refused(tmp_path: Path) -> None:
    path = experiment(tmp_path / "e.yaml", ["true"], "sweep:\n  resources.ranks_per_node: [1, 2]\n")
    one_line_error(hpcprof("render", str(path), "--set", "resources.ranks_per_node=99", cwd=tmp_path),
                   "sweep sets 'resources.ranks_per_node'")
    ok(hpcprof("render", str(path), "--set", "sweep={}", "--set", "resources.ranks_per_node=1", cwd=tmp_path))


def test_non_utf8_files(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_bytes(BASE.encode() + b"env:\n  X: \"\xff\xfe\"\n")
    one_line_error(hpcprof("render", str(exp), cwd=tmp_path), "UTF-8", "line 6")
    site = tmp_path / "s.yaml"
    site.write_bytes(b"name: \xe9t\xe9\nscheduler: local\n")
    good = experiment(tmp_path / "g.yaml", ["true"])
    one_line_error(hpcprof("render", str(good), "--site-file", str(site), cwd=tmp_path), "UTF-8")


def test_unwritable_and_overlong_paths(tmp_path: Path) -> None:
    good = experiment(tmp_path / "g.yaml", ["true"])
    blocker = tmp_path / "file"
    blocker.write_text("x")
    one_line_error(hpcprof("render", str(good), "-o", str(blocker / "out"), cwd=tmp_path), str(blocker))
    one_line_error(hpcprof("render", str(good), "-o", str(tmp_path / ("x" * 300)), cwd=tmp_path), "too long")
    one_line_error(hpcprof("submit", str(good), "--workdir", str(tmp_path / ("y" * 300)), cwd=tmp_path), "too long")


@pytest.mark.parametrize("args", [
    ["nsys", "gaps", "--threshold-ms", "nan"], ["nsys", "gaps", "--threshold-ms", "-1"],
    ["trace", "kernels", "--duration-ratio", "5"], ["trace", "kernels", "--num-kernels", "-1"],
    ["trace", "idle", "--consecutive-kernel-delay", "inf"], ["report", "--rows", "-3"],
])
def test_bad_numbers_are_refused(args: list[str], tmp_path: Path) -> None:
    result = hpcprof(*args, str(tmp_path / "x"), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("Error: Invalid value"), result.stderr


@pytest.mark.slow
def test_rank_range_is_bounded(tmp_path: Path, fixtures_dir: Path) -> None:
    trace = next((fixtures_dir / "hta").rglob("*.json"))
    one_line_error(hpcprof("trace", "temporal", "--ranks", "0-2000000000", str(trace), cwd=tmp_path),
                   "more than")
    one_line_error(hpcprof("trace", "temporal", "--ranks", "5-1", str(trace), cwd=tmp_path), "low to high")


@pytest.mark.slow
def test_seqpar_too_large_for_memory(tmp_path: Path) -> None:
    one_line_error(hpcprof("bench", "seqpar", "-s", "100000000000", "-d", "8", "--device", "cpu",
                           cwd=tmp_path, timeout=300), "memory")
    assert not (tmp_path / "results").exists()


def test_ncu_csv_of_na_values(tmp_path: Path, fixtures_dir: Path) -> None:
    import csv

    source = next((fixtures_dir / "ncu").rglob("*_details.csv"))
    rows = list(csv.reader(source.open()))
    column = rows[0].index("Metric Value")
    bad = tmp_path / "rank0_details.csv"
    with bad.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(
            [rows[0]] + [r[:column] + ["n/a"] + r[column + 1:] for r in rows[1:]])
    result = hpcprof("ncu", "metrics", str(bad), cwd=tmp_path)
    one_line_error(result)
    assert "no metric has a value" in result.stderr


def test_nsys_stats_with_nothing_to_report(tmp_path: Path, fixtures_dir: Path) -> None:
    import shutil
    import sqlite3

    export = tmp_path / "nokernels.sqlite"
    shutil.copyfile(fixtures_dir / "nsys" / "nsysai_h100_2gpu_1s.sqlite", export)
    with sqlite3.connect(export) as conn:
        conn.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    # as nsys does: the report is skipped with what the export lacks, exit 0, nothing on stdout
    result = hpcprof("nsys", "stats", "-r", "cuda_gpu_kern_sum,mpi_event_sum", str(export), cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [f"hpcprof nsys: {export}: cuda_gpu_kern_sum skipped: no CUDA kernel data",
                                          f"hpcprof nsys: {export}: mpi_event_sum skipped: no MPI event data"]


def test_status_exit_codes_are_integers(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.yaml", ["bash", "-c", "exit 4"])
    hpcprof("submit", str(exp), "--wait", cwd=tmp_path)
    [row] = json.loads(ok(hpcprof("status", "--format", "json", cwd=tmp_path)).stdout)
    assert row["exit_code"] == 4 and isinstance(row["exit_code"], int)
    assert '"exit_code":4' in ok(hpcprof("status", "--format", "json", cwd=tmp_path)).stdout.replace(" ", "")
