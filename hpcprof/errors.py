"""User-facing errors: one line, exit code 2, no traceback.

`UserError` is raised for bad input; `as_user_error` turns the known low-level failures of bad
input (an unreadable or unwritable path, a file that is not UTF-8 text, input nested too deeply)
into one, and the CLI's top-level handler (`hpcprof.cli.LazyGroup.invoke`) applies it to every
command.
"""

from __future__ import annotations

import errno

import click


class UserError(click.ClickException):
    """Bad input from the user (config, file, option). Printed as one line; exit code 2."""

    exit_code = 2

    def format_message(self) -> str:
        return " ".join(str(self.message).split())


def as_user_error(exc: BaseException) -> UserError | None:
    """The one-line UserError for a known failure caused by bad input, else None."""
    if isinstance(exc, UnicodeError):
        where = f" (byte {exc.start})" if isinstance(exc, UnicodeDecodeError) else ""
        return UserError(f"input is not UTF-8 text{where}: {exc.reason}; save the file as UTF-8")
    if isinstance(exc, RecursionError):
        return UserError("input is nested too deeply to process")
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR,
                                                  errno.EISDIR, errno.ENAMETOOLONG, errno.EROFS,
                                                  errno.ENOSPC, errno.EDQUOT, errno.EEXIST, errno.ELOOP):
        path = f"{exc.filename}: " if exc.filename else ""
        return UserError(f"{path}{exc.strerror}")
    if isinstance(exc, ValueError) and "null byte" in str(exc):
        return UserError("a path or argument contains a NUL byte")
    return None


class FiniteRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf (FloatRange lets nan through)."""

    name = "finite float range"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = super().convert(value, param, ctx)
        if number != number or number in (float("inf"), float("-inf")):
            self.fail(f"{value} is not a finite number", param, ctx)
        return number
