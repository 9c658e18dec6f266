"""No test touches the real user's home or hpcprof state (a pytest plugin, tests/conftest.py loads it).

Before anything else runs (collection, session and module fixtures, every pytest-xdist worker),
pytest_configure points HOME and $XDG_{CONFIG,STATE,CACHE}_HOME at a temporary home of the session
and unsets $HPCPROF_WORKDIR; each test then gets its own empty XDG directories (own_user_dirs).

The guard: the hpcprof directories of the real user (their recorded workdirs, compiled templates
and site files, wherever the caller's environment put them) are listed at the start and compared
at the end. A changed or added file that names one of the session's directories (its temporary
home, its pytest base temp: a workdir `submit` recorded, for one) fails the session; other changes
are listed without failing it: another process of the same user (a benchmark, a second test
session, hpcprof itself) may have made them while the session ran, as on a shared machine.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: the per-user directories hpcprof writes: (XDG variable, its default under the home directory)
XDG_DIRS = {"XDG_STATE_HOME": ".local/state", "XDG_CACHE_HOME": ".cache", "XDG_CONFIG_HOME": ".config"}
#: set by the session (and inherited by its xdist workers and subprocesses): its temporary home
SESSION_HOME = "HPCPROF_TEST_HOME"
#: the largest file the guard reads for the session's directories
MAX_READ = 16 << 20

Snapshot = dict[str, tuple[int, int] | None]


@dataclass
class Guard:
    """The caller's environment values the session replaced, the real user's hpcprof directories,
    what they held at the start; by the end, the changes that name the session (`ours`) and the others."""

    saved: dict[str, str | None]
    dirs: list[Path]
    before: Snapshot
    ours: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)


GUARD = pytest.StashKey[Guard]()


def hpcprof_dirs(env: Mapping[str, str]) -> list[Path]:
    """The hpcprof directories of the user `env` describes: under each $XDG_*_HOME it sets and
    under the home directory's defaults (both: either may be what hpcprof or a test used)."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    bases = {home / default for default in XDG_DIRS.values()}
    bases |= {Path(env[name]) for name in XDG_DIRS if os.path.isabs(env.get(name, ""))}
    return sorted(base / "hpcprof" for base in bases)


def snapshot(dirs: list[Path]) -> Snapshot:
    """Every directory (None) and file ((size, mtime in ns)) under `dirs`, by path."""
    found: Snapshot = {}
    for top in dirs:
        for where, subdirs, files in os.walk(top):
            found[where] = None
            for name in subdirs + files:
                path = os.path.join(where, name)
                try:
                    info = os.lstat(path)
                except FileNotFoundError:   # removed while listed: a change the end shows
                    continue
                found[path] = None if name in subdirs else (info.st_size, info.st_mtime_ns)
    return found


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """`added PATH`, `removed PATH` or `changed PATH` for each difference, sorted by path."""
    return [f"{'added' if path not in before else 'removed' if path not in after else 'changed'} {path}"
            for path in sorted(before.keys() | after.keys()) if before.get(path, 0) != after.get(path, 0)]


def names_any(path: str, marks: list[str]) -> bool:
    """Whether the file `path` (up to MAX_READ bytes) holds one of `marks`."""
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_READ)
    except OSError:                  # a directory, or gone again
        return False
    return any(mark.encode() in text for mark in marks)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """List the real user's hpcprof directories, then give the session (and the xdist workers it
    starts, which inherit the environment) a temporary home and XDG directories of its own."""
    if hasattr(config, "workerinput") and os.environ.get(SESSION_HOME):
        return                                          # a worker: the controller's home, inherited
    names = ("HOME", SESSION_HOME, "HPCPROF_WORKDIR", *XDG_DIRS)
    dirs = hpcprof_dirs(os.environ)
    config.stash[GUARD] = Guard({name: os.environ.get(name) for name in names}, dirs, snapshot(dirs))
    home = Path(tempfile.mkdtemp(prefix="hpcprof-tests-home-"))
    os.environ[SESSION_HOME] = os.environ["HOME"] = str(home)
    for name, default in XDG_DIRS.items():
        os.environ[name] = str(home / default)
    os.environ.pop("HPCPROF_WORKDIR", None)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the session when a test wrote into the real user's hpcprof directories (a worker's
    session leaves that to the controller, which ends after all of them)."""
    guard = session.config.stash.get(GUARD, None)
    if guard is None or hasattr(session.config, "workerinput"):
        return
    base_temp = session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]  # the workers' too
    marks = [os.path.join(os.environ[SESSION_HOME], ""), os.path.join(base_temp, "")]   # the directories' insides
    for change in changes(guard.before, snapshot(guard.dirs)):
        (guard.ours if names_any(change.partition(" ")[2], marks) else guard.others).append(change)
    if guard.ours:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    guard = config.stash.get(GUARD, None)
    if guard is None:
        return
    if guard.ours:
        terminalreporter.section("a test wrote into the real user's hpcprof directories", red=True)
        terminalreporter.write_line("these files name the session's directories (a test ran hpcprof with the real "
                                    "home: give it the session's environment):")
        for line in guard.ours:
            terminalreporter.write_line(f"  {line}")
    if guard.others:
        terminalreporter.section("the real user's hpcprof directories changed during the session", yellow=True)
        terminalreporter.write_line("naming none of the session's directories (another process of this user, "
                                    "or a test that wrote no path):")
        for line in guard.others:
            terminalreporter.write_line(f"  {line}")


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's home removed, the caller's environment back."""
    guard = config.stash.get(GUARD, None)
    if guard is None:
        return
    shutil.rmtree(os.environ[SESSION_HOME], ignore_errors=True)
    for name, value in guard.saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def own_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets empty per-user directories: no user site files ($XDG_CONFIG_HOME/hpcprof/sites),
    no recorded workdirs ($XDG_STATE_HOME/hpcprof/workdirs) and no compiled templates
    ($XDG_CACHE_HOME/hpcprof/templates) from the machine or other tests."""
    home = tmp_path_factory.mktemp("user")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
