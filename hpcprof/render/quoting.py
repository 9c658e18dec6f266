"""Shell quoting for templates: every value is quoted unless hpcprof itself marked it raw."""

from __future__ import annotations

import re
import shlex
from typing import Any, Iterable

from hpcprof.errors import UserError

DIRECTIVE_SAFE = re.compile(r"^[A-Za-z0-9_.:@+&|,=/\-]+$")


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


def directive(value: Any, field: str = "value") -> str:
    """A value for a #PBS/#SBATCH line: no quoting there, so only a safe charset is allowed."""
    text = str(value)
    if not DIRECTIVE_SAFE.fullmatch(text):
        raise UserError(f"field '{field}': {text!r} cannot go into a batch directive; use letters, "
                        "digits and _.:@+&|,=/- only")
    return text
