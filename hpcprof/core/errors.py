"""User-facing errors: one line, exit code 2, no traceback.

`UserError` is raised for bad input; `as_user_error` turns the known low-level failures of bad
input (an unreadable or unwritable path, a symlink loop, a file that is not UTF-8 text, text the
output's encoding cannot write, input nested too deeply) into one, and the CLI's top-level handler (`hpcprof.cli.LazyGroup.invoke`) applies it to every
command. `warn` names a damaged file that is skipped while the work goes on; `Problem` is what
`collect` could not use (a file, a step), whatever the cause.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

#: longest error line printed (a huge bad value is cut in the middle)
MAX_MESSAGE = 2000


class UserError(click.ClickException):
    """Bad input from the user (config, file, option). Printed as one line; exit code 2."""

    exit_code = 2

    def format_message(self) -> str:
        """One line, shortened, with terminal control characters shown as escapes (a path or a
        name in it may come from anyone)."""
        return shorten(printable(" ".join(str(self.message).split())), MAX_MESSAGE)


def shorten(text: str, limit: int) -> str:
    """`text`, cut in the middle to at most about `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    keep = max(limit - 40, 20)
    return f"{text[:keep * 3 // 4]} ...({len(text) - keep} characters cut)... {text[-(keep // 4):]}"


def printable(text: str) -> str:
    """`text` with terminal control characters (escape sequences, carriage returns, ...) shown as
    escapes, so user-provided text cannot drive the terminal."""
    if text.isprintable():  # the common case, checked at C speed
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


class UnsafeFile(OSError):
    """A file hpcprof refuses to read (hpcprof.core.safe_paths): not a regular file (a FIFO, a device),
    or larger than it reads of such a file. `strerror` says which, `filename` names it."""


_warned: set[str] = set()


def warn(line: str) -> None:
    """One `Warning:` line on stderr (each line once per process): a damaged file skipped while
    the work on the others goes on."""
    if line not in _warned:
        _warned.add(line)
        click.echo(f"Warning: {printable(line)}", err=True)


@dataclass(frozen=True)
class Problem:
    """A file (or a step) that could not be used while the rest was: `hpcprof collect` records
    the run `partial` and exits 3 for every Problem reported, whatever its kind."""

    path: Path | None
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path is not None else self.reason


class WorkerDied(Problem):
    """A collect worker process died (killed, out of memory) with this file undone: the pool
    is replaced before the next run."""

    def __init__(self, path: Path | None, reason: str = "skipped (a worker process died; collect again to retry)"):
        super().__init__(path, reason)


def as_user_error(exc: BaseException) -> UserError | None:
    """The one-line UserError for a known failure caused by bad input, else None."""
    if isinstance(exc, UnicodeEncodeError):      # text that does not fit an encoding: output, or a path
        return UserError(f"cannot write {exc.object[exc.start:exc.end]!r} in the {exc.encoding} encoding; set "
                         "PYTHONIOENCODING=utf-8 (or a UTF-8 locale)")
    if isinstance(exc, UnicodeError):
        where = f" (byte {exc.start})" if isinstance(exc, UnicodeDecodeError) else ""
        return UserError(f"input is not UTF-8 text{where}: {getattr(exc, 'reason', exc)}; save the file as UTF-8")
    if isinstance(exc, RuntimeError) and str(exc).startswith("Symlink loop from"):   # pathlib's resolve()
        return UserError(f"{str(exc).removeprefix('Symlink loop from ').strip(chr(39))}: a symlink loop; give a path "
                         "that leads to a directory")
    if isinstance(exc, RecursionError):
        return UserError("input is nested too deeply to process")
    if isinstance(exc, UnsafeFile):
        return UserError(f"{exc.filename}: {exc.strerror}")
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR,
                                                  errno.EISDIR, errno.ENAMETOOLONG, errno.EROFS,
                                                  errno.ENOSPC, errno.EDQUOT, errno.EEXIST, errno.ELOOP):
        path = f"{exc.filename}: " if exc.filename else ""
        return UserError(f"{path}{exc.strerror}")
    if isinstance(exc, ValueError) and "null byte" in str(exc):
        return UserError("a path or argument contains a NUL byte")
    return None


def expand_home(path: Path, what: str) -> Path:
    """`path` with a leading ~ or ~USER expanded; a user unknown here (or ~ without a home) is a
    one-line UserError naming `what`, not pathlib's RuntimeError."""
    try:
        return path.expanduser()
    except RuntimeError:
        raise UserError(f"{what}: {shorten(str(path), 200)}: {path.parts[0]} names no home directory here; write "
                        "the path out") from None


class FiniteRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf (FloatRange lets nan through)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = super().convert(value, param, ctx)
        if number != number or number in (float("inf"), float("-inf")):
            self.fail(f"{value} is not a finite number", param, ctx)
        return number
