"""What the run commands share: the console they print to, the store they open, the runs they select
and the state table they print."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import click

from hpcprof.errors import UserError
from hpcprof.rundir import RunDir, all_runs, find_run

if TYPE_CHECKING:
    from hpcprof.schedulers.base import JobState
    from hpcprof.store import Store

class Messages:
    """The run commands' messages on stderr: plain lines (`markup=False`) through click, the few with
    rich markup (`[bold]...[/]`) through rich's console, made on first use (so `render` and
    `submit` start without rich; a path with `:smile:` in it stays as it is)."""

    def __init__(self) -> None:
        self._rich: Any = None

    def print(self, text: str, markup: bool = True, highlight: bool = True) -> None:
        """Print one message (`highlight`: rich's colouring of numbers and paths, markup only)."""
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
    from hpcprof.store import Store, database_url, make_engine, sqlite_file

    url = database_url(workdir, db)
    path = sqlite_file(make_engine(url))
    if not create:
        return None if path is not None and not path.is_file() else Store(url)
    made = not workdir.exists()
    workdir.mkdir(parents=True, exist_ok=True)
    lock_path = workdir / ".hpcprof.lock"
    try:
        with open(lock_path, "a") as lock:  # first use: one process creates the store
            fcntl.flock(lock, fcntl.LOCK_EX)
            return Store(url)
    except BaseException:
        if made:  # a refused store leaves no workdir behind
            lock_path.unlink(missing_ok=True)
            try:
                workdir.rmdir()
            except OSError:
                pass
        raise


def check_store(workdir: Path, db: str | None) -> None:
    """Refuse an unusable store (a bad URL, a missing driver, a file that is not a store)
    before anything is made or read."""
    from hpcprof.store import check_ours, database_url, make_engine, sqlite_file

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
    (and how it was collected, when given)."""
    from hpcprof.output import emit_rows
    from hpcprof.rundir import sweep_of

    rows = [{"run": run.run_id, "sweep": sweep_of(run.run_id), "experiment": run.path.parent.name,
             "state": state.state, "exit_code": state.exit_code, "reason": state.reason,
             "job_id": run.submission.get("job_id", ""), "path": str(run.path),
             "collected": (collected or {}).get(run.run_id, "")} for run, state in pairs]
    columns = ["run", "sweep", "experiment", "state", "exit_code", "reason", "job_id", "path"]
    emit_rows(rows, columns + ["collected"] if collected else columns, fmt, whole=["run", "state"],
              optional=["path", "sweep", "job_id", "experiment"])
