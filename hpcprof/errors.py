"""User-facing errors: one line, exit code 2, no traceback."""

from __future__ import annotations

import click


class UserError(click.ClickException):
    """Bad input from the user (config, file, option). Printed as one line; exit code 2."""

    exit_code = 2

    def format_message(self) -> str:
        return " ".join(str(self.message).split("\n"))
