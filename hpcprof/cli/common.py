"""What the run commands share: the console they print to, the store they open, the runs they select
and the state table they print."""

from __future__ import annotations

import fcntl
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import click

from hpcprof.core.errors import UserError, printable
from hpcprof.run.rundir import RunDir, all_runs, find_run

if TYPE_CHECKING:
    from hpcprof.campaign.store import Store
    from hpcprof.schedulers.base import JobState

class Messages:
    """The run commands' messages on stderr: plain lines (`markup=False`) through click, the few with
    rich markup (`[bold]...[/]`, the values in them escaped by safe_text.rich_markup) through rich's
    console, made on first use (so `render` and `submit` start without rich; a path with `:smile:`
    in it stays as it is). Control characters (a file name's escape sequences) are shown as escapes."""

    def __init__(self) -> None:
        self._rich: Any = None

    def print(self, text: str, markup: bool = True, highlight: bool = True) -> None:
        """Print one message (`highlight`: rich's colouring of numbers and paths, markup only)."""
        text = printable(text)
        if not markup:
            click.echo(text, err=True)
            return
        if self._rich is None:
            from rich.console import Console

            self._rich = Console(stderr=True, soft_wrap=True, emoji=False)
        self._rich.print(text, highlight=highlight)


console = Messages()


@overload
def open_store(workdir: Path, db: str | None) -> Store: ...
@overload
def open_store(workdir: Path, db: str | None, create: Literal[True]) -> Store: ...
@overload
def open_store(workdir: Path, db: str | None, create: bool) -> Store | None: ...
def open_store(workdir: Path, db: str | None, create: bool = True) -> Store | None:
    """The campaign store of `workdir` (or `db`). Read-only commands pass `create=False`:
    nothing is created then, and a SQLite store that does not exist is None. A URL that cannot
    be used is refused before the workdir is made."""
    from hpcprof.campaign.store import Store, database_url, make_engine, sqlite_file

    url = database_url(workdir, db)
    path = sqlite_file(make_engine(url))
    if not create:
        return None if path is not None and not path.is_file() else Store(url)
    undo = undo_new_workdir(workdir, db)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with open(workdir / ".hpcprof.lock", "a") as lock:  # first use: one process creates the store
            fcntl.flock(lock, fcntl.LOCK_EX)
            return Store(url)
    except BaseException:
        undo()          # a refused store leaves no store and no workdir behind
        raise


def undo_new_workdir(workdir: Path, db: str | None) -> Callable[[], None]:
    """Called before a command makes its store: what undoes it when the command is refused (a full
    disk, a store that cannot be made): the SQLite store's files (-wal, -shm, -journal) where it did
    not exist and holds no sweep (another process's submit may have filled it meanwhile), and the
    lock and empty directories where the workdir did not exist."""
    from hpcprof.campaign.store import database_url, make_engine, sqlite_file

    made = not workdir.exists()
    path = sqlite_file(make_engine(database_url(workdir, db)))
    fresh = path is not None and not path.exists()

    def undo() -> None:
        if fresh and path is not None and not sweeps_in(path):
            for suffix in ("", "-wal", "-shm", "-journal"):
                path.with_name(path.name + suffix).unlink(missing_ok=True)
        if made and workdir.is_dir():
            (workdir / ".hpcprof.lock").unlink(missing_ok=True)
            for directory in [d for d in workdir.iterdir() if d.is_dir() and not d.is_symlink()] + [workdir]:
                try:
                    directory.rmdir()       # empty ones only
                except OSError:
                    pass

    return undo


def sweeps_in(path: Path) -> bool:
    """Whether the SQLite store at `path` records a sweep (read only; False where it does not read)."""
    import sqlite3

    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT 1 FROM sweeps LIMIT 1").fetchone() is not None
        finally:
            conn.close()
    except (sqlite3.Error, OSError):
        return False


def check_store(workdir: Path, db: str | None) -> None:
    """Refuse an unusable store (a bad URL, a missing driver, a file that is not a store)
    before anything is made or read."""
    from hpcprof.campaign.store import check_ours, database_url, make_engine, sqlite_file

    if (path := sqlite_file(make_engine(database_url(workdir, db)))) is not None:
        check_ours(path)


def runs_from(refs: tuple[str, ...], workdir: Path, damaged: bool = False) -> list[RunDir]:
    """Runs named by id or path, or every run in `workdir` (which must exist; runs with a
    damaged config.json only with `damaged`, else each is named in a warning)."""
    if refs:
        return [find_run(r, workdir) for r in refs]
    if not workdir.is_dir():
        raise UserError(f"--workdir {workdir}: no such work directory; give the --workdir you "
                        "submitted with (or $HPCPROF_WORKDIR)")
    return all_runs(workdir, damaged)


def show_states(pairs: list[tuple[RunDir, JobState]], fmt: str, collected: dict[str, str] | None = None) -> None:
    """One row per run: its sweep (what compare/report take), state, exit code, reason, job id, path
    (and how it was collected, when given); a run that failed or ran out of time with the sentence
    that says why (hpcprof.analysis.forensics) as its reason."""
    from hpcprof.analysis.forensics.verdict import explained
    from hpcprof.core.output import emit_rows
    from hpcprof.run.rundir import sweep_of

    pairs = [(run, explained(run, state)) for run, state in pairs]
    rows = [{"run": run.run_id, "sweep": sweep_of(run.run_id), "experiment": run.path.parent.name,
             "state": state.state, "exit_code": state.exit_code, "reason": state.reason,
             "job_id": run.submission.get("job_id", ""), "path": str(run.path),
             "collected": (collected or {}).get(run.run_id, ""), "profiler": slowdown(run)} for run, state in pairs]
    columns = ["run", "sweep", "experiment", "state", "exit_code", "reason", "job_id", "path"]
    columns += ["collected"] if collected else []
    columns += ["profiler"] if any(row["profiler"] for row in rows) else []
    emit_rows(rows, columns, fmt, whole=["run", "state"], optional=["path", "sweep", "job_id", "experiment"])


def slowdown(run: RunDir) -> str:
    """The profiler's slowdown of the run's steps as collect measured it in the run (`+23.1 %
    [+18.0, +29.5]`, `warning: ` first above catalog.OVERHEAD_WARN_PCT), '' where it has none."""
    from hpcprof.core import catalog as c
    from hpcprof.run.results import read_headline

    headline = read_headline(run.path)
    values = {name: value for name, value, _ in headline.metrics} if headline is not None else {}
    if c.PROFILER_SLOWDOWN.name not in values:
        return ""
    pct = values[c.PROFILER_SLOWDOWN.name]
    interval = f" [{values[c.PROFILER_SLOWDOWN_LOW.name]:+.1f}, {values[c.PROFILER_SLOWDOWN_HIGH.name]:+.1f}]" \
        if c.PROFILER_SLOWDOWN_LOW.name in values and c.PROFILER_SLOWDOWN_HIGH.name in values else ""
    return f"{'warning: ' if pct > c.OVERHEAD_WARN_PCT else ''}{pct:+.1f} %{interval}"
