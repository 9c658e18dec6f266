"""`hpcprof status` and `hpcprof cancel`."""

from __future__ import annotations

from pathlib import Path

import click

from hpcprof.cli.common import console, open_store, runs_from, show_states
from hpcprof.cli.options import db_option, with_site_lookup, workdir_option
from hpcprof.core.errors import UserError


@click.command()
@with_site_lookup
@click.argument("runs", nargs=-1)
@workdir_option
@db_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def status(runs: tuple[str, ...], workdir: Path, db: str | None, fmt: str) -> None:
    """Show the state of RUNS (ids or paths; default: every run in the workdir)."""
    from hpcprof.campaign import jobstate

    selected = runs_from(runs, workdir)
    states = jobstate.current_states(selected)  # one scheduler query for all the runs
    if todo := jobstate.unrecorded(states):  # ended runs the store already holds: the store is not opened
        jobstate.record(todo, open_store(workdir, db, create=False))
    collected = {run.run_id: note for run in states if (note := run.stored_collect())}  # as collect noted it
    show_states(list(states.items()), fmt, collected)


@click.command()
@click.argument("runs", nargs=-1, required=True)
@workdir_option
@db_option
def cancel(runs: tuple[str, ...], workdir: Path, db: str | None) -> None:
    """Cancel RUNS (ids or paths)."""
    from hpcprof.campaign import jobstate

    selected = runs_from(runs, workdir)
    store = open_store(workdir, db, create=False)
    failed = []
    for run in selected:  # one run that cannot be cancelled does not stop the others
        try:
            state = jobstate.cancel(run, store)
        except UserError as exc:
            failed.append(f"{run.run_id}: {exc.format_message()}")
            continue
        console.print(f"{run.run_id}: cancel requested, now {state.state}", markup=False)
    if failed:
        raise UserError(f"{len(failed)} of {len(selected)} run(s) not cancelled: {'; '.join(failed)}")
