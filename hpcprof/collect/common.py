"""What the steps of collect share: where a Problem goes, the timing of a run's phases, the pause of
the cyclic garbage collector around bulk listings, and an exception in one line."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator

from hpcprof.core.errors import Problem, UserError

#: where a Problem goes (Collected.report of the run being collected)
Report = Callable[[Problem], None]
#: a context manager that adds its block's wall time to a phase of the run (Collected.timed)
Timed = Callable[[str], contextlib.AbstractContextManager[None]]


@contextlib.contextmanager
def untimed(phase: str) -> Iterator[None]:
    """A Timed that records nothing."""
    yield


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection in the block (on again after it, where it was on): the listing
    of 16,384 rank files allocates ~100,000 objects, none in a cycle, enough to set off a full
    collection of every object of collect's imports (30-40 ms of its serial part), which then runs
    later, while the workers map. Never around a fork: a forked worker would start with it off."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def short(exc: BaseException) -> str:
    """An exception in one line: a UserError's message, else its type and its first line, whole."""
    if isinstance(exc, UserError):
        return exc.format_message()
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
