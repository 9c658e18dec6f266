"""Shell quoting for templates: every value is quoted unless hpcprof itself marked it raw."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

from hpcprof.config.site import DIRECTIVE_OPTION, DIRECTIVE_VALUE
from hpcprof.core.errors import UserError


class Raw(str):
    """A string hpcprof generated (never user input) that must reach the shell unquoted,
    e.g. `"$TMPDIR"` or `$(scontrol show hostnames ...)`."""


def quote(value: Any) -> str:
    """Shell-quote one value; Raw strings pass unchanged."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, bool):
        value = "true" if value else "false"
    return shlex.quote(str(value))


def quote_join(values: Iterable[Any]) -> str:
    """Quote each value and join with spaces."""
    return " ".join(quote(v) for v in values)


def directive(value: Any, field: str = "value", option: bool = False) -> str:
    """A value (or with `option`, a whole `-x value` option) for a #PBS/#SBATCH line: no quoting
    there, so only a safe charset is allowed. The config models check their fields the same way;
    this is the backstop for what they do not see (the workdir, edited templates)."""
    text = str(value)
    if not (DIRECTIVE_OPTION if option else DIRECTIVE_VALUE).fullmatch(text):
        raise UserError(f"field '{field}': {text!r} cannot go into a batch directive; use letters, "
                        f"digits{', spaces' if option else ''} and _.:@+&|,=/- only")
    return text
