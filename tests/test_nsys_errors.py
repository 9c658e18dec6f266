"""Bad input to `hpcprof nsys`: one clear line per file on stderr, the other files processed, exit 2."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcprof.cli import main
from hpcprof.tools.nsys.stats.db import Export, NsysInputError


def _copy(fixtures_dir: Path, tmp_path: Path, name: str = "nsysai_mock.sqlite") -> Path:
    dst = tmp_path / name
    shutil.copy(fixtures_dir / "nsys" / name, dst)
    dst.chmod(0o644)
    return dst


def _drop(db: Path, *tables: str) -> Path:
    con = sqlite3.connect(db)
    for table in tables:
        con.execute(f"DROP TABLE {table}")
    con.commit()
    con.close()
    return db


@pytest.fixture
def bad_files(fixtures_dir: Path, tmp_path: Path) -> dict[str, Path]:
    """One file per kind of bad input, each a scratch copy."""
    text = tmp_path / "notes.sqlite"
    text.write_text("this is not a database\n")
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes((fixtures_dir / "nsys" / "nsysai_mock.sqlite").read_bytes()[:50_000])
    (tmp_path / "nogpu").mkdir()
    (tmp_path / "nostrings").mkdir()
    no_gpu = _drop(_copy(fixtures_dir, tmp_path / "nogpu"), "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY")
    no_strings = _drop(_copy(fixtures_dir, tmp_path / "nostrings"), "StringIds")
    return {"not SQLite": text, "truncated": truncated, "no GPU activity": no_gpu, "StringIds": no_strings,
            "no such file": tmp_path / "missing.sqlite"}


def test_export_raises_one_clear_error_per_kind(bad_files: dict[str, Path]) -> None:
    messages = {}
    for kind, path in bad_files.items():
        with pytest.raises(NsysInputError) as err:
            with Export(path) as export:
                export.check_usable()
        messages[kind] = str(err.value)
        assert str(path) in messages[kind] and "\n" not in messages[kind]
    assert "not an SQLite database" in messages["not SQLite"]
    assert "truncated" in messages["truncated"]
    assert "no GPU activity" in messages["no GPU activity"]
    assert "StringIds" in messages["StringIds"]


@pytest.mark.parametrize("command", [["stats", "-r", "cuda_gpu_kern_sum", "--format", "csv"], ["nccl"], ["overlap"],
                                     ["gaps"], ["phases"]])
def test_cli_reports_each_bad_file_and_processes_the_good_one(fixtures_dir: Path, bad_files: dict[str, Path],
                                                               command: list[str]) -> None:
    good = fixtures_dir / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite"
    files = [str(p) for p in bad_files.values()] + [str(good)]
    res = CliRunner().invoke(main, ["nsys", command[0], *files, *command[1:]])
    assert res.exit_code == 2
    lines = [line for line in res.stderr.splitlines() if line.startswith("hpcprof nsys: ")]
    assert len(lines) == len(bad_files)
    for path in bad_files.values():
        assert sum(str(path) in line for line in lines) == 1
    # nsys stats reads an export without GPU operations (its kernel report is skipped, as nsys does)
    failed = len(bad_files) - (command[0] == "stats")
    assert f"{failed} of {len(files)} input file(s)" in res.stderr
    if command[0] == "stats":
        assert f"{bad_files['no GPU activity']}: cuda_gpu_kern_sum skipped: no CUDA kernel data" in res.stderr
    assert res.stdout.strip(), "the good file was not processed"
    if command[0] == "stats":
        assert "ncclDevKernel_AllGather" in res.stdout


def test_missing_table_skips_the_report_without_failing(fixtures_dir: Path) -> None:
    res = CliRunner().invoke(main, ["nsys", "stats", str(fixtures_dir / "nsys" / "nsysai_mock.sqlite"),
                                    "-r", "nvtx_sum,cuda_gpu_kern_sum", "--format", "csv"])
    assert res.exit_code == 0
    assert "nvtx_sum skipped: no NV Tools Extension (NVTX) data" in res.stderr
    assert "reduce_kernel" in res.stdout


def test_user_file_is_never_written(fixtures_dir: Path, tmp_path: Path) -> None:
    """Read-only and immutable: no journal, no side file, even with URI characters in the name."""
    db = _copy(fixtures_dir, tmp_path, "nsysai_h100_2gpu_1s.sqlite").rename(tmp_path / "run 1#a%b?.sqlite")
    db.chmod(0o444)
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    res = CliRunner().invoke(main, ["nsys", "stats", str(db), "-r", "nvtx_sum,cuda_gpu_trace", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [db.name]


def test_nsys_rep_is_exported_with_nsys_on_path(fixtures_dir: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    rep = tmp_path / "rank1.nsys-rep"
    rep.write_bytes(b"report")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    res = CliRunner().invoke(main, ["nsys", "stats", str(rep), "-r", "cuda_gpu_kern_sum", "--format", "csv"])
    assert res.exit_code == 2
    assert f"{rep}: a .nsys-rep needs nsys" in res.stderr
    # a stand-in nsys that "exports" by copying the H200 rank1 export
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "nsys"
    source = fixtures_dir / "nsys" / "h200_seqpar_bf16" / "rank1.sqlite"
    fake.write_text(f'#!/bin/sh\n[ "$1 $2 $3" = "export -t sqlite" ] || exit 3\n/bin/cp "{source}" "$7"\n')
    fake.chmod(0o755)
    res = CliRunner().invoke(main, ["nsys", "stats", str(rep), "-r", "cuda_gpu_kern_sum", "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert res.stdout == (source.parent / "rank1_cuda_gpu_kern_sum.csv").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "rank1.nsys-rep"]
