"""The output check every writing command shares (safe_paths.check_output), for the commands that
skipped it: `bench ceilings --out` and its `--sizes-from` input, and an SQLite journal beside any
database (`diff --csv` onto a store's -wal); `bench ceilings` on sizes it cannot allocate and on a
GPU it does not have, `report --html` onto a FIFO, a store of another user: one line each."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof
from reliability_util import one_line_error

from hpcprof.campaign.store import Store
from hpcprof.core.errors import UserError
from hpcprof.core.safe_paths import check_output


def fake_run(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "job.sh").write_text("#!/bin/sh\n")
    return path


@pytest.mark.parametrize(("target", "said"), [
    ("hpcprof.db", "the name of a campaign store"),
    ("run/config.json", "inside the run directory"),
    ("e.yaml", "that is an input of this command"),
    ("fifo", "a FIFO"),
    ("null", "a character device"),
    ("link", "a symbolic link"),
])
def test_bench_ceilings_out_is_checked_before_anything_runs(tmp_path: Path, target: str, said: str) -> None:
    fake_run(tmp_path / "run")
    (tmp_path / "hpcprof.db").write_bytes(b"SQLite format 3\x00")
    (tmp_path / "e.yaml").write_text("name: t\nworkload:\n  kind: command\n  argv: [\"true\"]\n")
    os.mkfifo(tmp_path / "fifo")
    if target == "null":   # a null device of the test's own: the system's is never risked as a root's output
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere.json")
    before = {p: p.read_bytes() for p in (tmp_path / "hpcprof.db", tmp_path / "run" / "config.json", tmp_path / "e.yaml")}
    result = hpcprof("bench", "ceilings", "--sizes-from", "e.yaml", "--out", target, cwd=tmp_path, timeout=60)
    one_line_error(result, f"--out {target}", said)
    assert {p: p.read_bytes() for p in before} == before and not (tmp_path / "elsewhere.json").exists()


def test_sizes_from_a_fifo_or_a_device_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    for source, said in (("fifo", "a FIFO"), ("/dev/zero", "not a regular file")):
        result = hpcprof("bench", "ceilings", "--sizes-from", source, cwd=tmp_path, timeout=30)
        one_line_error(result, f"--sizes-from {source}", said)


def test_an_sqlite_journal_beside_any_database_is_never_an_output(tmp_path: Path) -> None:
    db = tmp_path / "mine.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    try:
        wal = Path(f"{db}-wal")
        assert wal.stat().st_size > 0
        for path in (wal, Path(f"{db}-shm"), Path(f"{db}-journal")):
            with pytest.raises(UserError, match="SQLite journal of the database|SQLite write-ahead log"):
                check_output(path, [], "--csv")
        check_output(tmp_path / "other-wal", [], "--csv")          # no database beside it: a file like any other
    finally:
        conn.close()


@pytest.mark.slow
def test_bench_ceilings_names_sizes_it_cannot_allocate_and_a_missing_gpu(tmp_path: Path) -> None:
    if Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1":
        pytest.skip("the kernel grants any allocation (vm.overcommit_memory=1): a 4 TB matrix would be paged in")
    result = hpcprof("bench", "ceilings", "--gemm", "1000000,1000000,1000000", "--iters", "1", "--warmup", "0",
                     "--device", "cpu", "--out", "c.json", cwd=tmp_path, timeout=120)
    one_line_error(result, "do not fit in this CPU's memory", "tried to allocate 4000000000000 bytes")
    import torch

    if torch.cuda.is_available():
        return
    result = hpcprof("bench", "ceilings", "--device", "cuda", "--gemm", "64,64,64", "--out", "c.json", cwd=tmp_path,
                     timeout=120)
    one_line_error(result, "--device cuda: torch sees no CUDA device")
    assert not (tmp_path / "c.json").exists()


def test_report_html_onto_a_fifo_is_refused_before_the_report_is_made(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    result = hpcprof("report", "--html", "fifo", "--workdir", str(tmp_path / "none"), cwd=tmp_path, timeout=30)
    one_line_error(result, "--html fifo: a FIFO")


def test_a_store_of_another_user_is_one_line(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (to give the store to another user) and setpriv (to drop the root's override)")
    workdir = tmp_path / "runs"
    workdir.mkdir()
    Store(f"sqlite:///{workdir / 'hpcprof.db'}").engine.dispose()
    os.chown(workdir / "hpcprof.db", 65534, 65534)
    os.chmod(workdir / "hpcprof.db", 0o600)
    fake_run(workdir / "t" / "r1")
    plain = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]
    result = subprocess.run([*plain, sys.executable, "-m", "hpcprof", "collect", "--workdir", str(workdir)],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    one_line_error(result, "cannot be opened", "mode 600, not readable or writable by this user")


def test_diff_refuses_a_rank_given_twice_and_a_directory_of_both_kinds(tmp_path: Path) -> None:
    from hpcprof.analysis.diff.profiles import DiffInputError, profile_files

    for name in ("rank0.pt.trace.json", "rank1.pt.trace.json", "rank0.sqlite"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "again.json").symlink_to(tmp_path / "rank0.pt.trace.json")
    with pytest.raises(DiffInputError, match="rank0.pt.trace.json: given twice"):
        profile_files([tmp_path / "rank0.pt.trace.json", tmp_path / "rank0.pt.trace.json"])
    with pytest.raises(DiffInputError, match="again.json: given twice \\(also as .*rank0.pt.trace.json\\)"):
        profile_files([tmp_path / "rank0.pt.trace.json", tmp_path / "again.json"])
    with pytest.raises(DiffInputError, match="holds nsys exports and Kineto traces; give one kind as files"):
        profile_files([tmp_path])
    (tmp_path / "rank0.sqlite").unlink()
    (tmp_path / "again.json").unlink()
    assert profile_files([tmp_path])[1] == [tmp_path / "rank0.pt.trace.json", tmp_path / "rank1.pt.trace.json"]
