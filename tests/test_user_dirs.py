"""No test touches the real user's home or hpcprof state (tests/user_dirs.py): the session's own home
reaches module-scoped fixtures and pytest-xdist workers, and the guard fails a session that writes
into the real user's hpcprof directories."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from user_dirs import SESSION_HOME, XDG_DIRS, changes, hpcprof_dirs, snapshot

from hpcprof.run.workdirs import known_workdirs, known_workdirs_file, record_workdir

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def recorded_in_module(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A module-scoped fixture records a workdir as `hpcprof submit` does (test_report.py's wrote
    into the real ~/.local/state before the session had its own home): (the record, the workdir,
    the home)."""
    workdir = tmp_path_factory.mktemp("runs")
    record_workdir("local", workdir)
    return known_workdirs_file(), workdir, Path(os.environ["HOME"])


def test_module_fixtures_write_into_the_session_home(recorded_in_module: tuple[Path, Path, Path]) -> None:
    """The session's record (shared by every module fixture of the session) holds the workdir."""
    record, workdir, home = recorded_in_module
    session_home = Path(os.environ[SESSION_HOME])
    assert home == session_home and record == session_home / ".local/state/hpcprof/workdirs"
    assert f"local\t{workdir.resolve()}\n" in record.read_text()


def test_each_test_has_its_own_user_dirs() -> None:
    """Each test's XDG directories are new (tmp_path_factory's), the session's home stays, and no
    $HPCPROF_WORKDIR of the caller's reaches a test."""
    session_home = Path(os.environ[SESSION_HOME])
    assert os.environ["HOME"] == str(session_home) and "HPCPROF_WORKDIR" not in os.environ
    for name in XDG_DIRS:
        assert not Path(os.environ[name]).is_relative_to(session_home)
        assert Path(os.environ[name]).parent.name.startswith("user")
    assert known_workdirs() == []


def test_changes_names_each_difference(tmp_path: Path) -> None:
    state = tmp_path / ".local/state/hpcprof"
    state.mkdir(parents=True)
    (state / "workdirs").write_text("local\t/a\n")
    before = snapshot([state])
    (state / "workdirs").write_text("local\t/a\nlocal\t/b\n")
    (state / "new").mkdir()
    assert changes(before, snapshot([state])) == [f"added {state / 'new'}", f"changed {state / 'workdirs'}"]
    assert changes(before, snapshot([])) == [f"removed {state}", f"removed {state / 'workdirs'}"]


def test_hpcprof_dirs_are_the_homes_and_the_xdg_ones(tmp_path: Path) -> None:
    assert hpcprof_dirs({"HOME": "/h", "XDG_CACHE_HOME": "/c", "XDG_STATE_HOME": "relative"}) == [
        Path("/c/hpcprof"), Path("/h/.cache/hpcprof"), Path("/h/.config/hpcprof"), Path("/h/.local/state/hpcprof")]


INNER = """
import os
from pathlib import Path

def test_writes_into_the_real_home(tmp_path):
    home = Path(os.environ["HOME"])
    assert home == Path(os.environ["HPCPROF_TEST_HOME"]) and home != Path(os.environ["REAL_HOME"])
    assert "HPCPROF_WORKDIR" not in os.environ and os.environ.get("PYTEST_XDIST_WORKER")
    real = Path(os.environ["REAL_HOME"])
    (real / ".local/state/hpcprof").mkdir(parents=True)
    (real / ".local/state/hpcprof/workdirs").write_text(f"local\\t{tmp_path}/hpcprof-runs\\n")
    (real / ".cache/hpcprof/templates").mkdir()
    (real / ".cache/hpcprof/templates/local.sh.cache").write_bytes(b"compiled")
    (real / "session-home").write_text(str(home))
"""


@pytest.mark.slow
def test_the_guard_fails_a_session_that_writes_into_the_real_home(tmp_path: Path) -> None:
    """A pytest session (two xdist workers) with the plugin, whose test writes into the home it was
    started with: the workers had the session's home; the file that names the session's directories
    (a workdir under its base temp) fails the session, the one that names none is listed, and the
    session's home is removed at its end."""
    real_home = tmp_path / "home"
    (real_home / ".cache" / "hpcprof").mkdir(parents=True)
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {name: value for name, value in os.environ.items()
           if name not in {SESSION_HOME, "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "CI", *XDG_DIRS}}
    env |= {"HOME": str(real_home), "REAL_HOME": str(real_home), "HPCPROF_WORKDIR": str(tmp_path / "runs"),
            "PYTHONPATH": str(TESTS)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "user_dirs", "-p", "no:cacheprovider", "-n", "2",
                           "--basetemp", str(tmp_path / "inner"), "test_inner.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == pytest.ExitCode.TESTS_FAILED and "1 passed" in done.stdout, done.stdout + done.stderr
    state, cache = real_home / ".local/state/hpcprof", real_home / ".cache/hpcprof"
    ours, others = done.stdout.split("the real user's hpcprof directories changed during the session")
    assert "a test wrote into the real user's hpcprof directories" in ours
    assert f"\n  added {state / 'workdirs'}\n" in ours and "templates" not in ours
    assert f"\n  added {cache / 'templates'}\n  added {cache / 'templates/local.sh.cache'}\n" in others
    assert f"\n  added {state}\n" in others        # a directory names nothing
    session_home = Path((real_home / "session-home").read_text())
    assert session_home.name.startswith("hpcprof-tests-home-") and not session_home.exists()
