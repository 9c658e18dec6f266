"""Writes: one atomic_write (whole or nothing, the path named, temporaries removed on failure, on
SIGTERM, and after SIGKILL), outputs never an input, a --db that is not ours never written,
read-only and refused commands create nothing, render -o never over a run or foreign files."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof
from reliability_util import experiment, ok, one_line_error, runs

from hpcprof.campaign.store import Store
from hpcprof.core.atomic import HOST, atomic_write, remove_stale_temps, temp_path
from hpcprof.core.errors import UserError
from hpcprof.core.safe_paths import check_output


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_atomic_write_is_whole_or_nothing(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    target.write_text("old")

    def fails(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(UserError, match=r"out.csv: cannot write \(No space left on device\)"):
        atomic_write(target, fails)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.csv"]
    atomic_write(target, "new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_temporaries_are_unique_and_named_for_their_writer(tmp_path: Path) -> None:
    names = {temp_path(tmp_path / "x").name for _ in range(100)}
    assert len(names) == 100 and all(f".{HOST}-{os.getpid()}." in n and n.endswith(".tmp") for n in names)


def test_an_output_is_never_an_input(tmp_path: Path) -> None:
    source = tmp_path / "x.sqlite"
    source.write_bytes(b"export")
    with pytest.raises(UserError, match="input of this command"):
        atomic_write(tmp_path / "." / "x.sqlite", "csv", inputs=[source])
    check_output(tmp_path / "y.csv", [source])  # another file is fine
    assert source.read_bytes() == b"export"


def test_sigterm_mid_write_removes_the_temporary(tmp_path: Path) -> None:
    code = ("import sys, time\nfrom pathlib import Path\nfrom hpcprof.core.atomic import atomic_write\n"
            "def slow(tmp):\n    tmp.write_text('part')\n    print('writing', flush=True)\n    time.sleep(60)\n"
            f"atomic_write(Path({str(tmp_path / 'out')!r}), slow)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    assert [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # the temporary exists mid-write
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM  # it still dies of the signal
    assert list(tmp_path.iterdir()) == []


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".t.parquet.{HOST}-{dead.pid}.0123456789abcdef.tmp"
    live = tmp_path / f".u.parquet.{HOST}-{os.getpid()}.0123456789abcdef.tmp"
    other_host = tmp_path / ".v.parquet.elsewhere-1.0123456789abcdef.tmp"
    for path in (stale, live, other_host):
        path.write_text("x")
    assert remove_stale_temps(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other_host.name])
    os.utime(other_host, (time.time() - 7200, time.time() - 7200))  # another host's, untouched for 2 h
    assert remove_stale_temps(tmp_path) == 1 and other_host.exists() is False


def test_stale_temporary_directories_are_removed_whole(tmp_path: Path) -> None:
    """A killed collect's directory of reduce pieces (named as a temporary of its PID) goes with
    everything in it; a live collect's stays."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / "nsys" / f".pieces.{HOST}-{dead.pid}.0123456789abcdef.tmp"
    live = temp_path(tmp_path / "nsys" / "pieces")
    for directory in (stale, live):
        directory.mkdir(parents=True)
        (directory / "kernels.0.parquet").write_text("x")
    assert remove_stale_temps(tmp_path) == 1
    assert not stale.exists() and (live / "kernels.0.parquet").exists()


def test_a_zombie_writers_temporary_is_stale(tmp_path: Path) -> None:
    """A writer killed but not reaped yet (a pool worker whose parent died, where PID 1 does not
    reap) still has its PID: its temporary is stale all the same; a running writer's is not."""
    zombie = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{zombie.pid}/stat").read_bytes().rpartition(b")")[2].split()[0] != b"Z":
        assert time.monotonic() < deadline, "the child did not exit"
        time.sleep(0.01)
    running = subprocess.Popen(["sleep", "30"])
    try:
        stale = tmp_path / f".v.parquet.{HOST}-{zombie.pid}.0123456789abcdef.tmp"
        live = tmp_path / f".v.parquet.{HOST}-{running.pid}.0123456789abcdef.tmp"
        for path in (stale, live):
            path.write_text("x")
        assert remove_stale_temps(tmp_path) == 1
        assert [p.name for p in tmp_path.iterdir()] == [live.name]
    finally:
        running.kill()
        running.wait()
        zombie.wait()


def test_a_tracked_temporary_directory_goes_on_sigterm(tmp_path: Path) -> None:
    """collect's directory of reduce pieces (atomic.track_temporary) is removed by the SIGTERM handler,
    as the files in flight are: found left behind by the faults group's "SIGTERM mid-collect"."""
    code = ("import os, signal, sys; from pathlib import Path; from hpcprof.core.atomic import temp_path, track_temporary\n"
            "d = temp_path(Path(sys.argv[1]) / 'pieces'); d.mkdir(); (d / 'kernels.0.parquet').write_text('x')\n"
            "track_temporary(d); print(d, flush=True); os.kill(os.getpid(), signal.SIGTERM)")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == -signal.SIGTERM, result.stderr
    assert result.stdout.strip() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("start", ["fork", "forkserver"])
def test_a_pool_workers_temporary_goes_when_its_parent_gets_sigterm(tmp_path: Path, start: str) -> None:
    """A bundle being written by a pool worker when collect gets SIGTERM: collect stops its workers
    with SIGTERM and waits for them, their handlers remove their temporaries, then it dies of the
    signal (found left behind by the faults group's "SIGTERM mid-collect": the workers had died by
    SIGKILL with their parent, PR_SET_PDEATHSIG)."""
    code = ("import multiprocessing, sys, time\nfrom pathlib import Path\nfrom hpcprof.core.atomic import atomic_write\n"
            "from hpcprof.core.pool import process_pool\n"
            "def slow(tmp):\n    tmp.write_text('part')\n    print('writing', flush=True)\n    time.sleep(60)\n"
            "def task(out):\n    atomic_write(Path(out), slow)\n"
            "if __name__ == '__main__':\n"
            f"    pool = process_pool(2, multiprocessing.get_context({start!r}))\n"
            "    pool.submit(task, sys.argv[1]).result()\n")
    script = tmp_path / "collect_like.py"
    script.write_text(code)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(out / "part.arrow")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    assert proc.stdout.readline().strip() == "writing", proc.stderr.read()
    assert [p for p in out.iterdir() if p.name.endswith(".tmp")]  # the worker's temporary exists mid-write
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM  # it still dies of the signal
    assert list(out.iterdir()) == []


def test_a_forked_workers_sigterm_leaves_its_parents_temporaries(tmp_path: Path) -> None:
    """A worker forked while its parent had a temporary in flight, stopped alone by SIGTERM, removes
    only its own temporaries, not the parent's (which the parent still writes)."""
    code = ("import os, signal, sys; from pathlib import Path; from hpcprof.core.atomic import temp_path, track_temporary\n"
            "d = temp_path(Path(sys.argv[1]) / 'pieces'); d.mkdir(); track_temporary(d)\n"
            "pid = os.fork()\n"
            "if pid == 0:\n    os.kill(os.getpid(), signal.SIGTERM)\n    os._exit(3)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "print(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, d.exists())")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]


def test_a_foreign_sqlite_file_is_refused_unchanged(tmp_path: Path, fixtures_dir: Path) -> None:
    export = tmp_path / "report.sqlite"
    shutil.copyfile(fixtures_dir / "nsys" / "nsysai_mock.sqlite", export)
    before = sha(export)
    with pytest.raises(UserError, match="not a hpcprof store"):
        Store(f"sqlite:///{export}")
    noise = tmp_path / "noise.db"
    noise.write_bytes(os.urandom(4096))
    with pytest.raises(UserError, match="not a hpcprof store"):
        Store(f"sqlite:///{noise}")
    assert sha(export) == before and sorted(p.name for p in tmp_path.iterdir()) == ["noise.db", "report.sqlite"]
    with sqlite3.connect(export) as conn:  # still in its own journal mode (the hook never ran)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_refused_and_read_only_commands_create_nothing(tmp_path: Path) -> None:
    experiment(tmp_path / "e.yaml", ["true"])
    (tmp_path / "w").mkdir()
    one_line_error(hpcprof("submit", "e.yaml", "--db", "bogus://", cwd=tmp_path), "bogus")
    one_line_error(hpcprof("collect", "--workdir", "w", cwd=tmp_path), "no runs")
    ok(hpcprof("status", "--workdir", "w", "--db", "sqlite:///new.db", cwd=tmp_path))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["e.yaml", "w"]


def test_postgresql_without_its_driver_names_the_extra(tmp_path: Path) -> None:
    blocker = tmp_path / "block" / "psycopg"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n")
    experiment(tmp_path / "e.yaml", ["true"])
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "block"), os.environ.get("PYTHONPATH", "")])}
    line = one_line_error(hpcprof("submit", "e.yaml", "--db", "postgresql+psycopg://u@localhost/x", cwd=tmp_path,
                                  env=env), "[postgresql]", "psycopg")
    assert "u@localhost" not in line and not (tmp_path / "hpcprof-runs").exists()


@pytest.mark.slow
def test_render_o_never_overwrites_a_run_or_foreign_files(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.yaml", ["true"])
    ok(hpcprof("submit", str(exp), "--wait", cwd=tmp_path))
    [run] = runs(tmp_path / "hpcprof-runs")
    before = {p.name: sha(p) for p in run.iterdir() if p.is_file()}
    other = experiment(tmp_path / "o.yaml", ["echo", "other"])
    one_line_error(hpcprof("render", str(other), "-o", str(run), "--force", cwd=tmp_path), "submitted run")
    assert {p.name: sha(p) for p in run.iterdir() if p.is_file()} == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "job.sh").write_text("my job")
    one_line_error(hpcprof("render", str(other), "-o", str(mine), cwd=tmp_path), "not empty", "--force")
    assert (mine / "job.sh").read_text() == "my job"
    ok(hpcprof("render", str(other), "-o", str(mine), "--force", cwd=tmp_path))
    assert "echo other" in (mine / "job.sh").read_text() or "other" in (mine / "config.json").read_text()
    assert not [p for p in mine.rglob("*") if p.name.endswith(".tmp")]


def test_nsys_output_over_its_input_is_refused(tmp_path: Path, fixtures_dir: Path) -> None:
    export = tmp_path / "x.sqlite"
    shutil.copyfile(fixtures_dir / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite", export)
    before = sha(export)
    one_line_error(hpcprof("nsys", "overlap", "x.sqlite", "-o", "x.sqlite", cwd=tmp_path), "x.sqlite", "input")
    assert sha(export) == before
